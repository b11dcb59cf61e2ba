"""The GPU check's matmul part: the gallery's warp-specialized matmuls against `jnp.dot`
(cuBLAS) and against jax's own `hopper_matmul_mgpu`, side by side in one run.

- bfloat16 in, float32 out (`examples/matmul.py`) against `jnp.dot(..., preferred_element_type=
  float32)` at aligned sizes, M = 4088 (no host padding) and a ragged 4095^3;
- bfloat16 out (`bf16_out=True`) against `hopper_matmul_mgpu` with the same configuration
  (128 x 128 a consumer, two consumers along N, BK = 64, 4 stages), where its tiles divide the
  shape; it needs `absl-py` (jax's module imports jax's test utilities);
- fp8 (`examples/matmul_fp8.py`, e4m3fn, unit scales) against `jnp.dot` of the same fp8
  arrays with a float32 result.

On a Blackwell GPU (B200) the same kernels plan for `sm_100a` (tcgen05 into tensor memory) and
the bfloat16-out baseline is jax's `blackwell_matmul_mgpu` (128 x 128 x 128 tiles, 2 stages,
one CTA an MMA), the configuration closest to statickernel's single-CTA form.

Each case is checked against its `jnp.dot` before it is timed. A ragged row's cost is its time
per flop over that of the aligned row it names.
"""

import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.pallas import mosaic_gpu as plgpu

from gallery import example_module
from gpu_settings import Budget, MatmulShape, Settings
from report import Table, describe_error
from statickernel._targets import live_target
from timing import ratio, time_side_by_side

__all__ = ["hopper_matmul_config", "measure_matmul", "shape_label"]


def shape_label(shape: MatmulShape) -> str:
    dims = f"{shape.m}x{shape.k}x{shape.n}"
    return dims + {"bf16": "", "bf16-out": " bf16 out", "fp8": " fp8"}[shape.kind]


def hopper_matmul_config() -> Any:
    """The `TuningConfig` of jax's hopper_matmul_mgpu that statickernel's matmul chooses at
    4096^3: 128 x 128 a consumer, two consumers along N (a CTA tile of 128 x 256), BK = 64,
    4 stages, a snake order in bands of 8. Importing jax's module needs absl-py."""
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hmm

    return hmm.TuningConfig(
        tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=4, grid_tile_width=8
    )


def _blackwell_matmul() -> Any:
    """jax's blackwell_matmul_mgpu at 128 x 128 x 128 tiles, 2 stages, not collective."""
    from jax.experimental.pallas.ops.gpu import blackwell_matmul_mgpu as bmm

    config = bmm.TuningConfig(
        tile_m=128, tile_n=128, tile_k=128, max_concurrent_steps=2, collective=False
    )
    return jax.jit(lambda a, b: bmm.matmul_kernel(a, b, config))


def _mgpu_baseline(settings: Settings) -> tuple[str, Any]:
    """jax's own matmul for the attached GPU: Blackwell's on a B200, else Hopper's."""
    target = live_target()
    if target is not None and not target.has_wgmma and not settings.interpret:
        return "blackwell_matmul_mgpu", _blackwell_matmul()
    return "hopper_matmul_mgpu", _hopper_matmul(settings)


def _hopper_matmul(settings: Settings) -> Any:
    """jax's hopper_matmul_mgpu at the configuration statickernel's matmul chooses."""
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hmm

    config = hopper_matmul_config()
    if settings.interpret:  # the interpreter has no SMs to count
        hmm.get_num_sms = lambda: 4

    def run(a: jax.Array, b: jax.Array) -> jax.Array:
        interpret = (
            plgpu.force_gpu_interpret_mode() if settings.interpret else contextlib.nullcontext()
        )
        with interpret:
            return hmm.matmul(a, b, None, config)

    return jax.jit(run)


def measure_matmul_case(shape: MatmulShape, settings: Settings) -> dict[str, Any]:
    started = time.monotonic()
    row: dict[str, Any] = {"shape": [shape.m, shape.k, shape.n], "kind": shape.kind}
    ka, kb = jax.random.split(jax.random.key(shape.m + shape.n))
    f32 = jnp.float32
    try:
        if shape.kind == "fp8":
            kernel = example_module("matmul_fp8").matmul_fp8.with_backend(settings.backend)
            fp8 = jnp.float8_e4m3fn
            a = jax.random.normal(ka, (shape.m, shape.k), f32).astype(fp8)
            b_t = jax.random.normal(kb, (shape.n, shape.k), f32).astype(fp8)
            one = jnp.float32(1.0)
            ours = jax.jit(lambda: kernel(a, b_t, one, one))
            dot = jax.jit(lambda: jnp.dot(a, b_t.T, preferred_element_type=f32))
            sides: dict[str, Callable[[], Any]] = {"statickernel": ours, "dot": dot}
        else:
            matmul = example_module("matmul").matmul.with_backend(settings.backend)
            a = jax.random.normal(ka, (shape.m, shape.k), jnp.bfloat16)
            b = jax.random.normal(kb, (shape.k, shape.n), jnp.bfloat16)
            bf16_out = shape.kind == "bf16-out"
            out = jnp.bfloat16 if bf16_out else f32
            # The rehearsal's shapes are too small for the plan to take clusters: it asks.
            cluster = True if settings.interpret else None
            ours = jax.jit(lambda: matmul(a, b, bf16_out=bf16_out, cluster=cluster))
            dot = jax.jit(lambda: jnp.dot(a, b, preferred_element_type=f32).astype(out))
            sides = {"statickernel": ours, "dot": dot}
            ws = matmul.plan(a, b, bf16_out=bf16_out, cluster=cluster).warp_specialized
            if ws is not None and ws.cluster is not None:  # the same launch without one
                sides["no cluster"] = jax.jit(
                    lambda: matmul(a, b, bf16_out=bf16_out, cluster=False)
                )
            if bf16_out:
                try:
                    name, baseline = _mgpu_baseline(settings)
                    sides["mgpu"] = functools.partial(baseline, a, b)
                    row["mgpu_baseline"] = name
                except ImportError as exc:  # absl-py missing
                    row["hopper_matmul_mgpu_skipped"] = f"cannot import it: {exc}"
        got = {k: jax.block_until_ready(f()).astype(f32) for k, f in sides.items()}
        scale = float(jnp.max(jnp.abs(got["dot"]))) or 1.0
        errors = {k: float(jnp.max(jnp.abs(v - got["dot"]))) / scale for k, v in got.items()}
        row["max_rel_error"] = errors["statickernel"]
        tolerance = 1e-2 if shape.kind == "bf16-out" else 1e-3
        row["passed"] = errors["statickernel"] <= tolerance
        timings = time_side_by_side(
            sides, warmup=settings.warmup, runs=settings.runs, min_run_s=settings.min_run_s
        )
        flops = 2 * shape.m * shape.k * shape.n
        row["statickernel_us"] = timings["statickernel"].median_us
        row["jnp_dot_us"] = timings["dot"].median_us
        row["sk_tflop_per_s"] = flops / timings["statickernel"].median_s / 1e12
        row["dot_tflop_per_s"] = flops / timings["dot"].median_s / 1e12
        row["sk_fraction_of_dot"] = ratio(timings["dot"], timings["statickernel"])
        # A skinny product's cost is its weight's read: the HBM bandwidth that read reaches.
        weight_bytes = shape.k * shape.n * (1 if shape.kind == "fp8" else 2)
        row["weight_read_tb_per_s"] = weight_bytes / timings["statickernel"].median_s / 1e12
        if "no cluster" in timings:  # the clusters' gain: > 1 where they pay
            row["no_cluster_us"] = timings["no cluster"].median_us
            row["cluster_gain"] = ratio(timings["no cluster"], timings["statickernel"])
        if "mgpu" in timings:
            row["mgpu_us"] = timings["mgpu"].median_us
            row["mgpu_over_sk"] = ratio(timings["mgpu"], timings["statickernel"])
        row["timing"] = {k: t.to_json() for k, t in timings.items()}
    except Exception as exc:  # a failure is a finding: record it and go on
        row["error"] = describe_error(exc)
        row["passed"] = False
    row["wall_s"] = time.monotonic() - started
    return row


def measure_matmul(settings: Settings, budget: Budget) -> tuple[list[dict[str, Any]], Table]:
    """Each matmul shape of the settings, in order, until the time budget is spent."""
    table = Table(
        "Matmul: statickernel against jnp.dot (cuBLAS) and jax's hopper_matmul_mgpu",
        [
            "M x K x N",
            "sk us",
            "dot us",
            "sk TFLOP/s",
            "sk / dot",
            "mgpu / sk",
            "cluster",
            "ragged",
            "ok",
        ],
        "sk / dot: jnp.dot's time over statickernel's (goal >= 0.9 for bf16 at 4096^3 and "
        "8192^3, >= 0.8 for fp8). mgpu / sk: hopper_matmul_mgpu's time over statickernel's, "
        "both with a bfloat16 result (goal >= 1). cluster: the time without clusters over "
        "the time with them (expected 1.05-1.15 at 8192^3). ragged: time per flop over the "
        "aligned "
        "size's (goal <= 1.05 at M = 4088, <= 1.10 at 4095^3).",
    )
    rows: list[dict[str, Any]] = []
    by_shape: dict[tuple[int, int, int, str], dict[str, Any]] = {}
    for shape in settings.matmul:
        label = shape_label(shape)
        if budget.spent():
            rows.append({"shape": [shape.m, shape.k, shape.n], "kind": shape.kind, "skipped": True})
            table.add(label, None, None, None, None, None, None, None, "skipped")
            continue
        print(f"  .. matmul: {label}", flush=True)
        row = measure_matmul_case(shape, settings)
        by_shape[(shape.m, shape.k, shape.n, shape.kind)] = row
        if shape.versus is not None:
            base = by_shape.get((*shape.versus, shape.kind))
            if base is not None and "statickernel_us" in base and "statickernel_us" in row:
                per_flop = row["statickernel_us"] / (shape.m * shape.k * shape.n)
                m, k, n = shape.versus
                row["ragged_cost"] = per_flop / (base["statickernel_us"] / (m * k * n))
        rows.append(row)
        table.add(
            label,
            row.get("statickernel_us"),
            row.get("jnp_dot_us"),
            row.get("sk_tflop_per_s"),
            row.get("sk_fraction_of_dot"),
            row.get("mgpu_over_sk"),
            row.get("cluster_gain"),
            row.get("ragged_cost"),
            "error" if "error" in row else ("yes" if row.get("passed") else "NO"),
        )
    return rows, table
