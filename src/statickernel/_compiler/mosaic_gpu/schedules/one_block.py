"""One block a CTA: copy in, compute, copy out. Co-resident CTAs overlap one another's
waits. Every launch without loops can take it, so it is asked last."""

from ..plan.schedule import ScheduleKind, schedule_figures
from .base import ScheduleChoice, ScheduleInputs, check_blocks_fit, once_bytes

__all__ = ["OneBlockPerCta"]


class OneBlockPerCta:
    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
        plan = inputs.plan
        if plan.loops:
            return None
        smem = plan.held_smem_bytes
        check_blocks_fit(plan, smem)
        kind = ScheduleKind.ONE_BLOCK_PER_CTA
        schedule = schedule_figures(kind, plan.blocks, 1, once_bytes(inputs.operands), smem)
        return ScheduleChoice(schedule, smem, inputs.operands)
