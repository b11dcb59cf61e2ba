"""The CPU benchmark runs end to end in its quick mode and writes every section, and the
performance page's charts are valid SVG drawn from the committed results.

Only the structure of the results is checked: timings depend on the machine and its load, so
no test ever judges them.
"""

import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECTIONS = {
    "import_check": {"kernel", "decorator_ms", "module_import_ms", "decorator_share", "timings"},
    "first_call": {
        "kernel",
        "shape",
        "dtype",
        "statickernel_ms",
        "statickernel_specialize_ms",
        "handwritten_ms",
        "ratio",
        "goal",
        "meets_goal",
        "timings",
    },
    "steady_state": {
        "kernel",
        "shape",
        "dtype",
        "statickernel_ms",
        "handwritten_ms",
        "ratio",
        "goal",
        "meets_goal",
        "max_abs_diff",
        "timings",
    },
    "eager_call": {
        "kernel",
        "shape",
        "dtype",
        "kernel_call_ms",
        "generated_fn_ms",
        "ratio",
        "difference_us",
        "cache_lookup_us",
        "timings",
    },
    "throughput": {"kernel", "shape", "dtype", "median_ms", "elements_per_s", "timings"},
}
TIMING_KEYS = {"median_s", "min_s", "max_s", "runs", "calls_per_run", "timing"}


def test_quick_run_writes_every_section(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "cpu.json"
    proc = subprocess.run(
        [sys.executable, "bench/cpu_bench.py", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())

    assert data["benchmark"] == "cpu"
    assert data["settings"]["quick"] is True
    assert data["kernels"] == ["add", "softmax"]
    assert {"date", "jax", "cpu_count"} <= data["environment"].keys()
    for section, keys in SECTIONS.items():
        rows = data[section]
        assert [row["kernel"] for row in rows] == ["add", "softmax"], section
        for row in rows:
            assert row.keys() == keys, section
            for timing in row["timings"].values():
                assert timing.keys() == TIMING_KEYS
                assert timing["runs"] >= 1 and timing["calls_per_run"] >= 1
    summary = data["summary"]
    assert summary["goals"] == {"first_call_ratio": 1.5, "steady_state_ratio": 1.02}
    assert all(
        isinstance(summary[k], float) and math.isfinite(summary[k])
        for k in ("first_call_ratio_median", "steady_state_ratio_median")
    )
    # The same kernels computed the same values, so the ratios compare like with like.
    assert all(row["max_abs_diff"] <= 1e-5 for row in data["steady_state"])
    for title in ("Import-time check", "First call", "Steady state", "Eager call", "throughput"):
        assert title in proc.stdout


def _chart_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("chart", ROOT / "bench" / "chart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_charts_are_valid_svg_and_up_to_date() -> None:
    import xml.etree.ElementTree as ET

    chart = _chart_module()
    charts = chart.charts()
    assert {p.name for p in charts} == {"compile.svg", "cpu-bench.svg"}
    compiled = json.loads((ROOT / "bench/results/gpu-compile.json").read_text())
    for path, svg in charts.items():
        root = ET.fromstring(svg)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        bars = root.findall(".//{http://www.w3.org/2000/svg}rect[@height='16']")
        if path.name == "compile.svg":
            assert len(bars) == sum(r["status"] == "ok" for r in compiled)
        assert path.read_text(encoding="utf-8") == svg, (
            f"{path.relative_to(ROOT)} is out of date: run python bench/chart.py"
        )
    # The page shows both.
    page = (ROOT / "docs" / "performance.md").read_text()
    assert "(assets/compile.svg)" in page and "(assets/cpu-bench.svg)" in page


def test_the_chart_check_mode_finds_a_stale_chart(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chart = _chart_module()
    monkeypatch.setattr(chart, "ASSETS", tmp_path)
    assert chart.main(["--check"]) == 1
    assert chart.main([]) == 0
    assert chart.main(["--check"]) == 0
