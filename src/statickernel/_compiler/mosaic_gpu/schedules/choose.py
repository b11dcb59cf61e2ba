"""The launch schedules in the order they are asked: the first that proposes itself is the
schedule a launch takes. A new schedule is a module of this package and one line here."""

from ..proposals import first_proposal
from .base import LaunchSchedule, ScheduleChoice, ScheduleInputs
from .consumers import ConsumerPairLoop
from .mma_warp import MmaWarpLoop
from .one_block import OneBlockPerCta
from .persistent import PersistentBlocks
from .pipelined import PipelinedLoops
from .split import SplitLoop
from .warpspec import WarpSpecializedLoop

__all__ = ["LAUNCH_SCHEDULES", "choose_schedule"]

# A loop of sums over too few blocks to fill the SMs split across CTAs first, then a
# matmul-shaped loop (where the form allows it), then a loop two consumers can share (an
# attention-shaped one), then any loops, each pipelined. Without
# loops, persistent CTAs where the form chose them or they pay, else one block a CTA.
LAUNCH_SCHEDULES: tuple[LaunchSchedule, ...] = (
    SplitLoop(),
    MmaWarpLoop(),
    WarpSpecializedLoop(),
    ConsumerPairLoop(),
    PipelinedLoops(),
    PersistentBlocks(),
    OneBlockPerCta(),
)


def choose_schedule(inputs: ScheduleInputs) -> ScheduleChoice:
    return first_proposal(LAUNCH_SCHEDULES, inputs, "one block a CTA")
