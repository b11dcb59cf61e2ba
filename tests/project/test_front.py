"""The front and its back-ends: the front (declare, bind, trace, the cross-block rewrite, the
IR, the compile path's stages and the language) imports no back-end's module; it reaches a
back-end only through the registry (`_compiler/backends.py`), for a target.

The GPU rules the front still checks itself are listed here, each with why; the list may only
shrink (each goes to the target's limits as the TPU back-end arrives)."""

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

# Front modules that still read Mosaic GPU's limits, and why.
_GPU_HARDWARE = {"_compiler.mosaic_gpu", "_compiler.mosaic_gpu.hardware"}
GPU_RULES_IN_THE_FRONT = {
    # A call's dims bound as int32 (Mosaic GPU's index math) and within CUDA's grid.
    "_compiler.declare.limits": _GPU_HARDWARE,
    # A page's copy a whole number of 128-byte chunks (paged operands, at binding).
    "_compiler.declare.binding": _GPU_HARDWARE,
    # A shifted load's offset within one TMA box.
    "language.tile": _GPU_HARDWARE,
    # A slice's start on a TMA copy's 128-byte shared-memory alignment.
    "language.context": _GPU_HARDWARE,
}


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
