"""The statements of a persistent launch, as IR: CTA `cta` takes blocks cta, cta + ctas, ...
below `blocks`, each block in one of `stages` shared-memory slots.

Both persistent forms (the row form's, `emit.rows`, and the strided block's, `emit.module`) share
this skeleton; each supplies what one block's copies are, what a step computes, and when a
slot may be refilled.
"""

import dataclasses
import math

from ...ir.names import LocalNames
from ...ir.nodes import (
    Assign,
    BinOp,
    Comment,
    Const,
    Expr,
    ExprStmt,
    FunctionDef,
    Name,
    Operator,
    Stmt,
    call,
)

__all__ = ["PersistentNames", "persistent_statements"]


@dataclasses.dataclass(frozen=True)
class PersistentNames:
    """The persistent launch's locals: `cta`, its `trips`, the step `i` and its `slot`, and
    its two helpers; each given around the arrays' names (`LocalNames`)."""

    cta: Name
    slot: Name
    step: Name
    trips: Name
    load_block: str
    refill: str
    block: Name

    def block_indices(
        self, ctas: int, grid: tuple[int, ...], grid_names: tuple[str, ...]
    ) -> list[Stmt]:
        """The grid position of the CTA's `i`-th block of `grid`: the last axis runs fastest."""
        first = BinOp(Operator.ADD, self.cta, BinOp(Operator.MUL, self.step, Const(ctas)))
        lines: list[Stmt] = [Assign((self.block,), first)]
        for k, name in enumerate(grid_names):
            stride = math.prod(grid[k + 1 :])
            value: Expr = (
                BinOp(Operator.FLOORDIV, self.block, Const(stride)) if stride > 1 else self.block
            )
            if k > 0:
                value = call("lax.rem", value, Const(grid[k]))
            lines.append(Assign((Name(f"block_{name}"),), value))
        return lines

    @classmethod
    def around(cls, names: LocalNames) -> "PersistentNames":
        return cls(
            cta=Name(names.local("cta")),
            slot=Name(names.local("slot")),
            step=Name(names.local("i")),
            trips=Name(names.local("trips")),
            load_block=names.local("load_block"),
            refill=names.local("refill"),
            block=Name(names.local("block")),
        )


def persistent_statements(
    blocks: int,
    ctas: int,
    stages: int,
    load_block: tuple[Stmt, ...],
    setup: list[Stmt],
    step: list[Stmt],
    refill_reason: str,
    names: PersistentNames,
) -> list[Stmt]:
    """`cta` and its `trips`; `load_block(i, slot)`, the copies of the CTA's `i`-th block
    into `slot`; `setup`; the first `stages` blocks' copies; and the loop over the CTA's
    blocks: `step` on block `i` in slot `i % stages`, then, once `refill_reason` holds, that
    slot's copies of the block `stages` ahead."""
    body: list[Stmt] = [
        Assign((names.cta,), call("lax.axis_index", Const("cta"))),
        Assign(
            (names.trips,),
            BinOp(
                Operator.FLOORDIV,
                BinOp(Operator.SUB, Const(blocks + ctas - 1), names.cta),
                Const(ctas),
            ),
        ),
        FunctionDef(names.load_block, (names.step.text, names.slot.text), load_block),
        *setup,
    ]
    for s in range(stages):
        fill = ExprStmt(call(names.load_block, Const(s), Const(s)))
        if s == 0:  # every names.cta has a block
            body.append(fill)
        else:
            guard = call("pl.when", BinOp(Operator.LT, Const(s), names.trips))
            body.append(FunctionDef(f"fill_slot_{s}", (), (fill,), decorators=(guard,)))
    ahead = BinOp(Operator.ADD, names.step, Const(stages))
    refill = FunctionDef(
        names.refill,
        (),
        (Comment(refill_reason), ExprStmt(call(names.load_block, ahead, names.slot))),
        decorators=(call("pl.when", BinOp(Operator.LT, ahead, names.trips)),),
    )
    inner = (Assign((names.slot,), call("lax.rem", names.step, Const(stages))), *step, refill)
    body.append(
        FunctionDef(
            "step", (names.step.text,), inner, decorators=(call("pl.loop", Const(0), names.trips),)
        )
    )
    return body
