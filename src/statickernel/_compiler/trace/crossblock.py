"""Results that lack a tiled dim: reductions across blocks.

A result without a tiled dim (a scalar loss, or the per-column `dw` of a norm's backward
when the rows are tiled) is a reduction over values that every block along that dim holds a
part of. No block can write it alone, so:

1. each block writes its *partial* once: its part of the body's reduction over the lacking
   dims, stopped at a vector (the block reduces its tile to a per-row or per-column vector,
   as Mosaic GPU can);
2. the partials go to an array with one entry per block along the lacking dims (a grid
   step narrows it to its entry, as it does a batch dim);
3. the generated wrapper reduces the partials with one XLA reduction, then applies what the
   body did after its reduction (a scale by a constant, a cast). Where the body's last
   reduction reduces the vector of an earlier, different one (a sum of column maxes), the
   wrapper combines the blocks' vectors with the earlier one, applies the casts and scales
   between the two, then reduces the kept dim with the last one.

Every partial is written once and combined in a fixed order, so the result is the same, bit
for bit, on every call: no atomics.

Which reduction's partials the blocks write, and which bodies cannot be split into blocks
and are refused at the declaration, is `trace.crossblock_rewrite`'s; this module plans the partials
and writes their combination.
"""

import dataclasses
import enum
from collections.abc import Mapping

from ..._errors import CrossBlockResultError
from ..declare.spec import KernelSpec
from ..ir.casts import FP8_MAX, to_fp8
from ..ir.nodes import Const, DType, Expr, Kind, Literal, call
from .body import Atom, BodyTrace

__all__ = [
    "COMBINES",
    "Combine",
    "CrossBlock",
    "PostOp",
    "PostOpKind",
    "accumulated_rows",
    "applied",
    "combined",
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


COMBINES = {c.primitive: c for c in Combine}


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
    outer: Combine | None = None
    """The body's last reduction, over the kept dim, where it is not `combine` or follows it
    through other ops (a sum of column maxes): the wrapper then combines the blocks' partials
    alone, applies `between`, and reduces the kept dim with it. None where one `combine`
    over the blocks and the kept dim gives the result."""
    between: tuple[PostOp, ...] = ()
    """The ops from the partials' reduction to `outer`, in order."""

    @property
    def last(self) -> Combine:
        """The body's last reduction: the one `post` follows."""
        return self.outer or self.combine

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
        if self.kept not in self.result_dims and self.outer is None:
            axes.append(lead + len(self.per_block))
        return tuple(axes)

    def check_invariants(self) -> None:
        assert self.lacks and self.kept
        assert len(set(self.lacks)) == len(self.lacks)
        if self.last is not Combine.SUM:
            assert all(p.kind is PostOpKind.CAST for p in self.post)
        if self.outer is None:
            assert not self.between
        else:  # the blocks' partials are combined first, then the kept dim reduced
            assert self.per_block and self.kept not in self.result_dims


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
        e for e in trace.eqns if not (e.prim in COMBINES and all(o not in read for o in e.outputs))
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


_COMBINE_CALLS = {Combine.SUM: "jnp.sum", Combine.MAX: "jnp.max", Combine.MIN: "jnp.min"}


def combined(cross: CrossBlock, partials: Expr, batch: int) -> Expr:
    """The wrapper's expression for the result: the partials reduced, then the body's ops
    after its reduction; or, with an outer reduction, the blocks' partials combined, the ops
    between the body's reductions, the outer one over the kept dim, then the ops after it."""
    axes = Const(cross.combine_axes(batch))
    value: Expr = call(_COMBINE_CALLS[cross.combine], partials, axis=axes)
    if cross.outer is not None:
        value = applied(value, cross.between)
        value = call(_COMBINE_CALLS[cross.outer], value, axis=Const((batch,)))
    return applied(value, cross.post)


def applied(value: Expr, ops: tuple[PostOp, ...]) -> Expr:
    """`ops` applied to `value` in order, as the wrapper writes them: a cast to an fp8 format
    saturates, as the kernel's own does."""
    for op in ops:
        if op.kind is PostOpKind.CAST and op.dtype in FP8_MAX:
            value = to_fp8(value, op.dtype, None)
        elif op.kind is PostOpKind.CAST:
            value = call("lax.convert_element_type", value, DType(op.dtype))
        else:
            scale = "lax.mul" if op.kind is PostOpKind.MUL else "lax.div"
            value = call(scale, value, Literal(op.value, op.dtype, weak_type=False))
    return value
