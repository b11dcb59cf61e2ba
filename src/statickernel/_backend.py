"""Which backend runs a kernel: the real Mosaic GPU compiler, or its interpreter.

The choice is made, from most to least specific: per call (`kernel(x, backend=...)`), per
kernel (`@sk.kernel(backend=...)` or `kernel.with_backend(...)`), per process
(`sk.set_backend(...)`), from the STATICKERNEL_BACKEND environment variable, and finally by
looking for a CUDA device.
"""

import functools
import os

from ._errors import BackendError

__all__ = ["BACKENDS", "default_backend", "has_cuda", "resolve_backend", "set_backend"]

BACKENDS = ("mosaic_gpu", "interpret")
ENV_VAR = "STATICKERNEL_BACKEND"
_process_backend: str | None = None


def _check(name: str, origin: str) -> str:
    if name not in BACKENDS:
        raise BackendError(
            f"unknown backend {name!r} ({origin})",
            expected=" or ".join(repr(b) for b in BACKENDS),
            actual=repr(name),
            fix="use 'mosaic_gpu' on a machine with a Hopper GPU, or 'interpret' anywhere",
        )
    return name


def set_backend(name: str | None) -> None:
    """Sets the backend for every kernel in this process; None restores the default."""
    global _process_backend
    _process_backend = None if name is None else _check(name, "sk.set_backend")


@functools.cache
def has_cuda() -> bool:
    import jax

    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def default_backend() -> str:
    """The backend used when neither the call nor the kernel names one."""
    if _process_backend is not None:
        return _process_backend
    env = os.environ.get(ENV_VAR)
    if env:
        return _check(env, f"environment variable {ENV_VAR}")
    return "mosaic_gpu" if has_cuda() else "interpret"


def resolve_backend(call: str | None, kernel: str | None) -> str:
    if call is not None:
        return _check(call, "backend= argument")
    if kernel is not None:
        return kernel
    return default_backend()
