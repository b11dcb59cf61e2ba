"""Turns a traced body into Pallas Mosaic GPU statements, as IR: one statement per equation,
and a `LoopBlock` per loop.

Every value of a body lives in one register form, its *kind* (`ir.nodes.Kind`):
  tile       a 2-D block (rows, cols), in the WGMMA layout;
  row        a per-row vector (rows,), in the WGMMA layout reduced over columns;
  col        a per-column vector (cols,), in the WGMMA layout reduced over rows;
  scalar     a 0-d value;
and, in the step of a loop over a dim outside (rows, cols), along that dim:
  loop_tile  a (rows, loop block) block, such as attention's scores;
  loop_col   a per-column vector of one, such as the loop's positions.
jnp writes a per-row vector as (rows, 1) after `keepdims`; here it stays a vector and is
broadcast explicitly where it meets a tile, because Mosaic GPU cannot broadcast implicitly.

The rules for the body's ops are in `lower.rules`, those for loops in `lower.steps`, `sk.dot`'s values
in `lower.dots`, `sk.position`'s in `lower.positions`; this module puts them together. Import-time checks and code generation both run this translation, so an op the
translation accepts is an op the generated kernel contains.
"""

from ...ir.nodes import Expr, Kind
from ...ir.printer import dtype_source, literal_source
from ...trace.body import BodyTrace
from .context import NotInForm, Translator, trace_inputs
from .params import param_rule
from .registry import CHUNKABLE, COLUMN_LOCAL, REFUSALS, RULES
from .translation import Carry, DotUpdate, Geometry, LoopBlock, Translation

__all__ = [
    "COL",
    "ROW",
    "SCALAR",
    "TILE",
    "Carry",
    "DotUpdate",
    "Geometry",
    "LoopBlock",
    "NotInForm",
    "Translation",
    "dtype_source",
    "literal_source",
    "translate",
]

# The kinds by their old names; a Kind equals its string ("tile", ...).
TILE, ROW, COL, SCALAR = Kind.TILE, Kind.ROW, Kind.COL, Kind.SCALAR


def translate(
    trace: BodyTrace,
    geometry: Geometry,
    result_kinds: tuple[str | None, ...],
    kernel: str,
    where: str,
) -> Translation:
    """The body as IR. A result kind of None takes the kind the body computes (a partial of
    a result reduced across blocks); `Translation.result_kinds` says which it was."""
    tr = Translator(
        trace, geometry, kernel, where, RULES, REFUSALS, param_rule, CHUNKABLE, COLUMN_LOCAL
    )
    input_kinds = dict(geometry.input_kinds)
    for name in trace_inputs(trace):
        tr.define(name, Kind(input_kinds[name]), trace.aval(name)[1])
    tr.eqns(trace.eqns)
    outputs: list[Expr | None] = []
    streamed: list[tuple[int, int, int]] = []
    kinds: list[Kind] = []
    for i, (atom, kind) in enumerate(zip(trace.outputs, result_kinds, strict=True)):
        kinds.append(tr.kind(atom) if kind is None else Kind(kind))
        if atom.var in tr.loop_outputs:
            streamed.append((i, *tr.loop_outputs[atom.var]))
            outputs.append(None)
        else:
            outputs.append(tr.as_kind(atom, kinds[-1]))
    return Translation(
        tuple(tr.lines),
        tuple(outputs),
        frozenset(tr.masks),
        tuple(streamed),
        tuple(kinds),
        tr.scratch_bytes,
        tuple(tr.row_reductions),
        frozenset(n for n, k in tr.kinds.items() if k in (Kind.TILE, Kind.COL)),
        frozenset(n for n, k in tr.kinds.items() if k is Kind.SCALAR),
    )
