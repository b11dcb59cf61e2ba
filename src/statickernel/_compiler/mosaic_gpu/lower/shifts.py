"""Shifted loads: `sk.load(x, offset={"L": -3})`, the block of `x` three rows of `L` earlier,
as a causal convolution's taps read it.

The operand's copy holds the rows around its block that the body's offsets reach (its halo:
`Halo.before` rows above the block, `Halo.after` below, see `emit.halos`), so a shifted block
is a window of that buffer read at a static row: a load like the block's own, whose rows start
at a multiple of the row pitch, so every vector access stays aligned. Rows the window takes
from outside the array read the fill: before the first row (the first block's halo is copied
from inside the array, and a whole dim's is never written) and past the last (read as zeros
by TMA: masked only for another fill, or where the margin is never written).

Along the columns a window of that buffer would start inside a vector of the register layout
(misaligned on the device): each column offset has a window of its own instead, a TMA copy of
the block's rows from the shifted columns (`emit.halos.column_window_copies`), stacked below
the block in its buffer. Columns it takes from before the array are masked to the fill (TMA
reads zeros there on the device; the interpreter's copy leaves them unwritten), those past the
last are read as zeros by TMA and masked only for another fill.
"""

from collections.abc import Mapping

from ...._errors import ShiftError
from ....language.context import Halo
from ...ir.names import smem_ref
from ...ir.nodes import (
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
from ...ir.nodes import call as ir_call
from ...trace.body import Eqn
from ..pallas import broadcast, load_buffer, reads_zero, select
from .context import Rule, Support, Translator, Where

__all__ = ["SHIFT_RULES"]


def _translate_shift(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    operand, dim, offset = eqn.param("operand"), eqn.param("dim"), int(eqn.param("offset"))
    kind = tr.kind(atom)
    _check(tr, eqn, operand, dim, offset)
    halo = dict(tr.g.input_halos)[operand]
    fill = dict(tr.g.input_fills)[operand]
    if dim != tr.g.row_dim:
        return _column_window(tr, eqn, halo, fill, offset)
    rows = ir_call("pl.ds", Const(halo.before + offset), Const(tr.g.rows))
    boxes = tr.g.col_boxes if kind is Kind.TILE else 1
    window = load_buffer(smem_ref(operand), kind, boxes, rows)
    # Where the window's rows lie inside the array, where the buffer may not hold the fill.
    bounds: list[Expr] = []
    position = Name(Mask.ROW_POSITION)
    if offset < 0:  # row p reads row p + offset, inside from p = -offset on
        bounds.append(BinOp(Operator.GT, position, Const(-offset - 1)))
    if offset > 0 and (not reads_zero(fill) or not tr.g.row_tiled):
        bounds.append(BinOp(Operator.LT, position, Const(tr.g.row_size - offset)))
    _fill_outside(tr, eqn, window, fill, bounds, Mask.ROW_POSITION, "rows")


def _column_window(tr: Translator, eqn: Eqn, halo: Halo, fill: object, offset: int) -> None:
    """The block `offset` columns further: its own window, below the block in the buffer."""
    operand = eqn.param("operand")
    start = halo.window_start(offset, tr.g.rows)
    window = load_buffer(
        smem_ref(operand), Kind.TILE, 1, ir_call("pl.ds", Const(start), Const(tr.g.rows))
    )
    bounds: list[Expr] = []
    position = Name(Mask.COL_POSITION)
    if offset < 0:  # column p reads column p + offset, inside from p = -offset on
        bounds.append(BinOp(Operator.GT, position, Const(-offset - 1)))
    if offset > 0 and not reads_zero(fill):  # TMA reads zeros past the last column
        bounds.append(BinOp(Operator.LT, position, Const(tr.g.col_array_size - offset)))
    _fill_outside(tr, eqn, window, fill, bounds, Mask.COL_POSITION, "columns")


def _fill_outside(
    tr: Translator,
    eqn: Eqn,
    window: Expr,
    fill: object,
    bounds: list[Expr],
    position: Mask,
    what: str,
) -> None:
    """The window, where `bounds` (on the positions along its dim) say it lies outside the
    array: the fill."""
    (atom,) = eqn.inputs
    kind, dtype = tr.kind(atom), tr.dtype(atom)
    if not bounds:
        return tr.assign(eqn, kind, window)
    tr.masks.add(position)
    inside = bounds[0] if len(bounds) == 1 else BinOp(Operator.AND, bounds[0], bounds[1])
    if kind is Kind.TILE:
        dimension = 0 if position is Mask.ROW_POSITION else 1
        inside = broadcast(inside, tr.g.shape(Kind.TILE), dimension, tensor_cores=tr.g.tensor_cores)
    out = eqn.outputs[0]
    tr.define(out, kind, dtype)
    value = select(inside, window, Literal(fill, dtype, weak_type=False), dtype)
    tr.lines.append(Assign((Name(out),), value, comment=f"{what} outside the array read the fill"))


def _check(tr: Translator, eqn: Eqn, operand: str, dim: str, offset: int) -> None:
    where = f"sk.load({operand}, offset={{{dim!r}: {offset}}})"
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
    if dim != tr.g.row_dim:
        _check_columns(tr, eqn, operand, dim, offset, where)
    elif tr.g.row_tiled and -offset > tr.g.rows:
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


def _check_columns(
    tr: Translator, eqn: Eqn, operand: str, dim: str, offset: int, where: str
) -> None:
    """A column window is one TMA box of the block's columns, copied once: the operand is a
    2-D block of the frame, never shifted along its rows too, and a window that starts before
    the array does so in the first block of the columns only."""
    halo = dict(tr.g.input_halos)[operand]
    kind = tr.kind(eqn.inputs[0])
    if dim == tr.g.col_dim and kind is Kind.COL:
        shifted = _shifted_outside(operand, offset, dict(tr.g.input_fills)[operand])
        raise tr.fail(
            eqn,
            f"the body loads the per-column vector `{operand}` shifted along its columns {dim}: "
            "a window of a vector's columns would start inside a register vector",
            f"shift `{operand}` outside the kernel, {operand}_shifted = {shifted} (element j "
            f"is {operand}[j {'-' if offset < 0 else '+'} {abs(offset)}], the fill outside the "
            "array), and pass it as an "
            f"operand of its own along {dim}, loaded with sk.load({operand}_shifted)",
            actual=where,
            error=ShiftError,
            operand=operand,
            expected="a 2-D block shifted along the columns, or a vector along the rows",
            dim=dim,
        )
    if dim != tr.g.col_dim or kind is not Kind.TILE:
        raise tr.fail(
            eqn,
            f"the body loads `{operand}` shifted along {dim}, which is not a dim of the "
            "kernel's blocks it holds",
            f"shift `{operand}` along the rows {tr.g.row_dim} or the columns {tr.g.col_dim} of "
            "its blocks",
            actual=where,
            error=ShiftError,
            operand=operand,
            expected=f"a shift along {tr.g.row_dim} or {tr.g.col_dim}",
            dim=dim,
        )
    if halo.before or halo.after:
        raise tr.fail(
            eqn,
            f"the body loads `{operand}` shifted along both its rows {tr.g.row_dim} and its "
            f"columns {dim}",
            f"shift `{operand}` along one of them; pass a second operand of the same array "
            "for the other",
            actual=where,
            error=ShiftError,
            operand=operand,
            expected="shifts along one dim of the block",
            dim=dim,
        )
    if tr.g.col_boxes > 1:
        raise tr.fail(
            eqn,
            f"the body loads `{operand}` shifted along {dim}, whose blocks are copied in "
            f"{tr.g.col_boxes} TMA boxes: a shifted window is one box",
            f"split {dim} into blocks of at most 256 columns (tile={{{dim!r}: ...}})",
            actual=where,
            error=ShiftError,
            operand=operand,
            expected="a block of at most 256 columns",
            dim=dim,
        )
    if tr.g.col_tiled and -offset > tr.g.col_size:
        raise tr.fail(
            eqn,
            f"the body loads `{operand}` {-offset} columns of {dim} back, further than one "
            f"block ({tr.g.col_size} columns)",
            f"shift by at most {tr.g.col_size} columns, or split {dim} into larger blocks",
            actual=where,
            error=ShiftError,
            operand=operand,
            expected=f"an offset of at least -{tr.g.col_size}",
            dim=dim,
        )


SHIFT_RULES: Mapping[str, Rule] = {
    "sk_shift": Rule(
        _translate_shift,
        support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.NO)),
        note="a shifted block is masked by its positions along the rows or the columns, which "
        "only the block form holds",
    )
}


def _shifted_outside(operand: str, offset: int, fill: object) -> str:
    """The jnp of `sk.load(operand, offset={dim: offset})` along a vector: its elements moved
    by `offset`, the fill where they come from outside the array."""
    if isinstance(fill, float) and fill != fill:
        value = "jnp.nan"
    elif isinstance(fill, float) and fill in (float("inf"), float("-inf")):
        value = "jnp.inf" if fill > 0 else "-jnp.inf"
    else:
        value = repr(fill)
    values = "" if not fill else f", constant_values={value}"
    if offset < 0:
        return f"jnp.pad({operand}, ({-offset}, 0){values})[:{offset}]"
    return f"jnp.pad({operand}, (0, {offset}){values})[{offset}:]"
