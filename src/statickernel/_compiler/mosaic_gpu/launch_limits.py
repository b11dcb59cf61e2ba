"""Launch limits of Mosaic GPU that only the bound dims and blocks reveal, checked by the plan:
its int32 block offsets and CUDA's grid.

Mosaic GPU computes every block offset in int32, so the end of a dim's last block must stay
within 2**31 - 1 elements. Pallas launches its grid reversed onto CUDA's: the last axis
becomes grid x (at most 2**31 - 1 blocks), the one before it y, and the one before that z (at
most 65535 each); a grid of more than three axes folds all but its last two into z.
"""

import math
from collections.abc import Mapping

from ..._errors import ErrorContext, GridLimitError, Int32LimitError
from ..._targets import MOSAIC_GPU_LIMITS
from ..declare.limits import index_limit_text
from . import hardware as hw

__all__ = ["check_grid", "check_offsets"]

_INT32_TEXT = index_limit_text(MOSAIC_GPU_LIMITS)


def check_offsets(
    sizes: Mapping[str, int],
    blocks: Mapping[str, int],
    constants: Mapping[str, str],
    ctx: ErrorContext,
) -> None:
    """The last block along each split dim must end within int32: its positions are
    `block index * block + iota`, computed in int32."""
    for dim, block in blocks.items():
        size = sizes[dim]
        end = hw.cdiv(size, block) * block
        if end - 1 <= hw.INT32_MAX:
            continue
        const = constants[dim]
        raise ctx.error(
            Int32LimitError,
            f"the last block along {dim} reaches element {end - 1:,}, past int32",
            dim=dim,
            expected=f"element offsets of at most {_INT32_TEXT}: Mosaic GPU computes each "
            "block's positions in int32",
            actual=f"{hw.cdiv(size, block):,} blocks of {const}={block} cover {end:,} elements "
            f"of {dim}={size:,}",
            fix=f"set {const}={1 << (block.bit_length() - 1)}: with a power-of-two block, the "
            "last block ends by 2**31",
        )


def check_grid(
    grid: tuple[int, ...],
    names: tuple[str, ...],
    sizes: Mapping[str, int],
    blocks: Mapping[str, int],
    constants: Mapping[str, str],
    units: Mapping[str, int],
    ctx: ErrorContext,
) -> None:
    """Every CUDA grid axis that the Pallas grid becomes must be within CUDA's limit.

    `blocks`, `constants` and `units` give, for each tiled grid axis, its block, the constant
    that sets it and the unit a block must be a multiple of; batch axes have none of them."""
    folded = len(grid) > 3
    for axis, (name, count) in enumerate(zip(names, grid, strict=True)):
        from_end = len(grid) - 1 - axis
        if folded and from_end >= 2:
            continue  # checked below, as one folded z axis
        cuda_axis = "xyz"[from_end]
        limit = hw.CUDA_GRID_X_MAX if cuda_axis == "x" else hw.CUDA_GRID_YZ_MAX
        if count <= limit:
            continue
        raise ctx.error(
            GridLimitError,
            f"the grid has {count:,} blocks along {name}, over CUDA's limit of {limit:,} "
            f"for grid {cuda_axis}",
            dim=name,
            expected=f"<= {limit} blocks along {name}: Pallas launches grid axis {axis} "
            f"({name}) as CUDA grid {cuda_axis}",
            actual=count,
            fix=_grid_fix(name, sizes[name], limit, blocks, constants, units),
        )
    if folded:
        lead, lead_names = grid[:-2], names[:-2]
        total = math.prod(lead)
        if total > hw.CUDA_GRID_YZ_MAX:
            raise ctx.error(
                GridLimitError,
                f"the grid's leading axes ({', '.join(lead_names)}) fold into CUDA's grid z "
                f"with {total:,} blocks, over its limit of {hw.CUDA_GRID_YZ_MAX:,}",
                dim=lead_names[0],
                expected=f"<= {hw.CUDA_GRID_YZ_MAX} blocks in all along "
                f"{', '.join(lead_names)}: with more than three grid axes, Pallas folds all but "
                "the last two into CUDA grid z",
                actual=f"{' x '.join(str(g) for g in lead)} = {total:,}",
                fix=f"call the kernel on slices of {lead_names[0]} so that "
                f"{' x '.join(lead_names)} stays within {hw.CUDA_GRID_YZ_MAX}",
            )


def _grid_fix(
    name: str,
    size: int,
    limit: int,
    blocks: Mapping[str, int],
    constants: Mapping[str, str],
    units: Mapping[str, int],
) -> str:
    if name not in constants:  # a batch dim: one grid step per index
        return (
            f"call the kernel on slices of at most {limit} along the batch dim {name}, or "
            f"fold {name} into the rows outside the kernel"
        )
    const, unit = constants[name], units[name]
    needed = hw.round_up(hw.cdiv(size, limit), unit)
    if blocks[name] < needed <= hw.TMA_BOX_MAX:
        return f"set {const}={needed} (the smallest {const} that fits {name}={size:,} in {limit} blocks)"
    return (
        f"split the array along {name} outside the kernel into pieces of at most "
        f"{limit * hw.TMA_BOX_MAX:,} elements ({limit} blocks of {hw.TMA_BOX_MAX})"
    )
