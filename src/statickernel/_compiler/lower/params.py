"""Parameter vectors: a 1-D operand along a dim of its own (PolyNorm's 3 weights, `w: " P"`)
is never loaded; the body takes its elements by constant index (`w[0]`, or `w0, w1, w2 =
sk.load(w)`), and each is read from global memory where it is taken, a scalar of the block
(as a 0-d operand is). Anything else done to the vector is refused with the fix."""

import dataclasses
from collections.abc import Mapping

from ..ir.names import gmem_ref
from ..ir.nodes import Const, Kind, Name, Subscript
from ..trace.body import Atom, Eqn
from .context import Rule, Translator

__all__ = ["PARAM_RULES", "param_rule"]


def _element(tr: Translator, atom: Atom, index: int) -> Subscript:
    assert atom.var is not None, "a parameter vector is an operand"
    return Subscript(Name(gmem_ref(atom.var)), (Const(index),))


def _slice(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    start, limit = int(eqn.param("start_indices")[0]), int(eqn.param("limit_indices")[0])
    strides = eqn.param("strides")
    if limit - start != 1 or (strides is not None and int(strides[0]) != 1):
        raise _refusal(tr, eqn, f"slices it ({start}:{limit})")
    tr.assign(eqn, Kind.SCALAR, _element(tr, atom, start))


def _unstack(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    for index, out in enumerate(eqn.outputs):
        one = dataclasses.replace(eqn, outputs=(out,))
        tr.assign(one, Kind.SCALAR, _element(tr, atom, index))


def _refuse(tr: Translator, eqn: Eqn) -> None:
    raise _refusal(tr, eqn, f"takes `{eqn.prim}` of it")


def _refusal(tr: Translator, eqn: Eqn, what: str) -> Exception:
    name = next((a.var for a in eqn.inputs if a.var and tr.kind(a) is Kind.PARAMS), "w")
    return tr.fail(
        eqn,
        f"the body {what}: `{name}` is a vector of parameters, whose elements are read one by one",
        f"take its elements by constant index, {name}[0], {name}[1], ..., or unpack it, "
        f"p0, p1, p2 = sk.load({name}); for a vector along the kernel's rows or columns, give "
        "it their dim",
    )


_REFUSE = Rule(_refuse)
PARAM_RULES: Mapping[str, Rule] = {"slice": Rule(_slice), "unstack": Rule(_unstack)}


def param_rule(prim: str) -> Rule:
    """The rule for `prim` applied to a parameter vector: its elements, or a refusal."""
    return PARAM_RULES.get(prim, _REFUSE)
