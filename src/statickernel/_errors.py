"""The statickernel exception hierarchy.

Every error carries the same facts so that a user can act on it without reading a traceback:
what failed, where (the user's file:line and the operand or dim), the actual and expected
values, the dim bindings known at that point, and one concrete fix.

A hardware rule has one class, whichever phase finds it: the declaration, on probe sizes, or
a call, on the bound dims; `exc.phase` says which. The checks build their errors through an
`ErrorContext`, which holds the kernel, the location, the bindings and the phase.
"""

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

__all__ = [
    "AnnotationError",
    "BackendError",
    "BlockAlignmentError",
    "BodyError",
    "CallError",
    "CompileError",
    "CompileTargetError",
    "ConstantError",
    "DeclarationError",
    "DotDtypeError",
    "DotLayoutError",
    "DotShapeError",
    "DtypeError",
    "GridLimitError",
    "HardwareLimitError",
    "HardwareRuleError",
    "Int32LimitError",
    "LoopOperandError",
    "NotDifferentiableError",
    "OperandError",
    "OverrideError",
    "Phase",
    "PlanError",
    "ResultMismatchError",
    "ShapeError",
    "SharedMemoryError",
    "StaticKernelError",
    "SymbolicDimError",
    "TilingError",
    "TmaBoxError",
    "ToolchainError",
    "UnsupportedOpError",
]


class Phase(enum.StrEnum):
    """When a specialization is compiled: at the declaration, on probe sizes, or at a call.

    `DECLARATION` is the check the decorator runs, and `kernel.bind(...)` runs again for its
    constants; `CALL` is a call's, and `plan`, `emit`, `lower`, `specialize`, `trace` and
    `compile`'s, on the dims the arguments bind."""

    DECLARATION = "declaration"
    CALL = "call"


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
      phase: `Phase.DECLARATION` or `Phase.CALL`: which check found the error; None when
        it was raised outside both (for example by `sk.set_backend`).

    `constant=` also fills `operand`, so that code reading `exc.operand` sees the constant's
    name too; read `exc.constant` to tell a constant from an operand.
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
        phase: Phase | None = None,
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
        self.phase = phase
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
    """Deprecated: a hardware rule broken at the declaration.

    Every `HardwareRuleError` is one, in both phases, so that `except HardwareLimitError`
    around an import still catches what it caught before; it is never raised on its own.
    Deprecated, and kept for one release only: catch `HardwareRuleError` (or one rule's class,
    such as `TmaBoxError`), and read `exc.phase` to tell the declaration from a call.
    """


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
    """Deprecated: a hardware rule broken at a call, or by `kernel.bind`.

    Every `HardwareRuleError` is one, in both phases, so that `except PlanError` around a
    call still catches what it caught before; it is never raised on its own. Deprecated, and
    kept for one release only: catch `HardwareRuleError` (or one rule's class, such as
    `SharedMemoryError`), and read `exc.phase` to tell the declaration from a call.
    """


class OverrideError(CallError):
    """A per-call or bound constant override is unknown, mistyped, not positive or traced."""


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


# --- the hardware rules: one class per rule, raised at the declaration and at a call ----------


class HardwareRuleError(HardwareLimitError, PlanError):
    """The base of the hardware rules a kernel's blocks, grid or `sk.dot` can break.

    A rule has the same class whichever phase finds it; `phase` says which: the declaration
    (`Phase.DECLARATION`, on probe sizes, at import or `kernel.bind`) or a call
    (`Phase.CALL`, on the bound dims). It is never raised on its own: catch it for every rule,
    or a subclass for one.

    For one release it also subclasses the deprecated `HardwareLimitError` (so a
    `DeclarationError`) and `PlanError` (so a `CallError`), which were chosen by phase: old
    `except` clauses catch what they caught, and may now also catch the same rule from the
    other phase. When they are removed it will derive from `StaticKernelError` alone.
    """


class TmaBoxError(HardwareRuleError):
    """A block dim cut by a constant holds more than 256 elements, the most a TMA box copies."""


class BlockAlignmentError(HardwareRuleError):
    """A block dim is not a multiple of the unit its axis needs: 64 rows for the WGMMA
    register layout, 8 columns and 16-byte TMA rows, or 128 bytes for a 1-D block."""


class SharedMemoryError(HardwareRuleError):
    """The blocks of a kernel, with its pipelines' stages, do not fit in shared memory."""


class Int32LimitError(HardwareRuleError):
    """A dim, or the end of its last block, is past the 2**31 - 1 elements that Mosaic GPU's
    int32 index math addresses."""


class GridLimitError(HardwareRuleError):
    """The grid has more blocks along an axis than CUDA's grid takes there (65535 on y and z)."""


class DotShapeError(HardwareRuleError):
    """A block that `sk.dot` multiplies has a size WGMMA cannot take: M a multiple of 64, N a
    multiple of 8 (of the swizzle for a `b` laid out "K N") and at most 256, K a multiple of
    the 128-byte swizzle."""


class DotDtypeError(HardwareRuleError):
    """The operands of `sk.dot` have different dtypes, or a dtype WGMMA does not take
    (bfloat16, float16 and float32 as tf32 are its dtypes)."""


class DotLayoutError(HardwareRuleError):
    """The operands of `sk.dot` are laid out in a way WGMMA cannot read: a float32 `b` must be
    laid out "N K"."""


class LoopOperandError(HardwareRuleError):
    """An operand read block by block in a loop has a dim that is neither tiled nor the loop
    dim: the pipeline copies blocks, and a whole dim has none."""


# --- where a check runs ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ErrorContext:
    """Where a check runs: the kernel, the user's location, the dims bound so far and the
    phase. The checks receive it and build their errors with `error`, which adds these facts
    to each; the rule decides the class, the context the rest."""

    kernel: str | None
    where: str | None
    phase: Phase | None = None
    bindings: tuple[tuple[str, int], ...] = ()
    """The bound dims, in order; empty at the declaration, whose sizes are probes."""

    def bound(self, sizes: Mapping[str, int]) -> "ErrorContext":
        """This context with `sizes` as its bindings (copied now)."""
        return dataclasses.replace(self, bindings=tuple(sizes.items()))

    def facts(self) -> dict[str, Any]:
        """The context as keyword arguments of a `StaticKernelError`."""
        return dict(
            kernel=self.kernel, where=self.where, bindings=dict(self.bindings), phase=self.phase
        )

    def error[E: StaticKernelError](
        self,
        cls: type[E],
        what: str,
        *,
        operand: str | None = None,
        constant: str | None = None,
        dim: str | None = None,
        expected: Any = None,
        actual: Any = None,
        fix: str | None = None,
    ) -> E:
        """An error of class `cls`, with this context's kernel, location, bindings and phase."""
        return cls(
            what,
            **self.facts(),
            operand=operand,
            constant=constant,
            dim=dim,
            expected=expected,
            actual=actual,
            fix=fix,
        )


def stamp_phase(exc: StaticKernelError, phase: Phase) -> StaticKernelError:
    """`exc`, with `phase` recorded unless a check recorded one already. The entry points
    stamp theirs on the errors raised without a context: the body's trace and translation,
    the checks of the spec, the backend and the compile toolchain."""
    if exc.phase is None:
        exc.phase = phase
    return exc
