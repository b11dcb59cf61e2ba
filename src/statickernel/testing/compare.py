"""Comparing a kernel's results with its reference's: which elements differ beyond the
tolerance, the worst of them, and whether they all lie in edge blocks.

An element fails when |got - want| > atol + rtol * |want| (numpy.isclose's rule, in float32).
By default rtol is 0 and atol is a relative tolerance times the largest finite reference
magnitude (at least 1). The relative tolerance is that of the narrowest float involved: for a
kernel without products, its operands' and results' dtypes; for one with `sk.dot` products,
whose operands are exact inputs, its results' dtypes and the types its body rounds computed
values to (the plan's `numerics`: tf32 for a product of float32 blocks), and at least the
float32 roundings a contraction of length K accumulates, 2**-22 * sqrt(K). Equal values never
fail, matching infinities and NaNs included; any other NaN is an infinite error.

An edge block is the last block along a tiled dim whose size is not a multiple of the block:
it crosses the array's edge, so masking decides what it reads and writes. Mismatches found
there alone usually mean an edge mask is wrong; mismatches in interior blocks too mean the
body is.
"""

import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._compiler.mosaic_gpu.plan.numerics import TF32, Numerics, is_float
from .._compiler.mosaic_gpu.plan.plan import LaunchPlan

__all__ = [
    "Comparison",
    "EdgeBlock",
    "Placement",
    "WorstElement",
    "compare",
    "product_tolerance",
    "tolerance",
]

# Relative tolerances by the narrowest float involved; integer results must match exactly.
# tf32 (a product's float32 inputs, 10 bits of mantissa) allows ten of its units, 2**-11.
_RELATIVE_TOLERANCE = {"float32": 1e-5, TF32: 5e-3, "bfloat16": 2e-2, "float16": 2e-2}
# Each step of a contraction can round in float32 (2**-24), in another order than the
# reference's: errors that add up as a random walk, about sqrt(K) of them, allowed 4x.
_CONTRACTION_ROUNDING = 2.0**-22


def tolerance(dtypes: Sequence[str], scale: float = 1.0) -> float:
    """The default allowed abs error (atol): relative to the narrowest float dtype, times
    `scale` (at least 1); zero when every dtype is an integer."""
    relative = [_RELATIVE_TOLERANCE.get(jnp.dtype(d).name, 2e-2) for d in dtypes if is_float(d)]
    return max(relative, default=0.0) * max(1.0, scale)


def product_tolerance(numerics: Numerics, result_dtypes: Sequence[str], scale: float) -> float:
    """The default atol of a kernel with products: relative to the narrowest float among its
    results and what its body rounds to, at least the contraction's float32 roundings, times
    `scale` (at least 1); zero when nothing is a float."""
    floats = [d for d in result_dtypes if is_float(d)] + list(numerics.rounds_to)
    if not floats:
        return 0.0
    relative = max(_RELATIVE_TOLERANCE.get(_name(d), 2e-2) for d in floats)
    relative = max(relative, _CONTRACTION_ROUNDING * math.sqrt(numerics.contraction))
    return relative * max(1.0, scale)


def _name(dtype: str) -> str:
    return dtype if dtype == TF32 else jnp.dtype(dtype).name


@dataclasses.dataclass(frozen=True)
class WorstElement:
    """The element with the largest abs error."""

    result: str  # the result's name in the plan ("result" for a single result)
    index: tuple[int, ...]
    got: float
    want: float

    @property
    def abs_error(self) -> float:
        return abs(self.got - self.want) if not math.isnan(self.got - self.want) else math.inf

    @property
    def relative_error(self) -> float:
        """|got - want| / |want|; infinite where want is 0 and got is not."""
        if self.abs_error == 0:
            return 0.0
        return self.abs_error / abs(self.want) if self.want else math.inf

    def __str__(self) -> str:
        index = ", ".join(str(i) for i in self.index)
        return (
            f"{self.result}[{index}]: got {self.got:.6g}, want {self.want:.6g} "
            f"(abs error {self.abs_error:.3g}, relative error {self.relative_error:.3g})"
        )


@dataclasses.dataclass(frozen=True)
class EdgeBlock:
    """The last block along a tiled dim of one result, which crosses the array's edge, and
    how many mismatching elements it holds."""

    result: str
    dim: str
    start: int  # the block's first index along `dim`
    stop: int  # one past its last: the dim's size
    mismatches: int

    def __str__(self) -> str:
        last = self.stop - 1
        span = f"{self.start}–{last}" if last > self.start else str(last)
        return f"the last block along {self.dim} ({self.dim} {span})"


class Placement(enum.Enum):
    """Where the mismatching elements lie."""

    NONE = "none"  # no element differs
    EDGE_BLOCKS = "edge_blocks"  # every mismatch lies in an edge block
    INTERIOR = "interior"  # some mismatch lies in a block inside the arrays
    UNKNOWN = "unknown"  # the results do not follow the plan, so blocks are not known


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The facts of one comparison."""

    max_abs_error: float
    atol: float
    rtol: float
    elements: int
    mismatches: int
    worst: WorstElement | None
    placement: Placement
    edge_blocks: tuple[EdgeBlock, ...]  # those holding mismatches
    informative: int = 0
    """The reference's elements that are finite and nonzero: those that test the kernel's
    arithmetic (a masked softmax whose rows are all past their lengths compares zeros)."""


def compare(
    got: Any,
    want: Any,
    plan: LaunchPlan | None,
    dtypes: Sequence[str],
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> Comparison:
    """Compares the kernel's results `got` with the reference's `want`, element by element.

    `dtypes` are the operands'; the results' are added for the default tolerance. When only
    one of `rtol` and `atol` is given, the other is 0.
    """
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    got_shapes = [tuple(np.shape(g)) for g in got_leaves]
    want_shapes = [tuple(np.shape(w)) for w in want_leaves]
    if got_shapes != want_shapes:
        raise ValueError(f"the kernel returned shapes {got_shapes}, the reference {want_shapes}")
    pairs = [
        (np.asarray(g, np.float32), np.asarray(w, np.float32))
        for g, w in zip(got_leaves, want_leaves, strict=True)
    ]
    errors = [_abs_errors(g, w) for g, w in pairs]
    scale = max((_finite_max(w) for _, w in pairs), default=0.0)
    result_dtypes = [jnp.dtype(np.asarray(g).dtype).name for g in got_leaves]
    # By default an integer result (a top-k's indices) matches exactly, beside float ones.
    exact = [rtol is None and atol is None and not is_float(d) for d in result_dtypes]
    numerics = plan.numerics if plan is not None else None
    if rtol is None and atol is None and numerics is not None and numerics.contraction:
        atol, rtol = product_tolerance(numerics, result_dtypes, scale), 0.0
    elif rtol is None and atol is None:
        atol, rtol = tolerance([*dtypes, *result_dtypes], scale), 0.0
    atol, rtol = atol or 0.0, rtol or 0.0
    names = _result_names(plan, len(pairs))
    worst: WorstElement | None = None
    worst_error = 0.0
    elements = mismatches = informative = 0
    interior = False
    edge_blocks: list[EdgeBlock] = []
    follows_plan = plan is not None and names is not None
    for i, ((g, w), error) in enumerate(zip(pairs, errors, strict=True)):
        name = names[i] if names is not None else f"result {i}"
        bad = error > atol + rtol * np.where(np.isfinite(w), np.abs(w), 0.0)
        if exact[i]:
            bad = error > 0
        elements += error.size
        informative += int(np.count_nonzero(np.isfinite(w) & (w != 0)))
        mismatches += int(np.count_nonzero(bad))
        if error.size and float(np.max(error)) > worst_error:
            flat = int(np.argmax(error))
            index = tuple(int(n) for n in np.unravel_index(flat, error.shape))
            worst_error = float(error.flat[flat])
            worst = WorstElement(name, index, float(g[index]), float(w[index]))
        if plan is not None and names is not None and bad.any():
            blocks, in_edge = _edge_blocks(plan, i, name, bad)
            if blocks is None:
                follows_plan = False
                continue
            edge_blocks += blocks
            interior = interior or bool((bad & ~in_edge).any())
    if mismatches == 0:
        placement = Placement.NONE
    elif not follows_plan:
        placement = Placement.UNKNOWN
    else:
        placement = Placement.INTERIOR if interior else Placement.EDGE_BLOCKS
    return Comparison(
        max_abs_error=worst_error,
        atol=atol,
        rtol=rtol,
        elements=elements,
        mismatches=mismatches,
        worst=worst,
        placement=placement,
        edge_blocks=tuple(edge_blocks),
        informative=informative,
    )


def _abs_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.where(same, 0.0, np.abs(got - want))
    return np.where(np.isnan(error), np.inf, error)


def _finite_max(values: np.ndarray) -> float:
    finite = np.abs(values[np.isfinite(values)])
    return float(np.max(finite)) if finite.size else 0.0


def _result_names(plan: LaunchPlan | None, count: int) -> list[str] | None:
    if plan is None or len(plan.results) != count:
        return None
    return [r.name for r in plan.results]


def _edge_blocks(
    plan: LaunchPlan, index: int, name: str, bad: np.ndarray
) -> tuple[list[EdgeBlock] | None, np.ndarray]:
    """The edge blocks of result `index` that hold mismatches, and the mask of every element
    in an edge block; None when the result's shape is not the plan's."""
    result = plan.results[index]
    in_edge = np.zeros(bad.shape, dtype=bool)
    if tuple(result.shape) != bad.shape:
        return None, in_edge
    layouts = {d.name: d for d in plan.dims}
    blocks: list[EdgeBlock] = []
    for axis, dim in enumerate(result.dims):
        layout = layouts.get(dim)
        if layout is None or layout.tiled_by is None or layout.batched:
            continue
        start = (layout.size // layout.block) * layout.block
        if start == layout.size:  # the dim is a whole number of blocks: no edge block
            continue
        along = np.arange(bad.shape[axis]) >= start
        mask = along.reshape([-1 if a == axis else 1 for a in range(bad.ndim)])
        in_edge |= mask
        count = int(np.count_nonzero(bad & mask))
        if count:
            blocks.append(EdgeBlock(name, dim, start, layout.size, count))
    return blocks, in_edge
