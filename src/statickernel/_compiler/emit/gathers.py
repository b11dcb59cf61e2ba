"""The copies of a block whose rows an index operand picks (`index={"V": "ids"}`): row `t` of
the block is row `ids[t]` of the array, copied by TMA one row at a time.

A loop of the block's rows reads each id from global memory (the index of a row past the
index's end is read at its last element, and that row of the block is never stored), and
starts the copy of that row, all into the block's one barrier, which waits for every row's
arrival. An id outside [0, rows) is replaced by `rows`, one past the array's end, where TMA
reads zeros on the device and in the interpreter alike (a negative start is not: the
interpreter reads it as Python indexing would), so every such row reads zeros.
"""

from collections.abc import Mapping

from ..ir.names import block_index, gmem_ref
from ..ir.nodes import (
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
from ..ir.pallas import select
from ..plan.plan import LaunchPlan, OperandPlan
from .boxes import rows_boxes

__all__ = ["gather_copies"]


def gather_copies(
    plan: LaunchPlan, op: OperandPlan, barrier: Expr, promise: Mapping[str, Expr]
) -> list[Stmt]:
    """The loop that copies `op`'s block row by row from the rows its index picks."""
    assert op.index is not None
    index = plan.operand(op.index)
    along = plan.dim(op.dims[0])  # the index's dim: the block's rows
    rows = op.block_shape[0]
    row = Name(f"{op.name}_row")
    position: Expr = row
    if along.tiled_by:
        start = BinOp(Operator.MUL, Name(block_index(along.name)), Const(along.block))
        position = BinOp(Operator.ADD, start, row)
    last = Const(index.shape[-1] - 1)
    at = Name(f"{op.name}_at")
    picked = Name(f"{op.name}_index")
    array_rows = op.shape[0]
    read = Subscript(Name(gmem_ref(op.index)), (call("lax.min", position, last),))
    if index.dtype != "int32":
        read = call("lax.convert_element_type", read, DType("int32"))
    inside = BinOp(
        Operator.AND,
        BinOp(Operator.GT, picked, Const(-1)),
        BinOp(Operator.LT, picked, Const(array_rows)),
    )
    body: list[Stmt] = [
        Comment(f"The row of `{op.name}` that row {row.text} of the block reads; one outside"),
        Comment("the array is read one past its end, where TMA reads zeros."),
        Assign((picked,), read),
        Assign((at,), select(inside, picked, Const(array_rows), "int32")),
    ]
    for gmem_box, smem_box in rows_boxes(
        plan, op, (call("pl.ds", at, Const(1)), call("pl.ds", row, Const(1)))
    ):
        copy = call("plgpu.copy_gmem_to_smem", gmem_box, smem_box, barrier, **promise)
        body.append(ExprStmt(copy))
    loop = FunctionDef(
        f"gather_{op.name}",
        (row.text,),
        tuple(body),
        decorators=(call("pl.loop", Const(0), Const(rows)),),
    )
    return [loop]
