"""The gallery's products generated for Blackwell (sm_100a) compiled through ptxas without a
device: every row of bench/gpu_compile_blackwell.py compiles without spills, within its
register budget (tests/aot/compile-budgets-sm_100a.json), with tcgen05's instructions and
none of WGMMA's, beside jax's own `blackwell_matmul_mgpu`.

The rows compile in one fresh process (ptxas keeps the architecture of a process' first
compile), as `make gpu-compile` runs them; these tests skip without the toolchain.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUDGETS = REPO / "tests" / "aot" / "compile-budgets-sm_100a.json"
JAX_BLACKWELL_MATMUL = "blackwell_matmul_mgpu"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


pytestmark = pytest.mark.skipif(
    not any(_installed(m) for m in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")),
    reason="needs the CUDA plugin and ptxas (make gpu-compile)",
)


def _key(row: dict[str, Any]) -> str:
    return f"{row['kernel']} {', '.join(row['shape'])}"


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("blackwell")
    done = subprocess.run(
        [
            sys.executable,
            "bench/gpu_compile.py",
            "--target",
            "sm_100a",
            "--out",
            str(out / "rows.json"),
            "--markdown",
            str(out / "rows.md"),
        ],
        cwd=REPO,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert (out / "rows.json").is_file(), done.stdout + done.stderr
    return {_key(r): r for r in json.loads((out / "rows.json").read_text())}


def _budgets() -> dict[str, Any]:
    return json.loads(BUDGETS.read_text())


def test_every_row_compiles_without_spills(rows: dict[str, dict[str, Any]]) -> None:
    failed = {k: r.get("reason", r["status"]) for k, r in rows.items() if r["status"] != "ok"}
    assert not failed


def test_budgets_cover_the_rows(rows: dict[str, dict[str, Any]]) -> None:
    ours = {k for k in rows if not k.startswith(JAX_BLACKWELL_MATMUL)}
    assert set(_budgets()["registers"]) == ours


def test_registers_within_budget(rows: dict[str, dict[str, Any]]) -> None:
    budgets = _budgets()
    over = {}
    for key, budget in budgets["registers"].items():
        row = rows[key]
        if not row["ptxas_version"].startswith(budgets["ptxas"]):
            pytest.skip(f"the budgets hold for ptxas {budgets['ptxas']}: {row['ptxas_version']}")
        if row["registers"] > budget:
            over[key] = (row["registers"], budget)
    assert not over, f"over budget (registers, budget): {over}"


def test_the_products_take_tcgen05_and_tensor_memory(rows: dict[str, dict[str, Any]]) -> None:
    for key, row in rows.items():
        sass = row["sass"]
        mma = sass["UTCQMMA"] if "float8" in key else sass["UTCHMMA"]
        assert mma > 0 and sass["LDTM"] > 0, key
        assert sass["HGMMA"] + sass["QGMMA"] + sass["IGMMA"] == 0, key
        assert row["tmem_columns"] > 0, key


def test_the_matmul_beside_jax_own_blackwell_matmul(rows: dict[str, dict[str, Any]]) -> None:
    """The same form, all without spills: a TMA warp and an MMA warp beside an epilogue
    warpgroup, two accumulators in tensor memory, the epilogue by LDTM and TMA stores; at
    4096^3 the plan pairs CTAs for 2-CTA MMAs as jax's `collective=True` does, and its
    single-CTA twin (cluster=False) issues one CTA's MMAs as jax's default does."""
    shape = "bfloat16[4096,4096], bfloat16[4096,4096]"
    ours, theirs = (
        rows[f"matmul {shape}"],
        rows[f"{JAX_BLACKWELL_MATMUL} (collective=True) {shape}"],
    )
    single, theirs_single = (
        rows[f"matmul (cluster=False) {shape}"],
        rows[f"{JAX_BLACKWELL_MATMUL} {shape}"],
    )
    for row in (ours, theirs, single, theirs_single):
        assert row["spill_bytes"] == 0 and row["sass"]["UTCHMMA"] > 0
        assert row["sass"]["LDTM"] > 0 and row["sass"]["UTMASTG"] > 0
        assert row["threads"] == 256 and row["tmem_columns"] == 256
    assert ours["mma_ctas"] == theirs["mma_ctas"] == 2
    assert single["mma_ctas"] == theirs_single["mma_ctas"] == 1
    # A K step of 64 is four MMAs of K = 16 (M = 256 for a pair's).
    assert ours["sass"]["UTCHMMA"] == single["sass"]["UTCHMMA"] == 4
    # Each CTA of a pair holds half of b's block: a stage of 16 KiB of a and 8 KiB of b.
    assert ours["smem_bytes"] < single["smem_bytes"]
