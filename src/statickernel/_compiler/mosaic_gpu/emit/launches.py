"""What code generation does differently for each launch schedule (`ScheduleEmitter`): the
translation its block function runs, the CTAs it launches and how the module's header says
so, the grid axes a block reads its index along, how it holds shared memory and barriers, its
cluster, and its block function; and the pieces of the generator (`emit.module`) the block
functions are made of (`BlockPieces`, `PersistentPieces`).

`ScheduleEmitter` itself is one block a CTA, its loops pipelined, as the other schedules are
where they do not say otherwise. Each schedule with a config of its own has its emitter in the
module that writes its code (`emit/split.py`, `emit/consumers.py`, `emit/warpspec.py`,
`emit/mma_warp.py`, their shared walk in `emit/warp_walk.py`; the persistent blocks' in
`emit/persistent_block.py`), the only module of code generation that reads its config;
`emit.variants` picks a plan's emitter from its schedule's kind.
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Protocol

from ...ir.nodes import Expr, FunctionDef, Keyword, Stmt
from ..lower.translation import LoopBlock, Translation
from ..plan.plan import LaunchPlan, OperandPlan
from ..plan.schedule import Schedule

__all__ = ["BlockPieces", "ModuleGenerator", "PersistentPieces", "ScheduleEmitter", "WalkedPart"]


@dataclasses.dataclass(frozen=True)
class WalkedPart:
    """The part of a loop's blocks a CTA walks, where its schedule cuts the loop's steps into
    parts across CTAs."""

    first: Expr
    """The first block of the part."""
    steps: int
    """A part's steps: the pipeline's grid."""
    fewer: Expr | None
    """The steps this CTA's part walks, traced, where the last part walks fewer; else None."""


class BlockPieces(Protocol):
    """What the block function of one warpgroup a CTA is made of (`emit.module`), which the
    consumers' reuses."""

    plan: LaunchPlan
    t: Translation
    new_store_api: bool
    loaded: list[OperandPlan]
    kernel_results: list[OperandPlan]

    def block_header(self, indices: Mapping[str, list[Stmt]] | None = None) -> list[Stmt]: ...

    def load_statements(self) -> list[Stmt]: ...

    def masks(self) -> list[Stmt]: ...

    def computed(
        self, loop_lines: Callable[[LoopBlock], list[Stmt]], skipped: tuple[Stmt, ...] = ()
    ) -> list[Stmt]: ...

    def store(self) -> list[Stmt]: ...

    def params(self) -> tuple[str, ...]: ...


class PersistentPieces(Protocol):
    """What the persistent block function reads of the generator (`emit.module`)."""

    plan: LaunchPlan
    schedule: Schedule
    t: Translation
    new_store_api: bool
    loaded: list[OperandPlan]
    scalars: list[OperandPlan]

    def _boxes(self, op: OperandPlan) -> list[tuple[Expr, Expr]]: ...

    def _load(self, op: OperandPlan, ref: Expr | None = None) -> list[Stmt]: ...

    def masks(self) -> list[Stmt]: ...

    def params(self) -> tuple[str, ...]: ...


class ModuleGenerator(BlockPieces, PersistentPieces, Protocol):
    """The generator as a schedule's emitter sees it: every piece, and the block function of
    one block a CTA."""

    def one_block_function(self) -> FunctionDef: ...


@dataclasses.dataclass(frozen=True)
class ScheduleEmitter:
    """One block a CTA, its loops pipelined, as a schedule's code generation is unless its
    emitter says otherwise (a persistent launch's CTAs walk the blocks)."""

    def translation(self, plan: LaunchPlan, translation: Translation) -> Translation:
        """The body as the block function runs it."""
        return translation

    def copies_blocks_once(self) -> bool:
        """Whether the generator copies the blocks a CTA loads once (not the warp-specialized
        matmul's, whose consumers each hold their own buffers)."""
        return True

    def scopes_stores(self) -> bool:
        """Whether the results stored after the loops take scoped shared memory, which reuses
        the pipelines' buffers (not two consumers': scoped memory is every warpgroup's)."""
        return True

    def part_axes(self, plan: LaunchPlan) -> tuple[str, ...]:
        """The grid axes past the blocks' a block reads its index along."""
        return ()

    def grid_names(self, plan: LaunchPlan) -> tuple[str, ...]:
        """The launch grid's axes: the blocks', or one of CTAs that walk them."""
        if plan.schedule is not None and plan.schedule.walks_blocks:
            return ("cta",)
        return (*plan.grid_names, *self.part_axes(plan))

    def launch_grid(self, plan: LaunchPlan) -> tuple[int, ...]:
        """The CTAs launched: one a block, or the persistent CTAs that walk them."""
        if plan.schedule is not None and plan.schedule.walks_blocks:
            return (plan.schedule.ctas,)
        return plan.grid

    def grid_text(self, plan: LaunchPlan, launched: tuple[int, ...], blocks: str) -> str:
        """The module header's grid, where the CTAs launched are not the blocks."""
        return f"{launched} persistent CTAs, for the blocks {blocks}"

    def walked_part(self, plan: LaunchPlan, axis: str) -> WalkedPart | None:
        """The part of the loop over `axis` a CTA walks, where the schedule cuts the loop
        across CTAs; None where a CTA walks every block."""
        return None

    def smem_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A buffer of the kernel's scratch of `shape`, as the launch allocates it."""
        return shape

    def barriers(self) -> int | None:
        """The barriers a loaded block's copies take, where the schedule fixes them."""
        return None

    def cluster_keywords(self, plan: LaunchPlan) -> tuple[Keyword, ...]:
        """`plgpu.kernel`'s keywords of the launch's clusters of CTAs; none without."""
        return ()

    def finished_results(self, plan: LaunchPlan, outs: list[Expr]) -> list[Stmt]:
        """The wrapper's statements that finish the results the launch wrote in pieces, each
        finished result's expression in `outs` replaced by its name; none by default."""
        return []

    def block_function(self, gen: ModuleGenerator) -> FunctionDef:
        """The block function: copy in, compute, copy out."""
        return gen.one_block_function()
