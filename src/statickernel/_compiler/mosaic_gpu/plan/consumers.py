"""Two consumer warpgroups sharing one loop's blocks: when a body's loop can run as
FlashAttention-3's forward does, and how its launch is configured.

A CTA has three warpgroups. The producer only issues the TMA copies of the loop's blocks
(`plgpu.emit_pipeline_warp_specialized`) and gives up registers with `setmaxnreg`; each of
the two consumers computes one block of rows, the rows' blocks 2i and 2i + 1 of CTA i, with
the step the body declares, reading the same copy of each loop block. Against one warpgroup
a CTA, each loop block is copied once for twice the rows (attention's K and V blocks for 128
queries, not 64), no consumer waits on a copy it issues itself, and the consumers take the
registers the producer gives up (232 a thread), so that two CTAs' worth of rows run in one.

It takes a body of one loop that folds register carries (no WGMMA accumulator ref, no map),
walks every block of its dim (no start=, stop= or reverse=True), multiplies on the tensor
cores in its step (`sk.dot` products whose `b` is an operand's block) and reads nothing else
the body holds outside the loop; rows of one WGMMA row group a block (64), at least two of
them, and loop operands not along those rows (each copy serves both consumers). Everything
else keeps one warpgroup a CTA.
"""

import dataclasses

from ...ir.nodes import LoopMode
from .. import hardware as hw
from ..layout.smem import dims_of
from ..lower.translation import LoopBlock
from .inputs import PlanInputs
from .schedule_config import ScheduleConfig

__all__ = ["CONSUMERS", "CONSUMER_REGISTERS", "PRODUCER_REGISTERS", "ConsumerPair", "pair"]

CONSUMERS = 2
# The producer keeps this many registers a thread; the consumers share the rest of the
# register file (64K, less the producer's), rounded down to 8: jax's split.
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = min(256, (512 - PRODUCER_REGISTERS) // CONSUMERS) // 8 * 8


@dataclasses.dataclass(frozen=True)
class ConsumerPair(ScheduleConfig):
    """The launch: `pairs` CTAs along `rows` (the other grid axes as they are), each a
    producer copying the loop's blocks and two consumers of `block` rows each."""

    rows: str
    """The dim the consumers split: each computes one of its blocks."""
    blocks: int
    """Its blocks."""
    block: int
    """A consumer's rows."""
    loop_axis: str
    copied: tuple[str, ...]
    """The operands whose blocks the producer copies, a stage at a time."""
    stages: int

    @property
    def pairs(self) -> int:
        """The CTAs along the rows: a pair of blocks each."""
        return hw.cdiv(self.blocks, CONSUMERS)

    @property
    def odd(self) -> bool:
        """Whether the last CTA's second consumer has no block of its own: it computes the
        last block again (the pipeline waits for both consumers) and stores nothing."""
        return self.blocks % CONSUMERS == 1

    def check_invariants(self) -> None:
        assert self.blocks >= CONSUMERS and self.block == hw.WGMMA_ROWS
        assert self.stages >= 1 and self.copied

    def __str__(self) -> str:
        return (
            f"warp-specialized loop: a producer warpgroup copies "
            f"{', '.join(self.copied)} for the loop over {self.loop_axis} ({self.stages} "
            f"stage{'s' if self.stages != 1 else ''}), two consumer warpgroups of "
            f"{self.block} rows of {self.rows} each ({CONSUMERS * self.block} a CTA) share "
            f"each copy; setmaxnreg "
            f"{PRODUCER_REGISTERS} / {CONSUMER_REGISTERS}"
        )


def pair(inputs: PlanInputs, stages: int) -> ConsumerPair | None:
    """The consumer pair for this specialization, or None where its body or blocks do not
    suit it (see the module's docstring)."""
    if len(inputs.loops) != 1 or not inputs.steps_self_contained:
        return None
    (loop,) = inputs.loops
    if not _shared_step(loop) or inputs.buffers_read_by_body or inputs.spec.copies_by_data:
        return None
    if not inputs.form.specializes_warps or inputs.halos or inputs.spec.page_tables:
        return None
    rows = inputs.layout.dim(inputs.spec.rows)
    if not rows.tiled_by or rows.block != hw.WGMMA_ROWS:
        return None
    blocks = hw.cdiv(rows.size, rows.block)
    if blocks < CONSUMERS:
        return None
    # Each copy serves both consumers' rows: the loop's blocks cannot be along them.
    if any(rows.name in dims_of(inputs.spec, n) for n in loop.operands):
        return None
    result = ConsumerPair(rows.name, blocks, rows.block, loop.axis, loop.operands, stages)
    result.check_invariants()
    return result


def _shared_step(loop: LoopBlock) -> bool:
    """A fold of register carries over every block, multiplying operands' blocks on the
    tensor cores: a step each consumer runs on the producer's copies."""
    return (
        loop.mode is LoopMode.FOLD
        and bool(loop.products)
        and all(p.b for p in loop.products)  # a computed b is staged in shared memory
        and not loop.dots
        and not any(c.accumulator for c in loop.carries)
        and loop.start is None
        and loop.stop is None
        and not loop.reverse
        and bool(loop.operands)
    )
