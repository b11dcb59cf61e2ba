"""Edge masks: which positions of a block lie inside the array, and which masks a load needs.

Each axis gets a vector of positions (an iota in the per-row or per-column layout) compared
with the dim's true size; a block's mask is that vector broadcast. A broadcast shares the
vector's registers, where a block-shaped iota would take one register per element and per
mask: in a loop step, next to a block of data, those spill.
"""

import dataclasses
import math

from ._ir import Kind
from ._pallas import LAYOUTS
from ._plan import LaunchPlan, OperandPlan

__all__ = ["MaskAxis", "edge_mask_lines", "fill_masks", "reads_zero"]

ROW, COL = Kind.ROW, Kind.COL


@dataclasses.dataclass(frozen=True)
class MaskAxis:
    """One axis of the block: its extent in registers, the dim's size, and where the block
    starts along it, as source (`""` for a block at 0)."""

    extent: int
    size: int
    start: str


def edge_mask_lines(needed: set[str], rows: MaskAxis, cols: MaskAxis | None) -> list[str]:
    """Statements defining the masks in `needed`: `row_ok` and `col_ok` for blocks,
    `row_ok_vec` and `col_ok_vec` for vectors."""
    shape = (rows.extent, cols.extent if cols else 1)
    lines: list[str] = []
    for name, axis, kind in (("row", rows, ROW), ("col", cols, COL)):
        if not {f"{name}_ok", f"{name}_ok_vec"} & needed:
            continue
        assert axis is not None
        start = f" + {axis.start}" if axis.start else ""
        lines.append(
            f"{name}_index = plgpu.broadcasted_iota(jnp.int32, ({axis.extent},), 0, "
            f"layout={LAYOUTS[kind]})"
        )
        lines.append(f"{name}_ok_vec = {name}_index{start} < {axis.size}")
        if f"{name}_ok" in needed:
            dimension = 0 if kind == ROW else 1
            lines.append(
                f"{name}_ok = lax.broadcast_in_dim({name}_ok_vec, {shape}, ({dimension},))"
            )
    return lines


def reads_zero(fill: object) -> bool:
    """True for a fill of +0 (not -0.0): what TMA itself reads past an array's edge."""
    return fill is not None and fill == 0 and not math.copysign(1.0, float(fill)) < 0  # pyright: ignore[reportArgumentType]


def fill_masks(plan: LaunchPlan, op: OperandPlan, fill: object) -> set[str]:
    """The masks a load of `op` needs to read `fill` past the edge: none for +0, which TMA, the
    interpreter and host padding all read there already."""
    if fill is None or reads_zero(fill):
        return set()
    masks = set()
    for dim in op.dims:
        if not plan.dim(dim).ragged:
            continue
        along = "row" if dim == plan.rows else "col"
        masks.add(f"{along}_ok" if op.kind == Kind.TILE else f"{along}_ok_vec")
    return masks
