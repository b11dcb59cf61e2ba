"""Layer norm over each row, with a weight and a bias per column."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def layernorm_reference(
    x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float = 1e-5
) -> jax.Array:
    v = x.astype(jnp.float32)
    mean = jnp.mean(v, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(v - mean), axis=-1, keepdims=True)
    y = (v - mean) * jax.lax.rsqrt(var + eps)
    return (y * weight.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


@sk.kernel(tile={"M": "BM"}, reference=layernorm_reference, vjp="reference")
def layernorm(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    bias: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-5,
) -> Float[Array, "M N"]:
    v = sk.load(x).astype(jnp.float32)
    mean = jnp.mean(v, axis=1, keepdims=True)
    # Columns past N are excluded from the reductions automatically, so the variance is exact.
    var = jnp.mean(jnp.square(v - mean), axis=1, keepdims=True)
    y = (v - mean) * jax.lax.rsqrt(var + eps)
    w = sk.load(weight).astype(jnp.float32)
    b = sk.load(bias).astype(jnp.float32)
    return (y * w + b).astype(x.dtype)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (1000, 130), jnp.float32)
    w, b = jnp.ones((130,)), jnp.zeros((130,))
    print(layernorm.plan(x, w, b))
    err = jnp.max(jnp.abs(layernorm(x, w, b) - layernorm_reference(x, w, b)))
    print("max abs error:", float(err))
