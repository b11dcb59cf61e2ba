"""Reductions for kernel bodies.

They are jnp's reductions with one rule made explicit: `axis` is required, because Mosaic GPU
reduces a block along one axis at a time (`jnp.sum(v)`, to a scalar, reduces the columns,
then the rows). Reductions over a
ragged edge ignore the elements past it, whatever the load's fill.
"""

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["max", "min", "sum"]


def sum(x: Any, *, axis: int, keepdims: bool = False) -> jax.Array:
    """Sum over one axis of a block."""
    return jnp.sum(x, axis=axis, keepdims=keepdims)


def max(x: Any, *, axis: int, keepdims: bool = False) -> jax.Array:
    """Maximum over one axis of a block."""
    return jnp.max(x, axis=axis, keepdims=keepdims)


def min(x: Any, *, axis: int, keepdims: bool = False) -> jax.Array:
    """Minimum over one axis of a block."""
    return jnp.min(x, axis=axis, keepdims=keepdims)
