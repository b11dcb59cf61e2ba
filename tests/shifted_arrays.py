"""References for shifted loads: an array read a number of elements further along an axis,
the fill outside it, and small integers whose weighted sums are exact in any order."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def moved(x: jax.Array, offset: int, fill: float = 0, axis: int = 0) -> jax.Array:
    """`x` read `offset` elements further along `axis`: element p is element p + offset of
    `x`, and `fill` where that lies outside the array."""
    n = abs(offset)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (n, n)
    padded = jnp.pad(x, pad, constant_values=fill)
    return lax.slice_in_dim(padded, n + offset, n + offset + x.shape[axis], axis=axis)


def integers(shape: tuple[int, ...], dtype: Any = jnp.float32, seed: int = 0) -> jax.Array:
    """Small integers, so that sums of a few weighted taps are exact in float32 in any order:
    an element read from the wrong place is off by whole units."""
    return jnp.asarray(np.random.default_rng(seed).integers(-50, 51, shape), dtype)
