"""Layer norm over rows wider than one block: one loop over N folds each row's mean and
variance, and a second pass writes each normalized block with its weight and bias."""

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

    # One pass for both statistics: each block's count, mean and sum of squared deviations
    # from its own mean, merged into the running ones (Chan et al.'s parallel update). Exact
    # where sums of squares would cancel catastrophically for rows with a large mean.
    def statistics(carry):
        count, mean, m2 = carry
        v = sk.load(x).astype(jnp.float32)
        # Columns past N are excluded from the sums automatically, so these count the
        # block's columns inside the row.
        block_count = sk.sum(jnp.ones_like(v), axis=1)
        block_mean = sk.sum(v, axis=1) / block_count
        centered = v - block_mean[:, None]
        block_m2 = sk.sum(centered * centered, axis=1)
        total = count + block_count
        delta = block_mean - mean
        new_mean = mean + delta * (block_count / total)
        new_m2 = m2 + block_m2 + delta * delta * (count * block_count / total)
        return total, new_mean, new_m2

    zeros = jnp.zeros((BM,), jnp.float32)
    _, mean, m2 = sk.loop("N", statistics, init=(zeros, zeros, zeros))
    inv_std = jax.lax.rsqrt(m2 / n + eps)

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
