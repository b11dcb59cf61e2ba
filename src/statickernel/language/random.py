"""Random numbers in a kernel body: a counter-based hash of (seed, row, column).

Nothing is stored between calls and no state is threaded through the blocks: each element's
bits are a pure function of the seed and the element's global position, computed in registers
with uint32 multiplies, xors, shifts and adds, which Mosaic GPU lowers. So the bits depend on
neither the blocking nor the backend, and `random_bits_reference` reproduces them bit for bit
on whole arrays with the very same jnp code, for a kernel's `reference=`.

The hash is MurmurHash3's 32-bit finalizer (`_fmix32`, a bijection of uint32 with full
avalanche) applied three ways: the seed's key, then a key per row from it (a per-row vector),
a key per column (a per-column vector), and one finalizer over each element's xor of the two.
Only that last finalizer runs on the block; the keys cost a vector each.
"""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import BodyError
from .._where import call_site
from . import context as _trace_context
from .position import position
from .tile import Tile

__all__ = ["random_bits", "random_bits_reference", "uniform", "uniform_reference"]

_U32 = jnp.uint32
# Odd multipliers and offsets: the golden ratio, MurmurHash3's, and digits of pi. Odd
# multipliers make each key a bijection of its row or column.
_ROW_MULTIPLIER = 0x9E3779B9
_COL_MULTIPLIER = 0x27D4EB2F
_SEED_OFFSET = 0x243F6A88
_COL_OFFSET = 0x85A308D3
_MIX1 = 0x85EBCA6B
_MIX2 = 0xC2B2AE35
_UNIT = 2.0**-24  # 24 random bits scaled to [0, 1): exact in float32


def _fmix32(h: jax.Array) -> jax.Array:
    h = h ^ (h >> 16)
    h = h * _U32(_MIX1)
    h = h ^ (h >> 13)
    h = h * _U32(_MIX2)
    return h ^ (h >> 16)


def _bits(seed: jax.Array, rows: jax.Array, cols: jax.Array) -> jax.Array:
    """The bits of every (row, col) pair: `rows` and `cols` are uint32 vectors of global
    positions, `seed` a uint32 scalar. The kernel and the reference both run this."""
    seed_key = _fmix32(seed ^ _U32(_SEED_OFFSET))
    row_key = _fmix32(seed_key + rows * _U32(_ROW_MULTIPLIER))
    col_key = _fmix32(cols * _U32(_COL_MULTIPLIER) + _U32(_COL_OFFSET))
    return _fmix32(row_key[:, None] ^ col_key[None, :])


def _vector_bits(seed: jax.Array, cols: jax.Array) -> jax.Array:
    """The bits of a vector's elements: those of row 0 of a (1, n) array, element j the
    bits of (0, j), so a vector's bits are the first row's of the 2-D array it reshapes to."""
    row_key = _fmix32(_fmix32(seed ^ _U32(_SEED_OFFSET)))
    col_key = _fmix32(cols * _U32(_COL_MULTIPLIER) + _U32(_COL_OFFSET))
    return _fmix32(row_key ^ col_key)


def _unit(bits: jax.Array) -> jax.Array:
    """The top 24 bits as a float32 in [0, 1), on a grid of 2**-24."""
    return (bits >> 8).astype(jnp.float32) * jnp.float32(_UNIT)


def _seed_in_body(seed: Any) -> jax.Array:
    """The seed as a uint32 scalar inside a body: a scalar operand (loaded here if it is the
    operand itself), a 0-d value computed from one, or a Python int."""
    if isinstance(seed, Tile):
        seed = seed.load()
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer | jax.Array | np.ndarray):
        raise BodyError(
            "the seed of sk.random_bits / sk.uniform is not an integer scalar",
            actual=f"{type(seed).__name__}: {seed!r}"[:120],
            fix='declare it a scalar operand, `seed: UInt32[Array, ""]`, and pass it as it is, '
            "sk.uniform(seed)",
        )
    if isinstance(seed, int | np.integer):
        return _U32(int(seed) % 2**32)
    if seed.shape != () or jnp.dtype(seed.dtype).name not in ("uint32", "int32"):
        raise BodyError(
            "the seed of sk.random_bits / sk.uniform must be an int32 or uint32 scalar",
            actual=f"{jnp.dtype(seed.dtype).name}{list(seed.shape)}",
            fix='declare it `seed: UInt32[Array, ""]` (or Int32), a scalar operand read at run '
            "time, so that a new seed reuses the compiled kernel",
        )
    return jnp.asarray(seed).astype(_U32)


def random_bits(seed: Any) -> jax.Array:
    """uint32 random bits for every element of the body's current (rows, cols) block (or, in
    a kernel of vectors, of its vector: element j has the bits of (0, j)).

    Call it inside a kernel body, or inside a loop's step over the column dim (where the block
    is the step's). `seed` is a scalar operand (`seed: UInt32[Array, ""]` or Int32, a runtime
    value: a new seed does not recompile), a 0-d value computed from one, or a Python int.
    The bits are a hash of the seed and each element's global (row, column) position, so they
    do not depend on the block sizes; `sk.random_bits_reference(seed, shape)` gives the same
    bits for a whole array.
    """
    return _random_bits("sk.random_bits", seed)


def _random_bits(what: str, seed: Any) -> jax.Array:
    """`sk.random_bits(seed)`, called as `what` (`sk.random_bits` or `sk.uniform`)."""
    context = _trace_context.current()
    if context is None:
        reference = f"{what}_reference"
        raise BodyError(
            f"{what} was called outside a kernel body: it is only valid inside one, where it "
            "gives the numbers of the block being computed",
            where=call_site(),
            expected="a call inside the body of an @sk.kernel function",
            actual="a call outside any kernel body",
            fix=f"call {what} inside the body of an @sk.kernel function; on whole arrays, use "
            f"{reference}(seed, shape), which gives the same numbers",
        )
    rows, cols = context.frame
    key = _seed_in_body(seed)
    if cols is None:  # a kernel of vectors: element j has the bits of (0, j)
        return _vector_bits(key, position(rows).astype(_U32))
    return _bits(key, position(rows).astype(_U32), position(cols).astype(_U32))


def uniform(seed: Any) -> jax.Array:
    """float32 random numbers in [0, 1) for every element of the body's current block.

    The top 24 bits of `sk.random_bits(seed)` scaled by 2**-24: `sk.uniform(seed) >= rate`
    keeps an element with probability 1 - rate (to 2**-24). `sk.uniform_reference(seed,
    shape)` gives the same numbers, bit for bit, for a whole array.
    """
    return _unit(_random_bits("sk.uniform", seed))


def _seed_on_host(seed: Any) -> jax.Array:
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
        return _U32(int(seed) % 2**32)
    seed = jnp.asarray(seed)
    if seed.shape != () or seed.dtype.name not in ("uint32", "int32"):
        raise ValueError(
            f"the seed must be an int32 or uint32 scalar, not {seed.dtype.name}{list(seed.shape)}"
        )
    return seed.astype(_U32)


def _shape_2d(shape: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(shape)
    if len(dims) not in (1, 2):
        raise ValueError(f"the shape must be (rows, cols) or (n,), not {shape!r}")
    # int() would take 3.5 as 3, and jnp.arange(-4) is empty: a wrong shape, not an error.
    for n in dims:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise ValueError(
                f"the shape {shape!r} has the dim {n!r}: each dim must be a non-negative int"
            )
    return tuple(int(n) for n in dims)


def random_bits_reference(seed: Any, shape: Sequence[int]) -> jax.Array:
    """The uint32 bits `sk.random_bits(seed)` gives a kernel's blocks, for a whole
    (rows, cols) array: element (i, j) is the bits of row i, column j; for a vector `(n,)`,
    those of the first row (a kernel of vectors gives its elements these). Plain jnp, so it
    runs anywhere, traces under jit, and can build a kernel's `reference=`."""
    dims = _shape_2d(shape)
    if len(dims) == 1:  # a vector: the first row of a (1, n) array
        return _vector_bits(_seed_on_host(seed), jnp.arange(dims[0], dtype=_U32))
    m, n = dims
    return _bits(_seed_on_host(seed), jnp.arange(m, dtype=_U32), jnp.arange(n, dtype=_U32))


def uniform_reference(seed: Any, shape: Sequence[int]) -> jax.Array:
    """The float32 numbers in [0, 1) `sk.uniform(seed)` gives a kernel's blocks, for a whole
    (rows, cols) array (or a vector, `(n,)`), bit for bit."""
    return _unit(random_bits_reference(seed, shape))
