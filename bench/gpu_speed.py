"""The GPU check's speed part: the copy bandwidth, each gallery kernel against hand-written
Pallas and XLA at the shapes of the settings (aligned, ragged, the widths models use), and the
matmul's own module is gpu_matmul."""

import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

import handwritten
import statickernel as sk
from gallery import Subject
from gpu_settings import (
    BEATS_XLA,
    COPY_BOUND,
    GOAL_COPY_FRACTION,
    GOAL_RAGGED,
    GOAL_VS_HANDWRITTEN,
    Budget,
    Settings,
)
from report import Table, describe_error
from timing import Timing, ratio, time_side_by_side

__all__ = [
    "NOT_APPLICABLE",
    "floor_fraction",
    "measure_copy",
    "measure_speed",
    "ragged_against_aligned",
    "shape_text",
]

NOT_APPLICABLE = "n/a"  # a contender with no version for a shape: reported, never a failure
DTYPE_NAMES = {"float32": "f32", "bfloat16": "bf16"}


def measure_copy(settings: Settings) -> dict[str, Any]:
    """Device-to-device copy bandwidth: the ceiling for memory-bound kernels."""
    m, n = settings.copy_shape
    x = jnp.ones((m, n), jnp.float32)
    copy = jax.jit(jnp.copy)
    timing = time_side_by_side(
        {"copy": lambda: copy(x)},
        warmup=settings.warmup,
        runs=settings.runs,
        min_run_s=settings.min_run_s,
    )["copy"]
    moved = 2 * x.size * x.dtype.itemsize  # read once, written once
    return {
        "shape": [m, n],
        "dtype": "float32",
        "bytes": moved,
        "median_us": timing.median_us,
        "gb_per_s": moved / timing.median_s / 1e9,
        "timing": timing.to_json(),
    }


def measure_kernel_speed(
    subject: Subject, m: int, n: int, dtype: str, settings: Settings, copy_gb_s: float
) -> dict[str, Any]:
    """statickernel, the hand-written kernel and XLA at one shape, side by side; statickernel's
    result is also checked against XLA's, so that no figure times a wrong kernel."""
    started = time.monotonic()
    args = subject.random_arrays(m, n, dtype)
    contenders: dict[str, Callable[[], Any]] = {}
    errors: dict[str, str] = {}
    not_applicable: dict[str, str] = {}
    outputs: dict[str, Any] = {}
    makers: dict[str, Callable[[], Callable[..., Any]]] = {
        "statickernel": functools.partial(subject.statickernel_jit, settings.backend),
        "handwritten": functools.partial(
            subject.handwritten_jit, m, n, dtype, interpret=settings.interpret
        ),
        "xla": functools.partial(jax.jit, subject.reference),
    }
    for who, make in makers.items():
        try:
            fn = make()
            out = jax.block_until_ready(fn(*args))  # compile outside the timed runs
            contenders[who] = functools.partial(fn, *args)
            if who != "handwritten":
                outputs[who] = out
        except handwritten.Unsupported as exc:  # no version at this shape: "n/a", no failure
            not_applicable[who] = str(exc)
        except Exception as exc:  # reported with the row; the other contenders still run
            errors[who] = describe_error(exc)
    agreement = _agreement(outputs, dtype, subject.result_dtype or dtype)
    outputs.clear()
    timings = time_side_by_side(
        contenders, warmup=settings.warmup, runs=settings.runs, min_run_s=settings.min_run_s
    )
    moved = subject.bytes_moved(m, n, dtype)
    us = {who: t.median_us for who, t in timings.items()}
    sk_t, hand_t, xla_t = (timings.get(k) for k in ("statickernel", "handwritten", "xla"))
    gb_s = moved / sk_t.median_s / 1e9 if sk_t else None
    plan = subject.kernel.plan(*args, backend=settings.backend)
    floor_s = plan.cost.floor_seconds if plan.cost is not None else None
    return {
        "kernel": subject.name,
        "shape": [m, n],
        "dtype": dtype,
        "bytes": moved,
        "median_us": us,
        "sk_over_handwritten": _ratio(sk_t, hand_t),
        "xla_over_sk": _ratio(xla_t, sk_t),
        "sk_gb_per_s": gb_s,
        "handwritten_gb_per_s": moved / hand_t.median_s / 1e9 if hand_t else None,
        "xla_gb_per_s": moved / xla_t.median_s / 1e9 if xla_t else None,
        "sk_copy_fraction": gb_s / copy_gb_s if gb_s else None,
        "floor_us": floor_s * 1e6 if floor_s is not None else None,
        "floor_fraction": floor_fraction(floor_s, sk_t),
        "hbm_bytes": plan.cost.hbm_bytes if plan.cost is not None else None,
        **agreement,
        "grid": list(plan.grid),
        "form": plan.form.value,
        "schedule": str(plan.schedule) if plan.schedule is not None else None,
        "plan_notes": list(plan.notes),
        "errors": errors,
        "not_applicable": not_applicable,
        "timings": {who: t.to_json() for who, t in timings.items()},
        "wall_s": round(time.monotonic() - started, 2),
    }


@jax.jit
def _max_error(got: jax.Array, want: jax.Array) -> tuple[jax.Array, jax.Array]:
    """As gpu_correctness.max_error, on the device: (max abs error, largest |want|)."""
    g, w = got.astype(jnp.float32), want.astype(jnp.float32)
    same = (g == w) | (jnp.isnan(g) & jnp.isnan(w))
    diff = jnp.where(same, 0.0, jnp.abs(g - w))
    diff = jnp.where(jnp.isnan(diff), jnp.inf, diff)
    return jnp.max(diff, initial=0.0), jnp.max(jnp.abs(w), initial=0.0)


def _agreement(outputs: dict[str, Any], dtype: str, result_dtype: str) -> dict[str, Any]:
    """statickernel's result against XLA's, with the correctness part's tolerance."""
    if "statickernel" not in outputs or "xla" not in outputs:
        return {"max_abs_error_vs_xla": None, "tolerance": None, "agrees_with_xla": None}
    got, want = outputs["statickernel"], outputs["xla"]
    if got.shape != want.shape:
        return {"max_abs_error_vs_xla": math.inf, "tolerance": None, "agrees_with_xla": False}
    error, scale = (float(v) for v in _max_error(got, want))
    tolerance = sk.testing.tolerance([dtype, result_dtype], scale)
    return {
        "max_abs_error_vs_xla": error,
        "tolerance": tolerance,
        "agrees_with_xla": error <= tolerance,
    }


def _ratio(a: Timing | None, b: Timing | None) -> float | None:
    return ratio(a, b) if a is not None and b is not None else None


def floor_fraction(floor_s: float | None, measured: Timing | None) -> float | None:
    """The plan's roofline floor over the measured time: 1 at the floor, less above it."""
    if floor_s is None or measured is None or not measured.median_s:
        return None
    return floor_s / measured.median_s


def shape_text(shape: Sequence[int], dtype: str) -> str:
    """A shape for a table cell: 16384x4096 f32."""
    return f"{'x'.join(map(str, shape))} {DTYPE_NAMES.get(dtype, dtype)}"


def _cell(row: dict[str, Any], who: str, value: Any) -> Any:
    """A contender's figure, or why there is none: "n/a" (no version at this shape), "raised"."""
    if who in row["not_applicable"]:
        return NOT_APPLICABLE
    if who in row["errors"]:
        return "raised"
    return value


def measure_speed(
    subjects: Sequence[Subject], settings: Settings, budget: Budget, copy: dict[str, Any]
) -> tuple[list[dict], Table, Table]:
    speed = Table(
        "Speed: statickernel against hand-written Pallas and XLA",
        [
            "kernel",
            "shape",
            "sk us",
            "hand us",
            "XLA us",
            "sk / hand",
            "XLA / sk",
            "sk GB/s",
            "of copy",
            "of floor",
            "ok",
        ],
        f"sk / hand: time ratio, goal <= {GOAL_VS_HANDWRITTEN}; n/a: the hand-written kernel "
        "has no version for whole rows that wide (its 64-row blocks exceed shared memory). "
        f"XLA / sk: speed-up over XLA, goal > 1 for {', '.join(BEATS_XLA)}. of copy: sk "
        f"bandwidth (bytes read + written) over the copy bandwidth, goal >= {GOAL_COPY_FRACTION} "
        f"for {', '.join(COPY_BOUND)}. of floor: the plan's roofline floor "
        "(plan.cost.floor_seconds) over sk's time; 1 is as fast as the H200's peaks allow. ok: "
        "sk's result matches XLA's within the correctness tolerance.",
    )
    rows: list[dict] = []
    for shape in settings.speed:
        m, n, dtype = shape.m, shape.n, shape.dtype
        for subject in subjects:
            if not shape.times(subject.name):
                continue
            where = {"kernel": subject.name, "case": shape.label, "shape": [m, n], "dtype": dtype}
            if budget.spent():
                rows.append({**where, "skipped": "time budget"})
                speed.add(subject.name, shape_text((m, n), dtype), "skipped", *[None] * 8)
                continue
            print(f"  .. speed: {subject.name} {shape_text((m, n), dtype)}", flush=True)
            try:
                measured = measure_kernel_speed(subject, m, n, dtype, settings, copy["gb_per_s"])
            except Exception as exc:  # e.g. a launch that fails after compiling: keep going
                rows.append({**where, "error": describe_error(exc)})
                speed.add(subject.name, shape_text((m, n), dtype), "raised", *[None] * 8)
                continue
            row = {"case": shape.label, **measured}
            if shape.ragged_of:
                row["ragged_of"] = list(shape.ragged_of)
            rows.append(row)
            us = row["median_us"]
            agrees = row["agrees_with_xla"]
            speed.add(
                subject.name,
                shape_text((m, n), dtype),
                _cell(row, "statickernel", us.get("statickernel")),
                _cell(row, "handwritten", us.get("handwritten")),
                _cell(row, "xla", us.get("xla")),
                _cell(row, "handwritten", row["sk_over_handwritten"]),
                row["xla_over_sk"],
                row["sk_gb_per_s"],
                row["sk_copy_fraction"],
                row["floor_fraction"],
                None if agrees is None else ("yes" if agrees else "NO"),
            )
    return rows, speed, ragged_against_aligned(rows)


def ragged_against_aligned(rows: Sequence[dict]) -> Table:
    """Each ragged row's time per byte over its aligned shape's; written into the ragged row."""
    table = Table(
        "Ragged against aligned (one row and one column short)",
        ["kernel", "aligned", "ragged", "aligned GB/s", "ragged GB/s", "ragged cost", "hand's"],
        f"ragged cost: statickernel's ragged time per byte over its aligned time per byte, goal "
        f"<= {GOAL_RAGGED}; hand's: the same for the hand-written kernel (n/a where it has no "
        "version for the width).",
    )
    measured = [r for r in rows if "median_us" in r]
    for ragged in measured:
        if "ragged_of" not in ragged:
            continue
        aligned = next(
            (
                r
                for r in measured
                if r["kernel"] == ragged["kernel"]
                and r["dtype"] == ragged["dtype"]
                and r["shape"] == ragged["ragged_of"]
                and "ragged_of" not in r
            ),
            None,
        )
        if aligned is None or not (aligned["sk_gb_per_s"] and ragged["sk_gb_per_s"]):
            continue
        cost = aligned["sk_gb_per_s"] / ragged["sk_gb_per_s"]
        ragged["ragged_cost"] = cost
        hand = [r["handwritten_gb_per_s"] for r in (aligned, ragged)]
        hand_cost = hand[0] / hand[1] if all(hand) else None
        ragged["handwritten_ragged_cost"] = hand_cost
        table.add(
            ragged["kernel"],
            shape_text(aligned["shape"], aligned["dtype"]),
            shape_text(ragged["shape"], ragged["dtype"]),
            aligned["sk_gb_per_s"],
            ragged["sk_gb_per_s"],
            cost,
            _cell(ragged, "handwritten", hand_cost),
        )
    return table
