"""The prepared GPU check, as far as a machine without a GPU can run it: its dry run takes the
same code paths on the Mosaic GPU interpreter, and without a device it stops at once."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = ["add", "scale_bias", "softmax", "rmsnorm", "layernorm", "row_sum"]


def _has_cuda() -> bool:
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def run_script(out: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPU_CHECK_OUT": str(out), "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", "bench/gpu_check.sh", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dry_run_checks_every_kernel_and_writes_json_and_markdown(tmp_path: pathlib.Path) -> None:
    proc = run_script(tmp_path, "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "gpu_check-dry-run.json").read_text())
    markdown = (tmp_path / "gpu_check-dry-run.md").read_text()
    assert (tmp_path / "gpu_check-dry-run.log").exists()

    assert data["dry_run"] is True
    assert data["kernels"] == KERNELS
    # Correctness: both the statickernel kernel and its hand-written twin, at every case.
    checked = {row["kernel"] for row in data["correctness"]}
    assert checked == set(KERNELS)
    for row in data["correctness"]:
        assert row["passed"], row
        assert row["statickernel"]["passed"] and row["handwritten"]["passed"], row
    # Speed: three contenders at an aligned and a ragged shape for every kernel.
    assert data["copy"]["gb_per_s"] > 0
    speed = data["speed"]
    assert sorted((r["kernel"], r["case"]) for r in speed) == sorted(
        (k, case) for k in KERNELS for case in ("aligned", "ragged")
    )
    for row in speed:
        assert row["errors"] == {}, row
        assert row["median_us"].keys() == {"statickernel", "handwritten", "xla"}
        assert row["shape"][0] % 64 == (0 if row["case"] == "aligned" else 63)
        # The plan's roofline floor over the measured time: far below 1 on the interpreter.
        assert row["floor_us"] > 0 and row["floor_fraction"] > 0
    assert all("ragged_cost" in r for r in speed if r["case"] == "ragged")
    assert [r["size"] for r in data["matmul"]] == [128, 127]
    for row in data["matmul"]:
        assert row["passed"], row
        assert row["sk_fraction_of_dot"] > 0
        assert row["floor_us"] > 0 and row["floor_fraction"] > 0
    assert "ragged_cost" in data["matmul"][1]
    assert {"copy_fraction", "faster_than_xla", "sk_over_handwritten", "ragged_cost"} <= data[
        "goals"
    ].keys()
    for heading in ("Correctness", "Speed", "Ragged against aligned", "Matmul"):
        assert f"### {heading}" in markdown
    assert markdown.count("| of floor |") == 2  # the speed and matmul tables


@pytest.mark.skipif(_has_cuda(), reason="this machine has a CUDA device")
def test_without_a_device_it_stops_at_once_with_exit_code_2(tmp_path: pathlib.Path) -> None:
    proc = run_script(tmp_path)
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stdout + proc.stderr
    assert not (tmp_path / "gpu_check.json").exists()
