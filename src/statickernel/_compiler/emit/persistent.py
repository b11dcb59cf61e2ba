"""The statements of a persistent launch, as IR: CTA `cta` takes blocks cta, cta + ctas, ...
below `blocks`, each block in one of `stages` shared-memory slots.

Both persistent forms (the row form's, `emit.rows`, and the strided block's, `emit.module`) share
this skeleton; each supplies what one block's copies are, what a step computes, and when a
slot may be refilled.
"""

from ..ir.nodes import (
    Assign,
    BinOp,
    Comment,
    Const,
    ExprStmt,
    FunctionDef,
    Name,
    Operator,
    Stmt,
    call,
)

__all__ = ["CTA", "SLOT", "STEP", "persistent_statements"]

CTA, SLOT, STEP = Name("cta"), Name("slot"), Name("i")
_TRIPS = Name("trips")


def persistent_statements(
    blocks: int,
    ctas: int,
    stages: int,
    load_block: tuple[Stmt, ...],
    setup: list[Stmt],
    step: list[Stmt],
    refill_reason: str,
) -> list[Stmt]:
    """`cta` and its `trips`; `load_block(i, slot)`, the copies of the CTA's `i`-th block
    into `slot`; `setup`; the first `stages` blocks' copies; and the loop over the CTA's
    blocks: `step` on block `i` in slot `i % stages`, then, once `refill_reason` holds, that
    slot's copies of the block `stages` ahead."""
    body: list[Stmt] = [
        Assign((CTA,), call("lax.axis_index", Const("cta"))),
        Assign(
            (_TRIPS,),
            BinOp(
                Operator.FLOORDIV, BinOp(Operator.SUB, Const(blocks + ctas - 1), CTA), Const(ctas)
            ),
        ),
        FunctionDef("load_block", ("i", "slot"), load_block),
        *setup,
    ]
    for s in range(stages):
        fill = ExprStmt(call("load_block", Const(s), Const(s)))
        if s == 0:  # every CTA has a block
            body.append(fill)
        else:
            guard = call("pl.when", BinOp(Operator.LT, Const(s), _TRIPS))
            body.append(FunctionDef(f"fill_slot_{s}", (), (fill,), decorators=(guard,)))
    ahead = BinOp(Operator.ADD, STEP, Const(stages))
    refill = FunctionDef(
        "refill",
        (),
        (Comment(refill_reason), ExprStmt(call("load_block", ahead, SLOT))),
        decorators=(call("pl.when", BinOp(Operator.LT, ahead, _TRIPS)),),
    )
    inner = (Assign((SLOT,), call("lax.rem", STEP, Const(stages))), *step, refill)
    body.append(FunctionDef("step", ("i",), inner, decorators=(call("pl.loop", Const(0), _TRIPS),)))
    return body
