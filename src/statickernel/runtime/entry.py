"""How the errors a kernel's entry points raise leave them: naming the kernel, without
statickernel's frames below the entry point."""

from .._compiler.declare.binding import call_site
from .._errors import BackendError, Phase, StaticKernelError, stamp_phase

__all__ = ["at_entry_point", "for_kernel"]


def for_kernel(exc: BackendError, kernel: str) -> BackendError:
    """`exc`, which the backend's check raised without a kernel, naming `kernel`."""
    return BackendError(
        exc.what,
        kernel=kernel,
        where=exc.where or call_site(),
        expected=exc.expected,
        actual=exc.actual,
        fix=exc.fix,
    )


def at_entry_point(exc: StaticKernelError, phase: Phase = Phase.CALL) -> StaticKernelError:
    """The error, to be re-raised from a public entry point with the frames below it dropped,
    and with the entry point's phase unless a check recorded its own.

    Its message already names the user's line, the operand and the fix; statickernel's own
    frames would only bury that. Errors that are not statickernel's keep their full traceback.
    """
    return stamp_phase(exc, phase).with_traceback(None)
