"""Every name a generated module binds, used as an operand's name, either leaves the module
as it was (the operand's own names renamed, nothing else touched) or is refused at the
declaration with an error that names a free alternative.

The golden modules are the oracle: in each one, renaming an operand to a name is safe exactly
when the renamed operand's identifiers (`x`, `x_gmem`, `x_smem`, `x_barrier`, ...) meet none
of the module's other identifiers, so the renamed module is the same program."""

import ast
import builtins
import dataclasses
import functools
import pathlib
import re
import textwrap

import jax
import jax.numpy as jnp
import pytest

import statickernel as sk
from statickernel._compiler.ir import names
from statickernel._errors import AnnotationError

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
# The identifiers an operand `x` gives the module, by the suffix added to its name.
OPERAND_SUFFIXES = ("", "_gmem", "_smem", "_barrier", "_entry")


@functools.cache
def _goldens() -> tuple[pathlib.Path, ...]:
    return tuple(sorted(GOLDEN.rglob("*.py")))


def _header(source: str, field: str) -> str:
    found = re.search(rf"^# {field}:\s+(.*)$", source, re.MULTILINE)
    assert found, field
    return found[1]


def _identifiers(tree: ast.AST, local: frozenset[str] = frozenset()) -> set[str]:
    """Every name the module binds or reads: variables, parameters, functions, imports. A
    lambda's parameters are its own (`lambda k: (0, k)` takes nothing from outside), so
    they and their reads inside it do not count."""
    found: set[str] = set()
    if isinstance(tree, ast.Lambda):
        params = frozenset(a.arg for a in tree.args.args)
        return _identifiers(tree.body, local | params)
    if isinstance(tree, ast.Name) and tree.id not in local:
        found.add(tree.id)
    elif isinstance(tree, ast.arg) and tree.arg not in local:
        found.add(tree.arg)
    elif isinstance(tree, ast.FunctionDef | ast.ClassDef):
        found.add(tree.name)
    elif isinstance(tree, ast.Import | ast.ImportFrom):
        found |= {(a.asname or a.name).split(".")[0] for a in tree.names}
    for child in ast.iter_child_nodes(tree):
        found |= _identifiers(child, local)
    return found


@functools.cache
def _golden(path: pathlib.Path) -> tuple[str, tuple[str, ...], tuple[str, ...], frozenset[str]]:
    """A golden module's kernel, operands, dims and identifiers."""
    source = path.read_text()
    kernel = re.search(r"kernel `(\w+)`", source)
    assert kernel
    operands = tuple(o.split(":")[0].strip() for o in _header(source, "Operands").split(", "))
    dims = tuple(d.split("=")[0] for d in _header(source, "Dims").split(", "))
    return kernel[1], operands, dims, frozenset(_identifiers(ast.parse(source)))


def _results(path: pathlib.Path) -> list[str]:
    identifiers = _golden(path)[3]
    return sorted(i[: -len("_gmem")] for i in identifiers if re.fullmatch(r"result\d*_gmem", i))


def _candidates() -> list[str]:
    """Every name any golden module binds or reads, and the builtins."""
    found: set[str] = set()
    for path in _goldens():
        found |= _golden(path)[3]
    return sorted(found | {n for n in dir(builtins) if n.isidentifier() and n[0] != "_"})


def _collides(path: pathlib.Path, operand: str, name: str) -> str | None:
    """Which identifier of the golden module `name` would take if `operand` were named so."""
    identifiers = _golden(path)[3]
    own = {operand + s for s in OPERAND_SUFFIXES}
    # The copies of rows an index picks name their loop and locals after the array too.
    own |= {names.indexed_part(operand, part) for part in names.INDEXED_PARTS}
    own |= {names.indexed_loop(operand, verb) for verb in ("gather", "scatter")}
    others = identifiers - own
    for suffix in OPERAND_SUFFIXES:
        if operand + suffix in identifiers and name + suffix in others:
            return name + suffix
    return None


@pytest.mark.parametrize("path", _goldens(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_name_that_would_collide_is_refused(path: pathlib.Path) -> None:
    kernel, operands, dims, _ = _golden(path)
    missed = []
    for operand in operands:
        for name in _candidates():
            if name in operands or name == kernel or name in names.GIVEN_AROUND:
                continue
            taken = _collides(path, operand, name)
            renamed = [name if o == operand else o for o in operands]
            if taken and names.clash(renamed, _results(path), dims, kernel) is None:
                missed.append(f"{operand} -> {name} (takes {taken})")
    assert not missed, f"accepted, but the module already binds them: {missed}"


def test_the_warp_specialized_locals_are_reserved() -> None:
    """The warp-specialized block function's fixed locals are names the declaration refuses,
    and the module binds each; so are the names of the families it derives from a dim, an
    array, a loop or a carry."""
    fixed = dataclasses.astuple(names.WARP_SPECIALIZED)
    assert set(fixed) <= set(names.BLOCK_NAMES)
    assert set(fixed) <= _golden(GOLDEN / "jax-0.11.2" / "matmul.py")[3]
    derived = [
        names.cta_tile_index("M"),
        names.batch_entry("bias"),
        names.loop_function(0),
        names.loop_function(12),
        names.accumulator_ref("v0"),
    ]
    for name in (*fixed, *derived):
        found = names.clash([name, "b"], ["result"], ["M", "K", "N"], "matmul")
        assert found is not None and found[0] == name, name
    # Ragged rows add their own fixed locals, which the grouped matmul's module binds.
    ragged = dataclasses.astuple(names.RAGGED)
    assert set(ragged) <= set(names.BLOCK_NAMES)
    assert set(ragged) <= _golden(GOLDEN / "jax-0.11.2" / "grouped_matmul.py")[3]
    for name in ragged:
        found = names.clash([name, "w"], ["result"], ["M", "K", "N"], "grouped_matmul")
        assert found is not None and found[0] == name, name
    # Clusters of CTAs add theirs, which the clustered matmul's module binds.
    clustered = (names.CLUSTER.cta, names.cluster_tile_index("M"))
    assert names.CLUSTER.cta in names.BLOCK_NAMES
    assert set(clustered) <= _golden(GOLDEN / "jax-0.11.2" / "matmul-cluster.py")[3]
    for name in clustered:
        found = names.clash([name, "b"], ["result"], ["M", "K", "N"], "matmul")
        assert found is not None and found[0] == name, name
    # The index maps' parameter is the lambda's own: an operand may be named so.
    assert names.clash([names.INDEX_MAP_STEP, "b"], ["result"], ["M", "K", "N"]) is None


def test_the_oracle_finds_collisions() -> None:
    path = GOLDEN / "jax-0.11.2" / "add.py"
    assert _collides(path, "x", "v0") == "v0"
    assert _collides(path, "x", "y") == "y"
    assert _collides(path, "x", "jnp") == "jnp"
    assert _collides(path, "x", "result") == "result"
    assert _collides(path, "x", "a") is None
    assert _collides(path, "x", "inputs") is None


SOFTMAX = """
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float
import statickernel as sk

@sk.kernel(tile={{"M": "BM"}})
def softmax({x}: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    v = sk.load({x}, fill=-jnp.inf)
    e = jnp.exp(v - sk.max(v, axis=1, keepdims=True))
    return e / sk.sum(e, axis=1, keepdims=True)
"""


def _softmax(name: str) -> sk.Kernel:
    return _declare(SOFTMAX, name)


ADD = """
from jaxtyping import Array, Float
import statickernel as sk

@sk.kernel(tile={{"M": "BM", "N": "BN"}})
def add({x}: Float[Array, "M N"], y: Float[Array, "M N"], *, BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 128) -> Float[Array, "M N"]:
    return sk.load({x}) + sk.load(y)
"""


def _declare(template: str, name: str) -> sk.Kernel:
    scope: dict = {}
    exec(textwrap.dedent(template.format(x=name)), scope)
    return next(v for v in scope.values() if isinstance(v, sk.Kernel))


def _renamed(source: str, operand: str, name: str, arrays: tuple[str, ...] = ()) -> str:
    """`source` with the generator's locals given around `arrays` (`r` as `r_` where an
    operand is `r`), and then the operand `operand` and its own identifiers named `name`:
    identifiers only, never strings (a grid axis is named "cta" whatever the locals are)."""
    given = names.LocalNames.around(arrays, ())
    renames = {
        local: given.local(local) for local in names.GIVEN_AROUND if given.local(local) != local
    }
    renames |= {operand + suffix: name + suffix for suffix in OPERAND_SUFFIXES}

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            node.id = renames.get(node.id, node.id)
            return node

        def visit_arg(self, node: ast.arg) -> ast.arg:
            node.arg = renames.get(node.arg, node.arg)
            return node

        def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
            node.name = renames.get(node.name, node.name)
            self.generic_visit(node)
            return node

    return ast.unparse(Rename().visit(ast.parse(source)))


def _same_program(a: str, b: str) -> bool:
    # The printer may wrap a longer name's lines differently; comments show the user's lines.
    return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))


@pytest.mark.parametrize(
    "name", ["loop0", "v3", "row_ok", "col_position", "store_results", "result", "jnp"]
)
def test_a_name_the_module_needs_is_refused_with_a_free_name(name: str) -> None:
    with pytest.raises(AnnotationError) as info:
        _softmax(name)
    message = str(info.value)
    assert f"operand `{name}`" in message
    fix = re.search(r"rename `\w+` in the signature and the body, e.g. to `(\w+)`", message)
    assert fix, message
    _softmax(fix[1])  # the suggested name declares


ROW_FORM_LOCALS = ["r", "row", "row_start", "load_row", "compute_row", "store_row"]


@pytest.mark.parametrize("name", ROW_FORM_LOCALS)
def test_the_row_form_gives_its_locals_around_an_operand(name: str) -> None:
    assert set(ROW_FORM_LOCALS) <= set(names.GIVEN_AROUND)
    x = jnp.linspace(-3.0, 3.0, 8 * 16384, dtype=jnp.float32).reshape(8, 16384)
    kernel = _softmax(name)
    assert "row form" in str(kernel.plan(x))
    assert _same_program(
        kernel.emit(x), _renamed(_softmax("x").emit(x), "x", name, (name, "result"))
    )
    want = jnp.exp(x) / jnp.exp(x).sum(axis=1, keepdims=True)
    assert jnp.allclose(kernel(x), want, rtol=1e-5)


PERSISTENT_LOCALS = ["block", "cta", "slot", "i", "trips", "load_block", "refill"]


@pytest.mark.parametrize("name", PERSISTENT_LOCALS)
def test_a_persistent_launch_gives_its_locals_around_an_operand(name: str) -> None:
    assert set(PERSISTENT_LOCALS) <= set(names.GIVEN_AROUND)
    x = jax.ShapeDtypeStruct((8192, 8192), jnp.float32)
    baseline = _declare(ADD, "x").emit(x, x)
    assert "block = cta + i" in baseline  # the persistent launch
    renamed = _declare(ADD, name).emit(x, x)
    assert _same_program(renamed, _renamed(baseline, "x", name, (name, "y", "result")))


@pytest.mark.parametrize("name", ["slot", "i", "cta"])
def test_the_row_forms_persistent_launch_gives_its_locals_around_an_operand(name: str) -> None:
    x = jax.ShapeDtypeStruct((16384, 4096), jnp.float32)
    baseline = _softmax("x").emit(x)
    assert "def load_block(i, slot):" in baseline  # the row form's persistent launch
    renamed = _softmax(name).emit(x)
    assert _same_program(renamed, _renamed(baseline, "x", name, (name, "result")))


@pytest.mark.parametrize("columns", [96, 16384], ids=["block form", "row form"])
@pytest.mark.parametrize("name", ["x_gmem", "rows", "inputs"])
def test_an_accepted_name_changes_only_the_operands_own_names(columns: int, name: str) -> None:
    x = jnp.linspace(-3.0, 3.0, 8 * columns, dtype=jnp.float32).reshape(8, columns)
    baseline, renamed = _softmax("x").emit(x), _softmax(name).emit(x)
    assert _same_program(renamed, _renamed(baseline, "x", name))
    got = _softmax(name)(x)
    assert jnp.allclose(got, jnp.exp(x) / jnp.exp(x).sum(axis=1, keepdims=True), rtol=1e-5)
