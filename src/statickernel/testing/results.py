"""One checked case's result, and how results read: a table, then what went wrong in each
failing case (the mismatch count, the worst element, and whether only edge blocks differ)."""

import dataclasses
import math
from collections.abc import Sequence

from .compare import EdgeBlock, Placement, WorstElement
from .probes import dtype_text, shapes_text

__all__ = ["LOW_COVERAGE", "CheckResult", "coverage_warnings", "describe_failure", "format_results"]

LOW_COVERAGE = 0.01
"""Below this share of finite, nonzero reference elements a case is reported as testing little."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One case of a kernel checked against its reference.

    An element fails when |got - want| > tolerance + rtol * |want|; the case passes when no
    element fails and nothing raised.
    """

    kernel: str
    probe: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    backend: str
    max_abs_error: float  # nan when the run raised
    tolerance: float  # the allowed abs error (atol)
    error: str | None = None  # the exception the kernel or the reference raised
    rtol: float = 0.0  # the allowed error relative to |want|
    elements: int = 0  # elements compared, over every result
    mismatches: int = 0  # elements beyond the tolerance
    worst: WorstElement | None = None  # the element with the largest abs error
    placement: Placement = Placement.NONE  # where the mismatches lie
    edge_blocks: tuple[EdgeBlock, ...] = ()  # the edge blocks holding mismatches
    seconds: float = 0.0  # the case's wall time: the kernel, the reference and the comparison
    informative: int = 0  # the reference's elements that are finite and nonzero

    @property
    def coverage(self) -> float:
        """The share of the reference's elements that are finite and nonzero (nan when
        nothing was compared): a case whose reference is all zeros, infinities or NaNs tests
        little of the kernel's arithmetic, whatever its error."""
        return self.informative / self.elements if self.elements else math.nan

    @property
    def passed(self) -> bool:
        return self.error is None and self.mismatches == 0


def describe_failure(result: CheckResult) -> str:
    """What went wrong in a failed case: the mismatch count, the worst element and where the
    mismatches lie, one line each (or the error raised); "" for a passed one."""
    if result.error is not None:
        return result.error
    if result.passed:
        return ""
    lines = [f"{result.mismatches} of {result.elements} elements differ"]
    if result.worst is not None:
        lines.append(f"worst: {result.worst}")
    lines.append(f"where: {_placement_text(result)}")
    return "\n".join(lines)


def _placement_text(result: CheckResult) -> str:
    blocks = ", ".join(
        f"{b}: {b.mismatches}" + (f" in `{b.result}`" if b.result != "result" else "")
        for b in result.edge_blocks
    )
    if result.placement is Placement.EDGE_BLOCKS:
        if len(result.edge_blocks) == 1:
            (block,) = result.edge_blocks
            named = f" of `{block.result}`" if block.result != "result" else ""
            return f"all {result.mismatches} mismatches lie in an edge block: {block}{named}"
        return f"all {result.mismatches} mismatches lie in edge blocks: {blocks}"
    if result.placement is Placement.INTERIOR:
        if not blocks:
            return "the mismatches lie in interior blocks (no edge block differs)"
        return f"the mismatches lie in interior blocks too, not only in edge blocks ({blocks})"
    return "where the mismatches lie is unknown: the results do not follow the plan"


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3g}"


def _tolerance_text(result: CheckResult) -> str:
    if result.rtol and not math.isnan(result.tolerance):
        return f"{_number(result.tolerance)}+{_number(result.rtol)}·|want|"
    return _number(result.tolerance)


def format_results(results: Sequence[CheckResult]) -> str:
    """A table of results, one row per case, then what went wrong in each failed case."""
    header = ("kernel", "probe", "shapes", "dtype", "backend", "max abs error", "tolerance", "ok")
    rows = [
        (
            r.kernel,
            r.probe,
            shapes_text(r.shapes),
            dtype_text(r.dtypes),
            r.backend,
            "raised" if r.error is not None else _number(r.max_abs_error),
            _tolerance_text(r),
            "✓" if r.passed else "✗",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    numeric = {5, 6}

    def line(row: Sequence[str]) -> str:
        cells = [
            cell.rjust(width) if i in numeric else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    lines = [line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)]
    for r in results:
        if not r.passed:
            detail = describe_failure(r).replace("\n", "\n    ")
            lines.append(f"✗ {r.kernel}, {r.probe}, {shapes_text(r.shapes)}:\n    {detail}")
    lines += coverage_warnings(results)
    return "\n".join(lines)


def coverage_warnings(results: Sequence[CheckResult]) -> list[str]:
    """A line for each case that compared elements of which under 1% are finite and nonzero
    in the reference: random data that miss the operands' meaning (lengths past every row,
    a log-sum-exp that overflows every probability) pass whatever the kernel computes."""
    lines = []
    for r in results:
        if r.error is None and r.elements and r.coverage < LOW_COVERAGE:
            lines.append(
                f"! {r.kernel}, {r.probe}, {shapes_text(r.shapes)}: only {r.coverage:.2%} of "
                f"the reference's {r.elements} elements are finite and nonzero, so the case "
                "tests little; draw the operands whose meaning random data miss with "
                "@sk.kernel(test_data=...) or operands=..."
            )
    return lines
