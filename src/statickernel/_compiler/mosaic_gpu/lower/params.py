"""Parameter vectors: a 1-D operand along a dim of its own (PolyNorm's 3 weights, `w: " P"`)
is never loaded; the body takes its elements by constant index (`w[0]`, or `w0, w1, w2 =
sk.load(w)`), and each is read from global memory where it is taken, a scalar of the block
(as a 0-d operand is). Anything else done to the vector is refused with the fix.

A stack of vectors (`w: "4 C"`, a convolution's per-channel weights of its 4 taps) is copied
into shared memory with the block, and the body takes its vectors by constant index (`w[k]`,
`w[:, k]` for "C 4", or unpacked): each is loaded where taken, in the per-column (per-row)
layout, as a 1-D operand along the dim would be. Only the block form holds such vectors."""

import dataclasses
from collections.abc import Mapping

from ...ir.names import gmem_ref, smem_ref
from ...ir.nodes import Const, Expr, Kind, Literal, Mask, Name, Slice, Subscript
from ...trace.body import Atom, Eqn
from ..pallas import load, reads_zero, select
from .context import NotInForm, Rule, Translator, Where

__all__ = ["PARAM_RULES", "param_rule"]


def _element(tr: Translator, atom: Atom, index: int) -> Subscript:
    assert atom.var is not None, "a parameter vector is an operand"
    return Subscript(Name(gmem_ref(atom.var)), (Const(index),))


def _stack(tr: Translator, atom: Atom) -> tuple[int, Kind] | None:
    """(axis of the parameters, kind of a vector) of a stack of vectors; None for a vector."""
    if atom.var is None or atom.var not in dict(tr.g.param_stacks):
        return None
    if tr.form() is not Where.BLOCK:
        raise NotInForm("a stack of parameter vectors is loaded a vector at a time")
    axis, kind = dict(tr.g.param_stacks)[atom.var]
    return axis, Kind(kind)


def _vector(tr: Translator, operand: str, axis: int, kind: Kind, index: int) -> Expr:
    """Vector `index` of a stack, loaded from its buffer, the fill past the edge."""
    at: tuple[Expr, ...] = (Const(index),) if axis == 0 else (Slice(), Const(index))
    value = load(Subscript(Name(f"{smem_ref(operand)}.at"), at), kind)
    fill = dict(tr.g.input_fills).get(operand)
    ragged = tr.g.ragged_rows if kind is Kind.ROW else tr.g.ragged_cols
    if not ragged or reads_zero(fill):
        return value
    edge = Mask.ROW_OK_VEC if kind is Kind.ROW else Mask.COL_OK_VEC
    tr.masks.add(edge)
    dtype = tr.dtypes[operand]
    return select(Name(edge), value, Literal(fill, dtype, weak_type=False), dtype)


def _slice(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    stack = _stack(tr, atom)
    if stack is not None:
        return _slice_of_stack(tr, eqn, atom, *stack)
    start, limit = int(eqn.param("start_indices")[0]), int(eqn.param("limit_indices")[0])
    strides = eqn.param("strides")
    if limit - start != 1 or (strides is not None and int(strides[0]) != 1):
        raise _refusal(tr, eqn, f"slices it ({start}:{limit})")
    tr.assign(eqn, Kind.SCALAR, _element(tr, atom, start))


def _slice_of_stack(tr: Translator, eqn: Eqn, atom: Atom, axis: int, kind: Kind) -> None:
    """`w[k]` (`w[:, k]`): one vector of the stack, held back until `squeeze` takes it."""
    start, limit = eqn.param("start_indices"), eqn.param("limit_indices")
    strides = eqn.param("strides")
    whole = tr.logical_shape(atom)[1 - axis]
    if (
        int(limit[axis]) - int(start[axis]) != 1
        or (int(start[1 - axis]), int(limit[1 - axis])) != (0, whole)
        or (strides is not None and any(int(s) != 1 for s in strides))
    ):
        raise _refusal(tr, eqn, f"slices it ({list(start)}:{list(limit)})")
    out = eqn.outputs[0]
    tr.define(out, Kind.PARAMS, tr.dtype(atom))
    tr.stack_vectors[out] = (atom.var or "", axis, kind, int(start[axis]))


def _squeeze(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    if atom.var not in tr.stack_vectors:
        raise _refusal(tr, eqn, "takes `squeeze` of it")
    operand, axis, kind, index = tr.stack_vectors[atom.var]
    tr.assign(eqn, kind, _vector(tr, operand, axis, kind, index))


def _unstack(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    stack = _stack(tr, atom)
    if stack is not None:
        axis, kind = stack
        if int(eqn.param("axis")) != axis:
            raise _refusal(tr, eqn, "unpacks it along its vectors, not its parameters")
        for index, out in enumerate(eqn.outputs):
            one = dataclasses.replace(eqn, outputs=(out,))
            tr.assign(one, kind, _vector(tr, atom.var or "", axis, kind, index))
        return
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
        f"take its elements (or, of a stack, its vectors) by constant index, {name}[0], "
        f"{name}[1], ..., or unpack it, p0, p1, p2 = sk.load({name}); for a vector along the "
        "kernel's rows or columns, give it their dim",
    )


_REFUSE = Rule(_refuse)
PARAM_RULES: Mapping[str, Rule] = {
    "slice": Rule(_slice),
    "unstack": Rule(_unstack),
    "squeeze": Rule(_squeeze),
}


def param_rule(prim: str) -> Rule:
    """The rule for `prim` applied to a parameter vector: its elements, or a refusal."""
    return PARAM_RULES.get(prim, _REFUSE)
