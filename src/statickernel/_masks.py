"""The source of edge masks: which positions of a block lie inside the array.

Each axis gets a vector of positions (an iota in the per-row or per-column layout) compared
with the dim's true size; a block's mask is that vector broadcast. A broadcast shares the
vector's registers, where a block-shaped iota would take one register per element and per
mask: in a loop step, next to a block of data, those spill.
"""

import dataclasses

from ._translate import COL, LAYOUTS, ROW

__all__ = ["MaskAxis", "edge_mask_lines"]


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
