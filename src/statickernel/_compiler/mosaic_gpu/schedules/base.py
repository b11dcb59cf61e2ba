"""What every launch schedule reads and what it proposes: `ScheduleInputs` in, a
`ScheduleChoice` out, and the pieces the schedules share."""

import dataclasses
from typing import Protocol

from ...._errors import SharedMemoryError
from .. import hardware as hw
from ..layout.smem import smem_fix
from ..plan.inputs import PlanInputs
from ..plan.operands import OperandPlan
from ..plan.pipelining import LoopPlan
from ..plan.schedule import Schedule
from ..plan.variants import ScheduleVariant

__all__ = [
    "LaunchSchedule",
    "ScheduleChoice",
    "ScheduleInputs",
    "check_blocks_fit",
    "once_bytes",
]


@dataclasses.dataclass(frozen=True)
class ScheduleInputs:
    """A specialization as the schedules see it: what planning reads, and its arrays
    planned."""

    plan: PlanInputs
    operands: tuple[OperandPlan, ...]
    results: tuple[OperandPlan, ...]


@dataclasses.dataclass(frozen=True)
class ScheduleChoice:
    """The schedule a launch takes, and what it fixes in the plan: the shared memory, the
    loops' pipelines, the operands (a schedule may hold a block longer), its notes."""

    schedule: Schedule
    smem_bytes: int
    operands: tuple[OperandPlan, ...]
    loops: tuple[LoopPlan, ...] = ()
    notes: tuple[str, ...] = ()
    variant: ScheduleVariant | None = None
    """The schedule's own config (`plan.variants`): the warp-specialized matmul's, two
    consumer warpgroups', a loop split across CTAs'; None where `schedule` says it all."""
    results: tuple[OperandPlan, ...] | None = None
    """The results, where the schedule pads an array or writes partials (None: as planned)."""


class LaunchSchedule(Protocol):
    """A launch schedule: proposes itself for a specialization, or declines with None. A
    schedule that takes the specialization but cannot fit it raises the error that says so."""

    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None: ...


def once_bytes(operands: tuple[OperandPlan, ...]) -> int:
    """The bytes of the blocks a CTA loads once (not a loop's)."""
    return sum(op.smem_bytes for op in operands if op.loaded and op.loop_dim is None)


def check_blocks_fit(inputs: PlanInputs, smem: int) -> None:
    """Raises the error of blocks that do not fit in shared memory, with the fix."""
    if smem <= hw.SMEM_BYTES:
        return
    raise inputs.ctx.error(
        SharedMemoryError,
        f"the blocks need {smem:,} B of shared memory, over the {hw.SMEM_BYTES:,} B a block has",
        expected=f"<= {hw.SMEM_BYTES:,} B",
        actual=f"{smem:,} B",
        fix=smem_fix(inputs.spec, inputs.layout, inputs.dtypes, set(inputs.fills), inputs.loads),
    )
