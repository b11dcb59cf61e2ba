"""The public API, imported at once: what `statickernel/__init__.py` loads on first use.

The package's `__init__` names these without importing them, so that `import statickernel`
(and the command line's `--help`) does not import jax; the first attribute of the package
that is used imports this module, and with it everything, as an eager `__init__` would.
"""

from . import testing
from ._compiler.declare.consts import tune
from ._compiler.declare.spec import Const
from ._compiler.ir.nodes import Form, Kind, LoopMode
from ._compiler.mosaic_gpu.pallas import FlatFrame, RowFrame
from ._compiler.mosaic_gpu.plan.cost import Bound, Cost
from ._compiler.mosaic_gpu.plan.pipelining import LoopPlan, PlannedDot
from ._compiler.mosaic_gpu.plan.plan import DimPlan, LaunchPlan, OperandPlan, Role
from ._compiler.mosaic_gpu.plan.schedule import Persistent, Schedule, ScheduleKind
from ._compiler.mosaic_gpu.plan.split import LoopSplit
from ._errors import (
    AnnotationError,
    BackendError,
    BackwardError,
    BenchError,
    BlockAlignmentError,
    BodyError,
    CallError,
    CompileError,
    CompileTargetError,
    ConstantError,
    CrossBlockResultError,
    DeclarationError,
    DotDtypeError,
    DotLayoutError,
    DotShapeError,
    DtypeError,
    GridLimitError,
    HardwareLimitError,
    HardwareRuleError,
    Int32LimitError,
    JoinedColumnsError,
    LoopOperandError,
    NoCandidateError,
    NotAKernelError,
    NotDifferentiableError,
    OperandError,
    OverrideError,
    Phase,
    PlanError,
    RaggedGroupsError,
    ResultMismatchError,
    ShapeError,
    SharedMemoryError,
    ShiftError,
    SliceError,
    StaticKernelError,
    SymbolicDimError,
    TensorCoreTargetError,
    TilingError,
    TmaBoxError,
    ToolchainError,
    TuneError,
    UnsupportedOpError,
    VjpError,
)
from .aot.report import CompileReport, Occupancy, OccupancyLimit
from .language.loops import loop, map_blocks
from .language.position import position
from .language.products import dot
from .language.random import random_bits, random_bits_reference, uniform, uniform_reference
from .language.reductions import max, min, sum
from .language.tile import Tile, dim, load
from .runtime.backend import (
    BACKENDS,
    InterpreterFallbackWarning,
    backend,
    default_backend,
    set_backend,
)
from .runtime.indices import checked_indices
from .runtime.kernel import Kernel, kernel
from .runtime.profiling import profile, unprofiled
from .runtime.specialization import Specialization
from .tuning.cache_warning import TuningCacheWarning
from .tuning.result import Ranking, TuneCandidate, TuneResult

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
