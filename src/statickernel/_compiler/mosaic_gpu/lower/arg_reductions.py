"""`jnp.argmax` and `jnp.argmin` over an axis of a block (greedy decoding, a router's choice),
written with the reductions Mosaic GPU lowers: the block's max (or min) over the axis, then the
smallest position where the block holds it.

As jnp's: the first index wins a tie, a NaN wins over every number (the first NaN's index), and
the index is the block's own, from 0 (for a dim the block holds whole, the array's). Elements past
the array's edge never win: the max skips them, and so does the search for its position.
"""

import dataclasses
from collections.abc import Mapping

from ...ir.names import value_part
from ...ir.nodes import Assign, BinOp, Const, DType, Expr, Kind, Literal, Mask, Name, Operator
from ...ir.nodes import call as ir_call
from ...trace.body import Atom, Eqn
from .context import NotInForm, Rule, Support, Translator, Where
from .rules import reduce

__all__ = ["ARG_RULES"]

_INT32_MAX = 2**31 - 1
_EXTREMES = {"argmax": "reduce_max", "argmin": "reduce_min"}


def _arg_reduce(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    kind = tr.kind(atom)
    (axis,) = tuple(eqn.param("axes"))
    rows = tr.form() is Where.ROWS
    if tr.form() is Where.STRIDED or (rows and axis == 0):
        raise NotInForm("the position of a column's max mixes the rows the row form keeps apart")
    narrow = tr.g.own_width(kind, tr.logical_shape(atom)) is not None
    along_loop = kind is Kind.LOOP_TILE
    if kind not in (Kind.TILE, Kind.LOOP_TILE) or narrow or (along_loop and axis == 0):
        what = "a slice of a block" if narrow else f"a {kind} value"
        what = "a block along the loop dim, over its rows" if along_loop else what
        raise tr.fail(
            eqn,
            f"the body takes {eqn.prim} of {what}; it is taken over an axis of a block",
            f"take jnp.{eqn.prim}(v, axis=1) of a 2-D block of the kernel's rows and columns",
        )
    dtype = tr.dtype(atom)
    src = tr.source(atom)
    out = eqn.outputs[0]
    # The extreme over the axis, edges masked and NaN carried as the reductions do.
    extreme = value_part(out, "extreme")
    reduce(tr, dataclasses.replace(eqn, prim=_EXTREMES[eqn.prim], outputs=(extreme,)))
    spread = tr.as_kind(Atom(extreme), kind, tr.logical_shape(atom))
    hit: Expr = BinOp(Operator.EQ, src, spread)
    if "float" in dtype:  # a NaN is the extreme wherever the row holds one
        hit = ir_call("jnp.logical_or", hit, BinOp(Operator.NE, src, src))
    ragged = (tr.g.ragged_loop if along_loop else tr.g.ragged_cols) if axis == 1 else None
    if ragged if axis == 1 else tr.g.ragged_rows:
        edge = (Mask.LOOP_OK if along_loop else Mask.COL_OK) if axis == 1 else Mask.ROW_OK
        hit = BinOp(Operator.AND, hit, Name(edge))
        tr.masks.add(edge)
    positions = _step_positions(tr) if along_loop else _block_positions(tr, axis)
    along = (Kind.LOOP_COL if along_loop else Kind.COL) if axis == 1 else Kind.ROW
    position_name = value_part(out, "positions")
    tr.define(position_name, along, "int32")
    tr.lines.append(Assign((Name(position_name),), positions))
    spread_positions = tr.as_kind(Atom(position_name), kind, tr.logical_shape(atom))
    never = Literal(_INT32_MAX, "int32", weak_type=False)
    first = ir_call("jnp.where", hit, spread_positions, never)
    # The row form holds one row as a vector: its row reduction is the vector's full one.
    index = ir_call("lax.reduce_min", first, Const((0,) if rows else (axis,)))
    result_dtype = tr.trace.aval(out)[1]
    if result_dtype != "int32":
        index = ir_call("lax.convert_element_type", index, DType(result_dtype))
    tr.assign(eqn, Kind.ROW if axis == 1 else Kind.COL, index)


def _step_positions(tr: Translator) -> Expr:
    """The step's own indices along the loop dim, from 0: every step starts at a multiple of
    its block."""
    tr.masks.add(Mask.LOOP_POSITION)
    return ir_call("lax.rem", Name(Mask.LOOP_POSITION), ir_call("jnp.int32", Const(tr.g.loop_cols)))


def _block_positions(tr: Translator, axis: int) -> Expr:
    """The block's own indices along `axis`, from 0. A block starts at a multiple of its
    extent (a tiled dim's, or a loop's step over the columns), so the global positions
    modulo the extent are its own; a vector's remainder costs little beside the block. The
    row form's columns start at 0."""
    position = Mask.COL_POSITION if axis == 1 else Mask.ROW_POSITION
    tr.masks.add(position)
    if tr.form() is Where.ROWS:
        return Name(position)
    extent = tr.g.cols if axis == 1 else tr.g.rows
    return ir_call("lax.rem", Name(position), ir_call("jnp.int32", Const(extent)))


_RULE = Rule(
    _arg_reduce,
    support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.PARTLY)),
    note="over the columns in the row form (over the rows it mixes the rows the form keeps "
    "apart); the strided block has no positions",
)
ARG_RULES: Mapping[str, Rule] = {prim: _RULE for prim in _EXTREMES}
