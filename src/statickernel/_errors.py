"""The statickernel exception hierarchy.

Every error carries the same facts so that a user can act on it without reading a traceback:
what failed, where (the user's file:line and the operand or dim), the actual and expected
values, the dim bindings known at that point, and one concrete fix.
"""

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AnnotationError",
    "BackendError",
    "BodyError",
    "CallError",
    "CompileError",
    "CompileTargetError",
    "ConstantError",
    "DeclarationError",
    "DtypeError",
    "HardwareLimitError",
    "NotDifferentiableError",
    "OperandError",
    "OverrideError",
    "PlanError",
    "ResultMismatchError",
    "ShapeError",
    "SharedMemoryError",
    "StaticKernelError",
    "SymbolicDimError",
    "TilingError",
    "ToolchainError",
    "UnsupportedOpError",
]


class StaticKernelError(Exception):
    """Root of every error statickernel raises on purpose.

    The message is rendered from the attributes, one fact per line; catch a subclass to handle
    one kind of failure, or this class for all of them.

    Attributes:
      what: what failed, in one sentence.
      kernel: the kernel's name, when the error concerns one kernel.
      where: `path:line` in the user's code: the declaration, the body line or the call.
      operand: the operand (or result) concerned, if any; for a constant, its name.
      constant: the constant concerned, if any.
      dim: the dim concerned, if any.
      expected: the value or form that would have been accepted.
      actual: the value or form that was given.
      bindings: the dim sizes known when the error was raised.
      fix: one concrete change that resolves the error.
    """

    def __init__(
        self,
        what: str,
        *,
        kernel: str | None = None,
        where: str | None = None,
        operand: str | None = None,
        dim: str | None = None,
        expected: Any = None,
        actual: Any = None,
        bindings: Mapping[str, int] | None = None,
        fix: str | None = None,
        constant: str | None = None,
    ) -> None:
        self.what = what
        self.kernel = kernel
        self.where = where
        self.constant = constant
        self.operand = operand if operand is not None else constant
        self.dim = dim
        self.expected = expected
        self.actual = actual
        self.bindings = dict(bindings) if bindings else {}
        self.fix = fix
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"kernel `{self.kernel}`: " if self.kernel else ""
        lines = [head + self.what]
        if self.where:
            lines.append(f"  at:       {self.where}")
        subject = [
            f"constant `{self.constant}`"
            if self.constant
            else (f"operand `{self.operand}`" if self.operand else ""),
            f"dim {self.dim}" if self.dim else "",
        ]
        if any(subject):
            lines.append("  in:       " + ", ".join(s for s in subject if s))
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.actual is not None:
            lines.append(f"  actual:   {self.actual}")
        if self.bindings:
            lines.append("  bindings: " + ", ".join(f"{k}={v}" for k, v in self.bindings.items()))
        if self.fix:
            lines.append(f"  fix:      {self.fix}")
        return "\n".join(lines)


# --- raised while the decorator runs (import time) -------------------------------------------


class DeclarationError(StaticKernelError):
    """A kernel declaration is invalid; raised when the decorator runs."""


class AnnotationError(DeclarationError):
    """An operand or result annotation is not a usable jaxtyping array type, the annotations
    disagree, or an operand or the kernel has a name the generated module uses."""


class TilingError(DeclarationError):
    """The tiling names a dim or constant that does not exist, or tiles inconsistently."""


class ConstantError(DeclarationError):
    """A compile-time constant has a bad type, a bad default or a bad override."""


class HardwareLimitError(DeclarationError):
    """A block violates a Mosaic GPU hardware rule (TMA box, alignment, layout)."""


class SharedMemoryError(HardwareLimitError):
    """The blocks of a kernel do not fit in shared memory."""


class BodyError(DeclarationError):
    """The kernel body failed to trace on tile-shaped values."""


class ResultMismatchError(BodyError):
    """The body returns tiles whose rank, dims or dtype differ from the declared results."""


class UnsupportedOpError(BodyError):
    """The body uses an operation that Mosaic GPU cannot lower."""


# --- raised when a kernel is called, planned, emitted or lowered ------------------------------


class CallError(StaticKernelError):
    """A call to a kernel is invalid."""


class OperandError(CallError):
    """An argument is not a jax or numpy array (plan, emit and lower also take a
    `jax.ShapeDtypeStruct`), or the argument count is wrong."""


class ShapeError(CallError):
    """An operand's rank or dims do not match its annotation or the other operands."""


class DtypeError(CallError):
    """An operand's dtype is not allowed by its annotation or by Mosaic GPU."""


class SymbolicDimError(CallError):
    """A dim is symbolic or traced; Mosaic GPU launches need static ints."""


class PlanError(CallError):
    """A specialization breaks a hardware rule that only the bound dims reveal."""


class OverrideError(CallError):
    """A per-call or bound constant override is unknown, mistyped or breaks a hardware rule."""


class NotDifferentiableError(CallError):
    """A kernel was differentiated; generated kernels have no derivative rule."""


class BackendError(CallError):
    """An unknown backend was requested, or the backend cannot run here."""


# --- raised when a kernel is compiled for a GPU (kernel.compile) -------------------------------


class CompileError(CallError):
    """Compiling a specialization for a GPU failed, or the target cannot run the kernel."""


class CompileTargetError(CompileError):
    """A compile target is unknown."""


class ToolchainError(CompileError):
    """The compile toolchain (the CUDA plugin, ptxas) is missing or not usable here."""
