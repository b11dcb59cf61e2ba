"""Finding kernels: in a file, a folder of files, an importable module, or one named target.

A module is imported the way Python would import it from the shell: a file inside a package
(a folder with `__init__.py`) by its dotted name, so relative imports work; a loose file by its
stem, with its folder on `sys.path`, so it can import its siblings. A module already imported
from the same file is reused, so a kernel is never declared twice in one process.
"""

import dataclasses
import importlib
import importlib.util
import itertools
import pathlib
import sys
from collections.abc import Callable, Iterable
from types import ModuleType

from .._compiler.declare.spec import display_path
from ..runtime.kernel import Kernel

__all__ = [
    "FoundKernel",
    "ModuleExitError",
    "ModuleResult",
    "TargetError",
    "discover",
    "import_path",
    "kernels_in",
    "load_target",
    "module_files",
]

# Folders never searched: caches, virtual environments, build output, version control.
_SKIPPED_DIRS = frozenset({"node_modules", "build", "dist", "site-packages"})
# Files that run code on import and are never kernel modules.
_SKIPPED_FILES = frozenset({"conftest.py", "setup.py", "noxfile.py"})
_RENAMED = itertools.count()


class TargetError(Exception):
    """A path, module or `file.py:name` target that does not name what it should."""


class ModuleExitError(Exception):
    """A module called `sys.exit()` (raised SystemExit) while it was imported."""

    def __init__(self, code: object) -> None:
        self.code = code
        super().__init__(
            f"the module called sys.exit({code!r}) while it was imported, so its kernels "
            'cannot be checked; put the code that exits under `if __name__ == "__main__":`'
        )


def _run_import(load: Callable[[], ModuleType]) -> ModuleType:
    """`load()`, with a SystemExit of the module's turned into a ModuleExitError: the exit is
    the module's, not the command's, and would otherwise end the command with its code (0 for
    `sys.exit()`) before anything is reported. KeyboardInterrupt still interrupts."""
    try:
        return load()
    except SystemExit as exc:
        raise ModuleExitError(exc.code) from exc


@dataclasses.dataclass(frozen=True)
class FoundKernel:
    """A kernel and the module attribute that holds it."""

    name: str  # the attribute in its module
    kernel: Kernel

    @property
    def location(self) -> str:
        return self.kernel.spec.location


@dataclasses.dataclass(frozen=True)
class ModuleResult:
    """One module's import: the kernels it defines, or the exception its import raised."""

    source: str  # the path as shown to the user, or the module name
    kernels: tuple[FoundKernel, ...] = ()
    error: BaseException | None = None


def module_files(path: pathlib.Path) -> list[pathlib.Path]:
    """`path` itself if it is a file; otherwise every module file under it, sorted.

    Private modules (`_x.py`), test modules (`test_x.py`, `x_test.py`) and hidden or private
    folders are skipped: they are not where kernels are declared, and importing them can run
    test or build code.
    """
    if path.is_file():
        return [path]
    found = []
    for file in sorted(path.rglob("*.py")):
        relative = file.relative_to(path)
        if any(_skipped_dir(part) for part in relative.parts[:-1]):
            continue
        name = file.name
        if name.startswith(("_", "test_")) or name.endswith("_test.py") or name in _SKIPPED_FILES:
            continue
        found.append(file)
    return found


def _skipped_dir(name: str) -> bool:
    return name.startswith((".", "_")) or name in _SKIPPED_DIRS


def _package_root(file: pathlib.Path) -> tuple[pathlib.Path, str]:
    """The folder to put on `sys.path` and the dotted module name `file` has from there."""
    parts = [file.stem]
    folder = file.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)


def _same_file(module: ModuleType | None, file: pathlib.Path) -> bool:
    origin = getattr(module, "__file__", None)
    return origin is not None and pathlib.Path(origin).resolve() == file


def import_path(file: pathlib.Path) -> ModuleType:
    """Imports one Python file as a module (see the module docstring)."""
    file = file.resolve()
    root, name = _package_root(file)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    existing = sys.modules.get(name)
    if _same_file(existing, file):
        assert existing is not None
        return existing
    if "." in name and existing is None:
        return importlib.import_module(name)
    # A loose file, or a name already taken by another module (e.g. `types.py` next to the
    # kernels): load it from its path, under a name of its own when its stem is taken.
    unique = name if existing is None else f"statickernel_user_{next(_RENAMED)}_{name}"
    spec = importlib.util.spec_from_file_location(unique, file)
    if spec is None or spec.loader is None:
        raise TargetError(f"{display_path(str(file))} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as `import` does, so dataclasses and pickling can find it.
    sys.modules[unique] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(unique, None)
        raise
    return module


def kernels_in(module: ModuleType) -> tuple[FoundKernel, ...]:
    """The kernels a module defines, in definition order; kernels it imports are left out."""
    seen: set[int] = set()
    found = []
    for attr, value in vars(module).items():
        if not isinstance(value, Kernel) or id(value) in seen:
            continue
        if getattr(value.spec.fn, "__module__", None) != module.__name__:
            continue
        seen.add(id(value))
        found.append(FoundKernel(attr, value))
    return tuple(found)


def _import_one(source: str, load: Callable[[], ModuleType]) -> ModuleResult:
    try:
        module = _run_import(load)
    except Exception as exc:  # reported per module, so one bad module does not stop the rest
        return ModuleResult(source, error=exc)
    return ModuleResult(source, kernels_in(module))


def discover(paths: Iterable[str]) -> list[ModuleResult]:
    """Imports every module under `paths`: files, folders (searched recursively) or module
    names. Raises TargetError for a path that is neither a file, a folder nor a module."""
    results: list[ModuleResult] = []
    for raw in paths:
        path = pathlib.Path(raw)
        if path.exists():
            if path.is_file() and path.suffix != ".py":
                raise TargetError(f"{raw} is not a Python file")
            for file in module_files(path):
                results.append(_import_one(display_path(str(file)), lambda f=file: import_path(f)))
        elif _looks_like_module(raw):
            _check_module_exists(raw)
            results.append(_import_one(raw, lambda name=raw: importlib.import_module(name)))
        else:
            raise TargetError(f"{raw}: no such file, folder or module")
    return results


def _looks_like_module(text: str) -> bool:
    return all(part.isidentifier() for part in text.split("."))


def _check_module_exists(name: str) -> None:
    """Raises TargetError when `name` cannot be found; its import may still fail later."""
    _ensure_cwd_on_path()
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise TargetError(f"no module named {name!r} (looked in the current folder and sys.path)")


def _ensure_cwd_on_path() -> None:
    # `python -m` puts the working folder first on sys.path; the console script does not.
    cwd = str(pathlib.Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def load_target(target: str) -> tuple[str, Kernel]:
    """Resolves `path/to/file.py:name` or `package.module:name` to the kernel it names.

    Raises TargetError for a malformed target, a missing file or module, or a name that is not
    a kernel; the target's own import errors (e.g. a declaration error) propagate unchanged,
    and its `sys.exit()` as a ModuleExitError.
    """
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise TargetError(
            f"{target!r} is not a kernel target; write path/to/file.py:kernel_name or "
            "package.module:kernel_name"
        )
    path = pathlib.Path(where)
    if where.endswith(".py") or path.exists():
        if not path.is_file():
            raise TargetError(f"{where}: no such file")
        module = _run_import(lambda: import_path(path))
    elif _looks_like_module(where):
        _check_module_exists(where)
        module = _run_import(lambda: importlib.import_module(where))
    else:
        raise TargetError(f"{where}: no such file or module")
    if not hasattr(module, name):
        kernels = ", ".join(k.name for k in kernels_in(module)) or "none"
        raise TargetError(f"{where} has no attribute {name!r} (its kernels: {kernels})")
    value = getattr(module, name)
    if not isinstance(value, Kernel):
        raise TargetError(
            f"{where}:{name} is a {type(value).__name__}, not a statickernel kernel "
            "(declare it with @sk.kernel)"
        )
    return f"{where}:{name}", value
