"""Running a kernel's generated module in the Mosaic GPU interpreter with its race detector:
every shared-memory read and write of every warpgroup is checked against the barriers and
waits that order them, so a missing wait between a producer and a consumer, or an epilogue
slot refilled before its store has read it, is found on a CPU."""

import dataclasses
from typing import Any

import jax
from jax.experimental.pallas import mosaic_gpu as plgpu

from .._compat import interpreter_races_found
from .._where import call_site
from ..runtime.backend import require_mosaic_gpu
from .probes import require_kernel

__all__ = ["RaceReport", "detect_races", "run_detecting_races"]


@dataclasses.dataclass(frozen=True)
class RaceReport:
    """What a run under the race detector gave."""

    result: Any
    """The kernel's result, from the interpreter; None when the run stopped at a race."""
    races_found: bool
    """True when the detector saw two accesses to shared memory that nothing orders."""


def detect_races(kernel: Any, *args: Any, **overrides: Any) -> RaceReport:
    """Runs the module `kernel.emit(*args, backend="interpret", **overrides)` prints, freshly
    executed so that nothing is reused from an earlier trace, with
    `plgpu.InterpretGPUParams(detect_races=True)`."""
    require_kernel(kernel, "detect_races")
    source = str(kernel.emit(*args, backend="interpret", **overrides))
    return run_detecting_races(source, kernel.spec.name, args)


def run_detecting_races(source: str, name: str, args: tuple[Any, ...]) -> RaceReport:
    """Executes a generated module and calls its function `name` on `args` under the race
    detector. jax 0.11 records a race and runs on; jax 0.12 stops at the first one, with a
    "RACE DETECTED" error: either way the report says a race was found (with no result when
    the run stopped). On a jax too old to run the module, the BackendError a call gives."""
    require_mosaic_gpu(name, call_site())
    namespace: dict[str, Any] = {"__name__": f"statickernel_races_{name}"}
    exec(compile(source, f"<generated {name}>", "exec"), namespace)
    try:
        with plgpu.force_gpu_interpret_mode(plgpu.InterpretGPUParams(detect_races=True)):
            result = jax.block_until_ready(namespace[name](*args))
    except Exception as exc:
        if "RACE DETECTED" not in str(exc):
            raise
        return RaceReport(None, True)
    return RaceReport(result, interpreter_races_found())
