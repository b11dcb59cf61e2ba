"""Hopper and Mosaic GPU limits that statickernel checks before anything is lowered."""

import math
from collections.abc import Iterable

# Shared memory available to one block on H100/H200 (227 KiB).
SMEM_BYTES = 232448
# A TMA box holds at most this many elements along each dimension.
TMA_BOX_MAX = 256
# TMA moves rows in 16-byte units: strides and the box's last dim must be multiples of this.
TMA_ALIGN_BYTES = 16
# WGMMA reads its operands from shared memory tiled (8 rows) and swizzled over 128-byte rows,
# or over 64- or 32-byte rows for narrower blocks; a product's two operands share one swizzle.
SWIZZLE_BYTES = 128
SWIZZLES = (SWIZZLE_BYTES, 64, 32)
# A TMA copy's shared-memory destination starts on a 128-byte boundary.
TMA_SMEM_ALIGN_BYTES = 128
# The WGMMA register layout tiles a 2-D value in (64, 8) units.
WGMMA_ROWS = 64
WGMMA_COLS = 8
# CUDA caps grid x at 2**31 - 1 blocks and grid y and z at 65535. Pallas launches its grid
# reversed: the last axis is CUDA x, the one before it y, the one before that z; with more than
# three axes, all but the last two fold into z.
CUDA_GRID_X_MAX = 2**31 - 1
CUDA_GRID_YZ_MAX = 65535
# Mosaic GPU computes positions, block offsets and TMA coordinates in int32.
INT32_MAX = 2**31 - 1
BARRIER_BYTES = 8
# Mosaic GPU starts every shared-memory buffer on a 1 KiB boundary, and reserves 2 KiB of
# scratch for cross-lane reductions.
SMEM_BUFFER_ALIGN = 1024
SMEM_RESERVED_BYTES = 2048
# A copy moves a whole number of 128-byte chunks: one byte per thread of the warpgroup.
COPY_BYTES_QUANTUM = 128
# The H200's rooflines, as measured rather than as rated: what a `Cost` floor divides by.
# HBM: a device-to-device copy (bytes read + written per second).
HBM_BYTES_PER_S = 4.3e12
# The tensor cores: a cuBLAS bfloat16 matmul (flop per second).
DOT_FLOPS_PER_S = 790e12
# The CUDA cores: float32 arithmetic (flop per second).
VECTOR_FLOPS_PER_S = 67e12

# The dtypes that sk.dot multiplies and nothing else may load.
DOT_ONLY_DTYPES: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
# Dtypes packed below a byte an element: a body may only cast them (`w.astype(jnp.bfloat16)`).
SUB_BYTE_DTYPES: dict[str, int] = {"int4": 4, "uint4": 4}
# Dtypes that statickernel moves with TMA and computes on in registers, in the order it prefers
# when an annotation allows several (used for the import-time trace).
SUPPORTED_DTYPES: tuple[str, ...] = (
    "float32",
    "bfloat16",
    "float16",
    "int32",
    "int16",
    "int8",
    "uint32",
    "uint16",
    "uint8",
    # Only sk.dot reads these: WGMMA multiplies them from shared memory.
    *DOT_ONLY_DTYPES,
    # Only a cast reads these (quantized weights).
    *SUB_BYTE_DTYPES,
)


def cuda_grid(grid: tuple[int, ...]) -> tuple[int, int, int]:
    """The CUDA grid (x, y, z) that Mosaic GPU launches for a Pallas grid."""
    if len(grid) <= 3:
        z, y, x = (1,) * (3 - len(grid)) + tuple(grid)
    else:
        z, y, x = math.prod(grid[:-2]), grid[-2], grid[-1]
    return x, y, z


def bits(dtype_name: str) -> int:
    """The bits of one element: 4 for int4, whose elements pack two to a byte."""
    return SUB_BYTE_DTYPES.get(dtype_name) or _np_dtype(dtype_name).itemsize * 8


def nbytes(count: int, dtype_name: str) -> int:
    """The bytes `count` elements take in memory (a sub-byte dtype packs them)."""
    return -(-count * bits(dtype_name) // 8)


def per_bytes(byte_count: int, dtype_name: str) -> int:
    """How many elements fill `byte_count` bytes."""
    return byte_count * 8 // bits(dtype_name)


def widest_swizzle(row_bytes: Iterable[int]) -> int:
    """The widest swizzle, in bytes, whose row each of `row_bytes` holds a whole number of
    (the narrowest where none does: a rule refuses such blocks first)."""
    rows = tuple(row_bytes)
    return next((s for s in SWIZZLES if all(r % s == 0 for r in rows)), SWIZZLES[-1])


def _np_dtype(dtype_name: str):
    import jax.numpy as jnp

    return jnp.dtype(dtype_name)


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_quantum(axis: str, rank: int, dtype_name: str) -> int:
    """The unit a block extent must be a multiple of, for one operand along one axis.

    Rows: 64 for the WGMMA layout. Columns: 8 for the layout and 16 bytes for a TMA row. A 1-D
    block is a whole copy on its own, so it must also be a multiple of 128 bytes.
    """
    unit = WGMMA_ROWS if axis == "rows" else max(WGMMA_COLS, per_bytes(TMA_ALIGN_BYTES, dtype_name))
    if rank == 1:
        unit = max(unit, per_bytes(COPY_BYTES_QUANTUM, dtype_name))
    return unit
