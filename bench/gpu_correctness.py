"""The GPU check's correctness part: each gallery kernel and its hand-written twin against the
jnp reference, and (in a dry run) both cross-lowered for CUDA at every shape the GPU run uses.
A hand-written kernel with no version for a shape (whole rows too wide for its blocks) is
reported as "n/a" there, and judged only where it runs."""

import functools
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

import handwritten
import statickernel as sk
from gallery import Subject
from gpu_settings import GPU, Budget, Case, Settings
from report import Table, describe_error

__all__ = ["check_correctness", "lower_gpu_shapes"]


def max_error(got: Any, want: Any) -> float:
    """Max abs error in float32; equal values (matching infinities, NaNs) count as none."""
    g, w = np.asarray(got, np.float32), np.asarray(want, np.float32)
    if g.shape != w.shape:
        return float("inf")
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(g - w))
    return float(np.max(np.where(np.isnan(diff), np.inf, diff), initial=0.0))


def check_correctness(
    subjects: Sequence[Subject], settings: Settings, budget: Budget
) -> tuple[list[dict], Table]:
    table = Table(
        "Correctness against the jnp reference",
        ["kernel", "case", "shape", "dtype", "sk error", "hand error", "tolerance", "ok"],
        "Tolerance: 1e-5 (float32) or 2e-2 (bfloat16) times the largest reference value (or "
        "times 1, if that is smaller); 'raised': the kernel failed to compile or run; 'n/a': "
        "the hand-written kernel has no version for whole rows that wide.",
    )
    rows: list[dict] = []
    for subject in subjects:
        cases = settings.row_cases if subject.row_wise else settings.tiled_cases
        for case in cases:
            row: dict[str, Any] = {
                "kernel": subject.name,
                "case": case.label,
                "shape": [case.m, case.n],
                "dtype": case.dtype,
            }
            if budget.spent():
                rows.append({**row, "skipped": "time budget"})
                table.add(
                    subject.name,
                    case.label,
                    f"{case.m}x{case.n}",
                    case.dtype,
                    None,
                    None,
                    None,
                    "skipped",
                )
                continue
            print(f"  .. correctness: {subject.name} {case.m}x{case.n} {case.dtype}", flush=True)
            started = time.monotonic()
            args = subject.arrays(case.m, case.n, case.dtype)
            want = jax.jit(subject.reference)(*args)
            result_dtype = subject.result_dtype or case.dtype
            scale = float(np.max(np.abs(np.asarray(want, np.float32)), initial=0.0))
            tolerance = sk.testing.tolerance([case.dtype, result_dtype], scale)
            outcome = {}
            makers = {
                "statickernel": functools.partial(subject.statickernel_jit, settings.backend),
                "handwritten": functools.partial(
                    subject.handwritten_jit,
                    case.m,
                    case.n,
                    case.dtype,
                    interpret=settings.interpret,
                ),
            }
            for who, make in makers.items():
                try:
                    outcome[who] = {"max_abs_error": max_error(make()(*args), want)}
                except handwritten.Unsupported as exc:  # no version for this shape: no verdict
                    outcome[who] = {"max_abs_error": None, "not_applicable": str(exc)}
                    continue
                except Exception as exc:  # reported in the table; the other cases still run
                    outcome[who] = {"max_abs_error": None, "error": describe_error(exc)}
                err = outcome[who]["max_abs_error"]
                outcome[who]["passed"] = err is not None and err <= tolerance
            passed = all(o["passed"] for o in outcome.values() if "passed" in o)
            wall_s = round(time.monotonic() - started, 2)
            rows.append(
                {**row, "tolerance": tolerance, **outcome, "passed": passed, "wall_s": wall_s}
            )
            table.add(
                subject.name,
                case.label,
                f"{case.m}x{case.n}",
                case.dtype,
                _error_cell(outcome["statickernel"]),
                _error_cell(outcome["handwritten"]),
                tolerance,
                "yes" if passed else "NO",
            )
    return rows, table


def _error_cell(outcome: dict[str, Any]) -> Any:
    if outcome.get("not_applicable"):
        return "n/a"
    return "raised" if outcome.get("error") else outcome["max_abs_error"]


def gpu_shapes(subject: Subject) -> list[Case]:
    """Every shape the GPU run uses for a kernel: its correctness cases and speed shapes."""
    cases = list(GPU.row_cases if subject.row_wise else GPU.tiled_cases)
    speed = [
        Case(f"speed, {s.label}", s.m, s.n, s.dtype) for s in GPU.speed if s.times(subject.name)
    ]
    return [*cases, *speed]


def lower_handwritten(subject: Subject, case: Case) -> Any:
    f = subject.handwritten(case.m, case.n, case.dtype, interpret=False)
    sds = subject.structs(case.m, case.n, case.dtype)
    return jax.jit(f).trace(*sds).lower(lowering_platforms=("cuda",))


def lower_gpu_shapes(subjects: Sequence[Subject], budget: Budget) -> tuple[list[dict], Table]:
    """A dry run's rehearsal of the GPU run's compiles: both kernels at every GPU shape,
    cross-lowered for CUDA. Layouts, shared memory and TMA rules are checked here; only PTX
    compilation and the launch are left to the device."""
    table = Table(
        "GPU shapes cross-lowered for CUDA (dry run)",
        ["kernel", "case", "shape", "dtype", "statickernel", "hand-written"],
    )
    rows = []
    for subject in subjects:
        for case in gpu_shapes(subject):
            if budget.spent():
                rows.append({"kernel": subject.name, "case": case.label, "skipped": "time budget"})
                continue
            sds = subject.structs(case.m, case.n, case.dtype)
            lowerings = {
                "statickernel": functools.partial(subject.kernel.lower, *sds),
                "handwritten": functools.partial(lower_handwritten, subject, case),
            }
            outcome = {}
            for who, lower in lowerings.items():
                try:
                    lower()
                    outcome[who] = "ok"
                except handwritten.Unsupported:  # the GPU run reports it as n/a too
                    outcome[who] = "n/a"
                except Exception as exc:
                    outcome[who] = describe_error(exc)
            rows.append(
                {
                    "kernel": subject.name,
                    "case": case.label,
                    "shape": [case.m, case.n],
                    "dtype": case.dtype,
                    **outcome,
                    "passed": all(v in ("ok", "n/a") for v in outcome.values()),
                }
            )
            table.add(
                subject.name,
                case.label,
                f"{case.m}x{case.n}",
                case.dtype,
                outcome["statickernel"],
                outcome["handwritten"],
            )
    return rows, table
