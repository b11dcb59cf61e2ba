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
from typing import Any, ClassVar, TypeVar

from typing_extensions import deprecated

__all__ = [
    "AnnotationError",
    "BackendError",
    "BackwardError",
    "BenchError",
    "BlockAlignmentError",
    "BodyError",
    "CallError",
    "CompileError",
    "CompileTargetError",
    "ConstantError",
    "CrossBlockResultError",
    "DeclarationError",
    "DotDtypeError",
    "DotLayoutError",
    "DotShapeError",
    "DtypeError",
    "GridLimitError",
    "HardwareLimitError",
    "HardwareRuleError",
    "Int32LimitError",
    "JoinedColumnsError",
    "LoopOperandError",
    "NoCandidateError",
    "NotDifferentiableError",
    "OperandError",
    "OverrideError",
    "Phase",
    "PlanError",
    "RaggedGroupsError",
    "ResultMismatchError",
    "ShapeError",
    "SharedMemoryError",
    "ShiftError",
    "SliceError",
    "StaticKernelError",
    "SymbolicDimError",
    "TensorCoreTargetError",
    "TilingError",
    "TmaBoxError",
    "ToolchainError",
    "TuneError",
    "UnsupportedOpError",
    "VjpError",
]


# Where the error catalog lives; each message ends with its class's code and entry there.
CATALOG_URL = "https://statickernel.github.io/statickernel/errors/"


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
      code: the class's stable code, such as `SK202` for `ShapeError` (a class attribute);
        the message's last line gives it with the link to its entry in the error catalog.

    `constant=` also fills `operand`, so that code reading `exc.operand` sees the constant's
    name too; read `exc.constant` to tell a constant from an operand.
    """

    code: ClassVar[str] = "SK000"

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
        lines.append(f"  docs:     {self.code}, {self.catalog_url()}")
        return "\n".join(lines)

    @classmethod
    def catalog_url(cls) -> str:
        """The error catalog's entry for this class's code: a subclass defined outside
        statickernel shares its nearest statickernel ancestor's code and entry."""
        owner = next(c for c in cls.__mro__ if "code" in c.__dict__)
        return f"{CATALOG_URL}#{owner.__name__.lower()}"


# --- raised while the decorator runs (import time) -------------------------------------------


_E = TypeVar("_E", bound=StaticKernelError)


class DeclarationError(StaticKernelError):
    """A kernel declaration is invalid; raised when the decorator runs."""

    code: ClassVar[str] = "SK100"


class AnnotationError(DeclarationError):
    """An operand or result annotation is not a usable jaxtyping array type, the annotations
    disagree, or an operand or the kernel has a name the generated module uses."""

    code: ClassVar[str] = "SK101"


class TilingError(DeclarationError):
    """The tiling names a dim or constant that does not exist, or tiles inconsistently."""

    code: ClassVar[str] = "SK102"


class ConstantError(DeclarationError):
    """A compile-time constant has a bad type, a bad default or a bad override."""

    code: ClassVar[str] = "SK103"


# Deprecated for type checkers and editors only (category=None: no runtime warning), since
# every rule's class still subclasses it for this release and would warn at import.
@deprecated(
    "HardwareLimitError is deprecated: catch HardwareRuleError (or one rule's class, such as TmaBoxError) and read exc.phase",
    category=None,
)
class HardwareLimitError(DeclarationError):
    """Deprecated: a hardware rule broken at the declaration.

    Every `HardwareRuleError` is one, in both phases, so that `except HardwareLimitError`
    around an import still catches what it caught before; it is never raised on its own.
    Deprecated, and kept for one release only: catch `HardwareRuleError` (or one rule's class,
    such as `TmaBoxError`), and read `exc.phase` to tell the declaration from a call.
    """

    code: ClassVar[str] = "SK199"


class VjpError(DeclarationError):
    """`vjp=` is neither "reference" nor a function, says "reference" for a kernel without a
    `reference=` or with one that cannot take the operands, or names a backward that cannot
    take the operands, results and cotangents."""

    code: ClassVar[str] = "SK107"


class BodyError(DeclarationError):
    """The kernel body failed to trace on tile-shaped values."""

    code: ClassVar[str] = "SK104"


class ResultMismatchError(BodyError):
    """The body returns tiles whose rank, dims or dtype differ from the declared results."""

    code: ClassVar[str] = "SK105"


class CrossBlockResultError(ResultMismatchError):
    """A result lacks a tiled dim, but the body does not end it with a reduction over that dim
    that blocks can compute in parts (a sum, max or min, then casts or constant scales)."""

    code: ClassVar[str] = "SK108"


class UnsupportedOpError(BodyError):
    """The body uses an operation that Mosaic GPU cannot lower."""

    code: ClassVar[str] = "SK106"


class SliceError(UnsupportedOpError):
    """The body slices, splits or concatenates blocks off the register layout's tiles: along
    the columns, every bound and width a multiple of 8 (the WGMMA layout's column tile), and
    along a dim the block holds whole; never along the rows. Found at the call, where the
    dims have their sizes."""

    code: ClassVar[str] = "SK109"


class JoinedColumnsError(UnsupportedOpError):
    """The body moves values along a result's joined columns (`-> "M N1+N2"`) where a block
    holds them part by part: a part but the last is not a multiple of 8 columns, so the next
    part starts on a register tile of its own, and a slice, scan, gather or top-k along the
    joined columns would cross the columns between the parts. Elementwise ops and reductions
    over them are exact. Found at the call, where the parts have their sizes."""

    code: ClassVar[str] = "SK112"


class ShiftError(UnsupportedOpError):
    """The body loads an operand shifted (`sk.load(x, offset={dim: k})`) where no copy can
    hold the rows around its block: along the columns (a window would start inside a register
    vector), inside a loop's step, or further back than one block of a split dim."""

    code: ClassVar[str] = "SK110"


class RaggedGroupsError(BodyError):
    """A kernel with ragged groups (`ragged=`) whose body the warp-specialized matmul does not
    compute: ragged rows are walked as (group, row block) items by that form alone, so the
    body is one `sk.loop` folding `acc + sk.dot(x, w)` with an elementwise epilogue, and no
    copy is addressed by data (`index=`, `update=`, `pages=`)."""

    code: ClassVar[str] = "SK111"


# --- raised when a kernel is called, planned, emitted or lowered ------------------------------


class CallError(StaticKernelError):
    """A call to a kernel is invalid."""

    code: ClassVar[str] = "SK200"


class OperandError(CallError):
    """An argument is not a jax or numpy array (plan, emit and lower also take a
    `jax.ShapeDtypeStruct`), or the argument count is wrong; or, within
    `sk.checked_indices()`, an index operand holds an index outside the dim it addresses (or
    a slot its scatter writes twice)."""

    code: ClassVar[str] = "SK201"


class ShapeError(CallError):
    """An operand's rank or dims do not match its annotation or the other operands."""

    code: ClassVar[str] = "SK202"


class DtypeError(CallError):
    """An operand's dtype is not allowed by its annotation or by Mosaic GPU."""

    code: ClassVar[str] = "SK203"


class SymbolicDimError(CallError):
    """A dim, or the axis jax.vmap maps a kernel over, is symbolic or traced; Mosaic GPU
    launches need static ints."""

    code: ClassVar[str] = "SK204"


# Deprecated for type checkers and editors only (category=None: no runtime warning), since
# every rule's class still subclasses it for this release and would warn at import.
@deprecated(
    "PlanError is deprecated: catch HardwareRuleError (or one rule's class, such as SharedMemoryError) and read exc.phase",
    category=None,
)
class PlanError(CallError):
    """Deprecated: a hardware rule broken at a call, or by `kernel.bind`.

    Every `HardwareRuleError` is one, in both phases, so that `except PlanError` around a
    call still catches what it caught before; it is never raised on its own. Deprecated, and
    kept for one release only: catch `HardwareRuleError` (or one rule's class, such as
    `SharedMemoryError`), and read `exc.phase` to tell the declaration from a call.
    """

    code: ClassVar[str] = "SK299"


class OverrideError(CallError):
    """A per-call or bound constant override is unknown, mistyped, not positive or traced."""

    code: ClassVar[str] = "SK205"


class NotDifferentiableError(CallError):
    """A kernel declared without `vjp=` was differentiated, one declared with a backward
    was differentiated in forward mode (`jax.jvp`), which a backward cannot give, or a kernel
    was transposed as a linear function (`jax.linear_transpose`)."""

    code: ClassVar[str] = "SK206"


class BackendError(CallError):
    """An unknown backend was requested, or the backend cannot run here."""

    code: ClassVar[str] = "SK207"


class BackwardError(CallError):
    """A kernel's declared backward returned the wrong number of cotangents, or one unlike its
    operand in shape or dtype; or its reference returned results unlike the kernel's."""

    code: ClassVar[str] = "SK208"


class NotAKernelError(CallError):
    """A function of `sk.testing` was given something other than a kernel: a plain function,
    say, with no `@sk.kernel` declaration."""

    code: ClassVar[str] = "SK209"


class BenchError(CallError):
    """`sk.testing.bench` or `sk.testing.bench_side_by_side` was given something it cannot
    time: no contender, a contender that is not callable, or a setting out of range (`warmup`
    an int >= 0, `reps` an int >= 1, `min_run_s` finite seconds >= 0)."""

    code: ClassVar[str] = "SK210"


# --- raised when a kernel is compiled for a GPU (kernel.compile) -------------------------------


class CompileError(CallError):
    """Compiling a specialization for a GPU failed, or the target cannot run the kernel."""

    code: ClassVar[str] = "SK400"


class CompileTargetError(CompileError):
    """A compile target is unknown."""

    code: ClassVar[str] = "SK401"


class ToolchainError(CompileError):
    """The compile toolchain (the CUDA plugin, ptxas) is missing or not usable here."""

    code: ClassVar[str] = "SK402"


# --- raised when a kernel is tuned (kernel.tune) ---------------------------------------------


class TuneError(CallError):
    """A kernel cannot be tuned as asked: it declares nothing to tune, the measure named is not
    available here (the device measure without a GPU, or for another architecture than the
    attached GPU's), or `STATICKERNEL_AUTOTUNE` holds an unknown value."""

    code: ClassVar[str] = "SK500"


class NoCandidateError(TuneError):
    """Every candidate of a tuning was refused by a rule, failed to compile or gave wrong
    numbers: none can be chosen."""

    code: ClassVar[str] = "SK501"


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

    code: ClassVar[str] = "SK300"


class TmaBoxError(HardwareRuleError):
    """A block dim cut by a constant holds more than 256 elements, the most a TMA box copies."""

    code: ClassVar[str] = "SK301"


class BlockAlignmentError(HardwareRuleError):
    """A block dim is not a multiple of the unit its axis needs: 64 rows for the WGMMA
    register layout, 8 columns and 16-byte TMA rows, or 128 bytes for a 1-D block."""

    code: ClassVar[str] = "SK302"


class SharedMemoryError(HardwareRuleError):
    """The blocks of a kernel, with its pipelines' stages, do not fit in shared memory."""

    code: ClassVar[str] = "SK303"


class Int32LimitError(HardwareRuleError):
    """A dim, or the end of its last block, is past the 2**31 - 1 elements that Mosaic GPU's
    int32 index math addresses."""

    code: ClassVar[str] = "SK304"


class GridLimitError(HardwareRuleError):
    """The grid has more blocks along an axis than CUDA's grid takes there (65535 on y and z)."""

    code: ClassVar[str] = "SK305"


class DotShapeError(HardwareRuleError):
    """A block that `sk.dot` multiplies has a size WGMMA cannot take: M a multiple of 64, N a
    multiple of 8 (of the 32-byte swizzle for a `b` laid out "K N") and at most 256, K a
    multiple of the 32-byte swizzle, WGMMA's narrowest."""

    code: ClassVar[str] = "SK306"


class DotDtypeError(HardwareRuleError):
    """The operands of `sk.dot` have different dtypes, or a dtype WGMMA does not take
    (bfloat16, float16 and float32 as tf32 are its dtypes)."""

    code: ClassVar[str] = "SK307"


class DotLayoutError(HardwareRuleError):
    """The operands of `sk.dot` are laid out in a way WGMMA cannot read: a float32 `b` must be
    laid out "N K"."""

    code: ClassVar[str] = "SK308"


class LoopOperandError(HardwareRuleError):
    """An operand read block by block in a loop has a dim that is neither tiled nor the loop
    dim: the pipeline copies blocks, and a whole dim has none."""

    code: ClassVar[str] = "SK309"


class TensorCoreTargetError(HardwareRuleError):
    """A product `sk.dot` computes cannot take the target's tensor cores as the kernel is
    written: on `sm_100a` (tcgen05), a product must be folded into an accumulator carry over a
    loop of every block, of bfloat16, float16 or fp8 operands, in blocks of 128 rows and at
    most 256 columns."""

    code: ClassVar[str] = "SK310"


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

    def error(
        self,
        cls: type[_E],
        what: str,
        *,
        operand: str | None = None,
        constant: str | None = None,
        dim: str | None = None,
        expected: Any = None,
        actual: Any = None,
        fix: str | None = None,
    ) -> _E:
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
