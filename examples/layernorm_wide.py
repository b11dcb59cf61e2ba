"""Layer norm over rows wider than one block: a loop over N accumulates each row's sum and sum of
squares, and a second pass writes each normalized block with its weight and bias."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def layernorm_wide_reference(
    x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float = 1e-5
) -> jax.Array:
    v = x.astype(jnp.float32)
    mean = jnp.mean(v, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(v - mean), axis=-1, keepdims=True)
    y = (v - mean) * jax.lax.rsqrt(var + eps)
    return (y * weight.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, reference=layernorm_wide_reference)
def layernorm_wide(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    bias: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 256,
    stages: sk.Const[int] = 2,
    eps: sk.Const[float] = 1e-5,
) -> Float[Array, "M N"]:
    n = sk.dim("N")
    # A first pass for the mean, then one for the variance around it: exact where a single pass of
    # sums and sums of squares would cancel catastrophically for rows with a large mean.
    (total,) = sk.loop(
        "N",
        lambda carry: (carry[0] + sk.sum(sk.load(x).astype(jnp.float32), axis=1),),
        init=(jnp.zeros((BM,), jnp.float32),),
    )
    mean = total / n

    def squares(carry):
        (acc,) = carry
        centered = sk.load(x).astype(jnp.float32) - mean[:, None]
        # Columns past N are excluded from the sum automatically.
        return (acc + sk.sum(centered * centered, axis=1),)

    (sum_sq,) = sk.loop("N", squares, init=(jnp.zeros((BM,), jnp.float32),))
    inv_std = jax.lax.rsqrt(sum_sq / n + eps)

    def normalize():
        v = sk.load(x).astype(jnp.float32)
        w = sk.load(weight).astype(jnp.float32)
        b = sk.load(bias).astype(jnp.float32)
        return ((v - mean[:, None]) * inv_std[:, None] * w + b).astype(x.dtype)

    return sk.map_blocks("N", normalize)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (130, 10_000), jnp.float32)
    w = jax.random.normal(jax.random.key(1), (10_000,), jnp.float32)
    b = jax.random.normal(jax.random.key(2), (10_000,), jnp.float32)
    print(layernorm_wide.plan(x, w, b))
    err = jnp.max(jnp.abs(layernorm_wide(x, w, b) - layernorm_wide_reference(x, w, b)))
    print("max abs error:", float(err))
