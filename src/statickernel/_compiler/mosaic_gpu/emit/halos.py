"""The rows a block copy holds around its block for the body's shifted loads (`Halo`): where
each halo copy reads in global memory and where it lands in the operand's buffer.

The buffer holds `before` rows, the block, then `after` rows, one contiguous run of rows, so
every copy lands in a contiguous destination and every window (`lower.shifts`) starts at a
row. Only a tiled row dim is copied with its neighbours: a whole dim has none, and its margin
rows are masked where read. The rows above the first block would lie before the array, where
a TMA box is not read as its edge fill in every path (the interpreter zero-fills the whole
box), so that copy reads from row 0 instead: the window masks those rows to the fill.

A load shifted along the columns has a window of its own below the block (and its rows
below), `Halo.window_rows` rows a column offset, copied by TMA from the shifted columns: a
copy whose columns start before the array (the first block of the columns, at a negative
offset) reads zeros there on the device, TMA's coordinates being signed. The interpreter
zero-fills such a box whole, so for it that block copies the columns inside the array alone,
into the window's columns they belong to; the window masks the rest to the fill.
"""

from ...ir.names import block_index, column_window_copy, gmem_ref, smem_ref
from ...ir.nodes import (
    BinOp,
    Const,
    Expr,
    ExprStmt,
    FunctionDef,
    Name,
    Operator,
    Stmt,
    Subscript,
    call,
)
from ..plan.plan import LaunchPlan, OperandPlan
from .slices import EDGE_START, block_slice, whole_slice

__all__ = ["block_rows", "column_window_copies", "halo_copies"]


def block_rows(op: OperandPlan) -> Expr | None:
    """The rows of an operand's buffer that hold its block, when a halo surrounds it."""
    if not op.halo.rows:
        return None
    return call("pl.ds", Const(op.halo.before), Const(op.block_shape[0]))


def halo_copies(plan: LaunchPlan, op: OperandPlan) -> list[tuple[Expr, Expr]]:
    """(rows of the array, rows of the buffer) of each halo copy of a tiled block."""
    if not op.halo.rows or not op.dims or not plan.dim(op.dims[0]).tiled_by:
        return []
    extent = op.block_shape[0]
    start = BinOp(Operator.MUL, Name(block_index(op.dims[0])), Const(extent))
    copies: list[tuple[Expr, Expr]] = []
    before, after = op.halo.before, op.halo.after
    if before:
        above = call("jnp.maximum", BinOp(Operator.SUB, start, Const(before)), Const(0))
        copies.append((call("pl.ds", above, Const(before)), call("pl.ds", Const(0), Const(before))))
    if after:
        below = BinOp(Operator.ADD, start, Const(extent))
        copies.append(
            (
                call("pl.ds", below, Const(after)),
                call("pl.ds", Const(before + extent), Const(after)),
            )
        )
    return copies


def column_window_copies(
    plan: LaunchPlan, op: OperandPlan, barrier: Expr, interpreted: bool
) -> list[Stmt]:
    """The TMA copies of the windows of an operand's loads shifted along its columns, each into
    its rows of the buffer (`Halo.window_start`), signalling the block's barrier."""
    if not op.halo.column_shifts:
        return []
    rows_dim, cols_dim = plan.dim(op.dims[0]), plan.dim(op.dims[1])
    extent, width = op.block_shape
    rows = (
        block_slice(rows_dim) if rows_dim.tiled_by else whole_slice(extent, op.block_gmem_shape[0])
    )
    if cols_dim.tiled_by:
        col_start: Expr = BinOp(Operator.MUL, Name(block_index(cols_dim.name)), Const(width))
    else:
        col_start = EDGE_START
    statements: list[Stmt] = []
    gmem, smem = gmem_ref(op.name), smem_ref(op.name)
    for offset in op.halo.column_shifts:
        held = call("pl.ds", Const(op.halo.window_start(offset, extent)), Const(extent))
        step = Operator.ADD if offset > 0 else Operator.SUB
        shifted = BinOp(step, col_start, Const(abs(offset)))
        source = Subscript(Name(f"{gmem}.at"), (rows, call("pl.ds", shifted, Const(width))))
        target = Subscript(Name(f"{smem}.at"), (held,))
        copy = ExprStmt(call("plgpu.copy_gmem_to_smem", source, target, barrier))
        if offset > 0 or not interpreted:
            statements.append(copy)
            continue
        # The interpreter: the first block's columns inside the array, into the window's last
        # (a window wholly before the array, masked whole, takes the block's own: the copy
        # only completes the barrier's count).
        inside = width + offset
        columns = call("pl.ds", col_start, Const(inside if inside > 0 else width))
        first_source = Subscript(Name(f"{gmem}.at"), (rows, columns))
        first_target = Subscript(
            Name(f"{smem}.at"),
            (held, call("pl.ds", Const(-offset), Const(inside))) if inside > 0 else (held,),
        )
        first = ExprStmt(call("plgpu.copy_gmem_to_smem", first_source, first_target, barrier))
        if not cols_dim.tiled_by:  # every block is the first
            statements.append(first)
            continue
        index = Name(block_index(cols_dim.name))
        name = column_window_copy(op.name, offset)
        statements += [
            FunctionDef(
                f"{name}_first",
                (),
                (first,),
                (call("pl.when", BinOp(Operator.EQ, index, Const(0))),),
            ),
            FunctionDef(
                f"{name}_rest", (), (copy,), (call("pl.when", BinOp(Operator.NE, index, Const(0))),)
            ),
        ]
    return statements
