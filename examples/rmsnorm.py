"""RMS norm over each row, with a learned weight per column."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def rmsnorm_reference(x: jax.Array, weight: jax.Array, eps: float = 1e-6) -> jax.Array:
    v = x.astype(jnp.float32)
    rms = jax.lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + eps)
    return (v * rms * weight.astype(jnp.float32)).astype(x.dtype)


@sk.kernel(tile={"M": "BM"}, reference=rmsnorm_reference)
def rmsnorm(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-6,
) -> Float[Array, "M N"]:
    v = sk.load(x).astype(jnp.float32)
    rms = jax.lax.rsqrt(jnp.mean(v * v, axis=1, keepdims=True) + eps)
    return (v * rms * sk.load(weight).astype(jnp.float32)).astype(x.dtype)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (1000, 200), jnp.bfloat16)
    w = jnp.ones((200,), jnp.bfloat16)
    print(rmsnorm.plan(x, w))
    err = jnp.max(jnp.abs(rmsnorm(x, w).astype(jnp.float32) - rmsnorm_reference(x, w)))
    print("max abs error:", float(err))
