"""The TMA boxes that copy an operand's block, and a result's, between global and shared
memory: one box along each dim the grid splits, equal boxes of at most 256 elements along a
whole dim, and the boxes of the rows around a block that its shifted loads read
(`emit.halos`); and the copies that store a result's block, its last block's rows alone
where a whole block would run into the next batch entry, or a 0-d result's element."""

import itertools
from collections.abc import Sequence

from ...ir.names import block_index, gmem_ref, result_store, smem_ref
from ...ir.nodes import (
    Assign,
    BinOp,
    Comment,
    Const,
    EllipsisIndex,
    Expr,
    ExprStmt,
    FunctionDef,
    Name,
    Operator,
    Slice,
    Stmt,
    Subscript,
    call,
)
from .. import hardware as hw
from ..plan.plan import LaunchPlan, OperandPlan
from .halos import halo_copies
from .slices import EDGE_START, whole_slice

__all__ = ["element_stores", "oob_mode", "result_copies", "rows_boxes", "tma_boxes"]


def tma_boxes(plan: LaunchPlan, op: OperandPlan) -> list[tuple[Expr, Expr]]:
    """(GMEM slice, SMEM ref) of each TMA box of an operand's block, then of the rows
    around it that its shifted loads read (`emit.halos`).

    A whole dim wider than one box is copied in equal boxes: along rows they are
    contiguous slices of one SMEM buffer; along columns each box has its own leading SMEM
    index, because a TMA destination must be contiguous.
    """
    boxes = rows_boxes(plan, op, None)
    for rows in halo_copies(plan, op):
        boxes += rows_boxes(plan, op, rows)
    return boxes


def rows_boxes(
    plan: LaunchPlan, op: OperandPlan, rows: tuple[Expr, Expr] | None
) -> list[tuple[Expr, Expr]]:
    """The boxes of the block, or with `rows` (array rows, buffer rows) for its rows."""
    per_dim: list[list[tuple[Expr, int | None, Expr | None]]] = []
    below = op.halo.before  # the buffer's rows above the block's
    for dim_name, extent, gmem in zip(op.dims, op.block_shape, op.block_gmem_shape, strict=True):
        d = plan.dim(dim_name)
        first = not per_dim
        if first and rows is not None:
            per_dim.append([(rows[0], None, rows[1])])
            continue
        if d.tiled_by:
            start = BinOp(Operator.MUL, Name(block_index(dim_name)), Const(extent))
            held = call("pl.ds", Const(below), Const(extent)) if first and op.halo.rows else None
            per_dim.append([(call("pl.ds", start, Const(extent)), None, held)])
            continue
        if first and op.halo.rows and d.boxes == 1:
            held = call("pl.ds", Const(below), Const(extent))
            per_dim.append([(whole_slice(extent, gmem), None, held)])
            continue
        boxes, size = d.boxes, extent // d.boxes
        column = dim_name == plan.cols or d.joins is not None
        options: list[tuple[Expr, int | None, Expr | None]] = []
        for k in range(boxes):
            start = k * size
            gslice: Expr
            if boxes == 1 and extent == gmem:
                gslice = Slice()
            elif start + size <= gmem:
                gslice = call("pl.ds", Const(start), Const(size))
            else:
                edge = BinOp(Operator.ADD, EDGE_START, Const(start)) if start else EDGE_START
                gslice = call("pl.ds", edge, Const(size))
            if boxes == 1:
                options.append((gslice, None, None))
            elif column:
                options.append((gslice, k, None))
            else:
                held_at = start + (below if first else 0)
                options.append((gslice, None, call("pl.ds", Const(held_at), Const(size))))
        per_dim.append(options)
    boxes_out = []
    for combo in itertools.product(*per_dim):
        gmem_box = Subscript(Name(f"{gmem_ref(op.name)}.at"), tuple(g for g, _, _ in combo))
        index: list[Expr] = [Const(k) for _, k, _ in combo if k is not None]
        index += [r for _, _, r in combo if r is not None]
        smem = smem_ref(op.name)
        smem_box = Subscript(Name(f"{smem}.at"), tuple(index)) if index else Name(smem)
        boxes_out.append((gmem_box, smem_box))
    return boxes_out


def _copies(boxes: list[tuple[Expr, Expr]]) -> list[Stmt]:
    return [ExprStmt(call("plgpu.copy_smem_to_gmem", smem, gmem)) for gmem, smem in boxes]


def result_copies(plan: LaunchPlan, op: OperandPlan) -> list[Stmt]:
    """The TMA copies of a result's block to global memory. A batch entry's block of whole
    rows past its edge (`OperandPlan.last_block_rows`) is one contiguous run, which Mosaic GPU
    copies by a plain bulk copy clipped only at the whole array's end: the entry's last block
    copies its rows inside the entry alone (a static box), the others their whole block."""
    if not op.last_block_rows:
        return _copies(tma_boxes(plan, op))
    dim = plan.dim(op.dims[0])
    last, rows = hw.cdiv(dim.size, dim.block) - 1, op.last_block_rows
    edge = (
        call("pl.ds", Const(last * dim.block), Const(rows)),
        call("pl.ds", Const(0), Const(rows)),
    )
    part = _copies(rows_boxes(plan, op, edge))
    why = Comment(
        f"The last block's {rows} rows alone: a whole block would run into the next entry."
    )
    if last == 0:
        return [why, *part]
    index = Name(block_index(dim.name))
    inside = call("pl.when", BinOp(Operator.LT, index, Const(last)))
    at_edge = call("pl.when", BinOp(Operator.EQ, index, Const(last)))
    whole = tuple(_copies(tma_boxes(plan, op)))
    return [
        FunctionDef(result_store(op.name, "whole"), (), whole, (inside,)),
        why,
        FunctionDef(result_store(op.name, "edge"), (), tuple(part), (at_edge,)),
    ]


def oob_mode(plan: LaunchPlan, op: OperandPlan) -> dict[str, Expr]:
    """The load's bounds handling. A box inside the array in every block needs none: say so
    (a bulk copy). A block of a kernel of vectors alone may be wider than a TMA box: it is a
    bulk copy clamped at the array's end (`UNDEFINED`: past it, shared memory keeps what it
    held, which the edge masks replace and the clipped stores never write). Else TMA's zeros."""
    if not any(plan.dim(d).ragged for d in op.dims) and not op.halo.rows:
        return {"oob_mode": Name("plgpu.OOBFillMode.PROMISE_IN_BOUNDS")}
    if any(plan.dim(d).bulk for d in op.dims):
        return {"oob_mode": Name("plgpu.OOBFillMode.UNDEFINED")}
    return {}


def element_stores(
    written: Sequence[OperandPlan],
    results: Sequence[OperandPlan],
    outputs: Sequence[Expr | None],
) -> list[Stmt]:
    """Each 0-d result of `written`, from registers to its element of the array (the grid
    step's, its ref narrowed to its batch entry): no TMA box holds a 0-d block. Every thread
    writes the same value."""
    stores: list[Stmt] = []
    for op, value in zip(results, outputs, strict=True):
        if op in written:
            assert value is not None and not op.block_shape
            target = Subscript(Name(gmem_ref(op.name)), (EllipsisIndex(),))
            stores.append(Assign((target,), value, comment="one value a grid step"))
    return stores
