"""The public API, imported at once: what `statickernel/__init__.py` loads on first use.

The package's `__init__` names these without importing them, so that `import statickernel`
(and the command line's `--help`) does not import jax; the first attribute of the package
that is used imports this module, and with it everything, as an eager `__init__` would.
"""

from . import testing
from ._backend import (
    BACKENDS,
    InterpreterFallbackWarning,
    backend,
    default_backend,
    set_backend,
)
from ._compile_report import CompileReport, Occupancy, OccupancyLimit
from ._cost import Bound, Cost
from ._errors import (
    AnnotationError,
    BackendError,
    BackwardError,
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
    LoopOperandError,
    NotAKernelError,
    NotDifferentiableError,
    OperandError,
    OverrideError,
    Phase,
    PlanError,
    ResultMismatchError,
    ShapeError,
    SharedMemoryError,
    StaticKernelError,
    SymbolicDimError,
    TilingError,
    TmaBoxError,
    ToolchainError,
    UnsupportedOpError,
    VjpError,
)
from ._ir import Form, Kind, LoopMode
from ._kernel import Kernel, Specialization, kernel
from ._loops import dot, loop, map_blocks
from ._ops import max, min, sum
from ._pallas import FlatFrame, RowFrame
from ._pipeline import LoopPlan, PlannedDot
from ._plan import DimPlan, LaunchPlan, OperandPlan, Role
from ._position import position
from ._random import random_bits, random_bits_reference, uniform, uniform_reference
from ._schedule import Persistent, Schedule, ScheduleKind
from ._spec import Const
from ._tile import Tile, dim, load

__all__ = [
    "BACKENDS",
    "AnnotationError",
    "BackendError",
    "BackwardError",
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
    "Kernel",
    "Kind",
    "LaunchPlan",
    "LoopMode",
    "LoopOperandError",
    "LoopPlan",
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
    "ResultMismatchError",
    "Role",
    "RowFrame",
    "Schedule",
    "ScheduleKind",
    "ShapeError",
    "SharedMemoryError",
    "Specialization",
    "StaticKernelError",
    "SymbolicDimError",
    "Tile",
    "TilingError",
    "TmaBoxError",
    "ToolchainError",
    "UnsupportedOpError",
    "VjpError",
    "backend",
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
    "random_bits",
    "random_bits_reference",
    "set_backend",
    "sum",
    "testing",
    "uniform",
    "uniform_reference",
]
