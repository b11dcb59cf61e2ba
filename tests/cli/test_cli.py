"""The `statickernel` command line, run as the real console script in a subprocess.

Exit codes: 0 success, 1 check or test failures (and errors statickernel raises), 2 usage
errors. The slower paths (a full `test` of a folder) are left to `make demo`; the cheap usage
errors are also checked in-process through `cli.main`, which the console script calls.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import statickernel as sk
from add import add
from softmax import softmax
from statickernel import cli

REPO = pathlib.Path(__file__).resolve().parents[2]
_SCRIPT = shutil.which("statickernel", path=os.path.dirname(sys.executable))
# The console script of this interpreter's environment; `python -m statickernel` otherwise.
COMMAND = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "statickernel"]

GOOD_KERNEL = '''\
"""A kernel that declares fine."""

import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


@sk.kernel(tile={"M": "BM"}, reference=lambda x: x * 2)
def double(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return sk.load(x) * 2
'''

BAD_KERNEL = '''\
"""A kernel whose row block is not a multiple of 64."""

from jaxtyping import Array, Float

import statickernel as sk


@sk.kernel(tile={"M": "BM"})
def bad_block(x: Float[Array, "M N"], *, BM: sk.Const[int] = 100) -> Float[Array, "M N"]:
    return sk.load(x)
'''
BAD_KERNEL_LINE = 8

WRONG_REFERENCE = '''\
"""A kernel whose reference computes something else."""

import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


@sk.kernel(tile={"M": "BM"}, reference=lambda x: jnp.max(x, axis=1) + 1)
def row_max(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
    return sk.max(sk.load(x), axis=1)
'''


def run(*args: str, cwd: pathlib.Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [*COMMAND, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=300,
    )


@pytest.fixture
def kernel_folder(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder with a good kernel module, a bad one in a subfolder, and files to skip."""
    (tmp_path / "good.py").write_text(GOOD_KERNEL)
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "bad.py").write_text(BAD_KERNEL)
    (tmp_path / "_private.py").write_text("raise RuntimeError('private modules are skipped')\n")
    (tmp_path / "test_things.py").write_text("raise RuntimeError('test modules are skipped')\n")
    return tmp_path


# --- check ------------------------------------------------------------------------------------


def test_check_examples_lists_every_kernel() -> None:
    done = run("check", "examples")
    assert done.returncode == 0, done.stderr
    for name, line in [("add", 14), ("softmax", 20), ("layernorm", 41), ("row_sum", 14)]:
        assert f"✓ examples/{name}.py:{line}  {name}" in done.stdout
    assert "63 ✓, 0 ✗" in done.stdout


def test_check_reports_a_bad_module_and_goes_on(kernel_folder: pathlib.Path) -> None:
    done = run("check", ".", cwd=kernel_folder)
    assert done.returncode == 1
    assert "✓ good.py:9  double" in done.stdout
    assert "✗ nested/bad.py: declaration error" in done.stdout
    assert f"at:       nested/bad.py:{BAD_KERNEL_LINE}" in done.stdout
    assert "not a multiple of 64" in done.stdout
    assert "private modules" not in done.stdout + done.stderr
    assert "test modules" not in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_check_lower_cross_lowers_at_probe_shapes(kernel_folder: pathlib.Path) -> None:
    done = run("check", "good.py", "--lower", cwd=kernel_folder)
    assert done.returncode == 0, done.stdout + done.stderr
    # aligned, ragged M, ragged N (whole), smaller than one block; in float32 and bfloat16
    lowered = "(lowered for Mosaic GPU at 4 probe shapes in float32, bfloat16)"
    assert f"✓ good.py:9  double  {lowered}" in done.stdout


def test_check_plans_and_lowers_for_the_target_named(capsys: pytest.CaptureFixture[str]) -> None:
    # tcgen05 (sm_100a) does not multiply int8: kernel.lower(..., target="sm_100a") refuses it.
    kernel = "examples/matmul_int8.py:matmul_int8"
    assert cli.main(["check", kernel, "--lower"]) == cli.EXIT_OK
    assert "(lowered for Mosaic GPU at " in capsys.readouterr().out
    for extra in (["--lower"], []):
        assert cli.main(["check", kernel, *extra, "--target", "sm_100a"]) == cli.EXIT_FAILED
        out = capsys.readouterr().out
        step = "lowering" if extra else "planning"
        assert f"✗ examples/matmul_int8.py:15  matmul_int8: {step} failed at aligned" in out
        assert "TensorCoreTargetError" in out or "tcgen05 does not multiply" in out
    assert cli.main(["check", kernel, "--target", "sm_90a"]) == cli.EXIT_OK
    assert "(planned for Mosaic GPU (sm_90a) at " in capsys.readouterr().out


@pytest.mark.parametrize("command", ["check examples/add.py", "plan", "emit", "compile", "tune"])
def test_an_unknown_target_is_a_usage_error(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name, *paths = command.split()
    if not paths:
        paths = ["examples/add.py:add", "--arg", "x=float32[8,8]", "--arg", "y=float32[8,8]"]
    with pytest.raises(SystemExit) as info:
        cli.main([name, *paths, "--target", "sm_80"])
    assert info.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "'sm_80' is not a GPU architecture statickernel plans for" in err
    assert "sm_90a (NVIDIA H100 and H200 (Hopper)) or sm_100a (NVIDIA B200 (Blackwell))" in err


def test_check_takes_one_kernel_as_the_other_commands_do(
    kernel_folder: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", "examples/softmax.py:softmax"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "✓ examples/softmax.py:20  softmax" in out and "softmax_backward" not in out
    assert "1 ✓, 0 ✗ (1 kernel in 1 module)" in out
    assert cli.main(["check", "examples/softmax.py:nope"]) == cli.EXIT_USAGE
    assert "defines no kernel named 'nope' (its kernels: softmax, " in capsys.readouterr().err
    # A module that fails to import is reported as with a path.
    done = run("check", "nested/bad.py:bad_block", cwd=kernel_folder)
    assert done.returncode == 1 and "✗ nested/bad.py: declaration error" in done.stdout


def test_tune_ranks_and_caches_the_candidates(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STATICKERNEL_CACHE_DIR", str(tmp_path))
    args = ["tune", "examples/matmul.py:matmul", "--arg", "a=bf16[4096,4096]"]
    args += ["--arg", "b=bf16[4096,4096]", "--target", "sm_90a", "--by", "plan"]
    assert cli.main([*args, "--json"]) == cli.EXIT_OK
    first = json.loads(capsys.readouterr().out)
    assert first["ranked_by"] == "plan" and not first["cached"]
    assert len(first["candidates"]) == 12 and first["best"] == first["candidates"][0]["constants"]
    assert list(tmp_path.glob("tune/matmul-*.json"))
    assert cli.main(args) == cli.EXIT_OK
    again = capsys.readouterr()
    assert "(from the cache)" in again.out.splitlines()[0]
    assert "calls of these shapes now take BM=" in again.err
    fixed = ["--const", "BM=64", "--const", "BN=64", "--const", "cluster=False"]
    assert cli.main([*args[:-2], *fixed]) == cli.EXIT_FAILED
    assert "no constant left to tune" in capsys.readouterr().err
    # Another architecture's tuning is its own: measured, not the sm_90a one from the cache.
    assert cli.main([*args, "--target", "sm_100a", "--json"]) == cli.EXIT_OK
    blackwell = json.loads(capsys.readouterr().out)
    assert blackwell["target"] == "sm_100a" and not blackwell["cached"]
    assert blackwell["best"]["BM"] == 128  # a tcgen05 MMA's 128 rows
    assert len(list(tmp_path.glob("tune/matmul-*.json"))) == 2


def test_check_missing_path_is_a_usage_error() -> None:
    assert cli.main(["check", "no/such/folder"]) == cli.EXIT_USAGE


# --- plan -------------------------------------------------------------------------------------


def test_plan_prints_edges_per_dim() -> None:
    done = run(
        "plan", "examples/add.py:add", "--arg", "x=float32[1000,777]", "--arg", "y=f32[1000,777]"
    )
    assert done.returncode == 0, done.stderr
    assert "grid: (16, 7) over (M, N)" in done.stdout
    assert "N=777" in done.stdout and "ragged (777 % 128 = 9): masked" in done.stdout
    assert "fallback" in done.stdout  # 777 f32 columns are not TMA-addressable
    assert "smem:" in done.stdout


def test_plan_takes_a_module_target_and_constants(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        ["plan", "softmax:softmax", "--arg", "x=bfloat16[1000,100]", "--const", "BM=128"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "BM=128" in out and "grid: (8,)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arg", "x=float32(10,10)"], "is not NAME=DTYPE[D0,D1,...]"),
        (["--arg", "x=floaty[10,10]"], "is not a dtype"),
        (["--arg", "x=float32[10,10]", "--arg", "z=float32[3]"], "has no operand 'z'"),
        (["--arg", "x=float32[10,10]", "--arg", "x=float32[10,10]"], "given twice"),
        ([], "missing x"),
        (["--arg", "x=float32[10,10]", "--const", "BM=64.0.0"], "is not NAME=VALUE"),
    ],
)
def test_plan_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["plan", "examples/softmax.py:softmax", *args]) == cli.EXIT_USAGE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("examples/softmax.py", "not a kernel target"),
        ("examples/nothing.py:softmax", "no such file"),
        ("examples/row_sum.py:nope", "no attribute 'nope' (its kernels: row_sum)"),
        ("examples/softmax.py:softmax_reference", "not a statickernel kernel"),
        ("no_such_module_here:k", "no module named"),
    ],
)
def test_bad_targets_are_usage_errors(
    target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["plan", target, "--arg", "x=float32[8,8]"]) == cli.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_usage_error_exit_code_from_the_script() -> None:
    done = run("plan", "examples/softmax.py:softmax", "--arg", "x=float32[10;10]")
    assert done.returncode == 2
    assert "statickernel plan: error: --arg" in done.stderr
    assert run("frobnicate").returncode == 2  # argparse's own usage errors


def test_statickernel_error_is_a_message_unless_traceback(kernel_folder: pathlib.Path) -> None:
    args = ["plan", "nested/bad.py:bad_block", "--arg", "x=float32[64,64]"]
    short = run(*args, cwd=kernel_folder)
    assert short.returncode == 1
    assert "not a multiple of 64" in short.stderr
    assert f"nested/bad.py:{BAD_KERNEL_LINE}" in short.stderr
    assert "Traceback" not in short.stderr
    full = run(*args, "--traceback", cwd=kernel_folder)
    assert full.returncode == 1
    assert "Traceback (most recent call last)" in full.stderr
    assert "BlockAlignmentError" in full.stderr


def test_call_errors_point_at_the_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["plan", "examples/softmax.py:softmax", "--arg", "x=float32[2,100000]"])
    assert code == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert "shared memory" in err
    assert "at:       examples/softmax.py:20 (the kernel; its operands came from --arg)" in err


# --- emit -------------------------------------------------------------------------------------


def test_emit_prints_the_source_statickernel_runs() -> None:
    done = run("emit", "examples/softmax.py:softmax", "--arg", "x=float32[1000,100]")
    assert done.returncode == 0, done.stderr
    x = jax.ShapeDtypeStruct((1000, 100), jnp.float32)
    assert done.stdout == softmax.emit(x)


def test_emit_writes_a_file(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "add_pallas.py"
    done = run(
        "emit",
        "examples/add.py:add",
        "--arg",
        "x=bfloat16[300,1000]",
        "--arg",
        "y=bfloat16[300,1000]",
        "--backend",
        "mosaic_gpu",
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert f"wrote {out}" in done.stderr
    x = jax.ShapeDtypeStruct((300, 1000), jnp.bfloat16)
    assert out.read_text() == add.emit(x, x, backend="mosaic_gpu")
    assert "INTERPRET = False" in out.read_text()


def test_plan_and_emit_for_a_named_target() -> None:
    args = [
        "examples/matmul.py:matmul",
        "--arg",
        "a=bfloat16[300,200]",
        "--arg",
        "b=bfloat16[200,260]",
    ]
    emitted = run("emit", *args, "--backend", "mosaic_gpu", "--target", "sm_100a")
    assert emitted.returncode == 0, emitted.stderr
    assert "plgpu.tcgen05_mma(" in emitted.stdout and "plgpu.wgmma" not in emitted.stdout
    planned = run("plan", *args, "--target", "sm_100a")
    assert planned.returncode == 0, planned.stderr
    assert "form: warp-specialized, tcgen05: a TMA warp and an MMA warp" in planned.stdout
    assert "WGMMA sk.dot(a, b)" in run("plan", *args).stdout  # sm_90a by default


def test_emit_to_an_unwritable_place_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    target = str(tmp_path / "missing" / "dir" / "k.py")
    args = ["emit", "examples/softmax.py:softmax", "--arg", "x=float32[8,8]", "-o", target]
    assert cli.main(args) == cli.EXIT_USAGE


# --- test -------------------------------------------------------------------------------------


def test_test_runs_a_kernel_against_its_reference() -> None:
    done = run("test", "examples/softmax.py:softmax")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[1/1] softmax (examples/softmax.py:20): 8 cases" in done.stderr  # progress
    header = done.stdout.splitlines()[0].split()
    assert header[:3] == ["kernel", "probe", "shapes"]
    assert "max abs error" in done.stdout and "tolerance" in done.stdout
    for probe in ("aligned", "ragged M", "ragged N (whole)", "smaller than one block"):
        assert probe in done.stdout
    assert done.stdout.count("✓") == 8 + 1  # 8 rows and the summary
    assert "8 ✓, 0 ✗" in done.stdout


def test_test_fails_on_a_wrong_reference(kernel_folder: pathlib.Path) -> None:
    (kernel_folder / "wrong.py").write_text(WRONG_REFERENCE)
    done = run("test", ".", "--dtype", "float32", cwd=kernel_folder)
    assert done.returncode == 1
    assert "✗ nested/bad.py: declaration error" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith(("double", "row_max"))]
    assert len(rows) == 8  # 4 probes each, float32 only
    assert all(r.endswith("✓") for r in rows if r.startswith("double"))
    assert all(r.endswith("✗") for r in rows if r.startswith("row_max"))
    assert "4 ✓, 4 ✗" in done.stdout


@pytest.mark.parametrize(
    ("dtype", "message"),
    [("int8", "no kernel found allows int8"), ("floaty", "'floaty' is not a dtype")],
)
def test_test_with_an_unusable_dtype_is_a_usage_error(
    dtype: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["test", "examples/row_sum.py:row_sum", "--dtype", dtype]) == 2
    assert message in capsys.readouterr().err


def test_check_a_folder_without_kernels_fails(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "helpers.py").write_text("HELP = 1\n")
    assert cli.main(["check", str(tmp_path)]) == cli.EXIT_FAILED
    out = capsys.readouterr().out
    assert "helpers.py: no kernels" in out and "no kernels found" in out


# --- help and entry points --------------------------------------------------------------------


def test_help_documents_every_command_with_examples() -> None:
    done = run("--help")
    assert done.returncode == 0
    for command in ("check", "plan", "emit", "test"):
        assert command in done.stdout
    assert "exit codes" in done.stdout and "examples:" in done.stdout


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("check", ["--lower", "--traceback", "PATH"]),
        ("plan", ["--arg", "--const", "--backend", "--traceback", "TARGET"]),
        ("emit", ["--arg", "--const", "--backend", "-o", "--traceback", "TARGET"]),
        ("test", ["--dtype", "--seed", "--backend", "--traceback", "TARGET|PATH"]),
    ],
)
def test_subcommand_help(
    command: str, options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text
    for option in options:
        assert option in text
    # Every option's help carries an example.
    helps = textwrap.dedent(text.split("options:", 1)[1].split("examples:", 1)[0])
    for option in options:
        if option.startswith("-") and option not in ("--traceback",):
            assert "e.g." in helps.split(option, 1)[1].split("\n  -", 1)[0], option


def test_python_dash_m_works() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "statickernel", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert done.stdout.startswith("statickernel ")


# --- machine-readable output, selection and reports ---------------------------------------------


def test_plan_json_is_the_launch_plan(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "examples/add.py:add", "--arg", "x=f32[1000,777]", "--arg", "y=f32[1000,777]"]
    assert cli.main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    plan = document["plan"]
    assert document["command"] == "plan"
    assert plan["kernel"] == "add" and plan["grid"] == [16, 7] and plan["grid_names"] == ["M", "N"]
    assert plan["form"] == "strided" and plan["bindings"] == {"M": 1000, "N": 777}
    assert plan["schedule"]["kind"] in {k.value for k in sk.ScheduleKind}
    assert [d["tiled_by"] for d in plan["dims"]] == ["BM", "BN"]
    assert plan["operands"][0]["role"] == "input" and plan["results"][0]["shape"] == [1000, 777]


def test_plan_to_json_round_trips_through_json() -> None:
    from statickernel.cli.json_output import plan_to_json

    plan = softmax.plan(jax.ShapeDtypeStruct((1000, 100), jnp.float32))
    facts = json.loads(json.dumps(plan_to_json(plan), allow_nan=False))
    assert facts["grid"] == list(plan.grid) and facts["form"] == plan.form.value
    assert plan.schedule is not None and facts["schedule"]["kind"] == plan.schedule.kind.value
    assert facts["operands"][0]["fill"] is None  # -inf: JSON has no infinities
    assert facts["constants"] == [["BM", 64]]


def test_check_json_reports_modules_and_kernels(
    kernel_folder: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", str(kernel_folder), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["command"] == "check" and document["ok"] is False
    by_source = {m["source"].rpartition("/")[2]: m for m in document["modules"]}
    assert by_source["good.py"]["ok"] and by_source["good.py"]["kernels"][0]["name"] == "double"
    bad = by_source["bad.py"]
    assert bad["ok"] is False and bad["error"]["class"] == "BlockAlignmentError"
    assert "multiple of 64" in bad["error"]["message"]
    assert document["totals"] == {
        "modules": 2,
        "kernels": 1,
        "passed": 1,
        "failed": 0,
        "import_failures": 1,
    }


def test_test_json_has_per_case_results_and_totals(
    kernel_folder: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (kernel_folder / "wrong.py").write_text(WRONG_REFERENCE)
    argv = ["test", str(kernel_folder), "--dtype", "float32", "--json"]
    assert cli.main(argv) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["totals"] == {
        "kernels": 2,
        "cases": 8,
        "passed": 4,
        "failed": 4,
        "import_failures": 1,
        "seconds": document["totals"]["seconds"],
    }
    wrong = [c for c in document["cases"] if c["kernel"] == "row_max"]
    assert len(wrong) == 4 and not any(c["passed"] for c in wrong)
    case = wrong[0]
    for key in ("probe", "shapes", "dtypes", "backend", "max_abs_error", "tolerance", "error"):
        assert key in case
    assert case["mismatches"] == case["elements"] > 0
    assert case["placement"] == "interior" and "elements differ" in case["report"]
    assert case["worst"]["result"] == "result" and len(case["worst"]["index"]) == 1
    assert document["import_failures"][0]["error"]["class"] == "BlockAlignmentError"


def test_test_selects_kernels_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["test", "examples", "-k", "ROW_S*", "--dtype", "float32", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {c["kernel"] for c in document["cases"]} == {"row_sum"}
    from statickernel.cli.run_tests import selected

    assert selected("softmax_online", ["online"]) and selected("softmax", ["soft*"])
    assert not selected("softmax", ["norm"]) and selected("layernorm", ["x", "norm"])
    assert not selected("softmax_online", ["soft"]) or selected("softmax_online", [])


def test_test_exits_at_the_first_failing_kernel(
    kernel_folder: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (kernel_folder / "a_wrong.py").write_text(WRONG_REFERENCE)
    argv = ["test", str(kernel_folder), "--dtype", "float32", "-x"]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    assert "row_max" in out and "double" not in out
    assert "0 ✓, 4 ✗ (4 cases of 1 kernel" in out and "stopped after 1 kernel (-x)" in out


SLIGHTLY_OFF = '''\
"""A kernel one part in a million away from its reference: within the default f32 tolerance."""

from jaxtyping import Array, Float

import statickernel as sk


@sk.kernel(tile={"M": "BM"}, reference=lambda x: x)
def nudge(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return sk.load(x) + 2.0**-20
'''


def test_test_tolerances_from_the_command_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "slightly_off.py").write_text(SLIGHTLY_OFF)
    off = f"{tmp_path / 'slightly_off.py'}:nudge"
    assert cli.main(["test", off, "--dtype", "f32"]) == 0
    capsys.readouterr()
    assert cli.main(["test", off, "--dtype", "f32", "--atol", "0", "--json"]) == 1
    strict = json.loads(capsys.readouterr().out)
    assert all(c["tolerance"] == 0 and c["rtol"] == 0 for c in strict["cases"])
    assert all(c["mismatches"] > 0 for c in strict["cases"])
    target = "examples/softmax.py:softmax"
    assert cli.main(["test", target, "--dtype", "bf16", "--rtol", "0.1", "--atol", "1e-3"]) == 0
    assert "0.001+0.1·|want|" in capsys.readouterr().out


def test_test_writes_junit_xml(kernel_folder: pathlib.Path, tmp_path_factory: Any) -> None:
    (kernel_folder / "wrong.py").write_text(WRONG_REFERENCE)
    report = tmp_path_factory.mktemp("reports") / "junit.xml"
    argv = ["test", str(kernel_folder), "--dtype", "float32", "--junit-xml", str(report)]
    assert cli.main(argv) == 1
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("9", "4", "1")
    cases = suite.findall("testcase")
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == 4 and all(c.get("name", "").startswith("row_max[") for c in failed)
    failure = failed[0].find("failure")
    assert failure is not None and "elements differ" in (failure.get("message") or "")
    assert failed[0].get("classname", "").endswith("wrong.py:9")
    errored = [c for c in cases if c.find("error") is not None]
    assert [c.get("name") for c in errored] == ["import"]
    assert {c.get("name") for c in cases if c.get("name", "").startswith("double[")} == {
        "double[aligned-float32]",
        "double[ragged_M-float32]",
        "double[ragged_N_(whole)-float32]",
        "double[smaller_than_one_block-float32]",
    }
    # Each case carries its own time; the sum is within the suite's.
    times = [float(c.get("time") or "nan") for c in cases if c.get("name") != "import"]
    assert all(t > 0 for t in times) and sum(times) <= float(suite.get("time") or "nan") + 1e-3


def test_import_failures_are_counted_apart_and_fail(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "good.py").write_text(GOOD_KERNEL)
    (tmp_path / "broken.py").write_text("raise RuntimeError('no such luck')\n")
    assert cli.main(["test", str(tmp_path), "--dtype", "float32"]) == 1
    out = capsys.readouterr().out
    assert "✗ " in out and "broken.py: import failed" in out
    assert "4 ✓, 0 ✗ (4 cases of 1 kernel" in out
    assert "✗ 1 module failed to import (shown above)" in out
    assert cli.main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "1 ✓, 0 ✗ (1 kernel in 2 modules)" in out and "1 module failed to import" in out
    (tmp_path / "good.py").unlink()
    assert cli.main(["test", str(tmp_path)]) == 1
    assert "broken.py: import failed" in capsys.readouterr().out


def test_a_module_that_exits_at_import_is_a_failed_import(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `sys.exit(0)` at import ended `check` and `test` with exit 0 and no output, and
    the modules after it (a declaration error here) were never imported."""
    (tmp_path / "a_exits.py").write_text("import sys\n\nsys.exit(0)\n")
    (tmp_path / "b_bad.py").write_text(BAD_KERNEL)
    (tmp_path / "c_good.py").write_text(GOOD_KERNEL)
    for command in ("check", "test"):
        argv = [command, str(tmp_path)] + (["--dtype", "float32"] if command == "test" else [])
        assert cli.main(argv) == 1
        out = capsys.readouterr().out
        assert "a_exits.py: import failed" in out and "sys.exit(0)" in out
        assert "b_bad.py: declaration error" in out and "not a multiple of 64" in out
        assert "2 modules failed to import" in out and "double" in out
    target = f"{tmp_path / 'a_exits.py'}:k"
    assert cli.main(["plan", target, "--arg", "x=float32[8,8]"]) == 1
    assert "sys.exit(0)" in capsys.readouterr().err


def test_a_keyboard_interrupt_at_import_still_interrupts(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a_interrupted.py").write_text("raise KeyboardInterrupt\n")
    (tmp_path / "b_good.py").write_text(GOOD_KERNEL)
    assert cli.main(["check", str(tmp_path)]) == 130
    assert "interrupted" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--rtol", "nan"], "argument --rtol: 'nan' is not a tolerance"),
        (["--atol", "nan"], "argument --atol: 'nan' is not a tolerance"),
        (["--atol", "inf"], "argument --atol: 'inf' is not a tolerance"),
        (["--atol=-1e-3"], "argument --atol: '-1e-3' is not a tolerance"),
        (["--rtol", "-0.1"], "argument --rtol: '-0.1' is not a tolerance"),
        (["--seed", "-1"], "argument --seed: '-1' is not a seed"),
    ],
)
def test_test_refuses_a_tolerance_or_seed_that_decides_every_case(
    option: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a NaN tolerance passed a wrong reference (exit 0), and a negative tolerance or
    seed failed every case of a correct kernel."""
    with pytest.raises(SystemExit) as info:  # argparse's usage error
        cli.main(["test", "examples/add.py:add", *option])
    assert info.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and ">= 0" in err


def test_const_none_is_a_value_for_an_optional_constant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: `--const stages=None` was "not NAME=VALUE with a Python literal value", though
    `stages` is `sk.Const[int | None]` (and `sm_scale` is `sk.Const[float | None]`)."""
    argv = ["plan", "examples/matmul.py:matmul", "--arg", "a=bf16[128,128]"]
    argv += ["--arg", "b=bf16[128,128]"]
    assert cli.main([*argv, "--const", "stages=None"]) == 0
    assert "stages=None" in capsys.readouterr().out
    heads = [f"--arg={n}=bf16[1,2,128,64]" for n in "qkv"]
    attention = ["plan", "examples/attention.py:attention", *heads]
    assert cli.main([*attention, "--const", "sm_scale=None"]) == 0
    assert "sm_scale=None" in capsys.readouterr().out
    assert cli.main([*argv, "--const", "BM=None"]) == 1  # an int constant takes no None
    err = capsys.readouterr().err
    assert "constant `BM` must be a Python int" in err and "None (NoneType)" in err


@pytest.mark.parametrize("dtype", ["V8", "U4", "O", "M8"])
def test_arg_with_a_dtype_that_holds_no_numbers_is_a_usage_error(
    dtype: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """numpy parses these codes (void, str, object, datetime). Before: `--arg x=V8[3,4]` was a
    raw TypeError "data type 'void64' not understood"."""
    argv = ["plan", "examples/softmax.py:softmax", "--arg", f"x={dtype}[3,4]"]
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{dtype!r} is not a dtype an operand can have" in err
    assert "float32, bfloat16" in err and "bf16 (bfloat16)" in err
    assert "TypeError" not in err


# --- colour -----------------------------------------------------------------------------------

GREEN_TICK = "\033[32m✓\033[0m"


@pytest.mark.parametrize(
    ("argv", "env", "tty", "coloured"),
    [
        ([], {}, False, False),  # a pipe
        ([], {}, True, True),  # a terminal
        ([], {"NO_COLOR": "1"}, True, False),
        ([], {"NO_COLOR": ""}, True, True),  # an empty NO_COLOR does not count
        ([], {"FORCE_COLOR": "1"}, False, True),
        ([], {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, False),
        (["--color", "never"], {"FORCE_COLOR": "1"}, True, False),
        (["--color", "always"], {"NO_COLOR": "1"}, False, True),
    ],
)
def test_colour(
    argv: list[str],
    env: dict[str, str],
    tty: bool,
    coloured: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty, raising=False)
    assert cli.main(["check", "examples/softmax.py", *argv]) == 0
    out = capsys.readouterr().out
    assert (GREEN_TICK in out) is coloured
    assert ("\033[" in out) is coloured


def test_colour_of_the_test_table(capsys: pytest.CaptureFixture[str]) -> None:
    target = "examples/row_sum.py:row_sum"
    assert cli.main(["test", target, "--dtype", "float32", "--color", "always"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("\033[1mkernel") and lines[0].endswith("\033[0m")
    assert all(line.endswith(GREEN_TICK) for line in lines[2:-1])


# --- help without jax -------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--help"], ["test", "--help"], ["--version"], ["plan"]])
def test_help_does_not_import_jax(argv: list[str]) -> None:
    code = (
        "import sys\n"
        "from statickernel import cli\n"
        "try:\n"
        f"    cli.main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.'))\n"
        "print('jax imported' if loaded else 'jax not imported')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("jax not imported"), done.stdout


def test_the_parser_default_target_is_the_compilers() -> None:
    from statickernel.aot import compile as _compile
    from statickernel.cli import parser as _cli_parser

    assert _cli_parser.DEFAULT_TARGET == _compile.DEFAULT_TARGET
