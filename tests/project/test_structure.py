"""The package's shape stays what docs/design.md describes: modules of one job each, small
enough to read, whose imports flow one way.

Every import between the package's modules counts, wherever it is written: at the top, inside
a function (a lazy import is a cycle put off, not removed) or under `TYPE_CHECKING`.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "src" / "statickernel"
MAX_LINES = 600


def _module_name(path: pathlib.Path) -> str:
    """A module's dotted name inside the package; a sub-package's `__init__.py` is the
    sub-package (`cli`), the package's own is `__init__`."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The package modules `name` imports, resolved from its relative and absolute imports."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == "__init__":
        package = []
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                parts = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.split(".")[0] == "statickernel":
                parts = node.module.split(".")[1:]
            else:
                continue
            candidates = [".".join(parts)] + [".".join([*parts, a.name]) for a in node.names]
            found |= {c for c in candidates if c in known}
            if not parts and not node.names:
                found.add("__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "statickernel" and ".".join(parts[1:]) in known:
                    found.add(".".join(parts[1:]))
    found.discard(name)
    # The package's __init__ imports everything; importing it from below is what is refused.
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_package_has_no_import_cycles() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_module_is_over_600_lines(name: str) -> None:
    lines = len(_modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name}.py has {lines} lines; cut it along a concept"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_reader_sees_lazy_and_type_checking_imports(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from ._a import x\n"
        "if TYPE_CHECKING:\n    from ._b import y\n"
        "def f():\n    from . import _c\n    import statickernel._d\n"
    )
    known = {"_a", "_b", "_c", "_d", "m"}
    assert _imports("m", module, known) == {"_a", "_b", "_c", "_d"}


def test_the_lazy_package_names_what_it_imports() -> None:
    """`statickernel/__init__.py` lists the public names in `__all__` and imports them from
    `_api` on first use; type checkers read them through its one `from ._api import *`.
    `_api.__all__` must name the same ones, in the same order."""
    import ast

    import statickernel
    from statickernel import _api

    init = ast.parse((PACKAGE / "__init__.py").read_text())
    guarded = next(
        node
        for node in init.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    )
    assert [ast.unparse(node) for node in guarded.body] == ["from ._api import *"]
    assert _api.__all__ == statickernel.__all__


# Functions of the compiler over 100 lines, and the most each may keep until it is cut up:
# these may only shrink, and no other function may pass 100 lines. None is left.
MAX_FUNCTION_LINES = 100
OVERSIZE_FUNCTIONS: dict[str, int] = {}


def _compiler_functions() -> dict[str, int]:
    lengths = {}
    for name, path in _modules().items():
        if not name.startswith("_compiler"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lengths[f"{name}.{node.name}"] = node.end_lineno - node.lineno + 1
    return lengths


def test_no_compiler_function_is_over_100_lines() -> None:
    lengths = _compiler_functions()
    over = {
        name: lines
        for name, lines in lengths.items()
        if lines > OVERSIZE_FUNCTIONS.get(name, MAX_FUNCTION_LINES)
    }
    assert not over, f"functions to cut along a concept (lines): {over}"
    shrunk = {
        n: lengths.get(n, 0) for n, most in OVERSIZE_FUNCTIONS.items() if lengths.get(n, 0) < most
    }
    assert not shrunk, f"lower OVERSIZE_FUNCTIONS to what these are now: {shrunk}"


def _plans_patched(tree: ast.AST) -> list[str]:
    """The `dataclasses.replace` calls of `tree` that patch a made plan: a compile's plan
    replaced (`plan=`), or a replace of a `.plan`, or of a name bound to `make_plan(...)`,
    `launch_plan(...)` or `LaunchPlan(...)` in the same function."""
    makers = {"make_plan", "launch_plan", "LaunchPlan"}
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        plans = {
            target.id
            for node in ast.walk(function)
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name | ast.Attribute)
            and (getattr(node.value.func, "id", None) or getattr(node.value.func, "attr", None))
            in makers
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(function):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("replace")):
                continue
            first = node.args[0] if node.args else None
            if (
                any(k.arg == "plan" for k in node.keywords)
                or (isinstance(first, ast.Attribute) and first.attr == "plan")
                or (isinstance(first, ast.Name) and first.id in plans)
            ):
                found.append(ast.unparse(node))
    return found


def test_no_plan_is_patched_after_it_is_made() -> None:
    """A plan is made once, by `make_plan`, from everything it shows: no stage replaces a
    field of a made plan (the compile path hands each fact down instead)."""
    patched = {
        name: found
        for name, path in _modules().items()
        if name.startswith("_compiler")
        for found in [_plans_patched(ast.parse(path.read_text(), str(path)))]
        if found
    }
    assert not patched, f"plans patched after they are made: {patched}"


def test_the_patch_finder_finds_a_patched_plan() -> None:
    tree = ast.parse(
        "def f(inputs):\n    plan = make_plan(inputs)\n    return dataclasses.replace(plan, notes=())\n"
        "def g(c):\n    return dataclasses.replace(c, plan=None)\n"
        "def h(inputs):\n    return dataclasses.replace(inputs, consts={})\n"
    )
    assert len(_plans_patched(tree)) == 2
