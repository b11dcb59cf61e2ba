"""Where an error points: the user's file and line, never statickernel's or jax's."""

import os
import sys
import sysconfig
import warnings
from collections.abc import Callable
from typing import Any

__all__ = [
    "PACKAGE_DIR",
    "call_site",
    "caller_user_line",
    "display_path",
    "is_user_file",
    "source_location",
    "warn_at_user_line",
]

# The standard library's own files. JAX's tracing runs through some of them (contextlib's
# decorator wrappers), and they are never the user's call site.
_STDLIB_DIRS = tuple({sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]})
PACKAGE_DIR = os.path.dirname(__file__)
# Where console scripts are installed: the `statickernel` command's launcher, which only
# calls the CLI, lives there and is not the user's line.
_SCRIPTS_DIR = sysconfig.get_paths()["scripts"] + os.sep


def _in_stdlib(path: str) -> bool:
    return path.startswith(_STDLIB_DIRS) and "-packages" not in path


def call_site() -> str | None:
    """The innermost frame outside statickernel and jax: where the user called the kernel."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if (
            not path.startswith(PACKAGE_DIR)
            and not path.startswith("<frozen")
            and "/jax/" not in path
            and "/jaxtyping/" not in path
            and not _in_stdlib(path)
            and not path.startswith(_SCRIPTS_DIR)
        ):
            return f"{display_path(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def source_location(fn: Callable[..., Any]) -> str:
    """`path:line` of a function's first decorator, relative to the working directory if inside it."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return "<unknown>"
    return f"{display_path(code.co_filename)}:{code.co_firstlineno}"


def display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def is_user_file(path: str) -> bool:
    """Whether a traceback's file is the user's: not statickernel's, jax's or jaxtyping's."""
    if path.startswith(PACKAGE_DIR) or path.startswith("<"):
        return False
    return not any(f"{os.sep}{pkg}{os.sep}" in path for pkg in ("jax", "jaxlib", "jaxtyping"))


def caller_user_line() -> str | None:
    """`path:line` of the innermost user frame calling this function's caller."""
    frame = sys._getframe(1)  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return f"{display_path(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def warn_at_user_line(message: str, category: type[Warning]) -> None:
    """`warnings.warn`, reported at the innermost frame outside statickernel (the user's line
    that called into it). Python 3.12 skips the package's frames itself
    (`skip_file_prefixes`); on 3.11 the frames are counted here."""
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, skip_file_prefixes=(PACKAGE_DIR,))
        return
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)
