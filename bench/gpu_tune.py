"""The GPU check's tuning part: the gallery's matmul tuned on the device (each candidate of
its `sk.tune` constants checked against the reference, then timed), and the chosen constants
timed against the declared defaults, side by side with `sk.testing.bench_side_by_side`.

The tuning goes to a cache of its own under the check's output folder; the rest of the check
runs the declared defaults (`STATICKERNEL_AUTOTUNE=0`, set by gpu_check.py). In a dry run
(the interpreter) the candidates are ranked by the plan, as no device can time them.
"""

import functools
import time
from typing import Any

import jax
import jax.numpy as jnp

import statickernel as sk
from gallery import example_module
from gpu_settings import Budget, MatmulShape, Settings
from report import Table, describe_error

__all__ = ["measure_tuning"]


def measure_tuning_case(shape: MatmulShape, settings: Settings) -> dict[str, Any]:
    started = time.monotonic()
    matmul = example_module("matmul").matmul.with_backend(settings.backend)
    ka, kb = jax.random.split(jax.random.key(7))
    a = jax.random.normal(ka, (shape.m, shape.k), jnp.float32).astype(jnp.bfloat16)
    b = (jax.random.normal(kb, (shape.k, shape.n), jnp.float32) * shape.k**-0.5).astype(
        jnp.bfloat16
    )
    row: dict[str, Any] = {"shape": [shape.m, shape.k, shape.n]}
    try:
        by = "plan" if settings.dry_run else "device"
        result = matmul.tune(a, b, by=by, force=True, reps=settings.runs)
        defaults = {k: matmul.consts[k] for k in result.best}
        row["ranked_by"] = result.ranked_by.value
        row["best"] = dict(result.best)
        row["default"] = defaults
        row["candidates"] = result.to_json()["candidates"]
        table = sk.testing.bench_side_by_side(
            {
                "default": functools.partial(matmul, **defaults),
                "tuned": functools.partial(matmul, **result.best),
            },
            a,
            b,
            warmup=settings.warmup,
            reps=settings.runs,
            min_run_s=settings.min_run_s,
        )
        row["default_us"] = table["default"].median * 1e6
        row["tuned_us"] = table["tuned"].median * 1e6
        row["default_over_tuned"] = table["default"].median / table["tuned"].median
        row["timing"] = table["tuned"].timing.value
    except Exception as exc:  # a failure is a row of the report, not the end of the check
        row["error"] = describe_error(exc)
    row["wall_s"] = time.monotonic() - started
    return row


def measure_tuning(settings: Settings, budget: Budget) -> tuple[list[dict[str, Any]], Table]:
    """Each tuning shape of the settings, in order, until the time budget is spent."""
    table = Table(
        "Tuned against default: examples/matmul.py (bf16 in, f32 out)",
        ["M x K x N", "ranked by", "default", "tuned", "default us", "tuned us", "default / tuned"],
        "kernel.tune on the device (candidates checked, then timed), then the declared defaults "
        "and the tuned constants timed side by side. No goal: what tuning buys over the defaults.",
    )
    rows: list[dict[str, Any]] = []
    for shape in settings.tune:
        label = f"{shape.m}x{shape.k}x{shape.n}"
        if budget.spent():
            rows.append({"shape": [shape.m, shape.k, shape.n], "skipped": True})
            table.add(label, "skipped", None, None, None, None, None)
            continue
        row = measure_tuning_case(shape, settings)
        rows.append(row)
        table.add(
            label,
            row.get("error") or row.get("ranked_by"),
            sk_text(row.get("default")),
            sk_text(row.get("best")),
            row.get("default_us"),
            row.get("tuned_us"),
            row.get("default_over_tuned"),
        )
    return rows, table


def sk_text(constants: dict[str, Any] | None) -> str | None:
    return None if constants is None else ", ".join(f"{k}={v}" for k, v in constants.items())
