"""Results that lack a tiled dim, on the body's side: which reduction's partials each block
writes, the trace rewritten to write them, and the bodies whose blocks' partials would not
combine into the result (see `trace.crossblock` for how they are planned and combined).

Each block writes its part of a reduction over the lacking dims of values it holds whole. The
body's last reduction is that reduction (a sum of squares), or reduces its vector further: a
sum of column sums or a max of column maxes is one combination over the blocks and the kept
dim; a sum of column maxes, or a max of scaled column sums, combines the blocks' column maxes
or sums first and then runs the ops between the body's reductions and the last one, after the
launch. Anything else (`exp` of a partial sum, a block minus its own part of a column max, a
vector that every block holds whole, summed) would combine to a value the body, run on whole
arrays, does not compute, and is refused at the declaration with a fix.
"""

import dataclasses
import math
from collections.abc import Mapping

from ..._errors import CrossBlockResultError
from ..declare.operand import OperandSpec
from ..declare.spec import KernelSpec
from .body import Atom, BodyTrace, Eqn
from .crossblock import COMBINES, Combine, CrossBlock, PostOp, PostOpKind
from .partials import REDUCTIONS, SHAPE_OPS, ValueFacts, value_facts

__all__ = ["cross_block_results"]


def cross_block_results(
    spec: KernelSpec,
    trace: BodyTrace,
    sizes: Mapping[str, int],
) -> tuple[BodyTrace, tuple[CrossBlock, ...]]:
    """The results that lack a tiled dim, and the trace rewritten to return their partials:
    the input of the body's last reduction, reduced as far as a vector; or, where the last
    reduction follows another over the lacking dim through ops that do not commute with
    combining the blocks, that other reduction's vector."""
    found: list[CrossBlock] = []
    body = _Body.of(spec, trace, sizes)
    outputs = list(trace.outputs)
    eqns = list(trace.eqns)
    avals = dict(trace.avals)
    for index, result in enumerate(spec.results):
        lacks = tuple(d for d in spec.tile_map if d not in result.block_dims)
        if not lacks:
            continue
        chain, reduction, post = _result_chain(spec, result, outputs[index], body.producers, lacks)
        split = _checked_split(body, result, reduction, post, lacks, avals)
        first = split.first
        source = first.inputs[0]
        assert source.var is not None
        shape, dtype = avals[source.var]
        axes = tuple(first.param("axes"))
        after = _after_launch((*chain, *split.middle), body.uses)
        outputs[index] = Atom(_write_partial(spec, first, after, eqns, avals))
        over_rows = len(shape) == 2 and axes == (0,)
        found.append(
            CrossBlock(
                index,
                result.name,
                lacks,
                COMBINES[first.prim],
                tuple(post),
                dtype,
                result.block_dims,
                rows_source=source.var if over_rows else None,
                outer=split.outer,
                between=split.between,
            )
        )
    if not found:
        return trace, ()
    rewritten = dataclasses.replace(
        trace, eqns=tuple(eqns), outputs=tuple(outputs), avals=tuple(avals.items())
    )
    return rewritten, tuple(found)


@dataclasses.dataclass(frozen=True)
class _Body:
    """The traced body as the rewrite reads it, and the sizes it is specialized to."""

    spec: KernelSpec
    producers: Mapping[str, Eqn]
    """The equation that computes each value."""
    uses: Mapping[str, int]
    """How many times each value is read: by an equation's inputs or as an output."""
    facts: Mapping[str, ValueFacts]
    sizes: Mapping[str, int]

    @classmethod
    def of(cls, spec: KernelSpec, trace: BodyTrace, sizes: Mapping[str, int]) -> "_Body":
        producers = {out: eqn for eqn in trace.eqns for out in eqn.outputs}
        uses: dict[str, int] = {}
        for eqn in trace.eqns:
            for atom in eqn.inputs:
                if atom.var is not None:
                    uses[atom.var] = uses.get(atom.var, 0) + 1
        for atom in trace.outputs:
            if atom.var is not None:
                uses[atom.var] = uses.get(atom.var, 0) + 1
        return cls(spec, producers, uses, value_facts(spec, trace), sizes)


@dataclasses.dataclass(frozen=True)
class _Split:
    """Where a result's blocks' partials come from."""

    first: Eqn
    """The reduction over the lacking dims whose block partials are combined."""
    outer: Combine | None = None
    """The result's last reduction, when it is not `first` and runs after the combination."""
    between: tuple[PostOp, ...] = ()
    """The ops from `first` to `outer`, run after the combination, in order."""
    middle: tuple[Eqn, ...] = ()
    """The equations from `outer` back to `first`, which the kernel no longer runs."""


def _checked_split(
    body: _Body,
    result: OperandSpec,
    reduction: Eqn,
    post: list[PostOp],
    lacks: tuple[str, ...],
    avals: Mapping[str, tuple[tuple[int, ...], str]],
) -> _Split:
    """Where the result's blocks' partials come from (`_split`), refused where combining them
    would not give what the body computes on whole arrays: a scale after a max or a min, or a
    mean that divides by a block's count."""
    spec = body.spec
    last = COMBINES[reduction.prim]
    if last is not Combine.SUM and any(p.kind is not PostOpKind.CAST for p in post):
        raise _error(
            spec,
            result,
            reduction,
            lacks,
            f"{result.name} scales the {last} of its blocks; the scale does not commute "
            "with combining them",
            "scale the values before the reduction, or the result after the kernel",
        )
    split = _split(spec, result, reduction, lacks, body.producers, body.facts, avals)
    first = split.first
    source = first.inputs[0].var
    assert source is not None
    shape = avals[source][0]
    followers = split.between if split.outer is not None else tuple(post)
    _check_mean(spec, result, first, followers, body.facts, shape, lacks, body.sizes)
    if split.outer is not None:
        outer_source = reduction.inputs[0].var
        assert outer_source is not None
        outer_shape = avals[outer_source][0]
        _check_mean(spec, result, reduction, post, body.facts, outer_shape, lacks, body.sizes)
    return split


def _after_launch(chain: tuple[Eqn, ...], uses: Mapping[str, int]) -> list[Eqn]:
    """The ops from the result back to the reduction now run after the launch, as far as
    nothing else in the body reads them."""
    after: list[Eqn] = []
    for eqn in chain:
        if any(uses.get(o, 0) > 1 for o in eqn.outputs):
            break
        after.append(eqn)
    return after


def _write_partial(
    spec: KernelSpec,
    first: Eqn,
    after: list[Eqn],
    eqns: list[Eqn],
    avals: dict[str, tuple[tuple[int, ...], str]],
) -> str:
    """Rewrites `eqns` (and `avals`) to compute each block's partial of the reduction `first`
    and no longer run the ops `after` it, which run after the launch; returns the partial."""
    source = first.inputs[0]
    assert source.var is not None
    shape, dtype = avals[source.var]
    axes = tuple(first.param("axes"))
    partial: str
    if len(shape) == 2 and len(axes) == 2:
        # The whole tile: each block reduces it to a vector along a tiled dim it keeps.
        keep_rows = spec.rows in spec.tile_map
        partial = f"{first.outputs[0]}_partial"
        stop = dataclasses.replace(
            first,
            outputs=(partial,),
            params=tuple(
                (k, (1,) if keep_rows else (0,)) if k == "axes" else (k, v) for k, v in first.params
            ),
        )
        avals[partial] = ((shape[0],) if keep_rows else (shape[1],), dtype)
        at = eqns.index(first)
        if first in after:
            eqns[at] = stop
        else:
            eqns.insert(at + 1, stop)
    elif len(shape) == 2:
        partial = first.outputs[0]  # a vector already: the tile reduced over one axis
    else:
        partial = source.var  # the vector itself
    for eqn in after:
        if eqn is not first or partial == source.var:
            eqns.remove(eqn)
    return partial


def _split(
    spec: KernelSpec,
    result: OperandSpec,
    reduction: Eqn,
    lacks: tuple[str, ...],
    producers: Mapping[str, Eqn],
    facts: Mapping[str, ValueFacts],
    avals: Mapping[str, tuple[tuple[int, ...], str]],
) -> _Split:
    """The reduction whose blocks' partials make the result, and what runs after combining
    them. Each block's partial must be its part of a reduction over the lacking dims of
    values it holds whole: combining the parts then gives the reduction over the whole dims,
    as jnp computes it on whole arrays."""
    source = reduction.inputs[0].var
    assert source is not None
    if len(avals[source][0]) == 2:  # a block reduced: the reduction is the partial itself
        _check_whole(spec, result, facts[source], lacks)
        return _Split(reduction)
    # A vector: follow it back, through ops on it alone, to the reduction that made it.
    middle: list[Eqn] = []
    var = source
    while var in producers and _on_one_vector(producers[var], avals):
        middle.append(producers[var])
        var = next(a.var for a in producers[var].inputs if a.var is not None)
    first = producers.get(var)
    dim = _reduced_lacking(first, facts, lacks)
    if first is None or dim is None:
        # Not a block's part of a reduction over a lacking dim: a vector whole in each block.
        _check_whole(spec, result, facts[source], lacks)
        _check_varies(spec, result, reduction, facts[source], lacks)
        return _Split(reduction)
    assert first.inputs[0].var is not None
    _check_whole(spec, result, facts[first.inputs[0].var], lacks)
    ops = [e for e in reversed(middle) if e.prim not in SHAPE_OPS]
    if not ops and first.prim == reduction.prim:
        return _Split(reduction)  # a sum of sums, a max of maxes: one combination does both
    between: list[PostOp] = []
    for eqn in ops:
        op = _post_op(eqn)
        if op is None:
            raise _does_not_combine(spec, result, first, eqn, reduction, dim, facts)
        between.append(op)
    return _Split(first, COMBINES[reduction.prim], tuple(between), tuple(middle))


def _on_one_vector(eqn: Eqn, avals: Mapping[str, tuple[tuple[int, ...], str]]) -> bool:
    """An elementwise op, or one that adds or drops unit axes, on one vector and constants."""
    names = {a.var for a in eqn.inputs if a.var is not None}
    if len(names) != 1 or len(eqn.outputs) != 1 or eqn.prim in REDUCTIONS:
        return False
    if eqn.prim in ("sk_loop", "sk_map_blocks", "sk_dot", "sk_position", "sk_shift"):
        return False
    (name,) = names
    in_shape, out_shape = avals[name][0], avals[eqn.outputs[0]][0]
    return len(in_shape) == 1 and math.prod(in_shape) == math.prod(out_shape)


def _reduced_lacking(
    eqn: Eqn | None, facts: Mapping[str, ValueFacts], lacks: tuple[str, ...]
) -> str | None:
    """The lacking dim that `eqn` reduces a block over, if it is such a reduction."""
    if eqn is None or eqn.prim not in COMBINES or eqn.inputs[0].var is None:
        return None
    dims = facts[eqn.inputs[0].var].dims
    axes = tuple(eqn.param("axes"))
    if len(dims) != 2 or len(axes) != 1:
        return None
    dim = dims[axes[0]]
    return dim if dim in lacks else None


def _post_op(eqn: Eqn) -> PostOp | None:
    """A cast, or a multiplication or division by a constant; None for anything else."""
    if eqn.prim == "convert_element_type":
        return PostOp(PostOpKind.CAST, None, str(eqn.param("new_dtype")))
    constants = [a for a in eqn.inputs if a.var is None]
    values = [a for a in eqn.inputs if a.var is not None]
    if eqn.prim not in ("mul", "div") or len(constants) != 1 or len(values) != 1:
        return None
    if eqn.prim == "div" and eqn.inputs[0].var is None:
        return None  # c / x is not a scale
    kind = PostOpKind.MUL if eqn.prim == "mul" else PostOpKind.DIV
    return PostOp(kind, constants[0].value, constants[0].dtype)


def _result_chain(
    spec: KernelSpec,
    result: OperandSpec,
    atom: Atom,
    producers: Mapping[str, Eqn],
    lacks: tuple[str, ...],
) -> tuple[list[Eqn], Eqn, list[PostOp]]:
    """The equations from the body's last reduction to the result, that reduction, and the ops
    after it (in the order they run)."""
    chain: list[Eqn] = []
    post: list[PostOp] = []
    var = atom.var
    while var is not None and var in producers:
        eqn = producers[var]
        chain.append(eqn)
        if eqn.prim in COMBINES:
            post.reverse()
            return chain, eqn, post
        op = _post_op(eqn)
        if op is None:
            break
        post.append(op)
        var = next(a.var for a in eqn.inputs if a.var is not None)
    last = chain[-1] if chain else None
    # Without loops a dim may be held whole: every block then holds all the result needs (a
    # group's rstd, one value a grid step).
    whole = (
        f"; or, to compute it in the kernel, drop {' and '.join(lacks)} from tile= so that each "
        "block holds all of it"
        if not spec.loop
        else ""
    )
    raise _error(
        spec,
        result,
        last,
        lacks,
        f"{result.name} lacks the tiled dim {lacks[0]}, but the body does not compute it as a "
        f"sum, max or min over {lacks[0]}",
        f"end the result with the reduction over {lacks[0]} (sk.sum(v, axis=0), jnp.max, ...), "
        "followed at most by .astype(...) or a scale by a constant; each block then writes its "
        "part and one reduction after the launch combines them" + whole,
        actual=f"`{last.prim}`" + (f" in: {last.source}" if last.source else "")
        if last is not None
        else "a value that is not computed from the blocks",
    )


def _check_mean(
    spec: KernelSpec,
    result: OperandSpec,
    reduction: Eqn,
    after: tuple[PostOp, ...] | list[PostOp],
    facts: Mapping[str, ValueFacts],
    shape: tuple[int, ...],
    lacks: tuple[str, ...],
    sizes: Mapping[str, int],
) -> None:
    """jnp.mean over a tiled dim divides by the block, not by the dim: refuse it."""
    if reduction.prim != "reduce_sum":
        return
    source = reduction.inputs[0].var
    assert source is not None
    dims = facts[source].dims
    axes = tuple(reduction.param("axes"))
    over = [dims[a] if a < len(dims) else None for a in axes]
    block_count = math.prod(shape[a] for a in axes)
    true_count = math.prod(
        sizes[d] if d in lacks else shape[a] for d, a in zip(over, axes, strict=True)
    )
    divisors = [p.value for p in after if p.kind is PostOpKind.DIV]
    if block_count == true_count or not any(v == block_count for v in divisors):
        return
    # Refused rather than taken as a constant scale: a body sees one block, so a count it
    # divides by (jnp.mean, v.shape[0]) is the block's, and the result would be wrong.
    tiled = next(d for d in over if d in lacks)
    summed = f"jnp.sum(v, axis={axes[0]})" if len(axes) == 1 else "jnp.sum(v)"
    raise _error(
        spec,
        result,
        reduction,
        (tiled,),
        f"{result.name} divides its sum over the tiled dim {tiled} by {block_count}, the "
        f"elements of one block of {tiled}, but the result sums every block: as a mean "
        f"(jnp.mean, or a division by v.shape), it would divide by the wrong count",
        f"for a mean over {tiled}, divide by the dim's size: {summed} / sk.dim({tiled!r}); to "
        f"divide by the constant {block_count} itself, divide the kernel's result after the "
        "kernel, where XLA fuses it",
        actual=f"`reduce_sum` over {tiled}, then `div` by {block_count}"
        + (f" in: {reduction.source}" if reduction.source else ""),
        expected=f"a sum over {tiled} divided by sk.dim({tiled!r}), or by a constant other than "
        f"the {block_count} elements of its block",
    )


def _check_whole(
    spec: KernelSpec, result: OperandSpec, value: ValueFacts, lacks: tuple[str, ...]
) -> None:
    """The values a block reduces must be whole: not computed from its own part of a
    reduction over a lacking dim, which the blocks have not combined yet."""
    found = value.partial_over(lacks)
    if found is None:
        return
    dim, origin = found
    kind = str(COMBINES[origin.prim]) if origin.prim in COMBINES else "product (sk.dot)"
    raise _error(
        spec,
        result,
        origin,
        (dim,),
        f"{result.name} lacks the tiled dim {dim}, so its blocks' parts are combined after the "
        f"launch; but it is computed from a {kind} over {dim} that each block takes over its own "
        f"part of {dim} only, before any combination",
        f"return that {kind} over {dim} as a result of its own and compute the rest after the "
        f"kernel, where XLA fuses it; or keep {dim} whole in every block (leave it out of tile=)",
        actual=f"`{origin.prim}` over {dim}" + (f" in: {origin.source}" if origin.source else ""),
        expected=f"a reduction over {dim} of values each block holds whole",
    )


def _check_varies(
    spec: KernelSpec,
    result: OperandSpec,
    reduction: Eqn,
    vector: ValueFacts,
    lacks: tuple[str, ...],
) -> None:
    """A vector that every block along a lacking dim holds whole, summed: each block's sum
    is the whole sum, and adding the blocks' would count it once a block."""
    along = vector.dims[0] if vector.dims else None
    if reduction.prim != "reduce_sum" or along is None:
        return
    repeated = [d for d in lacks if d != along]
    if not repeated:
        return
    raise _error(
        spec,
        result,
        reduction,
        (repeated[0],),
        f"{result.name} sums a vector along {along} that every block along the tiled dim "
        f"{repeated[0]} holds whole: adding the blocks' sums would count it once a block",
        f"sum it outside the kernel, or sum a block over {repeated[0]} inside the body",
        actual=f"`{reduction.prim}` of a vector along {along}"
        + (f" in: {reduction.source}" if reduction.source else ""),
        expected=f"a sum of values that differ from block to block along {repeated[0]}",
    )


def _does_not_combine(
    spec: KernelSpec,
    result: OperandSpec,
    first: Eqn,
    op: Eqn,
    last: Eqn,
    dim: str,
    facts: Mapping[str, ValueFacts],
) -> CrossBlockResultError:
    """An op between the reduction over a lacking dim and the result's last reduction that
    the combination of the blocks' parts cannot run after it."""
    kind, outer = COMBINES[first.prim], COMBINES[last.prim]
    vector = facts[first.outputs[0]].dims
    along = vector[0] if vector else None
    of = f" over {along}" if along else ""
    return _error(
        spec,
        result,
        op,
        (dim,),
        f"{result.name} applies `{op.prim}` to the {kind}s over the tiled dim {dim} before "
        f"its {outer}{of}: each block holds the {kind} of its own part of {dim} only, and "
        f"`{op.prim}` of the blocks' parts does not combine into `{op.prim}` of the whole",
        f"return the {kind}s over {dim} as the result"
        + (f' (`Float[Array, " {along}"]`)' if along else "")
        + f" and apply `{op.prim}` and the {outer} after the kernel, where XLA fuses them; or "
        f"keep {dim} whole in every block (leave it out of tile=)",
        actual=f"`{op.prim}`" + (f" in: {op.source}" if op.source else ""),
        expected=f"only casts and constant scales between the {kind} over {dim} and the "
        f"{outer}{of}",
    )


def _error(
    spec: KernelSpec,
    result: OperandSpec,
    eqn: Eqn | None,
    lacks: tuple[str, ...],
    what: str,
    fix: str,
    actual: str | None = None,
    expected: str | None = None,
) -> CrossBlockResultError:
    return CrossBlockResultError(
        what,
        kernel=spec.name,
        where=(eqn.line if eqn is not None else None) or spec.location,
        operand=result.name,
        dim=lacks[0],
        expected=expected
        or f"a sum, max or min over {', '.join(lacks)}, then casts or constant scales",
        actual=actual or (f"`{eqn.prim}`" if eqn is not None else None),
        fix=fix,
    )
