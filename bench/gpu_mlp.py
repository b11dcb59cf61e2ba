"""The GPU check's chained-product part: `examples/mlp.py`, `relu(x @ w1) @ w2` with the hidden
activations kept on chip, against the same two products in jnp, which XLA runs as two cuBLAS
calls with the (M, H) hidden activations written to HBM and read back, side by side."""

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gallery import example_module
from gpu_settings import Budget, MlpShape, Settings
from report import Table, describe_error
from timing import ratio, time_side_by_side

__all__ = ["measure_mlp"]


def measure_mlp_case(shape: MlpShape, settings: Settings) -> dict[str, Any]:
    started = time.monotonic()
    module = example_module("mlp")
    mlp = module.mlp.with_backend(settings.backend)
    keys = jax.random.split(jax.random.key(3), 3)
    dims = ((shape.m, shape.k), (shape.k, shape.h), (shape.h, shape.n))
    scales = (1.0, shape.k**-0.5, shape.h**-0.5)
    x, w1, w2 = (
        (s * jax.random.normal(key, d, jnp.float32)).astype(jnp.bfloat16)
        for key, d, s in zip(keys, dims, scales, strict=True)
    )
    row: dict[str, Any] = {"shape": [shape.m, shape.k, shape.h, shape.n]}
    try:
        ours, xla = jax.jit(mlp), jax.jit(module.mlp_reference)
        got, want = jax.block_until_ready((ours(x, w1, w2), xla(x, w1, w2)))
        row["agrees_with_xla"] = bool(
            np.allclose(np.asarray(got), np.asarray(want), atol=3e-2, rtol=3e-2)
        )
        timings = time_side_by_side(
            {"statickernel": lambda: ours(x, w1, w2), "xla": lambda: xla(x, w1, w2)},
            warmup=settings.warmup,
            runs=settings.runs,
            min_run_s=settings.min_run_s,
        )
        row["median_us"] = timings["statickernel"].median_us
        row["xla_us"] = timings["xla"].median_us
        row["xla_over_sk"] = ratio(timings["xla"], timings["statickernel"])
        row["timing"] = {k: t.to_json() for k, t in timings.items()}
    except Exception as exc:  # a failure is a row of the report, not the end of the check
        row["error"] = describe_error(exc)
    row["wall_s"] = time.monotonic() - started
    return row


def measure_mlp(settings: Settings, budget: Budget) -> tuple[list[dict[str, Any]], Table]:
    """Each MLP shape of the settings, in order, until the time budget is spent."""
    table = Table(
        "Fused MLP, relu(x @ w1) @ w2 (bf16)",
        ["M x K x H x N", "sk us", "XLA us", "XLA / sk", "agrees"],
        "examples/mlp.py against the two products in jnp, jitted: XLA writes the (M, H) "
        "hidden activations to HBM between them. No goal: a figure to size the fusion by.",
    )
    rows: list[dict[str, Any]] = []
    for shape in settings.mlp:
        label = f"{shape.m}x{shape.k}x{shape.h}x{shape.n}"
        if budget.spent():
            rows.append({"shape": [shape.m, shape.k, shape.h, shape.n], "skipped": True})
            table.add(label, None, None, None, "skipped")
            continue
        row = measure_mlp_case(shape, settings)
        rows.append(row)
        table.add(
            label,
            row.get("median_us"),
            row.get("xla_us"),
            row.get("xla_over_sk"),
            row.get("error") or ("yes" if row.get("agrees_with_xla") else "NO"),
        )
    return rows, table
