"""Shifted loads' shared pieces: a body of weighted taps along L, its reference (an array read
a number of elements further along an axis, the fill outside it), and small integers whose
weighted sums are exact in any order."""

import functools
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import statickernel as sk


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


def sum_of_taps(x: Any, offsets: tuple[int, ...], fill: float) -> jax.Array:
    """A kernel body: tap i, `x` read offsets[i] further along L (0: the block itself), times
    i + 1."""
    total: jax.Array | None = None
    for weight, k in enumerate(offsets, 1):
        tap = sk.load(x, fill=fill, offset={"L": k} if k else None)
        term = tap if weight == 1 else weight * tap
        total = term if total is None else total + term
    assert total is not None
    return total


def weighted_taps(
    x: jax.Array, offsets: tuple[int, ...], fill: float = 0, axis: int = 0
) -> jax.Array:
    """What `sum_of_taps` computes on the whole array, L its `axis`: tap i (`x` moved
    offsets[i] along it) times i + 1, summed in float32 for 16-bit floats."""
    wide = x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x
    terms = (w * moved(wide, k, fill, axis=axis) for w, k in enumerate(offsets, 1))
    return functools.reduce(operator.add, terms)
