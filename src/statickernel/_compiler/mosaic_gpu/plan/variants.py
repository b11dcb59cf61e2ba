"""The variant slots of a `LaunchPlan`: what the register form and the launch schedule a
specialization took fix of their own, each a frozen config of the variant's module.

The form slot holds a `PlannedForm` (`plan.forms`: the block form, the strided block or
the row form, with its register frame). The schedule slot holds a `ScheduleVariant`, the
config of the schedule that took the launch where it has one: the warp-specialized matmul
(`plan.warpspec`, WGMMA; `plan.mma_warp`, tcgen05), two consumer warpgroups
(`plan.consumers`) or a loop split across CTAs (`plan.split`); None for the schedules the
plan's `Schedule` describes whole (one block a CTA, pipelined loops, persistent blocks). Each
config is a `ScheduleConfig` (`plan.schedule_config`), which answers what the modules outside
its unit ask of it.
"""

from typing import TypeAlias

from .consumers import ConsumerPair
from .mma_warp import MmaWarpSpecialized
from .split import LoopSplit
from .warpspec import WarpSpecialized

__all__ = ["ScheduleVariant"]

ScheduleVariant: TypeAlias = WarpSpecialized | MmaWarpSpecialized | ConsumerPair | LoopSplit
"""The config of the schedule that took a launch, where that schedule has one."""
