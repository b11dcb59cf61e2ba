"""The prepared GPU check, as far as a machine without a GPU can run it: its dry run takes the
same code paths on the Mosaic GPU interpreter, and without a device it stops at once."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNELS = ["add", "scale_bias", "softmax", "rmsnorm", "layernorm", "row_sum"]
WIDE = ["softmax", "rmsnorm", "layernorm"]  # timed at a wide row too


def _has_cuda() -> bool:
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def run_script(
    out: pathlib.Path, *args: str, limit_s: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPU_CHECK_OUT": str(out), "PYTHON": sys.executable}
    if limit_s is not None:
        env["GPU_CHECK_LIMIT_S"] = str(limit_s)
    return subprocess.run(
        ["bash", "bench/gpu_check.sh", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        # A hang guard, not a speed test: the suite's other worker shares the CPUs.
        timeout=600,
    )


@pytest.mark.slow
def test_dry_run_checks_every_kernel_and_writes_json_and_markdown(tmp_path: pathlib.Path) -> None:
    # Every part, however loaded the machine: the dry run's time budget (120 s) would skip the
    # parts left when it is spent, and this test checks them all.
    proc = run_script(tmp_path, "--dry-run", "--budget-s", "3600", limit_s=560)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "gpu_check-dry-run.json").read_text())
    markdown = (tmp_path / "gpu_check-dry-run.md").read_text()
    assert (tmp_path / "gpu_check-dry-run.log").exists()

    assert data["dry_run"] is True
    assert data["kernels"] == KERNELS
    # Correctness: the statickernel kernel at every case, and its hand-written twin wherever
    # it has a version for the shape; it has none for whole rows too wide for its blocks.
    checked = {row["kernel"] for row in data["correctness"]}
    assert checked == set(KERNELS)
    for row in data["correctness"]:
        assert row["passed"], row
        assert row["statickernel"]["passed"], row
        assert row["handwritten"].get("passed") or row["handwritten"]["not_applicable"], row
    assert {r["kernel"] for r in data["correctness"] if "not_applicable" in r["handwritten"]} == {
        "softmax",
        "rmsnorm",
        "layernorm",
    }
    # Both kernels cross-lowered for CUDA at the GPU run's shapes, the wide rows among them.
    lowered = data["gpu_shapes_lowered"]
    assert all(r["passed"] for r in lowered)
    widest = next(r for r in lowered if r["kernel"] == "softmax" and r["shape"] == [16384, 8192])
    assert (widest["statickernel"], widest["handwritten"]) == ("ok", "n/a")
    # Speed: three contenders at an aligned and a ragged shape for every kernel, and wide rows
    # (the row form) for the kernels held to beating XLA there, in float32 and bfloat16.
    assert data["copy"]["gb_per_s"] > 0
    speed = data["speed"]
    expected = [(k, [64, 128], "float32") for k in KERNELS]
    expected += [(k, [63, 127], "float32") for k in KERNELS]
    expected += [(k, [64, 1024], "float32") for k in WIDE]
    expected += [("rmsnorm", [64, 1024], "bfloat16")]
    assert [(r["kernel"], r["shape"], r["dtype"]) for r in speed] == expected
    for row in speed:
        assert row["errors"] == {}, row
        wide = row["shape"][1] == 1024
        assert row["not_applicable"].keys() == ({"handwritten"} if wide else set()), row
        contenders = {"statickernel", "xla"} | (set() if wide else {"handwritten"})
        assert row["median_us"].keys() == contenders
        assert (row["sk_over_handwritten"] is None) == wide
        assert row["case"] == ("ragged" if row["shape"][0] % 64 else "aligned")
        # Elementwise add computes on the strided block; the rest keep the WGMMA block.
        narrow = "strided" if row["kernel"] == "add" else "block"
        assert row["form"] == ("rows" if wide else narrow), row
        assert row["agrees_with_xla"] is True, row
        # The plan's roofline floor over the measured time: far below 1 on the interpreter.
        assert row["floor_us"] > 0 and row["floor_fraction"] > 0
    ragged = [r for r in speed if r["case"] == "ragged"]
    assert all(r["ragged_of"] == [64, 128] and "ragged_cost" in r for r in ragged)
    assert [(r["shape"], r["kind"]) for r in data["matmul"]] == [
        ([256, 128, 256], "bf16"),
        ([255, 127, 255], "bf16"),
        ([256, 128, 256], "bf16-out"),
        ([256, 128, 256], "fp8"),
        ([8, 1024, 256], "bf16"),
    ]
    for row in data["matmul"]:
        assert row["passed"], row
        assert row["sk_fraction_of_dot"] > 0 and row["weight_read_tb_per_s"] > 0
    assert "ragged_cost" in data["matmul"][1]
    # The same launch without clusters beside each clustered one (the rehearsal asks for them).
    assert all(row["cluster_gain"] > 0 for row in data["matmul"][:3]), data["matmul"][:3]
    # jax's hopper_matmul_mgpu runs beside the bfloat16 result, where absl-py is installed.
    side = data["matmul"][2]
    assert "mgpu_over_sk" in side or "absl" in side["hopper_matmul_mgpu_skipped"]
    # The grouped matmul beside the dense matmul and jax.lax.ragged_dot (ragged_dot_mgpu only
    # on a GPU), checked against XLA first.
    (grouped,) = data["grouped"]
    assert grouped["shape"] == [300, 128, 256, 4] and grouped["errors"] == {}, grouped
    assert grouped["agrees_with_xla"] is True
    assert grouped["matmul_over_sk"] > 0 and grouped["ragged_dot_over_sk"] > 0
    # Paged decode attention beside XLA (jax's Pallas kernel only on a GPU), and the
    # in-place cache update beside XLA's scatter, each checked against XLA first.
    (paged,) = data["paged"]
    assert paged["errors"] == {} and paged["agrees_with_xla"] is True, paged
    assert paged["copy_fraction"] > 0 and paged["xla_over_sk"] > 0
    (update,) = data["cache_update"]
    assert update["errors"] == {} and update["agrees_with_xla"] is True, update
    assert update["copy_fraction"] > 0 and update["xla_over_sk"] > 0
    # jax.grad through attention beside XLA's (cuDNN only on a GPU), and decoding beside XLA,
    # each checked against XLA first.
    (backward,) = data["attention_backward"]
    assert backward["errors"] == {} and backward["agrees_with_xla"] is True, backward
    assert backward["causal"] is True and backward["xla_over_sk"] > 0
    (decode,) = data["decode"]
    assert decode["errors"] == {} and decode["agrees_with_xla"] is True, decode
    assert decode["copy_fraction"] > 0 and decode["xla_over_sk"] > 0
    goals = data["goals"]
    assert "1x4x2x64x512" in goals["decode_fraction"]["measured"]
    assert "grouped 300x128x256 G=4" in goals["grouped_vs_matmul"]["measured"]
    assert "paged B=2 H=8/2 D=64 100/16" in goals["paged_fraction"]["measured"]
    assert len(goals["cluster_gain"]["measured"]) == 3  # the dry run's clustered matmuls
    assert {
        "copy_fraction",
        "faster_than_xla",
        "sk_over_handwritten",
        "ragged_cost",
        "floor_fraction",
    } <= goals.keys()
    # Judged at every shape measured: the wide ones too, in bfloat16 as well.
    assert "rmsnorm 64x1024 bf16" in goals["faster_than_xla"]["measured"]
    assert "add 64x128 f32" in goals["copy_fraction"]["measured"]
    assert "row_sum 64x128 f32" not in goals["copy_fraction"]["measured"]
    assert len(goals["ragged_cost"]["measured"]) == len(KERNELS)
    for heading in (
        "Correctness",
        "Speed",
        "Ragged against aligned",
        "Matmul",
        "Grouped matmul",
        "Paged decode attention",
        "KV-cache update",
        "Flash attention, jax.grad",
        "Decoding attention, one token",
        "Goals",
    ):
        assert f"### {heading}" in markdown
    assert "| n/a |" in markdown
    assert markdown.count("| of floor |") == 1  # the speed table


@pytest.mark.skipif(_has_cuda(), reason="this machine has a CUDA device")
def test_without_a_device_it_stops_at_once_with_exit_code_2(tmp_path: pathlib.Path) -> None:
    proc = run_script(tmp_path)
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stdout + proc.stderr
    assert not (tmp_path / "gpu_check.json").exists()
