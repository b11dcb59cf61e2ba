"""Which backend runs a kernel: the real Mosaic GPU compiler, or its interpreter.

The choice is made, from most to least specific: per call (`kernel(x, backend=...)`), per
kernel (`@sk.kernel(backend=...)` or `kernel.with_backend(...)`), per block of code
(`with sk.backend(...):`), per process (`sk.set_backend(...)`), from the STATICKERNEL_BACKEND
environment variable, and finally by looking for a CUDA device.
"""

import contextlib
import contextvars
import functools
import glob
import os
import shutil
from collections.abc import Iterator

from .._errors import BackendError
from .._where import call_site, warn_at_user_line

__all__ = [
    "BACKENDS",
    "InterpreterFallbackWarning",
    "backend",
    "default_backend",
    "has_cuda",
    "has_nvidia_gpu",
    "mosaic_gpu_refusal",
    "require_mosaic_gpu",
    "resolve_backend",
    "set_backend",
]

BACKENDS = ("mosaic_gpu", "interpret")
ENV_VAR = "STATICKERNEL_BACKEND"
_process_backend: str | None = None
# Set inside `with sk.backend(...)`; a context variable, so each thread and task has its own.
_block_backend: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "statickernel_backend", default=None
)


def _check(name: str, origin: str, fix: str | None = None) -> str:
    if name not in BACKENDS:
        raise BackendError(
            f"unknown backend {name!r} ({origin})",
            # The user's line that named it: the call, the `with` or the decorator; for the
            # environment variable, the call that read it.
            where=call_site(),
            expected=" or ".join(repr(b) for b in BACKENDS),
            actual=repr(name),
            fix=fix or "use 'mosaic_gpu' on a machine with a Hopper GPU, or 'interpret' anywhere",
        )
    return name


def set_backend(name: str | None) -> None:
    """Sets the backend for every kernel in this process; None restores the default."""
    global _process_backend
    _process_backend = None if name is None else _check(name, "sk.set_backend")


def backend(name: str) -> contextlib.AbstractContextManager[str]:
    """Runs the kernels called inside a `with` block on `name`, unless the call or the kernel
    names a backend of its own:

        with sk.backend("interpret"):
            y = softmax(x)

    Blocks nest, and the backend before the block is back when it ends, also on an exception.
    The setting is per thread: a block in one thread does not change another's kernels. The
    name is checked at once, before the block starts."""
    return _backend_block(_check(name, "sk.backend"))


@contextlib.contextmanager
def _backend_block(name: str) -> Iterator[str]:
    token = _block_backend.set(name)
    try:
        yield name
    finally:
        _block_backend.reset(token)


class InterpreterFallbackWarning(UserWarning):
    """The interpreter was chosen by default on a machine with an NVIDIA GPU that jax cannot
    use (a CPU-only jaxlib, or no CUDA plugin): kernels run, but orders of magnitude slower."""


@functools.cache
def has_nvidia_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU and driver, whatever jax sees: the driver's
    /proc entry or device nodes, or nvidia-smi on the PATH. Never imports jax or CUDA."""
    return (
        os.path.exists("/proc/driver/nvidia/version")
        or bool(glob.glob("/dev/nvidia[0-9]*"))
        or shutil.which("nvidia-smi") is not None
    )


@functools.cache
def _warn_interpreter_fallback() -> None:
    """Once per process: the default chose the interpreter although there is a GPU."""
    import jax

    platforms = ", ".join(sorted({d.platform for d in jax.devices()}))
    warn_at_user_line(
        "statickernel: this machine has an NVIDIA GPU, but jax sees no CUDA device (jax "
        f"{jax.__version__}, devices: {platforms}), so kernels run in the Mosaic GPU "
        "interpreter, about a million elements per second. Install jax with CUDA: "
        'pip install "jax[cuda13]>=0.11.2,<0.13" (or jax[cuda12], to match the driver). To run the '
        f"interpreter on purpose and silence this, set {ENV_VAR}=interpret or call "
        'sk.set_backend("interpret").',
        InterpreterFallbackWarning,
    )


@functools.cache
def has_cuda() -> bool:
    import jax

    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def require_mosaic_gpu(kernel: str, where: str | None) -> None:
    """Refuses to run or lower a kernel on a jax too old for the modules statickernel
    generates (the plan and the source need no particular jax)."""
    from .._compat import runs_mosaic_gpu

    if not runs_mosaic_gpu():
        raise mosaic_gpu_refusal(kernel, where)


def mosaic_gpu_refusal(kernel: str, where: str | None) -> BackendError:
    """The error that refuses to run or lower a kernel's generated module on a jax too old for
    it (`_compat.runs_mosaic_gpu`)."""
    import jax

    from .._compat import MOSAIC_GPU_MIN_JAX

    oldest = ".".join(map(str, MOSAIC_GPU_MIN_JAX))
    return BackendError(
        "its generated Pallas Mosaic GPU module cannot run or be lowered on this jax",
        kernel=kernel,
        where=where,
        expected=f"jax>={oldest}",
        actual=f"jax {jax.__version__}",
        fix=f"install jax and jaxlib >={oldest} (they need Python 3.12); kernel.plan(...) and "
        "kernel.emit(...) work on this jax",
    )


def default_backend() -> str:
    """The backend used when neither the call nor the kernel names one."""
    block = _block_backend.get()
    if block is not None:
        return block
    if _process_backend is not None:
        return _process_backend
    env = os.environ.get(ENV_VAR)
    if env:
        return _check(
            env,
            f"environment variable {ENV_VAR}",
            fix=f"set {ENV_VAR}=interpret, or {ENV_VAR}=mosaic_gpu on a machine with a Hopper "
            "GPU, or unset it to let the machine decide",
        )
    if has_cuda():
        return "mosaic_gpu"
    if has_nvidia_gpu():
        _warn_interpreter_fallback()
    return "interpret"


def resolve_backend(call: str | None, kernel: str | None, origin: str = "backend= argument") -> str:
    """The backend a call runs on: `call` (named by `origin`, for the error), else the
    kernel's, else the default."""
    if call is not None:
        return _check(call, origin)
    if kernel is not None:
        return kernel
    return default_backend()
