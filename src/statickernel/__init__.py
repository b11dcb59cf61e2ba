"""statickernel: typed Pallas Mosaic GPU kernels with static launches and exact edges."""

from . import testing
from ._backend import BACKENDS, default_backend, set_backend
from ._compile_report import CompileReport, Occupancy, OccupancyLimit
from ._errors import (
    AnnotationError,
    BackendError,
    BodyError,
    CallError,
    CompileError,
    CompileTargetError,
    ConstantError,
    DeclarationError,
    DtypeError,
    HardwareLimitError,
    NotDifferentiableError,
    OperandError,
    OverrideError,
    PlanError,
    ResultMismatchError,
    ShapeError,
    SharedMemoryError,
    StaticKernelError,
    SymbolicDimError,
    TilingError,
    ToolchainError,
    UnsupportedOpError,
)
from ._kernel import Kernel, Specialization, kernel
from ._loops import dot, loop, map_blocks
from ._ops import max, min, sum
from ._pipeline import LoopPlan
from ._plan import DimPlan, LaunchPlan, OperandPlan
from ._spec import Const
from ._tile import Tile, dim, load

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "AnnotationError",
    "BackendError",
    "BodyError",
    "CallError",
    "CompileError",
    "CompileReport",
    "CompileTargetError",
    "Const",
    "ConstantError",
    "DeclarationError",
    "DimPlan",
    "DtypeError",
    "HardwareLimitError",
    "Kernel",
    "LaunchPlan",
    "LoopPlan",
    "NotDifferentiableError",
    "Occupancy",
    "OccupancyLimit",
    "OperandError",
    "OperandPlan",
    "OverrideError",
    "PlanError",
    "ResultMismatchError",
    "ShapeError",
    "SharedMemoryError",
    "Specialization",
    "StaticKernelError",
    "SymbolicDimError",
    "Tile",
    "TilingError",
    "ToolchainError",
    "UnsupportedOpError",
    "default_backend",
    "dim",
    "dot",
    "kernel",
    "load",
    "loop",
    "map_blocks",
    "max",
    "min",
    "set_backend",
    "sum",
    "testing",
]
