"""What a launch schedule's config (`plan.variants.ScheduleVariant`) tells the modules outside
its unit: each config answers these questions for itself, so that the cost, the narrowing of a
call's constants and the tuner's model ask the config in the plan's schedule slot, and none of
them reads a schedule's config by its type. A schedule that does not fix a fact keeps the
answer here.
"""

import dataclasses
from typing import Protocol

__all__ = ["ScheduleConfig", "SharedCopies", "SummedResult"]


@dataclasses.dataclass(frozen=True)
class SharedCopies:
    """A CTA's consumers take consecutive blocks along `dim` and share the other operands'
    copies: `consumers` of them a copy."""

    dim: str
    consumers: int


class SummedResult(Protocol):
    """What a config reads of a result's plan (an `OperandPlan`) to count the bytes the
    wrapper's work on it moves after the launch."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def gmem_shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def batch(self) -> tuple[str, ...]: ...


class ScheduleConfig:
    """The questions every launch schedule's config answers; the defaults are those of a
    schedule that launches one CTA a block and finishes its results in the launch."""

    def loop_parts(self) -> int | None:
        """The parts the launch splits a loop into across CTAs; None where it splits none."""
        return None

    def after_launch_bytes(self, results: tuple[SummedResult, ...]) -> int:
        """The HBM bytes the wrapper moves after the launch to finish `results` (the plan's
        results, in order); none where the launch writes them whole."""
        return 0

    def shared_copies(self) -> SharedCopies | None:
        """The dim along which a CTA's consumers take consecutive blocks and share the other
        operands' copies, and how many consumers do (the tuner's model of the copies); None
        where the launch's CTAs copy their own blocks."""
        return None
