"""The GPU check's speed part: the copy bandwidth, each gallery kernel against hand-written
Pallas and XLA at an aligned and a ragged shape, and the jnp.dot baseline for matmul."""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from gallery import Subject
from gpu_settings import (
    BEATS_XLA,
    GOAL_COPY_FRACTION,
    GOAL_MATMUL_FRACTION,
    GOAL_RAGGED,
    GOAL_VS_HANDWRITTEN,
    Budget,
    Settings,
)
from report import Table, describe_error
from timing import Timing, ratio, time_side_by_side

__all__ = ["measure_copy", "measure_matmul_baseline", "measure_speed"]


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
    subject: Subject, m: int, n: int, settings: Settings, copy_gb_s: float
) -> dict[str, Any]:
    dtype = "float32"
    args = subject.arrays(m, n, dtype)
    contenders: dict[str, Callable[[], Any]] = {}
    errors: dict[str, str] = {}
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
            jax.block_until_ready(fn(*args))  # compile outside the timed runs
            contenders[who] = functools.partial(fn, *args)
        except Exception as exc:  # reported with the row; the other contenders still run
            errors[who] = describe_error(exc)
    timings = time_side_by_side(
        contenders, warmup=settings.warmup, runs=settings.runs, min_run_s=settings.min_run_s
    )
    moved = subject.bytes_moved(m, n, dtype)
    us = {who: t.median_us for who, t in timings.items()}
    sk_t, hand_t, xla_t = (timings.get(k) for k in ("statickernel", "handwritten", "xla"))
    gb_s = moved / sk_t.median_s / 1e9 if sk_t else None
    plan = subject.kernel.plan(*args, backend=settings.backend)
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
        "grid": list(plan.grid),
        "plan_notes": list(plan.notes),
        "errors": errors,
        "timings": {who: t.to_json() for who, t in timings.items()},
    }


def _ratio(a: Timing | None, b: Timing | None) -> float | None:
    return ratio(a, b) if a is not None and b is not None else None


def measure_speed(
    subjects: Sequence[Subject], settings: Settings, budget: Budget, copy: dict[str, Any]
) -> tuple[list[dict], Table, Table]:
    speed = Table(
        "Speed (float32): statickernel against hand-written Pallas and XLA",
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
        ],
        f"sk / hand: time ratio, goal <= {GOAL_VS_HANDWRITTEN}. XLA / sk: speed-up over XLA, "
        f"goal > 1 for {', '.join(BEATS_XLA)}. of copy: sk bandwidth (bytes read + written) "
        f"over the copy bandwidth, goal >= {GOAL_COPY_FRACTION}.",
    )
    ragged_table = Table(
        "Ragged against aligned (one row short)",
        ["kernel", "aligned", "ragged", "aligned GB/s", "ragged GB/s", "ragged cost", "hand's"],
        f"ragged cost: statickernel's ragged time per byte over its aligned time per byte, goal "
        f"<= {GOAL_RAGGED}; hand's: the same for the hand-written kernel.",
    )
    rows: list[dict] = []
    for subject in subjects:
        m, n = settings.row_speed if subject.row_wise else settings.tiled_speed
        pair: dict[str, dict] = {}
        for label, rows_m in (("aligned", m), ("ragged", m - 1)):
            if budget.spent():
                rows.append({"kernel": subject.name, "case": label, "skipped": "time budget"})
                speed.add(subject.name, f"{rows_m}x{n}", "skipped", *[None] * 6)
                continue
            print(f"  .. speed: {subject.name} {rows_m}x{n}", flush=True)
            try:
                measured = measure_kernel_speed(subject, rows_m, n, settings, copy["gb_per_s"])
            except Exception as exc:  # e.g. a launch that fails after compiling: keep going
                rows.append({"kernel": subject.name, "case": label, "error": describe_error(exc)})
                speed.add(subject.name, f"{rows_m}x{n}", "raised", *[None] * 6)
                continue
            row = {"case": label, **measured}
            rows.append(row)
            pair[label] = row
            us = row["median_us"]
            speed.add(
                subject.name,
                f"{rows_m}x{n}",
                us.get("statickernel"),
                us.get("handwritten"),
                us.get("xla"),
                row["sk_over_handwritten"],
                row["xla_over_sk"],
                row["sk_gb_per_s"],
                row["sk_copy_fraction"],
            )
        if len(pair) == 2 and pair["aligned"]["sk_gb_per_s"] and pair["ragged"]["sk_gb_per_s"]:
            cost = pair["aligned"]["sk_gb_per_s"] / pair["ragged"]["sk_gb_per_s"]
            pair["ragged"]["ragged_cost"] = cost
            hand = [pair[k]["handwritten_gb_per_s"] for k in ("aligned", "ragged")]
            hand_cost = hand[0] / hand[1] if all(hand) else None
            pair["ragged"]["handwritten_ragged_cost"] = hand_cost
            ragged_table.add(
                subject.name,
                "x".join(map(str, pair["aligned"]["shape"])),
                "x".join(map(str, pair["ragged"]["shape"])),
                pair["aligned"]["sk_gb_per_s"],
                pair["ragged"]["sk_gb_per_s"],
                cost,
                hand_cost,
            )
    return rows, speed, ragged_table


def measure_matmul_baseline(settings: Settings, budget: Budget) -> tuple[list[dict], Table]:
    table = Table(
        "Matmul (bf16): the jnp.dot baseline",
        ["size", "jnp.dot us", "TFLOP/s", "statickernel"],
        f"statickernel has no matmul yet (it waits on the loop-axis feature). When it has, the "
        f"goal is >= {GOAL_MATMUL_FRACTION:.0%} of jnp.dot at 4096^3, and 4095^3 within "
        f"{GOAL_RAGGED - 1:.0%} of 4096^3.",
    )
    rows = []
    for size in settings.matmul_sizes:
        if budget.spent():
            rows.append({"size": size, "skipped": "time budget"})
            continue
        print(f"  .. matmul baseline: {size}^3", flush=True)
        a = jnp.ones((size, size), jnp.bfloat16)
        b = jnp.ones((size, size), jnp.bfloat16)
        dot = jax.jit(jnp.dot)
        timing = time_side_by_side(
            {"dot": functools.partial(dot, a, b)},
            warmup=settings.warmup,
            runs=settings.runs,
            min_run_s=settings.min_run_s,
        )["dot"]
        tflops = 2 * size**3 / timing.median_s / 1e12
        rows.append(
            {
                "size": size,
                "dtype": "bfloat16",
                "jnp_dot_us": timing.median_us,
                "tflop_per_s": tflops,
                "statickernel": "pending: no matmul yet (loop-axis feature)",
                "timing": timing.to_json(),
            }
        )
        table.add(f"{size}^3", timing.median_us, tflops, "pending")
    return rows, table
