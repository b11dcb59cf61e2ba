"""`sk.profile`: the calls inside it run launches that Mosaic GPU's profiler records.

Each launch built inside it carries the profiler's options (`profile_space`, `profile_dir`
of `plgpu.CompilerParams`), so it is a specialization of its own beside the unprofiled one.
On a GPU, each call writes a trace of every warpgroup's events into the folder, which
Perfetto (ui.perfetto.dev) opens. The interpreter runs a profiled launch as any other and
writes no trace. `kernel.lower` and `kernel.compile` ignore it: the profiler copies its
events out through a host callback, which cannot be lowered for CUDA on a machine without one.
"""

import contextlib
import contextvars
import os
from collections.abc import Iterator

from .._compiler.mosaic_gpu.plan.profile import Profile
from .._errors import BackendError
from .._where import call_site

__all__ = ["current_profile", "profile", "unprofiled"]

_active: contextvars.ContextVar[Profile | None] = contextvars.ContextVar(
    "statickernel_profile", default=None
)


def current_profile() -> Profile | None:
    """The profile the calls in this context take; None outside `sk.profile`."""
    return _active.get()


def profile(
    directory: str | os.PathLike[str], *, space: int = 4096
) -> contextlib.AbstractContextManager[Profile]:
    """Calls inside record Mosaic GPU's profiler events: each warpgroup up to `space` of them,
    each call writing a trace into `directory` (created if missing).

        with sk.profile("traces"):
            y = softmax(x)

    The settings are checked, and the folder made, when it is called: a `BackendError` at
    the caller's line says what to change.
    """
    where = call_site()
    if isinstance(space, bool) or not isinstance(space, int) or space < 1:
        raise BackendError(
            "the profiler's event space must be a positive int",
            where=where,
            expected="an int >= 1, e.g. space=4096",
            actual=repr(space),
            fix="sk.profile(directory, space=4096)",
        )
    path = os.fspath(directory) if isinstance(directory, str | os.PathLike) else None
    if not path or not isinstance(path, str):
        raise BackendError(
            "the profiler needs a folder for its traces",
            where=where,
            expected="a path, e.g. 'traces'",
            actual=repr(directory)[:120],
            fix='sk.profile("traces")',
        )
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        a_file = isinstance(exc, FileExistsError | NotADirectoryError)
        raise BackendError(
            "the profiler's folder for its traces cannot be made"
            + (": a file is in the way" if a_file else ""),
            where=where,
            expected="a folder, or a path where one can be made",
            actual=f"{path!r}: {exc.strerror or exc}",
            fix='pass the path of a folder, e.g. sk.profile("traces"), not of a file'
            if a_file
            else 'pass a folder this process can write, e.g. sk.profile("traces")',
        ) from None
    return _profiling(Profile(os.path.abspath(path), space))


@contextlib.contextmanager
def _profiling(chosen: Profile) -> Iterator[Profile]:
    with _profiled_as(chosen):
        yield chosen


@contextlib.contextmanager
def unprofiled() -> Iterator[None]:
    """Inside `sk.profile`, a block whose specializations are not profiled."""
    with _profiled_as(None):
        yield


@contextlib.contextmanager
def _profiled_as(chosen: Profile | None) -> Iterator[None]:
    token = _active.set(chosen)
    try:
        yield
    finally:
        _active.reset(token)
