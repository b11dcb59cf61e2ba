"""statickernel: typed Pallas Mosaic GPU kernels with static launches and exact edges."""

# The public names below are imported on first use (PEP 562), all at once from `_api`: a
# plain `import statickernel` then costs nothing, so the command line answers `--help`
# without importing jax. Type checkers and documentation tools read `_api` directly.
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._api import *  # the names `_api.__all__` lists, the same as `__all__`

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "AnnotationError",
    "BackendError",
    "BackwardError",
    "BenchError",
    "BlockAlignmentError",
    "BodyError",
    "Bound",
    "CallError",
    "CompileError",
    "CompileReport",
    "CompileTargetError",
    "Const",
    "ConstantError",
    "Cost",
    "CrossBlockResultError",
    "DeclarationError",
    "DimPlan",
    "DotDtypeError",
    "DotLayoutError",
    "DotShapeError",
    "DtypeError",
    "FlatFrame",
    "Form",
    "GridLimitError",
    "HardwareLimitError",
    "HardwareRuleError",
    "Int32LimitError",
    "InterpreterFallbackWarning",
    "JoinedColumnsError",
    "Kernel",
    "Kind",
    "LaunchPlan",
    "LoopMode",
    "LoopOperandError",
    "LoopPlan",
    "LoopSplit",
    "NoCandidateError",
    "NotAKernelError",
    "NotDifferentiableError",
    "Occupancy",
    "OccupancyLimit",
    "OperandError",
    "OperandPlan",
    "OverrideError",
    "Persistent",
    "Phase",
    "PlanError",
    "PlannedDot",
    "RaggedGroupsError",
    "Ranking",
    "ResultMismatchError",
    "Role",
    "RowFrame",
    "Schedule",
    "ScheduleKind",
    "ShapeError",
    "SharedMemoryError",
    "ShiftError",
    "SliceError",
    "Specialization",
    "StaticKernelError",
    "SymbolicDimError",
    "TensorCoreTargetError",
    "Tile",
    "TilingError",
    "TmaBoxError",
    "ToolchainError",
    "TuneCandidate",
    "TuneError",
    "TuneResult",
    "TuningCacheWarning",
    "UnsupportedOpError",
    "VjpError",
    "backend",
    "checked_indices",
    "default_backend",
    "dim",
    "dot",
    "kernel",
    "load",
    "loop",
    "map_blocks",
    "max",
    "min",
    "position",
    "profile",
    "random_bits",
    "random_bits_reference",
    "set_backend",
    "sum",
    "testing",
    "tune",
    "uniform",
    "uniform_reference",
    "unprofiled",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import _api

    globals().update({n: getattr(_api, n) for n in _api.__all__})
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
