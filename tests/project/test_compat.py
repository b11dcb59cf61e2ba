"""`_compat`, the one module that reaches into jax's and jaxtyping's internals: no other module
of the package does, and each of its functions does what its callers rely on, on the installed
jax and jaxtyping."""

import ast
import importlib.util
import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.extend import core as jex_core
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Float, Float32, Int, Shaped

import statickernel as sk
from markers import line_finder
from statickernel import _compat

PACKAGE_DIR = pathlib.Path(sk.__file__).resolve().parent
line_of = line_finder(__file__)

# --- only _compat touches internals ---------------------------------------------------------

# Text that names a private module of jax or jaxtyping, or jax's semi-public interpreters,
# anywhere in a module: imports, importlib strings, comments and docstrings alike.
_PRIVATE_TEXT = re.compile(
    r"\bjax(lib)?\._src\b|\bjaxtyping\._|\bjax\.interpreters\b|\bversion\(\s*['\"]jax"
)
_JAX_PACKAGES = ("jax", "jaxlib", "jaxtyping")
# Probes that still live elsewhere until their module is pointed at _compat: module -> why.
_PENDING_PROBES: dict[str, str] = {}
# Modules that read jax's installed version to show it, never to compare it: module -> why.
_SHOWS_JAX_VERSION: dict[str, str] = {
    "cli/parser.py": "`statickernel --version` shows it from jax's metadata, without the "
    "cost of importing jax (and so of importing _compat)",
}


def _private_module(module: str) -> bool:
    parts = module.split(".")
    if parts[0] not in _JAX_PACKAGES:
        return False
    return module.startswith("jax.interpreters") or any(p.startswith("_") for p in parts[1:])


def _jax_names(tree: ast.AST) -> set[str]:
    """The names a module binds by importing from jax, jaxlib or jaxtyping, in any scope."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in _JAX_PACKAGES:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] in _JAX_PACKAGES
        ):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def violations(source: str) -> list[str]:
    """What in a module's source only _compat may do: name or import jax's internals, probe a
    jax module with hasattr/getattr, or compare jax's version."""
    found = [f"mentions {m.group(0)!r}" for m in _PRIVATE_TEXT.finditer(source)]
    tree = ast.parse(source)
    jax_names = _jax_names(tree)
    in_fstring: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue):
            in_fstring.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [
                f"line {line}: imports {a.name}" for a in node.names if _private_module(a.name)
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [f"line {line}: imports {m}" for m in modules if _private_module(m)][:1]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("hasattr", "getattr")
            and node.args
            and _root(node.args[0]) in jax_names
        ):
            found.append(f"line {line}: probes {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "__version__"
            and _root(node.value) in jax_names
            and id(node) not in in_fstring  # shown to the user, not tested
        ):
            found.append(f"line {line}: reads {ast.unparse(node)}")
    return found


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE_DIR.rglob("*.py") if p.name != "_compat.py")


def _name(path: pathlib.Path) -> str:
    """A module's file inside the package: `cli/parser.py`."""
    return path.relative_to(PACKAGE_DIR).as_posix()


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_only_compat_touches_jax_internals(path: pathlib.Path) -> None:
    found = violations(path.read_text())
    if _name(path) in _PENDING_PROBES:
        found = [f for f in found if "probes" not in f]
    if _name(path) in _SHOWS_JAX_VERSION:
        found = [f for f in found if f != "mentions 'version(\"jax'"]
    assert not found, f"{_name(path)}: {found}; move it into _compat.py"


@pytest.mark.parametrize(
    "source",
    [
        "from jax._src import source_info_util",
        "import jax._src.core",
        "from jax import _src",
        "from jax.interpreters import mlir",
        "import jax.interpreters.partial_eval as pe",
        "from jax import interpreters",
        "from jaxtyping._array_types import _NamedDim",
        "from jaxtyping import _array_types",
        "import importlib\nm = importlib.import_module('jax._src.pallas')",
        "def f():\n    from jax.experimental.pallas import mosaic_gpu as plgpu\n"
        "    return hasattr(plgpu, 'store')",
        "import jax\nOK = getattr(jax.lax, 'new_op', None)",
        "import jax\nNEW = jax.__version__ >= '0.12'",
        "import importlib.metadata\nv = importlib.metadata.version('jax')",
    ],
)
def test_the_scan_catches(source: str) -> None:
    assert violations(source), source


@pytest.mark.parametrize(
    "source",
    [
        "import jax\nfrom jax.extend import core\nfrom jaxtyping import AbstractArray",
        "from jax import core\nx = core.ShapedArray((1,), 'float32')",
        "import jax\nprint(f'jax {jax.__version__}')",
        "def f(self):\n    return self._src(1)",
        "def f(x):\n    return hasattr(x, 'shape')",
        "from ._compat import user_frames",
    ],
)
def test_the_scan_allows(source: str) -> None:
    assert not violations(source), source


def test_the_package_imports_compat_for_its_internals() -> None:
    users = {_name(p) for p in _modules() if "_compat import" in p.read_text()}
    assert {
        "_compiler/trace/body.py",
        "aot/compile.py",
        "language/loops.py",
        "runtime/interpreter.py",
        "_compiler/declare/arrays.py",
    } <= users


# --- jaxtyping annotations ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dims", "names"),
    [
        ("M N", ("M", "N")),
        (" M", ("M",)),
        ("B M N", ("B", "M", "N")),
        ("M 4", None),
        ("M rows=4", None),
        ("M+1 N", None),
        ("_ N", None),
        ("_M N", None),
        ("#M N", None),
        ("*batch M", None),
        ("... M", None),
    ],
)
def test_plain_dim_names(dims: str, names: tuple[str, ...] | None) -> None:
    assert _compat.plain_dim_names(Float[Array, dims]) == names


def test_annotation_dtypes() -> None:
    assert _compat.annotation_dtypes(Float32[Array, "M N"]) == ("float32",)
    assert _compat.annotation_dtypes(Shaped[Array, "M N"]) is None
    floats = _compat.annotation_dtypes(Float[Array, "M N"])
    assert floats is not None and {"float32", "bfloat16", "float16"} <= set(floats)
    ints = _compat.annotation_dtypes(Int[Array, "M N"])
    assert ints is not None and "int32" in ints and "float32" not in ints


def test_public_type_name_spells_jax_array_publicly() -> None:
    assert _compat.public_type_name(jax.Array) == "Array"
    assert _compat.public_type_name(Float[Array, "M N"]) == "Float[Array, 'M N']"
    assert _compat.public_type_name(Float[jax.Array, "M"]) == "Float[Array, 'M']"
    assert _compat.public_type_name(int) == "int"
    assert _compat.public_type_name(3) is None


# --- tracing --------------------------------------------------------------------------------


def test_user_frames_start_at_the_line_that_traced_the_equation() -> None:
    closed = jax.make_jaxpr(lambda x: x * 2.0)(jnp.ones(3))  # @traced
    frames = list(_compat.user_frames(closed.jaxpr.eqns[0]))
    assert frames, "no user frames"
    assert (frames[0].file_name, frames[0].start_line) == (__file__, line_of("traced"))
    jax_dir = pathlib.Path(jax.__file__).resolve().parent
    assert not any(pathlib.Path(f.file_name).resolve().is_relative_to(jax_dir) for f in frames)


def test_user_frames_of_an_equation_without_a_traceback() -> None:
    class NoTraceback:
        source_info = None

    assert list(_compat.user_frames(NoTraceback())) == []


def test_jnp_counting_function_names_the_reductions_that_divide_by_a_count() -> None:
    """jnp.mean's and jnp.var's divisions by the count they read from the shape are known by
    the function of jax.numpy that traced them; a division the user writes is not."""

    def body(x: jax.Array) -> tuple[jax.Array, ...]:
        return jnp.mean(x, axis=0), jnp.var(x, axis=0), jnp.sum(x, axis=0) / 4.0

    closed = jax.make_jaxpr(body)(jnp.ones((4, 3)))
    eqns = list(closed.jaxpr.eqns)
    while any("jaxpr" in e.params for e in eqns):  # jnp.var is a jitted function
        eqns = [i for e in eqns for i in (e.params["jaxpr"].eqns if "jaxpr" in e.params else [e])]
    divisions = [(e.primitive.name, _compat.jnp_counting_function(e)) for e in eqns]
    divisions = [d for d in divisions if d[0] in ("div", "sub")]
    # jnp.var: its mean, the values less it, the count less the correction, the division.
    want = [("div", "mean"), ("div", "mean"), ("sub", "_var"), ("sub", "_var"), ("div", "_var")]
    assert divisions == [*want, ("div", None)]


def test_convert_constvars_jaxpr_makes_the_constants_leading_inputs() -> None:
    const = jnp.arange(4.0)
    closed = jax.make_jaxpr(lambda x: x * const)(jnp.ones(4))
    assert len(closed.consts) == 1
    converted = _compat.convert_constvars_jaxpr(closed.jaxpr)
    assert not converted.constvars
    assert len(converted.invars) == 2
    fn = jex_core.jaxpr_as_fun(jex_core.ClosedJaxpr(converted, ()))
    (out,) = fn(*closed.consts, jnp.full(4, 2.0))
    np.testing.assert_array_equal(out, np.arange(4.0) * 2)


def test_debug_print_arguments_are_the_prints_own() -> None:
    """Both spellings of a print bind one `debug_print` equation whose parameters give back
    the arguments: traced values as the operands given, the rest as they were passed."""

    def body(x: jax.Array) -> jax.Array:
        jax.debug.print("{} {m} {s}", x, m=x * 2, s="text")
        pl.debug_print("v {}", x)
        return x

    eqns = [
        e for e in jax.make_jaxpr(body)(jnp.ones(3)).jaxpr.eqns if e.primitive.name == "debug_print"
    ]
    assert len(eqns) == 2
    args, kwargs = _compat.debug_print_arguments(dict(eqns[0].params), ["x", "m"])
    assert (tuple(args), dict(kwargs)) == (("x",), {"m": "m", "s": "text"})
    args, kwargs = _compat.debug_print_arguments(dict(eqns[1].params), ["x"])
    assert (tuple(args), dict(kwargs)) == (("x",), {})


# --- primitives -----------------------------------------------------------------------------

_SEEN_FOR_EXPORT: list[bool] = []


def _identity_p() -> Any:
    prim = jex_core.Primitive("statickernel_compat_test_identity")
    prim.def_impl(lambda x: x)
    prim.def_abstract_eval(lambda aval: aval)

    def lower(ctx: Any, x: Any) -> Any:
        _SEEN_FOR_EXPORT.append(_compat.lowering_for_export(ctx))
        return [x]

    _compat.register_lowering(prim, lower)
    _compat.register_batching_rule(prim, lambda args, dims: (prim.bind(*args), dims[0]))
    return prim


_IDENTITY_P = _identity_p()


def test_registered_lowering_and_batching_rule() -> None:
    x = jnp.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(jax.jit(_IDENTITY_P.bind)(x), x)
    np.testing.assert_array_equal(jax.vmap(_IDENTITY_P.bind)(x), x)
    np.testing.assert_array_equal(jax.jit(jax.vmap(_IDENTITY_P.bind, 1, 1))(x), x)


def test_lowering_for_export() -> None:
    _SEEN_FOR_EXPORT.clear()
    jax.jit(_IDENTITY_P.bind).lower(jnp.ones(5))
    assert _SEEN_FOR_EXPORT == [False]
    _SEEN_FOR_EXPORT.clear()
    jax.export.export(jax.jit(_IDENTITY_P.bind))(jnp.ones(7))
    assert _SEEN_FOR_EXPORT == [True]


def test_mesh_manual_axes() -> None:
    assert _compat.mesh_manual_axes() is None
    seen: list[Any] = []

    def body(x: Any) -> Any:
        seen.append(_compat.mesh_manual_axes())
        return x

    device = jax.devices()[:1]
    mesh = jax.make_mesh((1, 1), ("a", "b"), axis_types=(AxisType.Auto,) * 2, devices=device)
    x = jnp.ones((2, 2))
    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("a"), out_specs=P("a")))(x)
    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("a"), out_specs=P("a"), axis_names={"a"}))(x)
    assert seen == [None, (("a",), ("b",))]


# --- Mosaic GPU and the CUDA plugin ---------------------------------------------------------


def test_the_interpreter_can_be_reset() -> None:
    assert _compat.reset_mosaic_gpu_interpreter() is True


def test_has_plgpu_store_is_what_jax_has() -> None:
    from jax.experimental.pallas import mosaic_gpu as plgpu

    assert _compat.has_plgpu_store() is hasattr(plgpu, "store")


def test_cuda_plugin_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def installed(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except ImportError:
            return False

    assert _compat.cuda_plugin_installed() is any(installed(m) for m in _compat.CUDA_PLUGINS)
    monkeypatch.setattr(_compat, "CUDA_PLUGINS", ("no_such_package.plugin", "json"))
    assert _compat.cuda_plugin_installed() is True
    monkeypatch.setattr(_compat, "CUDA_PLUGINS", ("no_such_package.plugin",))
    assert _compat.cuda_plugin_installed() is False
