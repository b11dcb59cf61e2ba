"""Code generation for the loops of the row form: each `sk.loop` or `sk.map_blocks` over the
columns walks the row where it already lies, in shared memory, a step's block of columns at a
time, so the row is read from global memory once however many loops walk it.

A step's block of the row is a vector of the step's columns (`RowFrame.step_frame`), with as
many elements a thread as the row's vectors: each element is held by the same thread in every
loop and outside them, so a map that writes its result into the operand's buffer (an alias)
overwrites only elements its own thread has read. A fold is a `lax.fori_loop` whose carries
are registers (a per-row carry is a scalar); a map writes each step's block into the result's
row in shared memory, stored with the rest of the block after the rows are computed. Columns
past the array's edge (the last step's, where the step does not divide the row) read the
operand's fill, as the block form's steps do.
"""

import dataclasses
from collections.abc import Callable, Mapping

from ...ir.names import loop_function, loop_part
from ...ir.nodes import (
    Assign,
    BinOp,
    Const,
    Expr,
    FunctionDef,
    Literal,
    LoopMode,
    Mask,
    Name,
    Operator,
    Return,
    Stmt,
    Tuple,
    call,
)
from .. import hardware as hw
from ..lower.translation import LoopBlock
from ..pallas import RowFrame, select

__all__ = ["RowLoop", "row_loop_statements", "row_masks"]


def row_masks(frame: RowFrame, needed: set[Mask], size: int, start: Expr | None) -> list[Stmt]:
    """The edge masks (and positions) of the columns a frame holds in registers: the row's,
    or from column `start` on (a chunk's, a loop step's)."""
    if not needed:
        return []
    iota = call(
        "plgpu.broadcasted_iota",
        Name("jnp.int32"),
        Const((frame.chunk_width,)),
        Const(0),
        layout=frame.layout(),
    )
    lines: list[Stmt] = [Assign((Name("col_index"),), iota)]
    if start is not None:
        lines.append(Assign((Name("col_index"),), BinOp(Operator.ADD, Name("col_index"), start)))
    if Mask.COL_POSITION in needed:  # a row is whole: its positions are its indices
        lines.append(Assign((Name(Mask.COL_POSITION),), Name("col_index")))
    masks = needed - {Mask.COL_POSITION}
    if not masks:
        return lines
    first = Mask.COL_OK_VEC if Mask.COL_OK_VEC in masks else Mask.COL_OK
    lines.append(Assign((Name(first),), BinOp(Operator.LT, Name("col_index"), Const(size))))
    for mask in masks - {first}:
        lines.append(Assign((Name(mask),), Name(first)))
    return lines


@dataclasses.dataclass(frozen=True)
class RowLoop:
    """One loop of the row form, and how its steps reach the row in shared memory."""

    block: LoopBlock
    size: int
    """The columns of the array: those of the last step past it read the fill."""
    frame: RowFrame
    """The row's frame (its `step_frame` is a step's)."""
    load: Callable[[str, Expr], Stmt]
    """(operand, the step's columns) -> the statement that loads them into its variable."""
    write: Callable[[int, Expr, Expr], Stmt]
    """(the map's block, the step's columns, its value) -> the statement that stores it."""
    dtypes: Mapping[str, str]
    """The dtype of each operand the step loads."""

    @property
    def steps(self) -> int:
        return hw.cdiv(self.size, self.frame.step_block)


def row_loop_statements(loop: RowLoop) -> list[Stmt]:
    """The loop's step function and the walk over its steps."""
    block, frame = loop.block, loop.frame.step_frame()
    name = loop_function(block.index)
    index = Name(loop_part(name, "index"))
    carry = loop_part(name, "carry")
    step: list[Stmt] = []
    if block.reverse:
        walked = "the steps walk the blocks from the last to the first"
        last = BinOp(Operator.SUB, Const(loop.steps - 1), index)
        step.append(Assign((index,), last, comment=walked))
    start = BinOp(Operator.MUL, index, Const(frame.width))
    columns = call("pl.ds", start, Const(frame.width))
    if block.carries:
        step.append(Assign((_names([c.var for c in block.carries]),), Name(carry)))
    # Only the last step can hold columns past the edge, which read the fill there.
    past_edge = loop.steps * frame.width > loop.size
    needed = set(block.masks) | ({Mask.COL_OK} if past_edge and block.loads else set())
    step += row_masks(frame, needed, loop.size, start)
    fills = dict(block.fills)
    for op in block.loads:
        step.append(loop.load(op, columns))
        if past_edge:
            fill = Literal(fills.get(op, 0), loop.dtypes[op], weak_type=False)
            value = select(Name(Mask.COL_OK), Name(op), fill, loop.dtypes[op])
            step.append(Assign((Name(op),), value, comment="past the edge reads the fill"))
    step += block.lines
    for i, value in enumerate(block.blocks):
        step.append(loop.write(i, columns, value))
    if block.mode == LoopMode.MAP:
        assert not block.carries, "the row form's map carries nothing"
        walk = call("pl.loop", Const(0), Const(loop.steps))
        return [
            FunctionDef(loop_part(name, "step"), (index.text,), tuple(step), decorators=(walk,))
        ]
    updates = tuple(c.update for c in block.carries if c.update is not None)
    assert block.carries and len(updates) == len(block.carries), "a carry without its update"
    step.append(Return(Tuple(updates)))
    lines: list[Stmt] = [FunctionDef(loop_part(name, "step"), (index.text, carry), tuple(step))]
    inits = [loop_part(name, f"init{i}") for i in range(len(block.carries))]
    for init, c in zip(inits, block.carries, strict=True):
        assert c.init is not None
        lines.append(Assign((Name(init),), c.init))
    run = call(
        "lax.fori_loop", Const(0), Const(loop.steps), Name(loop_part(name, "step")), _names(inits)
    )
    lines.append(Assign((_names(list(block.finals)),), run))
    return lines


def _names(names: list[str]) -> Tuple:
    return Tuple(tuple(Name(n) for n in names))
