"""A loop split across CTAs: its steps cut into parts, each part summed by a CTA of its own.

A launch of few blocks over a long loop (a product of a few rows by a large weight, as every
decode step of a served model runs) leaves most SMs idle while the blocks it has stream the
whole weight. When the body's loop sums into its carries from zero and its results are those
sums, scaled and cast (`trace.splits`), the plan cuts the loop's steps into `parts` and launches a CTA for
each block and part: each sums its part from zero and writes it to an array of partial sums
with one entry a part, and the wrapper adds the entries in a fixed order, then applies the
body's casts. The same bits come out on every call; they differ from the unsplit sum's only
by the order of the additions.
"""

import dataclasses
import math

from .. import hardware as hw
from .schedule_config import ScheduleConfig, SummedResult

__all__ = ["MIN_PART_STEPS", "LoopSplit", "split_parts"]

# A part walks at least this many steps, so that its pipeline still overlaps copies with
# products, and a loop is split only when it has two such parts at least.
MIN_PART_STEPS = 4


@dataclasses.dataclass(frozen=True)
class LoopSplit(ScheduleConfig):
    """The loop over `axis` in `parts` parts of `part_steps` steps each (the last part the
    steps left), one CTA a block and part."""

    axis: str
    """The loop dim; the grid's last axis, named after it, numbers the parts."""
    steps: int
    """The loop's steps in all."""
    parts: int
    part_steps: int
    blocks: int
    """The grid's blocks, each split into `parts` CTAs."""
    sms: int
    """The SMs the launch is sized for."""
    partials: tuple[str, ...]
    """For each result, the body's variable each CTA stores: its part's sum, scaled."""
    partial_dtypes: tuple[str, ...]
    """Each result's partial sums' dtype: its carry's."""
    casts: tuple[tuple[str, ...], ...]
    """For each result, the dtypes the body casts its sum to, in order."""
    cast_vars: frozenset[str] = frozenset()
    """The body's variables of those casts, which the wrapper computes instead of the CTAs."""

    @property
    def last_part_steps(self) -> int:
        """The steps of the last part: the loop's steps left after the others'."""
        return self.steps - (self.parts - 1) * self.part_steps

    @property
    def ctas(self) -> int:
        return self.blocks * self.parts

    def loop_parts(self) -> int:
        return self.parts

    def after_launch_bytes(self, results: tuple[SummedResult, ...]) -> int:
        """The sum after the launch: each result's partial sums read, the result written."""
        total = 0
        for op, casts in zip(results, self.casts, strict=True):
            lead = len(op.batch)
            shape = (*op.shape[:lead], *op.shape[lead + 1 :])
            total += _bytes(op.gmem_shape, op.dtype)
            total += _bytes(shape, casts[-1] if casts else op.dtype)
        return total

    def check_invariants(self) -> None:
        assert self.parts >= 2 and self.part_steps >= MIN_PART_STEPS
        assert 1 <= self.last_part_steps <= self.part_steps
        assert len(self.casts) == len(self.partial_dtypes) == len(self.partials)

    def __str__(self) -> str:
        last = (
            f" (the last {self.last_part_steps})" if self.last_part_steps != self.part_steps else ""
        )
        casts = ", then cast as the body casts them" if any(self.casts) else ""
        return (
            f"split: {self.axis} in {self.parts} parts of {self.part_steps} steps{last}, "
            f"one CTA a block and part: {self.ctas:,} CTAs for {self.blocks:,} block(s); each "
            f"part sums from zero into {'/'.join(dict.fromkeys(self.partial_dtypes))} partials, "
            f"added after the launch in a fixed order (deterministic){casts}. "
            f"Why: {self.blocks:,} block(s) alone would keep {self.blocks:,} of "
            f"{self.sms} SMs busy"
        )


def _bytes(shape: tuple[int, ...], dtype: str) -> int:
    return hw.nbytes(math.prod(shape), dtype)


def split_parts(
    blocks: int, steps: int, sms: int, least: int = MIN_PART_STEPS
) -> tuple[int, int] | None:
    """The parts and steps a part of a loop of `steps` steps over a grid of `blocks` blocks:
    as many parts as keep every CTA on an SM of its own (`blocks * parts <= sms`), each of
    `least` steps at least (`MIN_PART_STEPS`, or the stages a kernel declares, which its
    pipeline then holds); None when fewer than two parts would."""
    least = max(least, MIN_PART_STEPS)
    most = min(sms // blocks, steps // least)
    if most < 2:
        return None
    part_steps = hw.cdiv(steps, most)
    return hw.cdiv(steps, part_steps), part_steps
