"""The counts jnp.mean, jnp.average and jnp.var divide by, counted where elements exist.

jnp reads the count from the shape it is traced on, and the body is traced on one block: a
tiled or looped dim has its block size there. Past the array's edge the block's sum leaves
the missing elements out (their identity, 0), so in the last block of a dim that ends inside
it the count must leave them out too: it is the number of positions the edge mask keeps,
summed from the mask's vector. A whole dim has its true size in the trace, and a block
inside the array all its elements: their counts stay the literal jnp wrote.
"""

import dataclasses
import math

from ...ir.names import value_part
from ...ir.nodes import Assign, BinOp, Const, Expr, Kind, Literal, Mask, Name, Operator
from ...ir.nodes import call as ir_call
from ...trace.body import Atom, Count, Eqn
from ..pallas import select
from .context import NotInForm, Translator, Where

__all__ = ["existing_count"]

TILE, ROW, COL, LOOP_TILE, LOOP_COL = Kind.TILE, Kind.ROW, Kind.COL, Kind.LOOP_TILE, Kind.LOOP_COL


def existing_count(tr: Translator, eqn: Eqn) -> Eqn:
    """`eqn` with the count jnp marked on it (see `Count`) replaced by the elements that exist
    in this block, where some may not; `eqn` itself where all do."""
    count = eqn.count
    if count is None:
        return eqn
    literal = eqn.inputs[count.operand]
    shape = tr.logical_shape(count.source)
    edges = [_edge(tr, count, axis, shape) for axis in count.axes]
    if not any(edges):
        return eqn
    if tr.form() is not Where.BLOCK:
        raise NotInForm("a mean's count over a dim that ends inside the block is a reduction")
    dtype = literal.dtype
    factors: list[Expr] = [_counted(tr, edge, dtype) for edge in edges if edge is not None]
    whole = math.prod(shape[a] for a, edge in zip(count.axes, edges, strict=True) if not edge)
    if whole != 1:
        factors.append(Literal(float(whole), dtype, weak_type=True))
    expr = factors[0]
    for factor in factors[1:]:
        expr = BinOp(Operator.MUL, expr, factor)
    name = value_part(eqn.outputs[0], "count")
    tr.define(name, Kind.SCALAR, dtype)
    tr.lines.append(Assign((Name(name),), expr))
    inputs = list(eqn.inputs)
    inputs[count.operand] = Atom(name)
    return dataclasses.replace(eqn, inputs=tuple(inputs), count=None)


def _edge(tr: Translator, count: Count, axis: int, shape: tuple[int, ...]) -> Mask | None:
    """The mask vector of the positions along `axis` of the counted value that lie inside
    the array, where some may not; None where all of its elements exist."""
    kind = tr.kind(count.source)
    if kind is Kind.SCALAR and len(shape) == 2:
        kind = TILE  # a constant block held as its scalar (jnp.ones_like(v))
    if kind in (ROW, COL, LOOP_COL) and len(shape) == 2 and shape[axis] == 1:
        return None  # the unit axis of a vector kept 2-D (keepdims)
    g = tr.g
    along_rows = (kind in (TILE, LOOP_TILE) and axis == 0) or kind is ROW
    if along_rows:
        return Mask.ROW_OK_VEC if g.ragged_rows and shape[axis] != g.row_size else None
    if kind in (LOOP_TILE, LOOP_COL):
        return Mask.LOOP_OK_VEC if g.ragged_loop else None
    if kind in (TILE, COL):
        cut = g.ragged_cols and g.own_width(kind, shape) is None
        return Mask.COL_OK_VEC if cut and shape[axis] != g.col_array_size else None
    return None


_VECTORS = {Mask.ROW_OK_VEC: ROW, Mask.COL_OK_VEC: COL, Mask.LOOP_OK_VEC: LOOP_COL}


def _counted(tr: Translator, edge: Mask, dtype: str) -> Expr:
    """The positions `edge` keeps, as a scalar of `dtype`."""
    tr.masks.add(edge)
    kind = _VECTORS[edge]
    one = tr.g.constant(Literal(1.0, dtype, weak_type=True), kind, dtype)
    inside = select(Name(edge), one, Literal(0.0, dtype, weak_type=True), dtype)
    return ir_call("lax.reduce_sum", inside, Const((0,)))
