"""Which of a body's values are one block's part of a reduction over a tiled dim.

The body describes one block. A sum, max or min over a tiled dim therefore reduces the
block's own slice of that dim: its value is a *partial*, complete only once every block's
partial along the dim is combined. A result that lacks the dim (`trace.crossblock`) is such a
combination; it is right only when the partials reach it unchanged, or through ops that the
combination can run after it. This module finds, for each value of a body, the dim each axis
runs along and the reductions over tiled dims whose partials it depends on, so that
`trace.crossblock` can tell a combination that follows the body's reductions from one that would
not.

The dims come from the operands (a block's axes are its operand's dims), from the reductions
and `sk.dot` (which drop the reduced axes) and from the frame (a block made of constants runs
along the rows and the columns). An axis whose dim cannot be known is counted as every tiled
dim where it is reduced, so an unknown value never passes for a complete one.
"""

import dataclasses
from collections.abc import Mapping

from ..declare.spec import KernelSpec
from .body import Atom, BodyTrace, Eqn, Step

__all__ = ["REDUCTIONS", "SHAPE_OPS", "ValueFacts", "value_facts"]

REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min"})
# Ops that move no element: jnp adds and drops unit axes around vectors (keepdims).
SHAPE_OPS = frozenset(
    {"broadcast_in_dim", "reshape", "squeeze", "expand_dims", "copy", "copy_p", "stop_gradient"}
)
_LOOPS = frozenset({"sk_loop", "sk_map_blocks"})


@dataclasses.dataclass(frozen=True)
class ValueFacts:
    """What is known of one value of the body."""

    dims: tuple[str | None, ...]
    """The dim each axis runs along; None for an axis of one element or an unknown one."""
    partial: tuple[tuple[str, Eqn], ...] = ()
    """The tiled dims it holds only this block's part of, each with the first reduction over
    it that the value depends on."""

    def partial_over(self, dims: tuple[str, ...]) -> tuple[str, Eqn] | None:
        """The first of `dims` the value holds only this block's part of, and the reduction
        over it."""
        return next(((dim, eqn) for dim, eqn in self.partial if dim in dims), None)


_NOTHING = ValueFacts(())


def value_facts(spec: KernelSpec, trace: BodyTrace) -> Mapping[str, ValueFacts]:
    """The facts of every variable of the body, loop steps included."""
    facts: dict[str, ValueFacts] = {}
    for operand, var in zip(spec.operands, trace.inputs, strict=True):
        if var is not None:
            facts[var] = ValueFacts(tuple(operand.block_dims))
    _Analysis(spec, trace, facts).eqns(trace.eqns)
    return facts


class _Analysis:
    def __init__(self, spec: KernelSpec, trace: BodyTrace, facts: dict[str, ValueFacts]):
        self.spec = spec
        self.shapes = {var: shape for var, (shape, _) in trace.avals}
        self.facts = facts
        self.tiled = tuple(spec.tile_map)

    def of(self, atom: Atom) -> ValueFacts:
        if atom.var is None:
            return _NOTHING
        return self.facts.get(atom.var, _NOTHING)

    def eqns(self, eqns: tuple[Eqn, ...]) -> None:
        for eqn in eqns:
            if eqn.prim in _LOOPS:
                self.loop(eqn)
            else:
                for out in eqn.outputs:
                    self.facts[out] = self.eqn(eqn, out)

    def eqn(self, eqn: Eqn, out: str) -> ValueFacts:
        inputs = [self.of(a) for a in eqn.inputs]
        partial = _union(*(f.partial for f in inputs))
        shape = self.shapes.get(out, ())
        if eqn.prim in REDUCTIONS:
            (source,) = inputs
            axes = tuple(eqn.param("axes"))
            reduced = [source.dims[a] if a < len(source.dims) else None for a in axes]
            in_shape = self.shapes.get(eqn.inputs[0].var or "", ())
            # A reduced axis of unknown dim (more than one element) may be any tiled dim.
            over = {d for d in reduced if d in self.tiled}
            if any(d is None and in_shape[a] > 1 for d, a in zip(reduced, axes, strict=True)):
                over |= set(self.tiled)
            kept = tuple(d for a, d in enumerate(source.dims) if a not in axes)
            return ValueFacts(kept, _union(partial, tuple((d, eqn) for d in sorted(over))))
        if eqn.prim == "sk_dot":
            lhs, rhs = inputs
            contract = tuple(eqn.param("contract"))
            summed = lhs.dims[contract[0]] if len(lhs.dims) == 2 else None
            product = (
                lhs.dims[1 - contract[0]] if len(lhs.dims) == 2 else None,
                rhs.dims[1 - contract[1]] if len(rhs.dims) == 2 else None,
            )
            over = ((summed, eqn),) if summed is not None and summed in self.tiled else ()
            return ValueFacts(self.framed(product, shape), _union(partial, over))
        if eqn.prim == "sk_position":
            return ValueFacts((str(eqn.param("dim")),))
        if eqn.prim == "broadcast_in_dim":
            (source,) = inputs[:1]
            spread = tuple(eqn.param("broadcast_dimensions"))
            spread_dims: list[str | None] = [None] * len(shape)
            for axis_in, axis_out in enumerate(spread):
                if axis_in < len(source.dims):
                    spread_dims[axis_out] = source.dims[axis_in]
            return ValueFacts(self.framed(tuple(spread_dims), shape), partial)
        if eqn.prim in SHAPE_OPS:
            return ValueFacts(self.reshaped(inputs[0], eqn.inputs[0], shape), partial)
        # Elementwise: jnp has made the shapes equal (with broadcast_in_dim) before.
        dims = [None] * len(shape)
        for f in inputs:
            if len(f.dims) == len(shape):
                dims = [d if d is not None else e for d, e in zip(dims, f.dims, strict=True)]
        return ValueFacts(self.framed(tuple(dims), shape), partial)

    def framed(
        self, dims: tuple[str | None, ...], shape: tuple[int, ...]
    ) -> tuple[str | None, ...]:
        """A block's unknown axes of more than one element run along the frame's dims."""
        if len(shape) != 2:
            return dims
        frame = (self.spec.rows, self.spec.cols)
        return tuple(frame[a] if d is None and shape[a] > 1 else d for a, d in enumerate(dims))

    def reshaped(
        self, source: ValueFacts, atom: Atom, shape: tuple[int, ...]
    ) -> tuple[str | None, ...]:
        """The dims after adding or dropping unit axes: the axes of more than one element keep
        theirs, in order."""
        in_shape = self.shapes.get(atom.var or "", ())
        carried = [d for d, n in zip(source.dims, in_shape, strict=False) if n > 1]
        dims: list[str | None] = []
        for n in shape:
            dims.append(carried.pop(0) if n > 1 and carried else None)
        return self.framed(tuple(dims), shape)

    def loop(self, eqn: Eqn) -> None:
        step: Step = eqn.param("step")
        carries = [self.of(a) for a in eqn.inputs]
        outs: list[ValueFacts] = []
        # A carry holds what the step makes of it: run the step until its facts settle.
        for _ in range(len(step.carries) + 2):
            for var, facts in zip(step.carries, carries, strict=True):
                self.facts[var] = facts
            self.eqns(step.eqns)
            outs = [self.of(a) for a in step.outputs]
            if not step.carries:
                break
            # A scan's step returns its blocks, then its carries.
            carried = outs[len(outs) - len(step.carries) :]
            merged = [_merge(c, o) for c, o in zip(carries, carried, strict=True)]
            if [_key(m) for m in merged] == [_key(c) for c in carries]:
                break
            carries = merged
        for out, facts in zip(eqn.outputs, outs, strict=True):
            shape = self.shapes.get(out, ())
            dims = facts.dims if len(facts.dims) == len(shape) else (None,) * len(shape)
            self.facts[out] = ValueFacts(self.framed(dims, shape), facts.partial)


def _merge(a: ValueFacts, b: ValueFacts) -> ValueFacts:
    if len(a.dims) == len(b.dims):
        dims = tuple(x if x is not None else y for x, y in zip(a.dims, b.dims, strict=True))
    else:
        dims = b.dims
    return ValueFacts(dims, _union(a.partial, b.partial))


def _key(facts: ValueFacts) -> tuple[tuple[str | None, ...], tuple[str, ...]]:
    return facts.dims, tuple(dim for dim, _ in facts.partial)


def _union(*parts: tuple[tuple[str, Eqn], ...]) -> tuple[tuple[str, Eqn], ...]:
    """Each dim once, with its first reduction."""
    seen: dict[str, Eqn] = {}
    for part in parts:
        for dim, eqn in part:
            seen.setdefault(dim, eqn)
    return tuple(seen.items())
