"""Hopper and Mosaic GPU limits that statickernel checks before anything is lowered.

Those the front checks too (int32 positions, a copy's 128-byte quantum, a TMA box's extent)
are the Mosaic GPU targets' `TargetLimits` (`_targets.py`), read here from there.

The dtypes and their sizes are the front's (`_dtypes.py`), named here too for the modules
of the back-end that read both as `hw`.
"""

import math
from collections.abc import Iterable

from ..._dtypes import (
    DOT_ONLY_DTYPES,
    SUB_BYTE_DTYPES,
    SUPPORTED_DTYPES,
    bits,
    cdiv,
    nbytes,
    per_bytes,
    round_up,
)
from ..._targets import MOSAIC_GPU_LIMITS

__all__ = [
    "BARRIER_BYTES",
    "COPY_BYTES_QUANTUM",
    "CUDA_GRID_X_MAX",
    "CUDA_GRID_YZ_MAX",
    "DOT_FLOPS_PER_S",
    "DOT_ONLY_DTYPES",
    "HBM_BYTES_PER_S",
    "INT32_MAX",
    "SMEM_BUFFER_ALIGN",
    "SMEM_BYTES",
    "SMEM_RESERVED_BYTES",
    "SUB_BYTE_DTYPES",
    "SUPPORTED_DTYPES",
    "SWIZZLES",
    "SWIZZLE_BYTES",
    "TMA_ALIGN_BYTES",
    "TMA_BOX_MAX",
    "TMA_SMEM_ALIGN_BYTES",
    "VECTOR_FLOPS_PER_S",
    "WGMMA_COLS",
    "WGMMA_ROWS",
    "bits",
    "block_quantum",
    "cdiv",
    "cuda_grid",
    "nbytes",
    "per_bytes",
    "round_up",
    "widest_swizzle",
]

# Shared memory available to one block on H100/H200 (227 KiB).
SMEM_BYTES = 232448
# A TMA box holds at most this many elements along each dimension.
TMA_BOX_MAX = MOSAIC_GPU_LIMITS.copy_extent_max  # 256
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
INT32_MAX = MOSAIC_GPU_LIMITS.index_max  # 2**31 - 1
BARRIER_BYTES = 8
# Mosaic GPU starts every shared-memory buffer on a 1 KiB boundary, and reserves 2 KiB of
# scratch for cross-lane reductions.
SMEM_BUFFER_ALIGN = 1024
SMEM_RESERVED_BYTES = 2048
# A copy moves a whole number of 128-byte chunks: one byte per thread of the warpgroup.
COPY_BYTES_QUANTUM = MOSAIC_GPU_LIMITS.copy_bytes_quantum  # 128
# The H200's rooflines, as measured rather than as rated: what a `Cost` floor divides by.
# HBM: a device-to-device copy (bytes read + written per second).
HBM_BYTES_PER_S = 4.3e12
# The tensor cores: a cuBLAS bfloat16 matmul (flop per second).
DOT_FLOPS_PER_S = 790e12
# The CUDA cores: float32 arithmetic (flop per second).
VECTOR_FLOPS_PER_S = 67e12


def cuda_grid(grid: tuple[int, ...]) -> tuple[int, int, int]:
    """The CUDA grid (x, y, z) that Mosaic GPU launches for a Pallas grid."""
    if len(grid) <= 3:
        z, y, x = (1,) * (3 - len(grid)) + tuple(grid)
    else:
        z, y, x = math.prod(grid[:-2]), grid[-2], grid[-1]
    return x, y, z


def widest_swizzle(row_bytes: Iterable[int]) -> int:
    """The widest swizzle, in bytes, whose row each of `row_bytes` holds a whole number of
    (the narrowest where none does: a rule refuses such blocks first)."""
    rows = tuple(row_bytes)
    return next((s for s in SWIZZLES if all(r % s == 0 for r in rows)), SWIZZLES[-1])


def block_quantum(axis: str, rank: int, dtype_name: str) -> int:
    """The unit a block extent must be a multiple of, for one operand along one axis.

    Rows: 64 for the WGMMA layout. Columns: 8 for the layout and 16 bytes for a TMA row. A 1-D
    block is a whole copy on its own, so it must also be a multiple of 128 bytes.
    """
    unit = WGMMA_ROWS if axis == "rows" else max(WGMMA_COLS, per_bytes(TMA_ALIGN_BYTES, dtype_name))
    if rank == 1:
        unit = max(unit, per_bytes(COPY_BYTES_QUANTUM, dtype_name))
    return unit
