"""Bodies whose loop can be split into parts that separate CTAs walk: sums from zero.

A body that folds its one loop as `acc + term` from zero, where no term reads a carry, and
whose results are those sums (scaled by values that do not depend on them, then cast, at
most), gives the same result when the loop's steps are cut into parts, each part summed from
zero and scaled by a CTA of its own, and the parts' sums added after the launch, then cast.
A launch of few blocks and a long loop (a product of few rows by a large weight: a decode
step's linear layers) then keeps more SMs streaming (`schedules.split`). Anything else the
body does after the loop (a bias, an activation) or a carry that is not such a sum (a
running max, a product) would be wrong once split, so such a body is never split.
"""

import dataclasses

import numpy as np

from .body import Atom, BodyTrace, Eqn, Step

__all__ = ["SplittableLoop", "splittable_loop"]

# What may lie between a zero and a carry's first value.
_ZERO_KEEPING = frozenset({"broadcast_in_dim", "convert_element_type", "copy", "copy_p"})
# What may lie between a final sum and a result: casts, which the sum of the parts takes.
_CASTS = frozenset({"convert_element_type"})
_COPIES = frozenset({"copy", "copy_p"})


@dataclasses.dataclass(frozen=True)
class SplittableLoop:
    """The body's one loop, whose steps sum into its carries from zero, and its results as
    those sums, scaled and cast."""

    axis: str
    """The loop dim."""
    partials: tuple[str, ...]
    """For each result, the variable each CTA stores as its part's: the sum, or the sum
    scaled (multiplied or divided by values that do not depend on it)."""
    partial_dtypes: tuple[str, ...]
    """For each result, its partial's dtype."""
    casts: tuple[tuple[str, ...], ...]
    """For each result, the dtypes its added partials are cast to, in order (none: kept)."""
    cast_vars: frozenset[str]
    """The variables of those casts, which the wrapper computes instead of the CTAs."""

    def check_invariants(self) -> None:
        assert self.axis and self.partials
        assert len(self.casts) == len(self.partials) == len(self.partial_dtypes)


def splittable_loop(trace: BodyTrace) -> SplittableLoop | None:
    """The body's loop when its parts may be summed apart (see the module's doc); else None."""
    loops = [e for e in trace.eqns if e.prim in ("sk_loop", "sk_map_blocks")]
    if len(loops) != 1 or loops[0].prim != "sk_loop":
        return None
    (loop,) = loops
    params = dict(loop.params)
    step: Step = loop.param("step")
    if "start" in params or "stop" in params or step.reverse or not step.carries:
        return None
    produced = {out: e for e in trace.eqns for out in e.outputs}
    if not all(_is_zero(atom, produced) for atom in loop.inputs):
        return None
    if not _sums_into_carries(step):
        return None
    after = trace.eqns[trace.eqns.index(loop) + 1 :]
    if not _linear_after(after, set(loop.outputs)):
        return None
    partials, casts, cast_vars = [], [], set()
    for out in trace.outputs:
        found = _scaled_sum_of(out, loop, produced)
        if found is None:
            return None
        partials.append(found[0])
        casts.append(found[1])
        cast_vars |= found[2]
    partial_dtypes = tuple(trace.aval(p)[1] for p in partials)
    split = SplittableLoop(
        step.axis, tuple(partials), partial_dtypes, tuple(casts), frozenset(cast_vars)
    )
    split.check_invariants()
    return split


def _linear_after(eqns: tuple[Eqn, ...], sums: set[str]) -> bool:
    """Whether every equation after the loop that reads a sum is linear in it: a cast, a
    copy, or a product or quotient by a value that does not depend on the sums. Equations
    that read no sum (a scale's load) may be anything."""
    depends = set(sums)
    for eqn in eqns:
        read = [i for i, a in enumerate(eqn.inputs) if a.var in depends]
        if not read:
            continue
        linear = eqn.prim in _CASTS | _COPIES or (
            len(read) == 1 and (eqn.prim == "mul" or (eqn.prim == "div" and read == [0]))
        )
        if not linear:
            return False
        depends.update(eqn.outputs)
    return True


def _is_zero(atom: Atom, produced: dict[str, Eqn]) -> bool:
    """Whether `atom` is zero everywhere: a literal 0, broadcast or cast."""
    while atom.var is not None:
        eqn = produced.get(atom.var)
        if eqn is None or eqn.prim not in _ZERO_KEEPING or len(eqn.inputs) != 1:
            return False
        atom = eqn.inputs[0]
    return atom.value is not None and not isinstance(atom.value, bool) and atom.value == 0


def _sums_into_carries(step: Step) -> bool:
    """Whether each carry comes back as `carry + term`, where no term depends on a carry and
    nothing else reads a carry or its sum."""
    readers: dict[str, list[Eqn]] = {}
    depends = set(step.carries)  # the values computed from a carry
    for eqn in step.eqns:
        for atom in eqn.inputs:
            if atom.var is not None:
                readers.setdefault(atom.var, []).append(eqn)
        if any(atom.var in depends for atom in eqn.inputs):
            depends.update(eqn.outputs)
    produced = {out: e for e in step.eqns for out in e.outputs}
    for carry, out in zip(step.carries, step.outputs, strict=True):
        add = produced.get(out.var or "")
        if add is None or add.prim != "add" or readers.get(carry, []) != [add]:
            return False
        terms = [a for a in add.inputs if a.var != carry]
        if len(terms) != 1 or terms[0].var in depends or readers.get(add.outputs[0]):
            return False
    return True


def _scaled_sum_of(
    atom: Atom, loop: Eqn, produced: dict[str, Eqn]
) -> tuple[str, tuple[str, ...], set[str]] | None:
    """For a result: the variable of its partial (the sum, scaled), the casts from there to
    the result in order, and those casts' variables; None when it is not a loop's sum. The
    casts must come last: a sum rounded before it is scaled is not a sum of scaled parts."""
    casts: list[str] = []
    cast_vars: set[str] = set()
    var = atom.var
    while var is not None and var not in loop.outputs:  # the casts, back from the result
        eqn = produced.get(var)
        if eqn is None or eqn.prim not in _CASTS | _COPIES:
            break
        if eqn.prim in _CASTS:
            casts.insert(0, str(np.dtype(eqn.param("new_dtype"))))
            cast_vars.add(var)
        var = eqn.inputs[0].var
    partial = var
    while var is not None and var not in loop.outputs:  # the scales, back to the sum
        eqn = produced.get(var)
        if eqn is None or eqn.prim not in {"mul", "div"} | _COPIES:
            return None
        var = next((a.var for a in eqn.inputs if _reaches(a.var, loop, produced)), None)
    if var is None or partial is None:
        return None
    return partial, tuple(casts), cast_vars


def _reaches(var: str | None, loop: Eqn, produced: dict[str, Eqn]) -> bool:
    """Whether `var` is computed from the loop's sums."""
    seen: set[str] = set()
    todo = [var] if var is not None else []
    while todo:
        v = todo.pop()
        if v in loop.outputs:
            return True
        if v in seen or v not in produced:
            continue
        seen.add(v)
        todo.extend(a.var for a in produced[v].inputs if a.var is not None)
    return False
