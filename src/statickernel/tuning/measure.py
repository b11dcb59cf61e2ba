"""How one candidate is measured: three strategies behind one interface, from the most to the
least trustworthy. Each plans the candidate first; a statickernel rule that refuses it prunes
it before anything compiles or runs."""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import jax

from .._compiler.mosaic_gpu.plan.plan import LaunchPlan
from .._errors import CompileError, StaticKernelError, ToolchainError
from ..runtime.autodiff import named_constants
from ..testing.bench import bench
from ..testing.compare import compare
from .model import copied_bytes, estimated_seconds
from .result import Ranking, Status, TuneCandidate
from .subject import TunedKernel

__all__ = ["CompileMeasure", "DeviceMeasure", "Measure", "PlanMeasure"]


class Measure(Protocol):
    @property
    def ranking(self) -> Ranking: ...

    @property
    def target(self) -> str: ...

    @property
    def planned_for(self) -> str: ...

    def measure(
        self, kernel: TunedKernel, args: Sequence[Any], constants: Mapping[str, Any]
    ) -> TuneCandidate: ...


def _reason(exc: StaticKernelError) -> str:
    return f"{type(exc).__name__}: {exc.what}"


def _structs(args: Sequence[Any]) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]


def _planned(
    kernel: TunedKernel, args: Sequence[Any], constants: Mapping[str, Any], target: str
) -> LaunchPlan | TuneCandidate:
    """The candidate's plan for the GPU architecture `target`, or the candidate pruned by the
    rule that refused it."""
    try:
        return kernel.plan(*_structs(args), backend="mosaic_gpu", target=target, **constants)
    except StaticKernelError as exc:
        return TuneCandidate(dict(constants), Status.PRUNED, _reason(exc))


def _from_plan(plan: LaunchPlan, constants: Mapping[str, Any], target: str) -> TuneCandidate:
    schedule = plan.schedule
    assert schedule is not None
    return TuneCandidate(
        dict(constants),
        Status.RANKED,
        ctas=schedule.ctas,
        ctas_per_sm=schedule.ctas_per_sm,
        bytes_in_flight_per_sm=schedule.bytes_in_flight_per_sm,
        smem_bytes=schedule.smem_bytes,
        estimated_seconds=estimated_seconds(plan, target=target),
        copied_bytes=copied_bytes(plan),
    )


@dataclasses.dataclass(frozen=True)
class PlanMeasure:
    """The plan's first-order estimate alone, for the architecture `target`."""

    target: str = "sm_90a"
    ranking: Ranking = Ranking.PLAN

    @property
    def planned_for(self) -> str:
        return self.target

    def measure(
        self, kernel: TunedKernel, args: Sequence[Any], constants: Mapping[str, Any]
    ) -> TuneCandidate:
        plan = _planned(kernel, args, constants, self.target)
        return plan if isinstance(plan, TuneCandidate) else _from_plan(plan, constants, self.target)


@dataclasses.dataclass(frozen=True)
class CompileMeasure:
    """A compile for `target` through ptxas (deviceless without a GPU): the registers and
    spills it reports, and the plan's estimate with the registers counted in its occupancy.
    A missing toolchain raises `ToolchainError`; a failed compile fails the candidate."""

    target: str = "sm_90a"
    ranking: Ranking = Ranking.COMPILE

    @property
    def planned_for(self) -> str:
        return self.target

    def measure(
        self, kernel: TunedKernel, args: Sequence[Any], constants: Mapping[str, Any]
    ) -> TuneCandidate:
        plan = _planned(kernel, args, constants, self.target)
        if isinstance(plan, TuneCandidate):
            return plan
        try:
            report = kernel.compile(*_structs(args), target=self.target, **constants)
        except ToolchainError:
            raise
        except CompileError as exc:
            return TuneCandidate(dict(constants), Status.FAILED, _reason(exc))
        schedule = report.schedule or plan.schedule
        assert schedule is not None
        return dataclasses.replace(
            _from_plan(plan, constants, self.target),
            ctas_per_sm=report.ctas_per_sm,
            bytes_in_flight_per_sm=schedule.bytes_in_flight_per_sm,
            registers=report.registers,
            spill_bytes=report.spill_bytes,
            estimated_seconds=estimated_seconds(plan, schedule, self.target),
        )


@dataclasses.dataclass(frozen=True)
class DeviceMeasure:
    """A run on this machine's GPU: the results checked against the kernel's reference (when
    it declares one), then timed by `testing.bench`: the median of `reps` runs after
    `warmup` calls. `target` is the device's name, `planned_for` its architecture."""

    target: str
    reps: int = 20
    warmup: int = 3
    ranking: Ranking = Ranking.DEVICE
    planned_for: str = "sm_90a"

    def measure(
        self, kernel: TunedKernel, args: Sequence[Any], constants: Mapping[str, Any]
    ) -> TuneCandidate:
        plan = _planned(kernel, args, constants, self.planned_for)
        if isinstance(plan, TuneCandidate):
            return plan
        candidate = _from_plan(plan, constants, self.planned_for)

        def run(*operands: Any) -> Any:
            return kernel(*operands, backend="mosaic_gpu", target=self.planned_for, **constants)

        try:
            got = jax.block_until_ready(run(*args))
        except StaticKernelError as exc:
            return dataclasses.replace(candidate, status=Status.FAILED, reason=_reason(exc))
        if kernel.reference is not None:
            consts = named_constants(kernel.reference, len(args), {**kernel.consts, **constants})
            want = kernel.reference(*args, **consts)
            dtypes = [str(a.dtype) for a in args]
            found = compare(got, want, plan, dtypes)
            if found.mismatches:
                reason = (
                    f"differs from the reference: {found.mismatches:,} of {found.elements:,} "
                    f"elements, max abs error {found.max_abs_error:.3g} (atol {found.atol:.3g})"
                )
                return dataclasses.replace(candidate, status=Status.FAILED, reason=reason)
        seconds = bench(run, *args, warmup=self.warmup, reps=self.reps).median
        return dataclasses.replace(candidate, seconds=seconds)
