"""What tuning reads of a kernel: its declaration, its constants, and the entry points that
plan, compile and run one specialization. (`runtime.kernel.Kernel` is one; tuning reads it
through this protocol, so that imports run one way.)"""

from collections.abc import Callable
from typing import Any, Protocol

from .._compiler.declare.spec import KernelSpec
from .._compiler.mosaic_gpu.plan.plan import LaunchPlan
from ..aot.report import CompileReport

__all__ = ["TunedKernel"]


class TunedKernel(Protocol):
    spec: KernelSpec
    consts: dict[str, Any]
    backend: str | None
    target: str | None
    reference: Callable[..., Any] | None

    def plan(
        self, *args: Any, backend: str | None = None, target: str | None = None, **overrides: Any
    ) -> LaunchPlan: ...

    def compile(self, *args: Any, target: str = "sm_90a", **overrides: Any) -> CompileReport: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
