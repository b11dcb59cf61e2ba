"""Generated kernel modules imported from files of their own, as a user's module is: a
declaration error then points at that file's lines."""

import importlib.util
import pathlib
import types


def write_and_import(path: pathlib.Path, source: str) -> types.ModuleType:
    """Writes `source` to `path` and runs it as the module `path.stem`; raises what the import
    raises (a kernel's refusal at its declaration, say)."""
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
