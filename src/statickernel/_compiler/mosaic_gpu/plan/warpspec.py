"""The warp-specialized, persistent form of a matmul: when a body is one `sk.loop` of
`acc + sk.dot(a, b)` and an elementwise epilogue, and how its launch is configured.

Each CTA has a producer warpgroup, which only issues TMA copies (and gives up registers with
`setmaxnreg`), and one or two consumer warpgroups, which issue WGMMA and run the epilogue.
A CTA's consumers take consecutive blocks along one dim ("paired"), so that they share the
other operand's block: with the default 128 x 128 blocks a CTA tile is 128 x 256. The CTAs
are persistent, one an SM; each walks the CTA tiles in an L2-friendly snake order. Each
consumer stores its block through two small swizzled shared-memory slots with TMA, so the
stores of one tile drain while the next tile's main loop runs.

The configuration is chosen here from the shape (`plan_warp_specialized`); the block
constants and a stage constant the user sets are kept, and what was chosen, and why, is part
of the plan.
"""

import dataclasses
import math

from .. import hardware as hw
from .cluster import choose_cluster
from .operands import OperandPlan
from .schedule_config import ScheduleConfig, SharedCopies
from .warp_walk import (
    EPILOGUE_ROWS,
    CtaTile,
    RaggedRows,
    WalkInputs,
    WarpWalk,
    plan_walk,
    walk_fields,
)

__all__ = ["MEMORY_REGISTERS", "WarpSpecialized", "plan_warp_specialized"]

# The producer keeps this many registers a thread; the consumers get the rest (setmaxnreg).
MEMORY_REGISTERS = 40


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarpSpecialized(WarpWalk, ScheduleConfig):
    """The launch of a warp-specialized, persistent matmul whose consumer warpgroups issue
    WGMMA: its tiles are CTA tiles of `consumers` blocks."""

    consumers: int
    """Consumer warpgroups a CTA (two): each computes one block, as the body declares it."""
    paired: str
    """The dim whose consecutive blocks a CTA's consumers take."""
    ragged: RaggedRows | None = None
    """The groups the rows are split into, when they are (`ragged=`): the tile grid's rows
    are then the items of `RaggedRows`, and each consumer stores only its item's rows."""

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    def shared_copies(self) -> SharedCopies:
        return SharedCopies(self.paired, self.consumers)

    def check_invariants(self) -> None:
        super().check_invariants()
        assert self.consumers == 2
        assert 1 <= self.ctas <= self.tiles
        assert self.epilogue[0] % hw.WGMMA_ROWS == 0
        if self.ragged is not None:  # both consumers take the item's rows
            assert self.paired != self.ragged.split and not self.swizzled
            assert self.tile_grid[0] == self.ragged.items
        if self.cluster is not None:
            self.cluster.check_invariants(self.tile_grid)
            assert self.ragged is None and self.ctas % self.cluster.size == 0

    def __str__(self) -> str:
        walk = (
            f"{self.ctas} persistent CTAs over {self.tiles} CTA tile(s) {list(self.tile_grid)}"
            if self.cluster is None
            else f"{self.ctas} persistent CTAs in {self.cluster}, over {self.walked_tiles} "
            f"cluster tile(s) {list(self.walked_grid)}"
        )
        return (
            f"warp-specialized: 1 producer + {self.consumers} consumer warpgroup(s), paired "
            f"along {self.paired} (setmaxnreg {MEMORY_REGISTERS} for the producer); "
            f"{self.walk_text(walk)} a consumer, stored by TMA while the next tile runs. "
            f"Why: {self.reason}" + (f"; {self.ragged}" if self.ragged is not None else "")
        )


class _Wgmma:
    """WGMMA, issued by two consumer warpgroups that take consecutive blocks along one dim
    ("paired") and share the other operand's block; each stores its own block through its
    own epilogue slots of one WGMMA row group."""

    title = "warp-specialized matmul"
    # The pipeline's produced and consumed barriers: one of each a stage.
    barriers_per_stage = 1
    fixed_barriers = 0
    zero_filled_edges = True

    def tile(self, inputs: WalkInputs) -> CtaTile | None:
        """None when no dim has two blocks for the consumers to pair, or pairing would idle
        SMs of a skinny product (`_skinny`)."""
        blocks, counts, names, ragged = inputs.blocks, inputs.counts, inputs.names, inputs.ragged
        pairing = (
            _pairing(blocks, counts, names)
            if ragged is None
            else _ragged_pairing(blocks, counts, names, ragged)
        )
        batch, sms = inputs.batch, inputs.sms
        if pairing is None or _skinny(inputs.a, counts, pairing.tile_grid, batch, sms, ragged):
            return None
        paired, tile_grid = pairing.paired, pairing.tile_grid
        declared = inputs.plan.declared_cluster
        tiles = math.prod(batch) * tile_grid[0] * tile_grid[1]
        operands = (inputs.a.name, inputs.b.name)
        cluster, clustered = choose_cluster(
            tile_grid, names, paired, operands, tiles, sms, ragged is not None, declared
        )
        bm, bn, _ = blocks
        return CtaTile(
            tile_grid,
            cluster,
            a_rows=2 * bm if paired == names[0] else bm,
            b_cols=2 * bn if paired == names[1] else bn,
            epilogues=pairing.consumers,
            slot_rows=EPILOGUE_ROWS,
            lead=pairing.reason,
            # Why not, where the kernel asked for clusters.
            tail=f"; {clustered}" if cluster is not None or declared else "",
            paired=paired,
        )

    def epilogue_count(self, tile: CtaTile) -> str:
        return f"{tile.epilogues} x "

    def record(self, walk: WarpWalk, tile: CtaTile, inputs: WalkInputs) -> WarpSpecialized:
        assert tile.paired is not None
        return WarpSpecialized(
            **walk_fields(walk), consumers=tile.epilogues, paired=tile.paired, ragged=inputs.ragged
        )


def plan_warp_specialized(inputs: WalkInputs) -> WarpSpecialized | None:
    """The warp-specialized WGMMA launch of a matmul-shaped body, or None for another body
    (or when one stage does not fit beside the epilogue: the pipelined form then keeps the
    kernel). Declared stages that do not fit are an error, with the largest count that
    fits."""
    return plan_walk(inputs, _Wgmma())


def _skinny(
    a: OperandPlan,
    block_counts: tuple[int, int],
    tile_grid: tuple[int, int],
    batch: tuple[int, ...],
    sms: int,
    ragged: RaggedRows | None,
) -> bool:
    """Whether the product has at most one WGMMA row group of rows (a decode step's few
    tokens) and pairing its blocks would leave SMs idle that the blocks alone keep busy. Such
    a product streams `b` and does little arithmetic a byte: a CTA a block, one warpgroup
    each, keeps twice the SMs loading it, where two consumers sharing `a`'s block save only
    shared-memory reads of a block of a few rows."""
    if ragged is not None or block_counts[0] != 1 or a.shape[-2] > hw.WGMMA_ROWS:
        return False
    entries = math.prod(batch)
    tiles, blocks = entries * math.prod(tile_grid), entries * math.prod(block_counts)
    return tiles < min(blocks, sms)


@dataclasses.dataclass(frozen=True)
class _Pairing:
    """The dim whose consecutive blocks a CTA's consumers take, and the CTA tiles it makes."""

    paired: str
    consumers: int
    tile_grid: tuple[int, int]
    reason: str


def _pairing(
    blocks: tuple[int, int, int], block_counts: tuple[int, int], names: tuple[str, str]
) -> _Pairing | None:
    """Pair along cols when it wastes no more blocks than rows would: the consumers then share
    a's block and b's paired block is one wide TMA copy, as jax's own matmul does. None when
    neither dim has two blocks."""
    bm, bn, _ = blocks
    m_blocks, n_blocks = block_counts
    waste_cols = m_blocks * (n_blocks % 2)
    waste_rows = n_blocks * (m_blocks % 2)
    can_cols = n_blocks >= 2
    can_rows = m_blocks >= 2
    if can_cols and (waste_cols <= waste_rows or not can_rows):
        reason = f"two consumers share a's {bm}-row block: a CTA tile of {bm}x{2 * bn}"
        return _Pairing(names[1], 2, (m_blocks, hw.cdiv(n_blocks, 2)), reason)
    if can_rows:
        reason = f"two consumers share b's {bn}-column block: a CTA tile of {2 * bm}x{bn}"
        return _Pairing(names[0], 2, (hw.cdiv(m_blocks, 2), n_blocks), reason)
    # One block both ways: a lone consumer would take every register of the SM
    # (setmaxnreg), and the pipelined form of one warpgroup a CTA does as well.
    return None


def _ragged_pairing(
    blocks: tuple[int, int, int],
    block_counts: tuple[int, int],
    names: tuple[str, str],
    ragged: RaggedRows,
) -> _Pairing:
    """Ragged rows pair along the columns: both consumers take their item's rows (one group's
    weights), each its own block of columns; an odd last column block leaves the second
    consumer columns past the edge, which its stores clip."""
    bm, bn, _ = blocks
    reason = (
        f"two consumers share x's {bm}-row block of one group: a CTA tile of {bm}x{2 * bn} "
        "(ragged rows pair along the columns)"
    )
    return _Pairing(names[1], 2, (ragged.items, hw.cdiv(block_counts[1], 2)), reason)
