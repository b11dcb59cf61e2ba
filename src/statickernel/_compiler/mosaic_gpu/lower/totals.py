"""Reductions to a scalar inside the body: `jnp.sum(v)`, `jnp.max(v)`, `jnp.mean(v)`, or a
vector's own total (`jnp.sum(jnp.sum(v, axis=1))`), used in later elementwise math (a group
norm's statistics over its block, a masked mean's count).

Mosaic GPU reduces a vector of the WGMMA layout to a scalar across the warpgroup's warps
through a few bytes of shared memory it allocates itself; a block is reduced over its columns
first, then its rows. The scalar is the block's: as every value of the body, it covers one
grid step's block. Elements past the array's edge take the reduction's identity.
"""

import dataclasses
from collections.abc import Mapping

from ...ir.names import value_part
from ...ir.nodes import Kind, Mask, Name
from ...trace.body import Atom, Eqn
from .context import NotInForm, Rule, Support, Translator, Where
from .rules import (
    REDUCTIONS,
    identity_past_edge,
    materialized_block,
    reduce,
    reduction_carrying_nan,
)

__all__ = ["TOTAL_RULES", "reduce_over_axes"]

_VECTOR_EDGES = {
    Kind.ROW: Mask.ROW_OK_VEC,
    Kind.COL: Mask.COL_OK_VEC,
    Kind.LOOP_COL: Mask.LOOP_OK_VEC,
}


def reduce_over_axes(tr: Translator, eqn: Eqn) -> None:
    """A reduction over every axis of a block or a vector; any other, as `reduce` takes it."""
    (atom,) = eqn.inputs
    kind = tr.kind(atom)
    axes = set(eqn.param("axes"))
    shape = tr.logical_shape(atom)
    # Only a reduction of a block or a vector to 0-d: jnp.sum(v, axis=0) of a (64, 1) block
    # is a per-column vector of one element.
    whole = (
        bool(shape)
        and tr.logical_shape(Atom(eqn.outputs[0])) == ()
        and set(range(len(shape))) <= axes
    )
    positions = kind is Kind.ROW and tr.source(atom) == Name(Mask.ROW_POSITION)
    if kind is Kind.SCALAR and whole and len(shape) == 2:
        # A constant block held as its scalar (jnp.ones_like(v)): its total counts the
        # elements inside the edge, so it needs the block.
        atom, kind = materialized_block(tr, eqn, atom), Kind.TILE
    if kind is Kind.SCALAR or not whole or positions:
        return reduce(tr, eqn)
    if kind not in (Kind.TILE, Kind.LOOP_TILE, *_VECTOR_EDGES):
        return reduce(tr, eqn)
    if tr.form() is not Where.BLOCK:
        raise NotInForm("a reduction to a scalar mixes the rows the row form keeps apart")
    if kind in (Kind.TILE, Kind.LOOP_TILE):
        # Over the columns first (a per-row vector), then over the rows.
        rows = value_part(eqn.outputs[0], "rows")
        reduce(tr, dataclasses.replace(eqn, outputs=(rows,), params=(("axes", (1,)),)))
        atom, kind = Atom(rows), tr.kinds[rows]
    _reduce_vector(tr, eqn, atom, kind)


def _reduce_vector(tr: Translator, eqn: Eqn, atom: Atom, kind: Kind) -> None:
    src = tr.source(atom)
    ragged = {
        Kind.ROW: tr.g.ragged_rows,
        Kind.COL: tr.g.ragged_cols and tr.g.own_width(kind, tr.logical_shape(atom)) is None,
        Kind.LOOP_COL: tr.g.ragged_loop,
    }[kind]
    if ragged:
        edge = _VECTOR_EDGES[kind]
        src = identity_past_edge(tr, eqn.prim, atom, src, edge, Name(edge))
    reduced = reduction_carrying_nan(tr, eqn.prim, eqn.outputs[0], src, (0,), tr.dtype(atom))
    tr.assign(eqn, Kind.SCALAR, reduced)


_RULE = Rule(
    reduce_over_axes,
    support=((Where.STRIDED, Support.PARTLY), (Where.ROWS, Support.PARTLY)),
    note="over the columns in the row form (a reduction over the rows mixes the rows it keeps "
    "apart); in the strided block only of an axis of one element; to a scalar in the block "
    "form",
)
TOTAL_RULES: Mapping[str, Rule] = {prim: _RULE for prim in REDUCTIONS}
