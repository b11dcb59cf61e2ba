"""Edge masks: which positions of a block lie inside the array, and which masks a load needs.

Each axis gets a vector of positions (an iota in the per-row or per-column layout, plus where
the block starts) compared with the dim's true size; a block's mask is that vector broadcast.
The positions themselves are what `sk.position` returns, built by the same statements. A broadcast shares the
vector's registers, where a block-shaped iota would take one register per element and per
mask: in a loop step, next to a block of data, those spill.
"""

import dataclasses
from collections.abc import Iterable

from ...._targets import TensorCores
from ...ir.nodes import Assign, BinOp, Const, DType, Expr, Kind, Mask, Name, Operator, Stmt, call
from ..pallas import broadcast, layout, reads_zero
from ..plan.plan import LaunchPlan, OperandPlan

__all__ = ["MaskAxis", "edge_mask_statements", "fill_masks"]


@dataclasses.dataclass(frozen=True)
class MaskAxis:
    """One axis of the block: its extent in registers, the dim's size, and where the block
    starts along it (None for a block at 0); for a result's joined columns held part by part,
    each part's first column in the block and its size (`DimLayout.parts`)."""

    extent: int
    size: int
    start: Expr | None
    parts: tuple[tuple[int, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class _Along:
    """The masks of one axis and the names of its positions."""

    prefix: str
    kind: Kind
    block: Mask
    vector: Mask
    position: Mask


_ROWS = _Along("row", Kind.ROW, Mask.ROW_OK, Mask.ROW_OK_VEC, Mask.ROW_POSITION)
_COLS = _Along("col", Kind.COL, Mask.COL_OK, Mask.COL_OK_VEC, Mask.COL_POSITION)
_LOOP = _Along("loop", Kind.LOOP_COL, Mask.LOOP_OK, Mask.LOOP_OK_VEC, Mask.LOOP_POSITION)
# The loop dim along the rows of a (loop block, cols) block: a computed `b` of sk.dot.
_LOOP_ROWS = _Along(
    "loop_row", Kind.ROW, Mask.LOOP_ROW_OK, Mask.LOOP_ROW_OK_VEC, Mask.LOOP_ROW_POSITION
)


def edge_mask_statements(
    needed: Iterable[Mask],
    rows: MaskAxis,
    cols: MaskAxis | None,
    loop: MaskAxis | None = None,
    tensor_cores: TensorCores = TensorCores.WGMMA,
) -> list[Stmt]:
    """Statements defining the masks in `needed`: `row_ok` and `col_ok` for blocks,
    `row_ok_vec` and `col_ok_vec` for vectors, and the positions `row_position` and
    `col_position` (global indices along the axis, past the dim's size too). In the step of a
    loop over a dim outside the frame, `loop` is that dim, with `loop_ok`, `loop_ok_vec` and
    `loop_position` along a step's columns, and `loop_row_ok` along the rows of a (loop
    block, cols) block (a computed `b` of sk.dot)."""
    needed = set(needed)
    statements: list[Stmt] = []
    for along, axis in ((_ROWS, rows), (_COLS, cols), (_LOOP, loop), (_LOOP_ROWS, loop)):
        across = loop if along is _LOOP else cols
        shape = (rows.extent, across.extent if across else 1)
        if along is _LOOP_ROWS:
            shape = (loop.extent if loop else 1, cols.extent if cols else 1)
        masks = {along.block, along.vector} & needed
        if not masks and along.position not in needed:
            continue
        assert axis is not None
        index = Name(f"{along.prefix}_index")
        iota = call(
            "plgpu.broadcasted_iota",
            DType("int32"),
            Const((axis.extent,)),
            Const(0),
            layout=layout(along.kind),
        )
        statements.append(Assign((index,), iota))
        position: Expr = index if axis.start is None else BinOp(Operator.ADD, index, axis.start)
        inside: Expr | None = None
        if axis.parts:  # columns held part by part: each part's own, its columns' positions
            position, inside = _part_positions(index, axis.parts), _in_parts(index, axis.parts)
        if along.position in needed:
            statements.append(Assign((Name(along.position),), position))
            position = Name(along.position)
        if not masks:
            continue
        if inside is None:
            inside = BinOp(Operator.LT, position, Const(axis.size))
        statements.append(Assign((Name(along.vector),), inside))
        if along.block in needed:
            dimension = 0 if along in (_ROWS, _LOOP_ROWS) else 1
            statements.append(
                Assign(
                    (Name(along.block),),
                    broadcast(Name(along.vector), shape, dimension, tensor_cores=tensor_cores),
                )
            )
    return statements


def _in_parts(index: Expr, parts: tuple[tuple[int, int], ...]) -> Expr:
    """Whether each column lies in a part, not between two."""
    inside: Expr | None = None
    for start, size in parts:
        end = BinOp(Operator.LT, index, Const(start + size))
        part = (
            end if start == 0 else BinOp(Operator.AND, BinOp(Operator.GE, index, Const(start)), end)
        )
        inside = part if inside is None else BinOp(Operator.OR, inside, part)
    assert inside is not None
    return inside


def _part_positions(index: Expr, parts: tuple[tuple[int, int], ...]) -> Expr:
    """Each column's position in the joined dim: its part's first position, plus its column
    in the part (between two parts, the next part's first, past the edge of the one before)."""
    position: Expr = index
    joined = 0
    for start, size in parts:
        if start != joined:
            shifted = BinOp(Operator.SUB, index, Const(start - joined))
            position = call("jnp.where", BinOp(Operator.GE, index, Const(start)), shifted, position)
        joined += size
    return position


def fill_masks(plan: LaunchPlan, op: OperandPlan, fill: object) -> set[Mask]:
    """The masks a load of `op` needs to read `fill` past the edge: none for +0, which TMA, the
    interpreter and host padding all read there already."""
    if fill is None or reads_zero(fill):
        return set()
    masks: set[Mask] = set()
    for dim in op.dims:
        if not plan.dim(dim).ragged:
            continue
        # A dim outside the frame is a loop's, whose vectors run along the step's columns.
        along = _ROWS if dim == plan.rows else _COLS if dim == plan.cols else _LOOP
        masks.add(along.block if op.kind == Kind.TILE else along.vector)
    return masks
