"""The GPU check's grouped-matmul part: `examples/grouped_matmul.py` against statickernel's own
`matmul` at equal FLOPs, `jax.lax.ragged_dot` (XLA) and jax's Pallas kernel `ragged_dot_mgpu`,
side by side, every side with a bfloat16 result.

The rows of x are split into G groups at seeded random cuts (every boundary inside a block,
as a router's counts are), so the blocks that straddle two groups are computed twice: the
grouped kernel's cost over the dense matmul's is what those blocks and the walk of the groups
cost. Each result is checked against XLA's before anything is timed.
"""

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gallery import example_module
from gpu_settings import GroupedShape, Settings
from report import Table, describe_error
from timing import ratio, time_side_by_side

__all__ = ["measure_grouped", "measure_grouped_case"]


def group_sizes(shape: GroupedShape) -> jax.Array:
    """G sizes summing to M, cut at seeded uniform rows (sorted)."""
    rng = np.random.default_rng(shape.m + shape.g)
    cuts = np.sort(rng.integers(0, shape.m + 1, shape.g - 1))
    return jnp.asarray(np.diff(cuts, prepend=0, append=shape.m), jnp.int32)


def _operands(shape: GroupedShape) -> tuple[jax.Array, jax.Array, jax.Array]:
    kx, kw = jax.random.split(jax.random.key(shape.m))
    x = jax.random.normal(kx, (shape.m, shape.k), jnp.float32).astype(jnp.bfloat16)
    w = jax.random.normal(kw, (shape.g, shape.k, shape.n), jnp.float32).astype(jnp.bfloat16)
    return x, w, group_sizes(shape)


def _ragged_dot_mgpu() -> Callable[..., Any]:
    """jax's ragged_dot_mgpu at 128 x 128 blocks, BK = 64, 4 stages, bands of 8 column
    blocks (its module needs absl-py)."""
    from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu as rdm

    def run(x: jax.Array, w: jax.Array, sizes: jax.Array) -> jax.Array:
        return rdm.ragged_dot(
            x,
            w,
            group_sizes=sizes,
            block_m=128,
            block_n=128,
            block_k=64,
            max_concurrent_steps=4,
            grid_block_n=8,
        )

    return jax.jit(run)


def measure_grouped_case(shape: GroupedShape, settings: Settings) -> dict[str, Any]:
    started = time.monotonic()
    row: dict[str, Any] = {"shape": [shape.m, shape.k, shape.n, shape.g], "errors": {}}
    try:
        grouped = example_module("grouped_matmul").grouped_matmul.with_backend(settings.backend)
        matmul = example_module("matmul").matmul.with_backend(settings.backend)
        x, w, sizes = _operands(shape)
        dense = w[0]
        ours = jax.jit(lambda x, w, s: grouped(x, w, s, bf16_out=True))
        xla = jax.jit(lambda x, w, s: jax.lax.ragged_dot(x, w, s).astype(jnp.bfloat16))
        want = np.asarray(xla(x, w, sizes), np.float32)
        got = np.asarray(ours(x, w, sizes), np.float32)
        scale = float(np.max(np.abs(want))) or 1.0
        row["max_rel_error"] = float(np.max(np.abs(got - want))) / scale
        row["agrees_with_xla"] = row["max_rel_error"] <= 1e-2
        dense_matmul = jax.jit(lambda x, b: matmul(x, b, bf16_out=True))
        calls: dict[str, Callable[[], Any]] = {
            "statickernel": lambda: ours(x, w, sizes),
            "matmul": lambda: dense_matmul(x, dense),
            "ragged_dot": lambda: xla(x, w, sizes),
        }
        if not settings.dry_run:
            try:
                mgpu = _ragged_dot_mgpu()
                theirs = np.asarray(mgpu(x, w, sizes), np.float32)
                if np.max(np.abs(theirs - want)) / scale <= 1e-2:
                    calls["ragged_dot_mgpu"] = lambda: mgpu(x, w, sizes)
                else:
                    row["errors"]["ragged_dot_mgpu"] = "disagrees with XLA: not timed"
            except Exception as exc:  # a baseline that does not run is a note, not a failure
                row["errors"]["ragged_dot_mgpu"] = describe_error(exc)
        timings = time_side_by_side(
            calls, warmup=settings.warmup, runs=settings.runs, min_run_s=settings.min_run_s
        )
        flops = 2 * shape.m * shape.k * shape.n
        row["median_us"] = timings["statickernel"].median_us
        row["sk_tflop_per_s"] = flops / timings["statickernel"].median_s / 1e12
        for name in timings:
            if name != "statickernel":
                row[f"{name}_us"] = timings[name].median_us
                row[f"{name}_over_sk"] = ratio(timings[name], timings["statickernel"])
        row["timing"] = {n: t.to_json() for n, t in timings.items()}
    except Exception as exc:
        row["errors"]["statickernel"] = describe_error(exc)
    row["wall_s"] = time.monotonic() - started
    return row


def measure_grouped(settings: Settings, budget: Any) -> tuple[list[dict[str, Any]], Table]:
    """Each grouped-matmul shape of the settings, in order, until the time budget is spent."""
    table = Table(
        "Grouped matmul (bf16 in and out)",
        ["M x K x N, G", "sk us", "sk TFLOP/s", "matmul / sk", "XLA / sk", "mgpu / sk", "agrees"],
        "examples/grouped_matmul.py against statickernel's matmul at equal FLOPs (goal >= "
        "0.9), jax.lax.ragged_dot (XLA) and jax's ragged_dot_mgpu (goals > 1): a ratio above "
        "1 is the grouped kernel faster.",
    )
    rows: list[dict[str, Any]] = []
    for shape in settings.grouped:
        if budget.spent():
            rows.append({"shape": [shape.m, shape.k, shape.n, shape.g], "skipped": True})
            continue
        print(f"  .. grouped matmul: {shape.m}x{shape.k}x{shape.n}, G={shape.g}", flush=True)
        row = measure_grouped_case(shape, settings)
        rows.append(row)
        table.add(
            f"{shape.m}x{shape.k}x{shape.n}, G={shape.g}",
            row.get("median_us"),
            row.get("sk_tflop_per_s"),
            row.get("matmul_over_sk"),
            row.get("ragged_dot_over_sk"),
            row.get("ragged_dot_mgpu_over_sk"),
            row["errors"].get("statickernel") or ("yes" if row.get("agrees_with_xla") else "NO"),
        )
    return rows, table
