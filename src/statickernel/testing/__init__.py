"""Checking kernels against their references, from a test suite or from the shell.

    import statickernel as sk

    def test_softmax():
        sk.testing.check_kernel(softmax)  # raises AssertionError with a table on any mismatch

`check_kernel` runs the kernel and its `reference` on the same random data at probe shapes
that statickernel derives from the tiling (`probe_shapes`): aligned, ragged on each tiled dim,
ragged on the whole dims, and smaller than one block; in float32 and, where the annotations
allow it, bfloat16. The data is seeded and centred well below zero, so that a zero read past an
edge changes a max, a softmax or a norm visibly. Results are compared in float32: an element
fails when |got - want| > atol + rtol * |want|, with atol derived from the dtypes unless
`rtol` or `atol` is given. A failure says how many elements differ, which is worst, and
whether they all lie in edge blocks (the blocks that cross an array's edge).

`bench` times a kernel or any function (median, p10, p90, and a kernel's achieved rates
against its plan's cost); `bench_side_by_side` times several in interleaved rounds.

`detect_races` runs a kernel's generated module in the interpreter with its race detector on.

`parametrize` makes one pytest item per probe case, and `shapes` is a hypothesis strategy of
cases. `statickernel test` runs the same machinery.
"""

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import StaticKernelError
from ..runtime.autodiff import named_constants
from ..runtime.backend import default_backend
from ..runtime.kernel import Kernel
from .bench import BenchResult, BenchTable, Timing, bench, bench_side_by_side
from .compare import EdgeBlock, Placement, WorstElement, compare, tolerance
from .data import Draw, OperandGenerator, check_generators, drawn_operands
from .probes import (
    ProbeCase,
    ProbeShape,
    ShapeSpec,
    probe_cases,
    probe_dtypes,
    probe_shapes,
    require_kernel,
)
from .races import RaceReport, detect_races
from .results import CheckResult, describe_failure, format_results
from .suites import case_id, cases, parametrize

__all__ = [
    "BenchResult",
    "BenchTable",
    "CheckResult",
    "Draw",
    "EdgeBlock",
    "Placement",
    "ProbeCase",
    "ProbeShape",
    "RaceReport",
    "Timing",
    "WorstElement",
    "bench",
    "bench_side_by_side",
    "case_id",
    "cases",
    "check_case",
    "check_kernel",
    "describe_failure",
    "detect_races",
    "format_results",
    "parametrize",
    "probe_cases",
    "probe_dtypes",
    "probe_shapes",
    "run_case",
    "run_checks",
    "tolerance",
]


# --- running one case -------------------------------------------------------------------------


def random_operands(case: ProbeCase, seed: int = 0) -> list[jax.Array]:
    """Seeded data for a case: normal * 2 - 4, rounded for integer dtypes; an index operand's
    values are drawn uniformly from two below the dim it addresses to two past its end, so
    that most rows are inside and some are not. Ragged groups' sizes split the rows at sorted
    uniform cuts (empty groups among them where cuts meet), the last cut at the end or, for
    half the seeds, before it: the rows past the sizes' sum are in no group."""
    rng = np.random.default_rng(seed)
    arrays = []
    bounds = case.index_bounds or (None,) * len(case.shapes)
    unique = case.unique_indices or (False,) * len(case.shapes)
    rows = case.group_rows or (None,) * len(case.shapes)
    for shape, dtype, bound, once, split in zip(
        case.shapes, case.dtypes, bounds, unique, rows, strict=True
    ):
        if split is not None:
            cuts = np.sort(rng.integers(0, split + 1, shape))
            if cuts.size and rng.random() < 0.5:
                cuts[-1] = split
            arrays.append(jnp.asarray(np.diff(cuts, prepend=0)).astype(dtype))
            continue
        if bound is not None:
            low = 0 if jnp.issubdtype(dtype, jnp.unsignedinteger) else -2
            high = min(bound + 2, int(jnp.iinfo(dtype).max))
            count = math.prod(shape)
            if once and count <= high - low:  # a scatter's rows, each written once
                values = rng.permutation(np.arange(low, high))[:count].reshape(shape)
            else:
                values = rng.integers(low, high, shape)
            arrays.append(jnp.asarray(values).astype(dtype))
            continue
        values = rng.standard_normal(shape, dtype=np.float32) * 2 - 4
        if jnp.issubdtype(dtype, jnp.integer):
            values = np.rint(values)
            if jnp.issubdtype(dtype, jnp.unsignedinteger):
                values = np.abs(values)
        arrays.append(jnp.asarray(values).astype(dtype))
    return arrays


def call_reference(
    kernel: Kernel, args: Sequence[Any], reference: Callable[..., Any] | None = None
) -> Any:
    """The reference on `args`, given the kernel's constants that it takes by name (e.g. eps)."""
    reference = reference or kernel.reference
    assert reference is not None
    # The rule vjp="reference" follows too, so that tests and derivatives see one reference.
    return reference(*args, **named_constants(reference, len(args), kernel.consts))


def run_case(
    kernel: Kernel,
    case: ProbeCase,
    *,
    backend: str | None = None,
    seed: int = 0,
    reference: Callable[..., Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    operands: Mapping[str, OperandGenerator] | None = None,
) -> CheckResult:
    """Runs one case; an exception from the kernel or the reference becomes a failed result.

    `rtol` and `atol` replace the tolerance derived from the dtypes: an element fails when
    |got - want| > atol + rtol * |want|; when only one is given, the other is 0. `operands`
    draws the named operands' data with their own generators (`testing.data`), beside and
    before the kernel's own (`test_data=`).
    """
    require_kernel(kernel, "run_case")
    _check_settings(seed, rtol, atol)
    check_generators(kernel.spec, operands or {})
    generators = {**dict(kernel.spec.test_data), **(operands or {})}
    chosen = backend or kernel.backend or default_backend()
    facts: dict[str, Any] = dict(
        kernel=kernel.spec.name,
        probe=case.label,
        shapes=case.shapes,
        dtypes=case.dtypes,
        backend=chosen,
    )
    started = time.perf_counter()
    try:
        arrays = random_operands(case, seed)
        args = drawn_operands(kernel.spec, arrays, generators, seed, kernel.consts)
        got = kernel(*args, backend=chosen)
        want = call_reference(kernel, args, reference)
        plan = kernel.plan(*args, backend=chosen)
        found = compare(got, want, plan, case.dtypes, rtol=rtol, atol=atol)
    except Exception as exc:  # reported in the table rather than stopping the other cases
        return CheckResult(
            **facts,
            max_abs_error=math.nan,
            tolerance=math.nan,
            error=_describe(exc),
            seconds=time.perf_counter() - started,
        )
    return CheckResult(
        **facts,
        seconds=time.perf_counter() - started,
        max_abs_error=found.max_abs_error,
        tolerance=found.atol,
        rtol=found.rtol,
        elements=found.elements,
        mismatches=found.mismatches,
        worst=found.worst,
        placement=found.placement,
        edge_blocks=found.edge_blocks,
        informative=found.informative,
    )


def check_case(
    kernel: Kernel,
    case: ProbeCase,
    *,
    backend: str | None = None,
    seed: int = 0,
    reference: Callable[..., Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    operands: Mapping[str, OperandGenerator] | None = None,
) -> CheckResult:
    """Runs one case, as `run_case`, and raises AssertionError saying what differs (or what
    raised) if it fails; returns the result otherwise. For `parametrize` and `cases`."""
    require_kernel(kernel, "check_case")
    if (reference or kernel.reference) is None:
        raise ValueError(_no_reference(kernel))
    result = run_case(
        kernel,
        case,
        backend=backend,
        seed=seed,
        reference=reference,
        rtol=rtol,
        atol=atol,
        operands=operands,
    )
    if not result.passed:
        raise AssertionError(
            f"kernel `{kernel.spec.name}` ({kernel.spec.location}) differs from its reference "
            f"at {case.describe()}:\n" + format_results([result])
        )
    return result


def _check_settings(seed: Any, rtol: Any, atol: Any) -> None:
    """Raises ValueError for a seed or tolerance that would decide every case by itself: a NaN
    or infinite tolerance passes any result, a negative one fails a correct kernel."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed={seed!r}: the seed must be an int >= 0, e.g. seed=1")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is None:
            continue
        number = isinstance(value, int | float | np.integer | np.floating)
        if isinstance(value, bool) or not number or not math.isfinite(value) or value < 0:
            raise ValueError(
                f"{name}={value!r}: a tolerance must be a finite number >= 0, e.g. {name}=1e-3 "
                "(or None for the one derived from the dtypes)"
            )


def _no_reference(kernel: Kernel) -> str:
    return (
        f"kernel `{kernel.spec.name}` ({kernel.spec.location}) declares no reference; pass "
        "reference=... to @sk.kernel or to check_kernel"
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, StaticKernelError):
        return str(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- checking a kernel ------------------------------------------------------------------------


def run_checks(
    kernel: Kernel,
    shapes: Sequence[ShapeSpec] | None = None,
    dtypes: Sequence[Any] | None = None,
    *,
    backend: str | None = None,
    seed: int = 0,
    reference: Callable[..., Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
    operands: Mapping[str, OperandGenerator] | None = None,
) -> list[CheckResult]:
    """Every case of `kernel` against its reference; never raises for a failing case."""
    require_kernel(kernel, "run_checks")
    if (reference or kernel.reference) is None:
        raise ValueError(_no_reference(kernel))
    results = []
    for case in probe_cases(kernel, shapes, dtypes):
        result = run_case(
            kernel,
            case,
            backend=backend,
            seed=seed,
            reference=reference,
            rtol=rtol,
            atol=atol,
            operands=operands,
        )
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def check_kernel(
    kernel: Kernel,
    shapes: Sequence[ShapeSpec] | None = None,
    dtypes: Sequence[Any] | None = None,
    *,
    backend: str | None = None,
    seed: int = 0,
    reference: Callable[..., Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    operands: Mapping[str, OperandGenerator] | None = None,
) -> list[CheckResult]:
    """Checks `kernel` against its reference; raises AssertionError with a table if any case
    fails, and returns the results otherwise.

    Args:
      shapes: what to check instead of the probe shapes: each entry maps dim names to sizes
        (`{"M": 1000, "N": 777}`) or gives one shape per operand (`[(1000, 777), (777,)]`).
      dtypes: the dtypes to check instead of float32 and bfloat16 (e.g. `["float16"]`).
      backend: "interpret" or "mosaic_gpu"; by default the kernel's.
      seed: the random data's seed.
      reference: a reference to use instead of the kernel's own.
      rtol: the allowed error relative to |want|, replacing the tolerance derived from the
        dtypes: an element fails when |got - want| > atol + rtol * |want|.
      atol: the allowed abs error, likewise; when only one of the two is given, the other is 0.
      operands: a generator per operand whose data the default random data would miss, by
        name: a function of a `Draw` (its `rng`, `shape`, `dtype` and the case's dim
        `sizes`), e.g. `{"lengths": lambda d: d.rng.integers(0, d.sizes["N"] + 1, d.shape)}`.
    """
    require_kernel(kernel, "check_kernel")
    results = run_checks(
        kernel,
        shapes,
        dtypes,
        backend=backend,
        seed=seed,
        reference=reference,
        rtol=rtol,
        atol=atol,
        operands=operands,
    )
    failed = [r for r in results if not r.passed]
    if failed:
        raise AssertionError(
            f"kernel `{kernel.spec.name}` ({kernel.spec.location}) differs from its reference "
            f"in {len(failed)} of {len(results)} case(s):\n" + format_results(results)
        )
    return results
