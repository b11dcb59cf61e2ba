"""The copies of a block whose rows an index operand picks (`index={"V": "ids"}`), one TMA
copy a row: a gather copies row `ids[t]` of an operand's array into row t of its block, a
scatter copies row t of a result's block (one that updates an operand in place) to row
`ids[t]` of that array.

A loop of the block's rows reads each id from global memory and starts the copy of that
row. A gather's copies all arrive at the block's one barrier, which counts one arrival a
row, so every row is copied: a row past the index's end reads the index's last element
(that row of the block is never stored), and an id outside [0, rows) is replaced by `rows`,
one past the array's end, where TMA reads zeros on the device and in the interpreter alike
(a negative start is not: the interpreter reads it as Python indexing would). A scatter
skips such a row, and a row past the index's end, under `pl.when`.
"""

from collections.abc import Mapping

from ...ir.names import block_index, gmem_ref, indexed_loop, indexed_part
from ...ir.nodes import (
    Assign,
    BinOp,
    Comment,
    Const,
    DType,
    Expr,
    ExprStmt,
    FunctionDef,
    Name,
    Operator,
    Stmt,
    Subscript,
    call,
)
from .. import hardware as hw
from ..pallas import select
from ..plan.plan import LaunchPlan, OperandPlan
from .boxes import rows_boxes

__all__ = ["gather_copies", "scatter_copies"]


def gather_copies(
    plan: LaunchPlan, op: OperandPlan, barrier: Expr, promise: Mapping[str, Expr]
) -> list[Stmt]:
    """The loop that copies `op`'s block row by row from the rows its index picks."""
    row, picked, inside, body = _row_of_array(plan, op, skip_past_index=False)
    at = Name(indexed_part(op.name, "at"))
    body.append(Assign((at,), select(inside, picked, Const(_array_rows(op)), "int32")))
    body.append(Comment("An id outside the array reads one past its end: zeros."))
    for gmem_box, smem_box in rows_boxes(plan, op, _one_row(at, row)):
        copy = call("plgpu.copy_gmem_to_smem", gmem_box, smem_box, barrier, **promise)
        body.append(ExprStmt(copy))
    return [_row_loop(indexed_loop(op.name, "gather"), op, row, body)]


def scatter_copies(plan: LaunchPlan, op: OperandPlan) -> list[Stmt]:
    """The loop that copies the result `op`'s block row by row to the rows its index picks;
    a row outside the array, or past the index's end, is not copied at all (sent one past
    the array's end, TMA would drop it, but the copies of several such rows would still be
    writes to one place that nothing orders)."""
    row, picked, inside, body = _row_of_array(plan, op, skip_past_index=True)
    copies = tuple(
        ExprStmt(call("plgpu.copy_smem_to_gmem", smem_box, gmem_box))
        for gmem_box, smem_box in rows_boxes(plan, op, _one_row(picked, row))
    )
    body.append(Comment("A row outside the array, or past the index's end, is skipped."))
    when = call("pl.when", inside)
    body.append(FunctionDef(indexed_part(op.name, "store"), (), copies, decorators=(when,)))
    return [_row_loop(indexed_loop(op.name, "scatter"), op, row, body)]


def _one_row(at: Expr, row: Name) -> tuple[Expr, Expr]:
    """(the array's row `at`, the buffer's row `row`), one row each."""
    return call("pl.ds", at, Const(1)), call("pl.ds", row, Const(1))


def _row_loop(name: str, op: OperandPlan, row: Name, body: list[Stmt]) -> FunctionDef:
    loop = call("pl.loop", Const(0), Const(op.block_shape[0]))
    return FunctionDef(name, (row.text,), tuple(body), decorators=(loop,))


def _array_rows(op: OperandPlan) -> int:
    """The rows of the array the index addresses (after its batch dims)."""
    return op.gmem_shape[len(op.batch)]


def _row_of_array(
    plan: LaunchPlan, op: OperandPlan, *, skip_past_index: bool
) -> tuple[Name, Name, Name, list[Stmt]]:
    """The loop's row, the id read at its position, whether that id is a row of the array
    (and, with `skip_past_index`, whether the position is inside the index), and the
    statements that compute them."""
    assert op.index is not None
    index = plan.operand(op.index)
    along = plan.dim(op.dims[0])  # the index's dim: the block's rows
    row = Name(indexed_part(op.name, "row"))
    position: Expr = row
    if along.tiled_by:
        start = BinOp(Operator.MUL, Name(block_index(along.name)), Const(along.block))
        position = BinOp(Operator.ADD, start, row)
    size = index.shape[-1]
    read: Expr = Subscript(Name(gmem_ref(op.index)), (call("lax.min", position, Const(size - 1)),))
    if index.dtype != "int32":
        read = call("lax.convert_element_type", read, DType("int32"))
    picked, inside = Name(indexed_part(op.name, "index")), Name(indexed_part(op.name, "inside"))
    condition: Expr = BinOp(
        Operator.AND,
        BinOp(Operator.GT, picked, Const(-1)),
        BinOp(Operator.LT, picked, Const(_array_rows(op))),
    )
    if skip_past_index and hw.cdiv(along.size, along.block) * op.block_shape[0] > size:
        condition = BinOp(Operator.AND, condition, BinOp(Operator.LT, position, Const(size)))
    body: list[Stmt] = [
        Comment(f"The row of the array that row {row.text} of the block is copied with."),
        Assign((picked,), read),
        Assign((inside,), condition),
    ]
    return row, picked, inside, body
