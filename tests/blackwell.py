"""Shared factories of the tests of code generated for Blackwell (`sm_100a`): operands,
kernels bound to the target and the interpreter, and the comparison against a reference
scaled by its largest magnitude."""

import jax
import jax.numpy as jnp
import numpy as np

import statickernel as sk

__all__ = ["BLACKWELL", "close", "normal", "on_blackwell"]

BLACKWELL = "sm_100a"


def normal(key: int, shape: tuple[int, ...], dtype: jnp.dtype = jnp.bfloat16) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, jnp.float32).astype(dtype)


def on_blackwell(kernel: sk.Kernel) -> sk.Kernel:
    """`kernel` planning for sm_100a, run by the interpreter."""
    return kernel.with_target(BLACKWELL).with_backend("interpret")


def close(out: jax.Array, ref: jax.Array, rtol: float) -> None:
    """`out` within `rtol` of the reference's largest magnitude (at least 1) everywhere."""
    out32, ref32 = np.asarray(out, np.float32), np.asarray(ref, np.float32)
    scale = max(float(np.max(np.abs(ref32))), 1.0)
    np.testing.assert_allclose(out32, ref32, rtol=0, atol=rtol * scale)
