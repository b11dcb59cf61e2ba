"""Shifted loads: `sk.load(x, offset={"L": -3})`, the block of `x` three rows of `L` earlier,
as a causal convolution's taps read it.

The operand's copy holds the rows around its block that the body's offsets reach (its halo:
`Halo.before` rows above the block, `Halo.after` below, see `emit.halos`), so a shifted block
is a window of that buffer read at a static row: a load like the block's own, whose rows start
at a multiple of the row pitch, so every vector access stays aligned. Rows the window takes
from outside the array read the fill: before the first row (the first block's halo is copied
from inside the array, and a whole dim's is never written) and past the last (read as zeros
by TMA: masked only for another fill, or where the margin is never written).

Along the columns a window would start inside a vector of the register layout (misaligned on
the device), so shifts run along the rows; a body shifting a sequence laid out along the
columns passes it transposed (channels last, as flax's convolutions take it).
"""

from collections.abc import Mapping

from ..._errors import ShiftError
from ..ir.names import smem_ref
from ..ir.nodes import (
    Assign,
    BinOp,
    Const,
    Expr,
    Kind,
    Literal,
    Mask,
    Name,
    Operator,
)
from ..ir.nodes import call as ir_call
from ..ir.pallas import broadcast, load_buffer, reads_zero, select
from ..trace.body import Eqn
from .context import Rule, Support, Translator, Where

__all__ = ["SHIFT_RULES"]


def _translate_shift(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    operand, dim, offset = eqn.param("operand"), eqn.param("dim"), int(eqn.param("offset"))
    kind = tr.kind(atom)
    _check(tr, eqn, operand, dim, offset)
    halo = dict(tr.g.input_halos)[operand]
    rows = ir_call("pl.ds", Const(halo.before + offset), Const(tr.g.rows))
    boxes = tr.g.col_boxes if kind is Kind.TILE else 1
    window = load_buffer(smem_ref(operand), kind, boxes, rows)
    dtype = tr.dtype(atom)
    fill = dict(tr.g.input_fills)[operand]
    # Where the window's rows lie inside the array, where the buffer may not hold the fill.
    bounds: list[Expr] = []
    position = Name(Mask.ROW_POSITION)
    if offset < 0:  # row p reads row p + offset, inside from p = -offset on
        bounds.append(BinOp(Operator.GT, position, Const(-offset - 1)))
    if offset > 0 and (not reads_zero(fill) or not tr.g.row_tiled):
        bounds.append(BinOp(Operator.LT, position, Const(tr.g.row_size - offset)))
    if not bounds:
        return tr.assign(eqn, kind, window)
    tr.masks.add(Mask.ROW_POSITION)
    inside = bounds[0] if len(bounds) == 1 else BinOp(Operator.AND, bounds[0], bounds[1])
    if kind is Kind.TILE:
        inside = broadcast(inside, tr.g.shape(Kind.TILE), 0)
    out = eqn.outputs[0]
    tr.define(out, kind, dtype)
    value = select(inside, window, Literal(fill, dtype, weak_type=False), dtype)
    tr.lines.append(Assign((Name(out),), value, comment="rows outside the array read the fill"))


def _check(tr: Translator, eqn: Eqn, operand: str, dim: str, offset: int) -> None:
    where = f"sk.load({operand}, offset={{{dim!r}: {offset}}})"
    if dim != tr.g.row_dim:
        raise tr.fail(
            eqn,
            f"the body loads `{operand}` shifted along {dim}, its columns: a shifted window of "
            "the columns would start inside a register vector",
            f"lay {dim} out as the rows: pass `{operand}` transposed (channels last, "
            f"'{dim} ...' before its other dim) and shift along the rows",
            actual=where,
            error=ShiftError,
            operand=operand,
            expected=f"a shift along the row dim {tr.g.row_dim}",
            dim=dim,
        )
    if tr.g.row_tiled and -offset > tr.g.rows:
        # The rows above a block are copied from `block start - rows above`: past one block,
        # that lies before the array for blocks after the first too.
        raise tr.fail(
            eqn,
            f"the body loads `{operand}` {-offset} rows of {dim} back, further than one block "
            f"({tr.g.rows} rows)",
            f"shift by at most {tr.g.rows} rows, or split {dim} into larger blocks (its "
            "tiling constant) so that one block spans the taps",
            actual=where,
            error=ShiftError,
            operand=operand,
            expected=f"an offset of at least -{tr.g.rows}",
            dim=dim,
        )
    if tr.g.in_step or operand in dict(tr.g.looped_operands):
        raise tr.fail(
            eqn,
            f"the body loads `{operand}` shifted inside a loop's step, whose pipeline copies "
            "one block at a time without its neighbours",
            f"split {dim} across the grid (tile={{{dim!r}: ...}}) and load `{operand}` "
            "shifted outside any loop",
            actual=where,
            error=ShiftError,
            operand=operand,
            expected="a shifted load outside loops",
            dim=dim,
        )


SHIFT_RULES: Mapping[str, Rule] = {
    "sk_shift": Rule(
        _translate_shift,
        support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.NO)),
        note="a shifted block is masked by per-row positions, which only the block form holds",
    )
}
