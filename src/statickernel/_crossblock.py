"""Results that lack a tiled dim: reductions across blocks.

A result without a tiled dim (a scalar loss, or the per-column `dw` of a norm's backward
when the rows are tiled) is a reduction over values that every block along that dim holds a
part of. No block can write it alone, so:

1. each block writes its *partial* once: the body's last reduction, stopped at a vector
   (the block reduces its tile to a per-row or per-column vector, as Mosaic GPU can);
2. the partials go to an array with one entry per block along the lacking dims (a grid
   step narrows it to its entry, as it does a batch dim);
3. the generated wrapper reduces the partials with one XLA reduction, then applies what the
   body did after its reduction (a scale by a constant, a cast).

Every partial is written once and combined in a fixed order, so the result is the same, bit
for bit, on every call: no atomics.

The body's result must therefore end in a sum, max or min over the lacking dims, followed
only by casts (and, after a sum, multiplications or divisions by constants); anything else
cannot be split into blocks and is refused at the declaration with a fix.
"""

import dataclasses
import enum
import math
from collections.abc import Mapping

from . import _hardware as hw
from ._body import Atom, BodyTrace, Eqn
from ._errors import CrossBlockResultError
from ._ir import Const, DType, Expr, Kind, Literal, call
from ._operand import OperandSpec
from ._operand_plan import OperandPlan
from ._spec import KernelSpec

__all__ = [
    "Combine",
    "CrossBlock",
    "PostOp",
    "PostOpKind",
    "accumulated_rows",
    "combined",
    "cross_block_results",
    "partial_plans",
    "partial_specs",
]


class Combine(enum.StrEnum):
    """How partials combine: the body's last reduction, done once more over the blocks."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"

    @property
    def primitive(self) -> str:
        """The reduction's primitive, e.g. `reduce_sum`."""
        return f"reduce_{self.value}"

    @property
    def pairwise(self) -> str:
        """The elementwise op that folds one partial into another, e.g. `lax.add`."""
        return {Combine.SUM: "lax.add", Combine.MAX: "lax.max", Combine.MIN: "lax.min"}[self]


_COMBINES = {c.primitive: c for c in Combine}


class PostOpKind(enum.StrEnum):
    MUL = "mul"
    DIV = "div"
    CAST = "cast"


@dataclasses.dataclass(frozen=True)
class PostOp:
    """One op the body applies after its last reduction; the wrapper applies it to the
    combined partials, in order."""

    kind: PostOpKind
    value: float | int | None
    """The constant of a multiplication or division; None for a cast."""
    dtype: str
    """The dtype of the constant, or the dtype a cast goes to."""


@dataclasses.dataclass(frozen=True)
class CrossBlock:
    """One result reduced across blocks: where its partials come from and how they combine."""

    index: int
    """The result's position among the kernel's results."""
    name: str
    lacks: tuple[str, ...]
    """The tiled dims the result lacks, in the order of tile=."""
    combine: Combine
    post: tuple[PostOp, ...]
    partial_dtype: str
    """The dtype of the partials: the reduction's; the result's dtype comes after the casts."""
    result_dims: tuple[str, ...]
    """The result's dims as the body sees them (without batch dims)."""
    kept: str = ""
    """The frame dim of the vector each block writes; set once the body is translated."""
    rows_source: str | None = None
    """For a sum, max or min of a tile over its rows alone: the tile's variable, which the
    row form accumulates row by row instead; None otherwise."""

    @property
    def per_block(self) -> tuple[str, ...]:
        """The lacking dims whose block index leads the partials array (the kept dim is
        written whole by its blocks, like any result)."""
        return tuple(d for d in self.lacks if d != self.kept)

    def combine_axes(self, batch: int) -> tuple[int, ...]:
        """The axes of the partials array (after `batch` batch dims) that the wrapper reduces:
        one per block dim, and the kept dim's when the result lacks it."""
        lead = batch
        axes = list(range(lead, lead + len(self.per_block)))
        if self.kept not in self.result_dims:
            axes.append(lead + len(self.per_block))
        return tuple(axes)

    def check_invariants(self) -> None:
        assert self.lacks and self.kept
        assert len(set(self.lacks)) == len(self.lacks)
        if self.combine is not Combine.SUM:
            assert all(p.kind is PostOpKind.CAST for p in self.post)


def cross_block_results(
    spec: KernelSpec,
    trace: BodyTrace,
    logical: Mapping[str, int],
    sizes: Mapping[str, int],
) -> tuple[BodyTrace, tuple[CrossBlock, ...]]:
    """The results that lack a tiled dim, and the trace rewritten to return their partials:
    the input of the body's last reduction, reduced as far as a vector."""
    found: list[CrossBlock] = []
    producers = {out: eqn for eqn in trace.eqns for out in eqn.outputs}
    uses: dict[str, int] = {}
    for eqn in trace.eqns:
        for atom in eqn.inputs:
            if atom.var is not None:
                uses[atom.var] = uses.get(atom.var, 0) + 1
    for atom in trace.outputs:
        if atom.var is not None:
            uses[atom.var] = uses.get(atom.var, 0) + 1
    outputs = list(trace.outputs)
    eqns = list(trace.eqns)
    avals = dict(trace.avals)
    for index, result in enumerate(spec.results):
        lacks = tuple(d for d in spec.tile_map if d not in result.block_dims)
        if not lacks:
            continue
        chain, reduction, post = _result_chain(spec, result, outputs[index], producers, lacks)
        combine = _COMBINES[reduction.prim]
        if combine is not Combine.SUM and any(p.kind is not PostOpKind.CAST for p in post):
            raise _error(
                spec,
                result,
                reduction,
                lacks,
                f"{result.name} scales the {combine} of its blocks; the scale does not commute "
                "with combining them",
                "scale the values before the reduction, or the result after the kernel",
            )
        source = reduction.inputs[0]
        assert source.var is not None
        shape, dtype = avals[source.var]
        axes = tuple(reduction.param("axes"))
        _check_mean(spec, result, reduction, post, shape, axes, lacks, logical, sizes)
        # The ops from the result back to the reduction now run after the launch, as far as
        # nothing else in the body reads them.
        after: list[Eqn] = []
        for eqn in chain:
            if any(uses.get(o, 0) > 1 for o in eqn.outputs):
                break
            after.append(eqn)
        partial: str
        if len(shape) == 2 and len(axes) == 2:
            # The whole tile: each block reduces it to a vector along a tiled dim it keeps.
            keep_rows = spec.rows in spec.tile_map
            partial = f"{reduction.outputs[0]}_partial"
            stop = dataclasses.replace(
                reduction,
                outputs=(partial,),
                params=tuple(
                    (k, (1,) if keep_rows else (0,)) if k == "axes" else (k, v)
                    for k, v in reduction.params
                ),
            )
            avals[partial] = ((shape[0],) if keep_rows else (shape[1],), dtype)
            at = eqns.index(reduction)
            if reduction in after:
                eqns[at] = stop
            else:
                eqns.insert(at + 1, stop)
        elif len(shape) == 2:
            partial = reduction.outputs[0]  # a vector already: the tile reduced over one axis
        else:
            partial = source.var  # the vector itself
        outputs[index] = Atom(partial)
        for eqn in after:
            if eqn is not reduction or partial == source.var:
                eqns.remove(eqn)
        over_rows = len(shape) == 2 and axes == (0,)
        found.append(
            CrossBlock(
                index,
                result.name,
                lacks,
                combine,
                tuple(post),
                dtype,
                result.block_dims,
                rows_source=source.var if over_rows else None,
            )
        )
    if not found:
        return trace, ()
    rewritten = dataclasses.replace(
        trace, eqns=tuple(eqns), outputs=tuple(outputs), avals=tuple(avals.items())
    )
    return rewritten, tuple(found)


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
        if eqn.prim in _COMBINES:
            post.reverse()
            return chain, eqn, post
        if eqn.prim == "convert_element_type":
            post.append(PostOp(PostOpKind.CAST, None, str(eqn.param("new_dtype"))))
            var = eqn.inputs[0].var
            continue
        constants = [a for a in eqn.inputs if a.var is None]
        values = [a for a in eqn.inputs if a.var is not None]
        if eqn.prim in ("mul", "div") and len(constants) == 1 and len(values) == 1:
            if eqn.prim == "div" and eqn.inputs[0].var is None:
                break  # c / x is not a scale
            kind = PostOpKind.MUL if eqn.prim == "mul" else PostOpKind.DIV
            post.append(PostOp(kind, constants[0].value, constants[0].dtype))
            var = values[0].var
            continue
        break
    last = chain[-1] if chain else None
    raise _error(
        spec,
        result,
        last,
        lacks,
        f"{result.name} lacks the tiled dim {lacks[0]}, but the body does not compute it as a "
        f"sum, max or min over {lacks[0]}",
        f"end the result with the reduction over {lacks[0]} (sk.sum(v, axis=0), jnp.max, ...), "
        "followed at most by .astype(...) or a scale by a constant; each block then writes its "
        "part and one reduction after the launch combines them",
        actual=f"`{last.prim}`" + (f" in: {last.source}" if last.source else "")
        if last is not None
        else "a value that is not computed from the blocks",
    )


def _check_mean(
    spec: KernelSpec,
    result: OperandSpec,
    reduction: Eqn,
    post: list[PostOp],
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    lacks: tuple[str, ...],
    logical: Mapping[str, int],
    sizes: Mapping[str, int],
) -> None:
    """jnp.mean over a tiled dim divides by the block, not by the dim: refuse it."""
    if reduction.prim != "reduce_sum":
        return
    block_count = math.prod(shape[a] for a in axes)
    divisors = [p.value for p in post if p.kind is PostOpKind.DIV]
    true_blocks = math.prod(logical[d] for d in lacks)
    true_sizes = math.prod(sizes[d] for d in lacks)
    if true_blocks == true_sizes or not any(v == block_count for v in divisors):
        return
    # Refused rather than taken as a constant scale: a body sees one block, so a count it
    # divides by (jnp.mean, v.shape[0]) is the block's, and the result would be wrong.
    dim = lacks[0]
    summed = f"jnp.sum(v, axis={axes[0]})" if len(axes) == 1 else "jnp.sum(v)"
    raise _error(
        spec,
        result,
        reduction,
        lacks,
        f"{result.name} divides its sum over the tiled dim {dim} by {block_count}, the "
        f"elements of one block of {dim}, but the result sums every block: as a mean (jnp.mean, "
        f"or a division by v.shape), it would divide by the wrong count",
        f"for a mean over {dim}, divide by the dim's size: {summed} / sk.dim({dim!r}); to "
        f"divide by the constant {block_count} itself, divide the kernel's result after the "
        "kernel, where XLA fuses it",
        actual=f"`reduce_sum` over {dim}, then `div` by {block_count}"
        + (f" in: {reduction.source}" if reduction.source else ""),
        expected=f"a sum over {dim} divided by sk.dim({dim!r}), or by a constant other than "
        f"the {block_count} elements of its block",
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


def accumulated_rows(
    spec: KernelSpec, trace: BodyTrace, crosses: tuple[CrossBlock, ...]
) -> tuple[BodyTrace, frozenset[str]] | None:
    """The trace for the row form, whose CTAs add up the rows of each result reduced over the
    rows: it returns the reduced tile itself (a row, in the row form). None when a result
    reduced across blocks is something else, which the row form cannot hold."""
    outputs = list(trace.outputs)
    names: set[str] = set()
    for cross in crosses:
        if cross.kept == spec.rows and not cross.per_block:
            continue  # per-row partials: a per-row result of the row form
        if cross.rows_source is None or cross.per_block != (spec.rows,):
            return None
        outputs[cross.index] = Atom(cross.rows_source)
        names.add(cross.name)
    if not names:
        return trace, frozenset()
    read = {a.var for e in trace.eqns for a in e.inputs} | {a.var for a in outputs}
    # The reductions over the rows are now the CTAs' sums: drop them when nothing reads them.
    eqns = tuple(
        e for e in trace.eqns if not (e.prim in _COMBINES and all(o not in read for o in e.outputs))
    )
    return dataclasses.replace(trace, eqns=eqns, outputs=tuple(outputs)), frozenset(names)


def partial_specs(
    spec: KernelSpec, crosses: tuple[CrossBlock, ...], kinds: Mapping[int, Kind]
) -> tuple[KernelSpec, tuple[CrossBlock, ...]]:
    """The spec the launch is planned with: each cross-block result replaced by its
    partials, a vector along the dim the translated body keeps (`kinds`, by result)."""
    results = list(spec.results)
    settled: list[CrossBlock] = []
    for cross in crosses:
        result = results[cross.index]
        kind = kinds[cross.index]
        kept = spec.rows if kind == Kind.ROW else spec.cols
        if kind not in (Kind.ROW, Kind.COL) or kept is None:
            raise CrossBlockResultError(
                f"{result.name} reduces a value that does not vary along the blocks",
                kernel=spec.name,
                where=spec.location,
                operand=result.name,
                dim=cross.lacks[0],
                expected="a reduction of values loaded from the operands",
                actual=f"a {kind} value",
                fix="compute the result from the operands' blocks, or outside the kernel",
            )
        if result.block_dims and kept not in result.block_dims:
            raise CrossBlockResultError(
                f"{result.name} is '{' '.join(result.block_dims)}', but the body's reduction "
                f"keeps {kept}",
                kernel=spec.name,
                where=spec.location,
                operand=result.name,
                dim=cross.lacks[0],
                expected=f"a reduction over {', '.join(cross.lacks)} that keeps "
                f"{' '.join(result.block_dims)}",
                actual=f"a vector along {kept}",
                fix=f"reduce over {cross.lacks[0]}: axis={0 if cross.lacks[0] == spec.rows else 1}",
            )
        settled.append(dataclasses.replace(cross, kept=kept))
        results[cross.index] = dataclasses.replace(
            result,
            name=result.name,
            dims=(*result.batch, kept),
            dtypes=(cross.partial_dtype,),
        )
    return dataclasses.replace(spec, results=tuple(results)), tuple(settled)


def partial_plans(
    results: tuple[OperandPlan, ...],
    crosses: tuple[CrossBlock, ...],
    grid: Mapping[str, int],
    per_cta: bool = False,
) -> tuple[tuple[OperandPlan, ...], tuple[str, ...]]:
    """The results' plans with the partials' leading block dims, and the notes that say so.
    `grid` gives the entries along each block dim: its blocks, or with `per_cta` (the row
    form's persistent CTAs, each adding up the rows of its blocks) the CTAs."""
    plans = list(results)
    notes: list[str] = []
    for cross in crosses:
        op = plans[cross.index]
        lead = tuple(grid[d] for d in cross.per_block)
        gmem = op.gmem_shape
        if lead or op.batch:
            # A row of partials starts on a 16-byte boundary, as TMA needs of every stride.
            unit = hw.TMA_ALIGN_BYTES // hw.itemsize(op.dtype)
            gmem = (*gmem[:-1], hw.round_up(gmem[-1], unit))
        batch = len(op.batch)
        plans[cross.index] = dataclasses.replace(
            op,
            shape=(*op.shape[:batch], *lead, *op.shape[batch:]),
            gmem_shape=(*gmem[:batch], *lead, *gmem[batch:]),
            per_block=cross.per_block,
        )
        count = math.prod(lead) if lead else 1
        along = " x ".join(f"{grid[d]} along {d}" for d in cross.per_block)
        who = f"each of the {count:,} blocks ({along}) writes" if lead else "its blocks write"
        if per_cta:
            who = f"each of the {count:,} CTAs adds up the rows of its blocks and writes"
        notes.append(
            f"`{cross.name}` lacks the tiled dim {', '.join(cross.lacks)}: {who} "
            f"a partial {cross.combine} along {cross.kept} ({count:,} x "
            f"{op.shape[-1]:,} {op.dtype}); one {cross.combine} after the launch combines them, "
            "in a fixed order (deterministic)"
        )
    return tuple(plans), tuple(notes)


_COMBINE_CALLS = {Combine.SUM: "jnp.sum", Combine.MAX: "jnp.max", Combine.MIN: "jnp.min"}


def combined(cross: CrossBlock, partials: Expr, batch: int) -> Expr:
    """The wrapper's expression for the result: the partials reduced, then the body's ops
    after its reduction."""
    axes = Const(cross.combine_axes(batch))
    value: Expr = call(_COMBINE_CALLS[cross.combine], partials, axis=axes)
    for op in cross.post:
        if op.kind is PostOpKind.CAST:
            value = call("lax.convert_element_type", value, DType(op.dtype))
        else:
            scale = "lax.mul" if op.kind is PostOpKind.MUL else "lax.div"
            value = call(scale, value, Literal(op.value, op.dtype, weak_type=False))
    return value
