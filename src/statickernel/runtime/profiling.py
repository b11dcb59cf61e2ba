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

from .._compiler.plan.profile import Profile
from .._errors import BackendError

__all__ = ["current_profile", "profile", "unprofiled"]

_active: contextvars.ContextVar[Profile | None] = contextvars.ContextVar(
    "statickernel_profile", default=None
)


def current_profile() -> Profile | None:
    """The profile the calls in this context take; None outside `sk.profile`."""
    return _active.get()


@contextlib.contextmanager
def profile(directory: str | os.PathLike[str], *, space: int = 4096) -> Iterator[Profile]:
    """Calls inside record Mosaic GPU's profiler events: each warpgroup up to `space` of them,
    each call writing a trace into `directory` (created if missing).

        with sk.profile("traces"):
            y = softmax(x)
    """
    if isinstance(space, bool) or not isinstance(space, int) or space < 1:
        raise BackendError(
            "the profiler's event space must be a positive int",
            expected="an int >= 1, e.g. space=4096",
            actual=repr(space),
            fix="sk.profile(directory, space=4096)",
        )
    path = os.fspath(directory)
    if not path:
        raise BackendError(
            "the profiler needs a folder for its traces",
            expected="a path, e.g. 'traces'",
            actual=repr(directory),
            fix='sk.profile("traces")',
        )
    os.makedirs(path, exist_ok=True)
    chosen = Profile(os.path.abspath(path), space)
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
