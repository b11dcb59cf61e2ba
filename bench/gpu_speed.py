"""The GPU check's speed part: the copy bandwidth, each gallery kernel against hand-written
Pallas and XLA at an aligned and a ragged shape, and the matmul against jnp.dot."""

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

__all__ = ["floor_fraction", "measure_copy", "measure_matmul", "measure_speed"]


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
        "grid": list(plan.grid),
        "plan_notes": list(plan.notes),
        "errors": errors,
        "timings": {who: t.to_json() for who, t in timings.items()},
    }


def _ratio(a: Timing | None, b: Timing | None) -> float | None:
    return ratio(a, b) if a is not None and b is not None else None


def floor_fraction(floor_s: float | None, measured: Timing | None) -> float | None:
    """The plan's roofline floor over the measured time: 1 at the floor, less above it."""
    if floor_s is None or measured is None or not measured.median_s:
        return None
    return floor_s / measured.median_s


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
            "of floor",
        ],
        f"sk / hand: time ratio, goal <= {GOAL_VS_HANDWRITTEN}. XLA / sk: speed-up over XLA, "
        f"goal > 1 for {', '.join(BEATS_XLA)}. of copy: sk bandwidth (bytes read + written) "
        f"over the copy bandwidth, goal >= {GOAL_COPY_FRACTION}. of floor: the plan's roofline "
        "floor (plan.cost.floor_seconds) over sk's time; 1 is as fast as the H200's peaks allow.",
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
                speed.add(subject.name, f"{rows_m}x{n}", "skipped", *[None] * 7)
                continue
            print(f"  .. speed: {subject.name} {rows_m}x{n}", flush=True)
            try:
                measured = measure_kernel_speed(subject, rows_m, n, settings, copy["gb_per_s"])
            except Exception as exc:  # e.g. a launch that fails after compiling: keep going
                rows.append({"kernel": subject.name, "case": label, "error": describe_error(exc)})
                speed.add(subject.name, f"{rows_m}x{n}", "raised", *[None] * 7)
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
                row["floor_fraction"],
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


def measure_matmul(settings: Settings, budget: Budget) -> tuple[list[dict], Table]:
    """examples/matmul.py against jnp.dot, side by side, at an aligned and a ragged size.

    Each size is also checked for correctness against jnp.dot in float32 before it is timed.
    """
    from gallery import example_module

    matmul = example_module("matmul").matmul
    table = Table(
        "Matmul (bf16 in, f32 out): statickernel against jnp.dot",
        [
            "size",
            "jnp.dot us",
            "sk us",
            "dot TFLOP/s",
            "sk TFLOP/s",
            "sk / dot throughput",
            "of floor",
            "ok",
        ],
        f"Goal: >= {GOAL_MATMUL_FRACTION:.0%} of jnp.dot's throughput at 4096^3, and the ragged "
        f"size within {GOAL_RAGGED - 1:.0%} of the aligned one. Default constants "
        "(BM=BN=128, BK=64, stages=4). of floor: the plan's roofline floor over sk's time.",
    )
    rows = []
    for size in settings.matmul_sizes:
        if budget.spent():
            rows.append({"size": size, "skipped": "time budget"})
            continue
        print(f"  .. matmul: {size}^3", flush=True)
        ka, kb = jax.random.split(jax.random.key(size))
        a = jax.random.normal(ka, (size, size), jnp.bfloat16)
        b = jax.random.normal(kb, (size, size), jnp.bfloat16)
        dot = jax.jit(functools.partial(jnp.dot, preferred_element_type=jnp.float32))
        row: dict[str, Any] = {"size": size, "dtype": "bfloat16"}
        try:
            got = matmul(a, b, backend=settings.backend)
            want = dot(a, b)
            scale = float(jnp.max(jnp.abs(want))) or 1.0
            row["max_rel_error"] = float(jnp.max(jnp.abs(got - want))) / scale
            row["passed"] = row["max_rel_error"] <= 1e-3
            timings = time_side_by_side(
                {
                    "dot": functools.partial(dot, a, b),
                    "statickernel": functools.partial(matmul, a, b, backend=settings.backend),
                },
                warmup=settings.warmup,
                runs=settings.runs,
                min_run_s=settings.min_run_s,
            )
        except Exception as exc:  # a failure is a finding: record it and go on
            row["error"] = describe_error(exc)
            row["passed"] = False
            rows.append(row)
            table.add(f"{size}^3", None, None, None, None, None, None, "error")
            continue
        flops = 2 * size**3
        dot_s, sk_s = timings["dot"].median_s, timings["statickernel"].median_s
        cost = matmul.plan(a, b, backend=settings.backend).cost
        floor_s = cost.floor_seconds if cost is not None else None
        row.update(
            jnp_dot_us=timings["dot"].median_us,
            statickernel_us=timings["statickernel"].median_us,
            dot_tflop_per_s=flops / dot_s / 1e12,
            sk_tflop_per_s=flops / sk_s / 1e12,
            sk_fraction_of_dot=dot_s / sk_s,
            floor_us=floor_s * 1e6 if floor_s is not None else None,
            floor_fraction=floor_fraction(floor_s, timings["statickernel"]),
            timing={k: t.to_json() for k, t in timings.items()},
        )
        rows.append(row)
        table.add(
            f"{size}^3",
            row["jnp_dot_us"],
            row["statickernel_us"],
            row["dot_tflop_per_s"],
            row["sk_tflop_per_s"],
            row["sk_fraction_of_dot"],
            row["floor_fraction"],
            "yes" if row["passed"] else "NO",
        )
    timed = [r for r in rows if "statickernel_us" in r]
    if len(timed) == 2:
        aligned, ragged = timed
        # Per flop, so that one size smaller does not count as a speedup.
        cost = (ragged["statickernel_us"] / ragged["size"] ** 3) / (
            aligned["statickernel_us"] / aligned["size"] ** 3
        )
        ragged["ragged_cost"] = cost
    return rows, table
