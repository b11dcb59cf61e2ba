"""The emitted Pallas source: standalone, deterministic, what actually runs, and pinned.

- It imports only jax, jaxlib and numpy, defines a function named after the kernel, and opens
  with a header (kernel, declared-at path:line, dims, constants, backend, jax version).
- It is byte-identical across emits and across processes.
- Executed in a process where statickernel cannot be imported, it gives bit-identical results
  to the kernel called through statickernel (interpreter), and cross-lowers for CUDA.
- Golden files pin it: `tests/compiler/mosaic_gpu/emit/golden/jax-<version>/<kernel>.py` hold the source of every
  gallery kernel at one ragged shape (interpret backend), one folder per supported jax version,
  because the generated store differs between jax 0.11 and 0.12. A change to the generated
  code fails `test_matches_golden_file` with a diff. When the change is intended, regenerate
  the files for each jax version and review the diff:

      STATICKERNEL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/compiler/mosaic_gpu/emit/test_emit.py
      STATICKERNEL_UPDATE_GOLDEN=1 .venv-jax0.12/bin/python -m pytest tests/compiler/mosaic_gpu/emit/test_emit.py
"""

import ast
import difflib
import json
import linecache
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from gallery_cases import KERNELS, SCHEDULES, SHAPES, kernel_of, structs
from jax_support import GOLDEN_DIR, RUNS_MOSAIC_GPU, needs_mosaic_gpu, require_golden_dir
from softmax import softmax

REPO = pathlib.Path(__file__).resolve().parents[4]
UPDATE_GOLDEN = os.environ.get("STATICKERNEL_UPDATE_GOLDEN") == "1"
ALLOWED_IMPORTS = {"jax", "jaxlib", "numpy"}


def operands(name: str) -> list[jax.Array]:
    rng = np.random.default_rng(0)
    return [
        jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * 2 - 4).astype(dt)
        for shape, dt in SHAPES[name]
    ]


def repo_relative(source: str, kernel: sk.Kernel[..., Any]) -> str:
    """The source with the kernel's file shown relative to the repository root, whatever the
    working directory was when the example was imported."""
    file = pathlib.Path(kernel.spec.fn.__code__.co_filename).resolve()
    relative = file.relative_to(REPO).as_posix()
    return source.replace(f"{file}:", f"{relative}:")


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # Paths in the generated comments are relative to the working directory.
    monkeypatch.chdir(REPO)


def emit(name: str, backend: str = "interpret") -> str:
    kernel = kernel_of(name)
    return repo_relative(kernel.emit(*structs(name), backend=backend), kernel)


def bits(array: Any) -> np.ndarray:
    """An array's bytes as unsigned ints: compares bit for bit, and saves bf16 losslessly."""
    array = np.asarray(array)
    return array.view(f"u{array.dtype.itemsize}")


# --- the source itself -------------------------------------------------------------------------


@pytest.mark.parametrize("name", KERNELS)
def test_imports_only_jax_and_numpy(name: str) -> None:
    tree = ast.parse(emit(name))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in emitted source"
            imported.add(node.module or "")
    assert imported
    assert {m.split(".")[0] for m in imported} <= ALLOWED_IMPORTS, imported


@pytest.mark.parametrize("name", KERNELS)
def test_defines_a_function_named_after_the_kernel(name: str) -> None:
    tree = ast.parse(emit(name))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert name in functions
    params = [a.arg for a in functions[name].args.args]
    assert params == [o.name for o in KERNELS[name].spec.operands]


def test_header_says_what_and_where() -> None:
    source = emit("softmax")
    header = source.split("\n\n", 1)[0]
    assert "`softmax`" in header
    assert "Declared at: examples/softmax.py:20" in header
    assert "M=100, N=100" in header
    assert "BM=64" in header
    assert "interpret" in header
    assert f"JAX:         {jax.__version__}" in header
    assert header.splitlines()[0].startswith("#")


def test_comments_map_code_to_the_dsl_lines() -> None:
    source = emit("softmax")
    assert "# examples/softmax.py:23: e = jnp.exp(v - sk.max(v, axis=1, keepdims=True))" in source


@sk.kernel(tile={"M": "BM"})
def _double(x_edge_start: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return sk.load(x_edge_start) * 2


def test_edge_start_is_defined_only_where_a_box_starts_at_it() -> None:
    """The traced zero that starts boxes wider than a whole dim is there only for those boxes,
    whatever the operands are called."""
    fits = _double.emit(jax.ShapeDtypeStruct((100, 128), jnp.float32))
    assert "edge_start" not in fits.replace("x_edge_start", "")
    # bf16 rows of 296 keep the block form (64 rows need 39 KB a buffer), in two boxes.
    wide = _double.emit(jax.ShapeDtypeStruct((100, 296), jnp.bfloat16))
    assert 'edge_start = lax.axis_index("M") * 0' in wide


def test_mosaic_gpu_source_is_not_interpreted() -> None:
    assert "INTERPRET = False" in emit("softmax", "mosaic_gpu")
    assert "INTERPRET = True" in emit("softmax", "interpret")


# --- one path: what runs is what is emitted ----------------------------------------------------


@needs_mosaic_gpu
@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_the_running_code_is_the_emitted_source(name: str) -> None:
    """statickernel compiles the emitted text itself, under a `<statickernel:NAME:N>` file name
    that tracebacks show, when the specialization's function is first asked for; the
    bit-identical tests below check the same from outside."""
    kernel = KERNELS[name]
    entry = kernel.specialize(*structs(name), backend="interpret")
    assert entry.source == kernel.emit(*structs(name), backend="interpret")
    assert callable(entry.fn)  # the function is made from the source on first use
    compiled = [
        "".join(linecache.getlines(filename))
        for filename in list(linecache.cache)
        if filename.startswith(f"<statickernel:{name}:")
    ]
    assert entry.source in compiled


# --- determinism -------------------------------------------------------------------------------


def test_deterministic_within_a_process() -> None:
    fresh = softmax.bind()  # a new kernel object: nothing cached
    again = repo_relative(fresh.emit(*structs("softmax"), backend="interpret"), fresh)
    assert again == emit("softmax")


_EMIT_ALL = """
import json, sys
sys.path[:0] = ["examples", "tests"]
import jax, jax.numpy as jnp
from gallery_cases import KERNELS
shapes = json.loads(sys.argv[1])
out = {}
for name, operands in shapes.items():
    kernel = KERNELS[name]
    args = [jax.ShapeDtypeStruct(tuple(s), jnp.dtype(d)) for s, d in operands]
    out[name] = kernel.emit(*args, backend="interpret")
print(json.dumps(out))
"""


def test_deterministic_across_processes() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _EMIT_ALL, json.dumps(SHAPES)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    emitted = json.loads(done.stdout)
    for name in KERNELS:
        assert emitted[name] == emit(name), name


# --- the standalone module ---------------------------------------------------------------------

_STANDALONE = """
import sys
sys.modules["statickernel"] = None  # any import of statickernel now raises ImportError
import importlib.util, json, pathlib
import jax, jax.numpy as jnp, numpy as np

def load(path):
    spec = importlib.util.spec_from_file_location(pathlib.Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

try:
    import statickernel
    blocked = False
except ImportError:
    blocked = True
report = {"blocked": blocked}
for case in json.loads(pathlib.Path(sys.argv[1]).read_text()):
    name = case["name"]
    args = [jnp.asarray(np.load(path).view(jnp.dtype(dt))) for path, dt in case["inputs"]]
    outputs = jax.tree.leaves(getattr(load(case["interpret"]), name)(*args))
    for i, out in enumerate(outputs):
        out = np.asarray(out)
        np.save(f"{case['prefix']}_out{i}.npy", out.view(f"u{out.dtype.itemsize}"))
    mosaic = load(case["mosaic_gpu"])
    sds = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    lowered = jax.jit(getattr(mosaic, name)).trace(*sds).lower(lowering_platforms=("cuda",))
    report[name] = {
        "outputs": len(outputs),
        "interpret_flag": mosaic.INTERPRET,
        "mosaic_gpu_call": "mosaic_gpu" in lowered.as_text(),
    }
report["statickernel_modules"] = sorted(m for m in sys.modules if m.startswith("statickernel") and sys.modules[m] is not None)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Runs every gallery kernel's emitted modules in one process that blocks statickernel,
    and the same kernels through statickernel here; returns both sides."""
    folder = tmp_path_factory.mktemp("standalone")
    cases, expected = [], {}
    for name, kernel in KERNELS.items():
        args = operands(name)
        inputs = []
        for i, arg in enumerate(args):
            path = folder / f"{name}_in{i}.npy"
            np.save(path, bits(arg))
            inputs.append((str(path), str(arg.dtype)))
        modules = {}
        for backend in ("interpret", "mosaic_gpu"):
            path = folder / f"{name}_{backend}.py"
            path.write_text(kernel.emit(*args, backend=backend))
            modules[backend] = str(path)
        expected[name] = [bits(out) for out in jax.tree.leaves(kernel(*args, backend="interpret"))]
        cases.append({"name": name, "inputs": inputs, "prefix": str(folder / name), **modules})
    manifest = folder / "cases.json"
    manifest.write_text(json.dumps(cases))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_STANDALONE), str(manifest)],
        cwd=folder,
        capture_output=True,
        text=True,
        # A guard against a hang, not a time limit: the whole gallery runs in the subprocess,
        # which shares the CPUs with the other test workers, and took over 600 s in a
        # parallel run on a loaded 2-CPU machine.
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {"report": report, "expected": expected, "folder": folder}


@pytest.mark.slow
def test_standalone_process_cannot_import_statickernel(standalone: dict[str, Any]) -> None:
    assert standalone["report"]["blocked"] is True
    assert standalone["report"]["statickernel_modules"] == []


@pytest.mark.slow
@pytest.mark.parametrize("name", KERNELS)
def test_standalone_module_is_bit_identical(standalone: dict[str, Any], name: str) -> None:
    expected = standalone["expected"][name]
    assert standalone["report"][name]["outputs"] == len(expected)
    for i, want in enumerate(expected):
        got = np.load(standalone["folder"] / f"{name}_out{i}.npy")
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want), f"{name} output {i} differs from statickernel's"


@pytest.mark.slow
@pytest.mark.parametrize("name", KERNELS)
def test_standalone_module_cross_lowers_for_cuda(standalone: dict[str, Any], name: str) -> None:
    assert standalone["report"][name]["interpret_flag"] is False
    assert standalone["report"][name]["mosaic_gpu_call"] is True


# --- golden files ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*KERNELS, *SCHEDULES])
def test_matches_golden_file(name: str) -> None:
    source = emit(name)
    path = GOLDEN_DIR / f"{name}.py"
    if UPDATE_GOLDEN:
        if not RUNS_MOSAIC_GPU:
            pytest.skip(f"golden modules pin what runs; jax {jax.__version__} runs none")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        return
    require_golden_dir()
    assert path.is_file(), (
        f"{path.relative_to(REPO)} is missing; run with STATICKERNEL_UPDATE_GOLDEN=1"
    )
    golden = path.read_text(encoding="utf-8")
    if source != golden:
        diff = "".join(
            difflib.unified_diff(
                golden.splitlines(keepends=True),
                source.splitlines(keepends=True),
                fromfile=f"{path.relative_to(REPO)} (golden)",
                tofile=f"{name}.emit(...) (now)",
            )
        )
        pytest.fail(
            f"the emitted source of `{name}` changed. If that is intended, regenerate the "
            "golden files with STATICKERNEL_UPDATE_GOLDEN=1 (see this module's docstring) and "
            f"review the diff:\n{diff}",
            pytrace=False,
        )


def test_golden_files_cover_the_gallery() -> None:
    if UPDATE_GOLDEN:
        pytest.skip("the golden files are being regenerated")
    require_golden_dir()
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.py")) == sorted([*KERNELS, *SCHEDULES])


def test_emitted_source_is_already_formatted() -> None:
    """The generated modules are a fixed point of the formatter: readable as written."""
    ruff = pathlib.Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed next to this interpreter")
    require_golden_dir()
    files = sorted(str(p) for p in GOLDEN_DIR.glob("*.py"))
    result = subprocess.run(
        [str(ruff), "format", "--check", "--isolated", "--line-length", "100", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
