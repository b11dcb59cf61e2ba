"""Dropout for training: each element is kept with probability 1 - rate and scaled by
1 / (1 - rate), from random bits the kernel computes from a runtime seed.

The seed is a scalar operand, not a constant: a training loop passes a new one each step and
reuses the compiled kernel. The bits hash the seed with each element's global position, so
`sk.uniform_reference` reproduces them on the whole array, and the reference (and with it the
gradient: the same mask times the cotangent) is plain jnp.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, UInt32

import statickernel as sk


def _scale(rate: float) -> float:
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"the dropout rate must be in [0, 1), not {rate!r}")
    return 1.0 / (1.0 - rate)


def dropout_reference(x: jax.Array, seed: jax.Array, rate: float = 0.1) -> jax.Array:
    keep = sk.uniform_reference(seed, x.shape) >= rate
    scaled = x.astype(jnp.float32) * _scale(rate)
    return jnp.where(keep, scaled, 0.0).astype(x.dtype)


@sk.kernel(tile={"M": "BM", "N": "BN"}, reference=dropout_reference, vjp="reference")
def dropout(
    x: Float[Array, "M N"],
    seed: UInt32[Array, ""],
    *,
    rate: sk.Const[float] = 0.1,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
) -> Float[Array, "M N"]:
    keep = sk.uniform(seed) >= rate
    scaled = sk.load(x).astype(jnp.float32) * _scale(rate)
    return jnp.where(keep, scaled, 0.0).astype(x.dtype)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (1000, 300), jnp.float32)
    seed = jnp.uint32(42)
    print(dropout.plan(x, seed))
    y = dropout(x, seed)
    print("equal to the reference:", bool(jnp.all(y == dropout_reference(x, seed))))
    print("kept:", float(jnp.mean(y != 0)))
