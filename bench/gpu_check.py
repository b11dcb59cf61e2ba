"""The GPU check: the gallery on real hardware, for correctness and for speed.

1. Correctness: every gallery kernel, and its hand-written twin where it has a version for the
   shape, against the jnp reference at aligned, ragged and wide-row shapes, in float32 and
   bfloat16.
2. Speed, as ratios taken in this run, at the shapes the goals are stated at (gpu_settings.py):
   every kernel at 16384x4096 and at the ragged 16383x4095; softmax, rmsnorm and layernorm also
   at 16384x1024 and 16384x8192 (and rmsnorm at 16384x4096 in bfloat16); add at 8192x8192; the
   whole-row kernels at 65536x256, where the hand-written kernels also run. Each kernel against
   the jnp/XLA version and the hand-written Pallas kernel with the same blocks ("n/a" where it
   has none); memory-bound kernels as a fraction of the device-to-device copy bandwidth
   measured here; ragged shapes against aligned ones, per byte. Every timed kernel is also given as a fraction of its plan's
   roofline floor (`plan.cost`), and its result is checked against XLA's.
3. Matmul (gpu_matmul.py): examples/matmul.py against jnp.dot (cuBLAS) at 4096^3, 8192^3, M = 4088
   and 4095^3; with a bfloat16 result also against jax's hopper_matmul_mgpu at the same
   configuration; examples/matmul_fp8.py against jnp.dot of the same fp8 arrays at 4096^3;
   decode steps (M = 16 against 4096^2 and 8192^2 weights, in the blocks the plan narrows to
   64 x 32, one a CTA) with the bandwidth of the weight's read (weight_read_tb_per_s).
4. Attention: examples/attention.py at B=1, H=16, D=128 and S = 4096 (also 4095, causal) and
   8192, against cuDNN's and XLA's jax.nn.dot_product_attention and jax's attention_mgpu;
   examples/mlp.py at 16384x256x1024x256 (and a ragged one) against XLA's two products.
5. Training: jax.grad of rmsnorm, layernorm, softmax and the cross-entropy through their
   backward kernels, against jax.grad of the same loss in jnp (XLA), side by side, at
   16384x4096 (16384x32000 for the loss, and 16384x50257 for the blocked loss beside
   cross_entropy_rows, whose rows are read once and addressed flat); the gradients are
   checked to agree first.
6. Grouped matmul (gpu_grouped.py): examples/grouped_matmul.py at M = 16384, K = N = 4096 in
   8 groups against statickernel's matmul at equal FLOPs, jax.lax.ragged_dot (XLA) and jax's
   ragged_dot_mgpu, all with a bfloat16 result.
7. Paged (gpu_paged.py): examples/paged_attention.py at B = 32 and 4, H = 32 over 8 key heads,
   D = 128, 4096 tokens in pages of 16, against jax's Pallas paged_attention and XLA, as a
   fraction of the copy bandwidth; the in-place KV-cache update against XLA's scatter.
8. Attention training and decoding (gpu_attention_training.py): jax.grad through
   examples/attention.py's attention_lse (its declared backward) at 1x16x4096x128, full and
   causal, against jax.grad of cuDNN's and XLA's jax.nn.dot_product_attention; and
   examples/attention_variants.py's attention_decode of one token of 32 heads over 8 key
   heads against caches of 32768 tokens (B = 1) and 8192 (B = 8), as a fraction of the copy
   bandwidth, against XLA.
A last table sums up each goal: the worst figure, where, and whether it is met.

Each time is the median of at least 10 timed runs after a warm-up; a run batches back-to-back
calls to last about 20 ms and ends with block_until_ready.

    python bench/gpu_check.py              # needs a CUDA device; exits 2 without one
    python bench/gpu_check.py --dry-run    # the same code paths on the interpreter, tiny shapes

Writes gpu_check.json and gpu_check.md (gpu_check-dry-run.* for a dry run) under the
directory in GPU_CHECK_OUT, or the current directory. Exits 1 if a correctness case fails, or
statickernel fails or disagrees with XLA at a speed shape.
"""

import argparse
import dataclasses
import os
import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

from gallery import select
from gpu_attention import measure_attention
from gpu_attention_training import measure_attention_backward, measure_decode
from gpu_correctness import check_correctness, lower_gpu_shapes
from gpu_grad import measure_grad
from gpu_grouped import measure_grouped
from gpu_matmul import measure_matmul, shape_label
from gpu_mlp import measure_mlp
from gpu_paged import measure_cache_update, measure_paged
from gpu_settings import (
    BEATS_XLA,
    COPY_BOUND,
    DRY_RUN,
    GOAL_ATTENTION_CAUSAL,
    GOAL_ATTENTION_GRAD_VS_CUDNN,
    GOAL_ATTENTION_RAGGED,
    GOAL_ATTENTION_VS_CUDNN,
    GOAL_ATTENTION_VS_MGPU,
    GOAL_CLUSTER_GAIN,
    GOAL_COPY_FRACTION,
    GOAL_DECODE_FRACTION,
    GOAL_FP8_FRACTION,
    GOAL_GRAD_BEATS_XLA,
    GOAL_GROUPED_VS_MATMUL,
    GOAL_MATMUL_FRACTION,
    GOAL_MATMUL_RAGGED,
    GOAL_MATMUL_RAGGED_M,
    GOAL_MATMUL_VS_MGPU,
    GOAL_PAGED_FRACTION,
    GOAL_RAGGED,
    GOAL_VS_HANDWRITTEN,
    GPU,
    Budget,
    MatmulShape,
    Settings,
)
from gpu_speed import measure_copy, measure_speed, shape_text
from gpu_tune import measure_tuning
from report import Table, environment, write_json

EXIT_FAILED = 1
EXIT_NO_DEVICE = 2


# --- the device -------------------------------------------------------------------------------


def cuda_devices() -> list[Any]:
    try:
        return list(jax.devices("cuda"))
    except RuntimeError:  # no CUDA plugin, or no device it can use
        return []


def describe_device(settings: Settings) -> dict[str, Any]:
    if settings.dry_run:
        return {"kind": "dry run: the Mosaic GPU interpreter on the CPU", "platform": "cpu"}
    device = cuda_devices()[0]
    return {
        "kind": device.device_kind,
        "platform": device.platform,
        "compute_capability": getattr(device, "compute_capability", None),
        "count": len(cuda_devices()),
    }


# --- goals and output -------------------------------------------------------------------------


def _key(row: dict[str, Any]) -> str:
    return f"{row['kernel']} {shape_text(row['shape'], row['dtype'])}"


def _matmul_key(row: dict[str, Any]) -> str:
    m, k, n = row["shape"]
    return shape_label(MatmulShape(m, k, n, row["kind"]))


def _grouped_key(row: dict[str, Any]) -> str:
    m, k, n, g = row["shape"]
    return f"grouped {m}x{k}x{n} G={g}"


def _paged_key(row: dict[str, Any]) -> str:
    b, h, hkv, d, tokens, page = row["shape"]
    return f"paged B={b} H={h}/{hkv} D={d} {tokens}/{page}"


def _attention_key(row: dict[str, Any]) -> str:
    return "x".join(map(str, row["shape"])) + (" causal" if row["causal"] else "")


def goals(results: dict[str, Any]) -> dict[str, Any]:
    """Each goal with the measured figures it is judged on; None where nothing was measured."""
    speed = [r for r in results.get("speed", []) if "median_us" in r]  # measured rows
    aligned = [r for r in speed if r["case"] == "aligned"]
    ragged = [r for r in speed if r.get("ragged_cost") is not None]
    attention = [r for r in results.get("attention", []) if "median_us" in r]
    matmul = [r for r in results.get("matmul", []) if "statickernel_us" in r]
    grouped = [r for r in results.get("grouped", []) if "median_us" in r]
    paged = [r for r in results.get("paged", []) if "median_us" in r]
    backward = [r for r in results.get("attention_backward", []) if "median_us" in r]
    decode = [r for r in results.get("decode", []) if "median_us" in r]

    def judged(values: dict[str, Any], ok: Callable[[Any], bool]) -> dict[str, Any]:
        measured = {k: v for k, v in values.items() if v is not None}
        return {
            "measured": measured,
            "met": all(ok(v) for v in measured.values()) if measured else None,
        }

    return {
        "copy_fraction_at_least": GOAL_COPY_FRACTION,
        "copy_fraction": judged(
            {_key(r): r["sk_copy_fraction"] for r in aligned if r["kernel"] in COPY_BOUND},
            lambda v: v >= GOAL_COPY_FRACTION,
        ),
        "faster_than_xla": judged(
            {_key(r): r["xla_over_sk"] for r in aligned if r["kernel"] in BEATS_XLA},
            lambda v: v > 1.0,
        ),
        "sk_over_handwritten_at_most": GOAL_VS_HANDWRITTEN,
        "sk_over_handwritten": judged(
            {_key(r): r["sk_over_handwritten"] for r in speed},
            lambda v: v <= GOAL_VS_HANDWRITTEN,
        ),
        "ragged_cost_at_most": GOAL_RAGGED,
        "ragged_cost": judged(
            {_key(r): r["ragged_cost"] for r in ragged}, lambda v: v <= GOAL_RAGGED
        ),
        # No threshold: how far each timed kernel is from its plan's roofline floor.
        "floor_fraction": {
            "measured": {_key(r): r["floor_fraction"] for r in speed if r["floor_fraction"]},
            "met": None,
        },
        "matmul_fraction_at_least": GOAL_MATMUL_FRACTION,
        "matmul_fraction": judged(
            {
                _matmul_key(r): r["sk_fraction_of_dot"]
                for r in matmul
                if r["kind"] != "fp8" and r.get("ragged_cost") is None
            },
            lambda v: v >= GOAL_MATMUL_FRACTION,
        ),
        "matmul_vs_mgpu": judged(
            {_matmul_key(r): r.get("mgpu_over_sk") for r in matmul},
            lambda v: v >= GOAL_MATMUL_VS_MGPU,
        ),
        "cluster_gain": judged(
            {_matmul_key(r): r.get("cluster_gain") for r in matmul},
            lambda v: v >= GOAL_CLUSTER_GAIN,
        ),
        "fp8_fraction": judged(
            {_matmul_key(r): r["sk_fraction_of_dot"] for r in matmul if r["kind"] == "fp8"},
            lambda v: v >= GOAL_FP8_FRACTION,
        ),
        "grad_faster_than_xla": judged(
            {
                _key(r): r["xla_over_sk"]
                for r in results.get("grad", [])
                if r["kernel"] in GOAL_GRAD_BEATS_XLA and "xla_over_sk" in r
            },
            lambda v: v > 1.0,
        ),
        "attention_vs_cudnn": judged(
            {_attention_key(r): r.get("cudnn_over_sk") for r in attention if not r["causal"]},
            lambda v: v >= GOAL_ATTENTION_VS_CUDNN,
        ),
        "attention_vs_mgpu": judged(
            {_attention_key(r): r.get("attention_mgpu_over_sk") for r in attention},
            lambda v: v > GOAL_ATTENTION_VS_MGPU,
        ),
        "attention_ragged": judged(
            {_attention_key(r): r.get("versus") for r in attention if not r["causal"]},
            lambda v: v <= GOAL_ATTENTION_RAGGED,
        ),
        "grouped_vs_matmul": judged(
            {_grouped_key(r): r.get("matmul_over_sk") for r in grouped},
            lambda v: v >= GOAL_GROUPED_VS_MATMUL,
        ),
        "grouped_vs_ragged_dot": judged(
            {_grouped_key(r): r.get("ragged_dot_over_sk") for r in grouped},
            lambda v: v > 1.0,
        ),
        "grouped_vs_mgpu": judged(
            {_grouped_key(r): r.get("ragged_dot_mgpu_over_sk") for r in grouped},
            lambda v: v > 1.0,
        ),
        "paged_fraction": judged(
            {_paged_key(r): r.get("copy_fraction") for r in paged},
            lambda v: v >= GOAL_PAGED_FRACTION,
        ),
        "attention_grad_vs_cudnn": judged(
            {_attention_key(r): r.get("cudnn_over_sk") for r in backward},
            lambda v: v >= GOAL_ATTENTION_GRAD_VS_CUDNN,
        ),
        "decode_fraction": judged(
            {"x".join(map(str, r["shape"])): r.get("copy_fraction") for r in decode},
            lambda v: v >= GOAL_DECODE_FRACTION,
        ),
        "paged_vs_jax": judged(
            {_paged_key(r): r.get("jax_paged_attention_over_sk") for r in paged},
            lambda v: v > 1.0,
        ),
        "attention_causal": judged(
            {_attention_key(r): r.get("versus") for r in attention if r["causal"]},
            lambda v: v <= GOAL_ATTENTION_CAUSAL,
        ),
        "matmul_ragged_m": judged(
            {
                _matmul_key(r): r.get("ragged_cost")
                for r in matmul
                if r["shape"][1:] == [4096, 4096]
            },
            lambda v: v <= GOAL_MATMUL_RAGGED_M,
        ),
        "matmul_ragged_cost": judged(
            {
                _matmul_key(r): r.get("ragged_cost")
                for r in matmul
                if r["shape"][1:] != [4096, 4096]
            },
            lambda v: v <= GOAL_MATMUL_RAGGED,
        ),
    }


# The goals table: (key in goals(), the goal in words, whether the worst figure is the lowest).
_GOAL_ROWS = (
    ("copy_fraction", f"of copy >= {GOAL_COPY_FRACTION} ({', '.join(COPY_BOUND)})", True),
    ("faster_than_xla", f"XLA / sk > 1 ({', '.join(BEATS_XLA)})", True),
    ("ragged_cost", f"ragged cost <= {GOAL_RAGGED}", False),
    ("sk_over_handwritten", f"sk / hand <= {GOAL_VS_HANDWRITTEN} (where it runs)", False),
    ("floor_fraction", "of floor (no threshold)", True),
    ("matmul_fraction", f"matmul sk / dot >= {GOAL_MATMUL_FRACTION} (bf16)", True),
    ("matmul_vs_mgpu", f"matmul mgpu / sk >= {GOAL_MATMUL_VS_MGPU} (bf16 out)", True),
    ("cluster_gain", f"matmul without / with clusters >= {GOAL_CLUSTER_GAIN}", True),
    ("fp8_fraction", f"fp8 matmul sk / dot >= {GOAL_FP8_FRACTION}", True),
    ("matmul_ragged_m", f"matmul M=4088 cost <= {GOAL_MATMUL_RAGGED_M}", False),
    ("matmul_ragged_cost", f"matmul 4095^3 cost <= {GOAL_MATMUL_RAGGED}", False),
    ("grad_faster_than_xla", f"grad XLA / sk > 1 ({', '.join(GOAL_GRAD_BEATS_XLA)})", True),
    ("attention_vs_cudnn", f"attention cuDNN / sk >= {GOAL_ATTENTION_VS_CUDNN}", True),
    ("attention_vs_mgpu", f"attention mgpu / sk > {GOAL_ATTENTION_VS_MGPU}", True),
    ("attention_ragged", f"attention S=4095 / 4096 <= {GOAL_ATTENTION_RAGGED}", False),
    ("attention_causal", f"attention causal / full <= {GOAL_ATTENTION_CAUSAL}", False),
    ("grouped_vs_matmul", f"grouped matmul / sk >= {GOAL_GROUPED_VS_MATMUL}", True),
    ("grouped_vs_ragged_dot", "grouped ragged_dot (XLA) / sk > 1", True),
    ("grouped_vs_mgpu", "grouped ragged_dot_mgpu / sk > 1", True),
    ("paged_fraction", f"paged attention of copy >= {GOAL_PAGED_FRACTION}", True),
    ("paged_vs_jax", "paged attention jax / sk > 1", True),
    (
        "attention_grad_vs_cudnn",
        f"attention grad cuDNN / sk >= {GOAL_ATTENTION_GRAD_VS_CUDNN}",
        True,
    ),
    ("decode_fraction", f"decode of copy >= {GOAL_DECODE_FRACTION}", True),
)


def goals_table(judged: dict[str, Any]) -> Table:
    """One line a goal: how many figures it was judged on, the worst of them, and the verdict."""
    table = Table(
        "Goals",
        ["goal", "figures", "worst", "worst at", "best", "met"],
        "Each goal over every shape it was measured at in this run (the speed and matmul tables "
        "above); met: every figure meets it.",
    )
    for key, words, lowest_is_worst in _GOAL_ROWS:
        measured: dict[str, float] = judged[key]["measured"]
        if not measured:
            table.add(words, 0, None, None, None, "not measured")
            continue
        order = sorted(measured, key=lambda k: measured[k], reverse=not lowest_is_worst)
        met = judged[key]["met"]
        table.add(
            words,
            len(measured),
            measured[order[0]],
            order[0],
            measured[order[-1]],
            "-" if met is None else ("yes" if met else "NO"),
        )
    return table


def markdown(results: dict[str, Any], tables: Sequence[Table]) -> str:
    env, device = results["environment"], results["device"]
    title = "GPU check" + (
        " (dry run on the interpreter: not GPU figures)" if results["dry_run"] else ""
    )
    lines = [
        f"## {title}",
        "",
        f"- date: {env['time_utc']}",
        f"- device: {device['kind']}",
        f"- jax {env['jax']}, jaxlib {env['jaxlib']}, Python {env['python']}",
        f"- copy bandwidth: {results['copy']['gb_per_s']:.0f} GB/s"
        if results.get("copy")
        else "- copy bandwidth: not measured",
        f"- correctness: {results['correctness_summary']}",
        "",
    ]
    for table in tables:
        lines += [table.markdown(), ""]
    return "\n".join(lines)


def output_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("GPU_CHECK_OUT") or ".")


def write_outputs(results: dict[str, Any], tables: Sequence[Table]) -> list[pathlib.Path]:
    stem = "gpu_check-dry-run" if results["dry_run"] else "gpu_check"
    out = output_dir()
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    write_json(json_path, results)
    md_path.write_text(markdown(results, tables))
    return [json_path, md_path]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run the same code paths on the Mosaic GPU interpreter at tiny shapes (no GPU)",
    )
    parser.add_argument("--kernels", help="comma-separated gallery kernels (default: all)")
    parser.add_argument("--budget-s", type=float, help="seconds after which to skip what is left")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = DRY_RUN if args.dry_run else GPU
    if args.budget_s is not None:
        settings = dataclasses.replace(settings, budget_s=args.budget_s)
    if settings.dry_run:
        jax.config.update("jax_platforms", "cpu")
    elif not cuda_devices():
        print(
            "gpu_check: no CUDA device is visible to JAX, so there is nothing to measure.\n"
            "  It needs an NVIDIA Hopper (H100/H200) or Blackwell (B200) GPU and the jax CUDA "
            "plugin.\n"
            "  To check the script itself on this machine: python bench/gpu_check.py --dry-run",
            file=sys.stderr,
        )
        return EXIT_NO_DEVICE
    # The gallery runs at its declared constants; the tuning part keeps its tunings apart.
    os.environ.setdefault("STATICKERNEL_AUTOTUNE", "0")
    os.environ.setdefault("STATICKERNEL_CACHE_DIR", str(output_dir() / "tune-cache"))
    subjects = select(args.kernels)
    budget = Budget(settings.budget_s)
    results: dict[str, Any] = {
        "benchmark": "gpu_check",
        "dry_run": settings.dry_run,
        "environment": environment(),
        "device": describe_device(settings),
        "settings": dataclasses.asdict(settings),
        "kernels": [s.name for s in subjects],
        "correctness_summary": "not run",
    }
    print(f"GPU check on {results['device']['kind']}, jax {results['environment']['jax']}")
    tables: list[Table] = []

    def checkpoint(*new: Table) -> None:
        for table in new:
            print()
            print(table.text(), flush=True)
        tables.extend(new)
        write_outputs(results, tables)

    started = time.monotonic()
    rows, table = check_correctness(subjects, settings, budget)
    results["correctness"] = rows
    checked = [r for r in rows if "skipped" not in r]
    failed = [r for r in checked if not r["passed"]]
    results["correctness_summary"] = (
        f"{len(checked) - len(failed)} of {len(checked)} cases passed"
        + (
            f", {len(rows) - len(checked)} skipped (time budget)"
            if len(checked) < len(rows)
            else ""
        )
    )
    checkpoint(table)

    if settings.dry_run:
        rows, table = lower_gpu_shapes(subjects, budget)
        results["gpu_shapes_lowered"] = rows
        failed += [r for r in rows if not r.get("passed", True)]
        checkpoint(table)

    results["copy"] = measure_copy(settings)
    copy_table = Table(
        "Device-to-device copy",
        ["shape", "us", "GB/s"],
        "jax.jit(jnp.copy) of a float32 array; bytes read + written.",
    )
    copy_table.add(
        "x".join(map(str, settings.copy_shape)),
        results["copy"]["median_us"],
        results["copy"]["gb_per_s"],
    )
    checkpoint(copy_table)

    rows, speed_table, ragged_table = measure_speed(subjects, settings, budget, results["copy"])
    results["speed"] = rows
    # statickernel wrong or failing at a speed shape fails the check; a baseline does not.
    failed += [
        r
        for r in rows
        if r.get("agrees_with_xla") is False or "statickernel" in r.get("errors", {})
    ]
    checkpoint(speed_table, ragged_table)

    rows, matmul_table = measure_matmul(settings, budget)
    results["matmul"] = rows
    failed += [r for r in rows if r.get("passed") is False]
    checkpoint(matmul_table)

    rows, attention_table = measure_attention(settings, budget)
    results["attention"] = rows
    failed += [
        r
        for r in rows
        if r.get("agrees_with_xla") is False or "statickernel" in r.get("errors", {})
    ]
    checkpoint(attention_table)

    rows, mlp_table = measure_mlp(settings, budget)
    results["mlp"] = rows
    failed += [r for r in rows if r.get("agrees_with_xla") is False or "error" in r]
    checkpoint(mlp_table)

    rows, grad_table = measure_grad(settings, budget)
    results["grad"] = rows
    failed += [r for r in rows if r.get("agrees_with_xla") is False or "error" in r]
    checkpoint(grad_table)

    rows, grouped_table = measure_grouped(settings, budget)
    results["grouped"] = rows
    failed += [
        r
        for r in rows
        if r.get("agrees_with_xla") is False or "statickernel" in r.get("errors", {})
    ]
    checkpoint(grouped_table)

    copy_gb_s = results["copy"]["gb_per_s"]
    rows, paged_table = measure_paged(settings, budget, copy_gb_s)
    results["paged"] = rows
    update_rows, update_table = measure_cache_update(settings, budget, copy_gb_s)
    results["cache_update"] = update_rows
    failed += [
        r
        for r in rows + update_rows
        if r.get("agrees_with_xla") is False or "statickernel" in r.get("errors", {})
    ]
    checkpoint(paged_table, update_table)

    rows, backward_table = measure_attention_backward(settings, budget)
    decode_rows, decode_table = measure_decode(settings, budget, copy_gb_s)
    results["attention_backward"] = rows
    results["decode"] = decode_rows
    failed += [
        r
        for r in rows + decode_rows
        if r.get("agrees_with_xla") is False or "statickernel" in r.get("errors", {})
    ]
    checkpoint(backward_table, decode_table)

    rows, tune_table = measure_tuning(settings, budget)
    results["tune"] = rows
    failed += [r for r in rows if "error" in r]
    results["goals"] = goals(results)
    results["wall_s"] = time.monotonic() - started
    checkpoint(tune_table, goals_table(results["goals"]))

    paths = write_outputs(results, tables)
    print(f"\ncorrectness: {results['correctness_summary']}")
    print(f"wrote {', '.join(str(p) for p in paths)} ({results['wall_s']:.0f} s)")
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main())
