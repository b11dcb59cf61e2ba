"""Which emitter writes a plan's variants: its register form's (`FormEmitter`, by the form)
and its launch schedule's (`ScheduleEmitter`, by the schedule's kind). The generator
(`emit.module`) asks the two it gets here, and reads no variant's config itself; a new form or
schedule is its emitter's module and one line here.
"""

from collections.abc import Mapping

from ...ir.nodes import Form
from ..plan.plan import LaunchPlan
from ..plan.schedule import ScheduleKind
from .consumers import CONSUMER_PAIR_LOOP
from .forms import BLOCK_FORM, FormEmitter
from .launches import ScheduleEmitter
from .mma_warp import MMA_WARP_LOOP
from .persistent_block import PERSISTENT_BLOCKS
from .rows import ROW_FORM
from .split import SPLIT_LOOP
from .warpspec import WARP_SPECIALIZED_LOOP

__all__ = ["FORM_EMITTERS", "SCHEDULE_EMITTERS", "form_emitter", "schedule_emitter"]

# What each register form does its own way: copies, buffers, slicing back, block function.
FORM_EMITTERS: Mapping[Form, FormEmitter] = {
    Form.BLOCK: BLOCK_FORM,
    Form.STRIDED: BLOCK_FORM,
    Form.ROWS: ROW_FORM,
}

# What each launch schedule does its own way: the CTAs launched, their grid, buffers and
# barriers, the results finished after the launch, the block function of the block forms.
SCHEDULE_EMITTERS: Mapping[ScheduleKind, ScheduleEmitter] = {
    ScheduleKind.ONE_BLOCK_PER_CTA: ScheduleEmitter(),
    ScheduleKind.PIPELINED_LOOPS: ScheduleEmitter(),
    ScheduleKind.SPLIT_LOOP: SPLIT_LOOP,
    ScheduleKind.PERSISTENT: PERSISTENT_BLOCKS,
    ScheduleKind.WARP_SPECIALIZED: WARP_SPECIALIZED_LOOP,
    ScheduleKind.MMA_WARP: MMA_WARP_LOOP,
    ScheduleKind.CONSUMER_PAIR: CONSUMER_PAIR_LOOP,
}


def form_emitter(plan: LaunchPlan) -> FormEmitter:
    """The emitter of the register form `plan` took."""
    return FORM_EMITTERS[plan.form]


def schedule_emitter(plan: LaunchPlan) -> ScheduleEmitter:
    """The emitter of the launch schedule `plan` took."""
    assert plan.schedule is not None, "a plan at a call has its schedule"
    return SCHEDULE_EMITTERS[plan.schedule.kind]
