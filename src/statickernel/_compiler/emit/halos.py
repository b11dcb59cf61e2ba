"""The rows a block copy holds around its block for the body's shifted loads (`Halo`): where
each halo copy reads in global memory and where it lands in the operand's buffer.

The buffer holds `before` rows, the block, then `after` rows, one contiguous run of rows, so
every copy lands in a contiguous destination and every window (`lower.shifts`) starts at a
row. Only a tiled row dim is copied with its neighbours: a whole dim has none, and its margin
rows are masked where read. The rows above the first block would lie before the array, where
a TMA box is not read as its edge fill in every path (the interpreter zero-fills the whole
box), so that copy reads from row 0 instead: the window masks those rows to the fill.
"""

from ..ir.names import block_index
from ..ir.nodes import BinOp, Const, Expr, Name, Operator, call
from ..plan.plan import LaunchPlan, OperandPlan

__all__ = ["block_rows", "halo_copies"]


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
