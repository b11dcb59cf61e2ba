"""Kernel call sites are typed from the decorated function: pyright infers each result and
checks constant overrides by name and type (tests/typecheck/typed_calls.py holds the calls)."""

import importlib.util
import json
import pathlib
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

TYPING_DIR = pathlib.Path(__file__).resolve().parents[2] / "typecheck"
PROBE = TYPING_DIR / "typed_calls.py"


def _pyright() -> str | None:
    """The pyright next to this interpreter (the dev extra installs it), else on the PATH."""
    local = pathlib.Path(sys.executable).parent / "pyright"
    return str(local) if local.exists() else shutil.which("pyright")


def _diagnostics(path: pathlib.Path) -> list[dict]:
    pyright = _pyright()
    if pyright is None:
        pytest.skip("pyright is not installed (pip install -e '.[dev]')")
    done = subprocess.run(
        [pyright, "--outputjson", "--pythonpath", sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=TYPING_DIR.parent.parent,
    )
    report = json.loads(done.stdout)
    return [d for d in report["generalDiagnostics"] if d["severity"] == "error"]


@pytest.fixture(scope="module")
def unsuppressed(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """pyright's errors on the probe with its `pyright: ignore` comments taken out."""
    text = re.sub(r"  # pyright: ignore\[\w+\]", "", PROBE.read_text())
    path = tmp_path_factory.mktemp("typing") / "typed_calls.py"
    path.write_text(text)
    return _diagnostics(path)


def test_the_probe_type_checks_as_written():
    errors = _diagnostics(PROBE)
    assert [f"line {d['range']['start']['line'] + 1}: {d['message']}" for d in errors] == []


def test_each_refused_call_is_refused_by_its_rule(unsuppressed: list[dict]):
    lines = PROBE.read_text().splitlines()
    expected = {
        (n, m.group(1))
        for n, text in enumerate(lines)
        if (m := re.search(r"# pyright: ignore\[(\w+)\]", text))
    }
    got = {(d["range"]["start"]["line"], d["rule"]) for d in unsuppressed}
    assert len(expected) == 6
    assert got == expected


def test_the_typed_calls_run():
    """The probe's kernels are real: the calls pyright accepts run and give the right numbers."""
    spec = importlib.util.spec_from_file_location("typed_calls", PROBE)
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    x = jax.random.normal(jax.random.key(0), (70, 33))
    probe.typed_calls(x)
    np.testing.assert_allclose(
        np.asarray(probe.softmax(x)), np.asarray(jax.nn.softmax(x, axis=-1)), rtol=1e-5, atol=1e-6
    )
    mean, std = probe.moments(x, eps=1e-5)
    np.testing.assert_allclose(np.asarray(mean), np.mean(np.asarray(x), axis=1), atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(std), np.sqrt(np.var(np.asarray(x), axis=1) + 1e-5), rtol=1e-5
    )
