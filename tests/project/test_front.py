"""The front and its back-ends: the front (declare, bind, trace, the cross-block rewrite, the
IR, the compile path's stages and the language) imports no back-end's module; it reaches a
back-end only through the registry (`_compiler/backends.py`), for a target.

The GPU rules the front would still check itself would be listed here, each with why; the list
is empty and may only stay so: the front reads a target's bounds from its limits."""

import pytest
from test_structure import _graph

import statickernel._compiler.backends as backends
from statickernel._compiler.backends import Backend, backend_for
from statickernel._targets import TARGETS, BackendKind

FRONT = ("_compiler.declare", "_compiler.trace", "_compiler.ir", "language")
FRONT_MODULES = (
    "_compiler.build",
    "_compiler.unit",
    "_compiler.backends",
    "_dtypes",
    "_errors",
    "_where",
    "_targets",
)
BACKEND_PACKAGES = tuple(f"_compiler.{kind.value}" for kind in BackendKind)

# Front modules that still read a back-end's rules, and why: none. The front checks a target's
# limits as data (`TargetLimits` in `_targets.py`), given by the compile path; a rule of one
# back-end alone is checked in that back-end.
GPU_RULES_IN_THE_FRONT: dict[str, set[str]] = {}


def _front(name: str) -> bool:
    return name in FRONT_MODULES or any(name == p or name.startswith(p + ".") for p in FRONT)


def _in_a_backend(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in BACKEND_PACKAGES)


def test_the_front_imports_no_backend() -> None:
    reaching = {
        name: {target for target in targets if _in_a_backend(target)}
        for name, targets in _graph().items()
        if _front(name)
    }
    reaching = {name: targets for name, targets in reaching.items() if targets}
    assert reaching == GPU_RULES_IN_THE_FRONT, (
        "the front imports a back-end's module; reach it through backends.backend_for, or "
        "take the rule to the target's limits"
    )


def test_the_front_names_are_modules() -> None:
    graph = _graph()
    assert all(name in graph for name in FRONT_MODULES)
    assert all(any(n.startswith(p) for n in graph) for p in FRONT)


def test_the_front_imports_no_mosaic_gpu_of_jax() -> None:
    import ast
    import pathlib

    package = pathlib.Path(backends.__file__).resolve().parents[1]
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(package).with_suffix("").parts).removesuffix(".__init__")
        if not _front(name):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            jax = [m for m in modules if m.startswith("jax")]
            assert not any("mosaic_gpu" in m for m in jax), (name, ast.unparse(node))


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_target_names_a_backend(target: str) -> None:
    backend = backend_for(TARGETS[target])
    assert isinstance(backend, Backend)
    assert (
        type(backend).__module__
        == f"statickernel._compiler.{TARGETS[target].backend.value}.backend"
    )


def test_every_backend_kind_is_registered() -> None:
    assert set(backends._MODULES) == set(BackendKind)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_mosaic_gpu_target_has_the_limits_of_its_hardware(target: str) -> None:
    from statickernel._compiler.mosaic_gpu import hardware as hw

    limits = TARGETS[target].limits
    assert TARGETS[target].backend is BackendKind.MOSAIC_GPU
    assert limits.index_max == hw.INT32_MAX == 2**31 - 1 and limits.index_type == "int32"
    assert limits.copy_bytes_quantum == hw.COPY_BYTES_QUANTUM == 128
    assert limits.copy_extent_max == hw.TMA_BOX_MAX == 256
    assert limits.index_math == "Mosaic GPU's int32 index math"
