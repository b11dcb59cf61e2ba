"""The warp-specialized, persistent form of a matmul on tcgen05 tensor cores (Blackwell),
and how its launch is configured.

Each CTA has two warpgroups. In the first, one warp only issues TMA copies of a's and b's K
blocks into a ring of `stages` slots, and another only issues the MMAs: each K step's
`tcgen05_mma` into an accumulator in tensor memory, committed to the slot's barrier, which
hands the slot back to the copying warp. The accumulator is double-buffered (two of them,
side by side in tensor memory), so the second warpgroup, the epilogue, loads one tile's
accumulator into registers, applies the body's epilogue and stores it, while the MMA warp
already accumulates the next tile into the other. The CTAs are persistent, one an SM, each
walking the tiles in the same L2-friendly snake order as the WGMMA form.

On a large launch, the CTAs pair up (a cluster of two on neighbouring SMs, `blackwell_matmul_mgpu`'s
`collective`): a pair's tile is two blocks of rows by one of columns, each CTA copies its own
rows of a and half of b's columns, and the first CTA's MMA warp issues one 2-CTA MMA
(`tcgen05.mma.cta_group::2`, M = 256) that reads both CTAs' halves and writes each CTA's rows
into its own tensor memory. b's traffic from L2 and its shared memory halve; the epilogues
are unchanged. The interpreter does not run 2-CTA MMAs: a launch for it takes the
single-CTA form, which computes the same blocks.

The configuration is chosen here from the shape (`plan_mma_warp`, its walk `plan.warp_walk`'s); block constants and a
stage constant the user sets are kept, and what was chosen, and why, is part of the plan.
"""

import dataclasses
import math

from .. import hardware as hw
from .cluster import CLUSTER_SIZE, MIN_TILES_PER_CTA, CtaCluster
from .operands import OperandPlan
from .schedule_config import ScheduleConfig
from .warp_walk import CtaTile, WalkInputs, WarpWalk, plan_walk, walk_fields

__all__ = ["ACCUMULATOR_BUFFERS", "MmaWarpSpecialized", "plan_mma_warp"]

# Accumulators in tensor memory a CTA: one being accumulated, one being stored.
ACCUMULATOR_BUFFERS = 2
# Tensor memory an SM has: 128 lanes by 512 columns of 32 bits; an allocation is a power of
# two columns, at least 32.
TMEM_COLUMNS = 512
_MIN_TMEM_ALLOCATION = 32


@dataclasses.dataclass(frozen=True, kw_only=True)
class MmaWarpSpecialized(WarpWalk, ScheduleConfig):
    """The launch of a warp-specialized, persistent matmul whose accumulators are in tensor
    memory: a TMA warp, an MMA warp, one epilogue warpgroup. Its tiles are blocks, or with a
    cluster a pair's two blocks of rows (the cluster's tiles)."""

    accumulator_columns: int
    """Tensor memory columns of one accumulator (a block's columns, 32-bit each)."""
    warpgroups: int = 2

    @property
    def b_columns(self) -> int:
        """The columns of b's block a CTA copies: half of a pair's."""
        return self.accumulator_columns // (1 if self.cluster is None else CLUSTER_SIZE)

    @property
    def threads(self) -> int:
        return 128 * self.warpgroups

    @property
    def tmem_columns(self) -> int:
        """The tensor memory the CTA allocates: both accumulators, as a power of two."""
        need = ACCUMULATOR_BUFFERS * self.accumulator_columns
        return max(_MIN_TMEM_ALLOCATION, 1 << (need - 1).bit_length())

    def check_invariants(self) -> None:
        assert 1 <= self.launched <= self.tiles
        if self.cluster is not None:
            self.cluster.check_invariants((CLUSTER_SIZE * self.tile_grid[0], self.tile_grid[1]))
            assert self.ctas % CLUSTER_SIZE == 0 and self.cluster.axis == 0
        super().check_invariants()
        assert self.tmem_columns <= TMEM_COLUMNS

    def __str__(self) -> str:
        walk = (
            f"{self.ctas} persistent CTAs over {self.tiles} tile(s) {list(self.tile_grid)}"
            if self.cluster is None
            else f"{self.ctas} persistent CTAs in pairs issuing 2-CTA MMAs (M = 256; each "
            f"copies its rows of a and half of b's columns), over {self.tiles} pair tile(s) "
            f"{list(self.tile_grid)}"
        )
        return (
            "warp-specialized, tcgen05: a TMA warp and an MMA warp, 1 epilogue warpgroup; "
            f"{ACCUMULATOR_BUFFERS} accumulators of {self.accumulator_columns} columns in "
            f"tensor memory ({self.tmem_columns} allocated), one stored while the next "
            f"accumulates; {self.walk_text(walk)}, stored by TMA. Why: {self.reason}"
        )


class _Tcgen05:
    """tcgen05 MMAs, issued by one thread of an MMA warp into two accumulators in tensor
    memory; one epilogue warpgroup stores a block through slots of all its rows (the
    TCGEN05 layout gives each thread a row)."""

    title = "warp-specialized tcgen05 matmul"
    # A loaded and a consumed barrier a stage, and an accumulator-done and an
    # accumulator-free barrier an accumulator.
    barriers_per_stage = 2
    fixed_barriers = 2 * ACCUMULATOR_BUFFERS
    zero_filled_edges = False

    def tile(self, inputs: WalkInputs) -> CtaTile | None:
        """None when the accumulators do not fit twice in tensor memory."""
        bm, bn, _ = inputs.blocks
        if ACCUMULATOR_BUFFERS * bn > TMEM_COLUMNS:
            return None
        pair = _Pair(inputs.rows, inputs.b, bn, inputs.dot.transpose_b)
        plan, counts = inputs.plan, inputs.counts
        interpreted = plan.backend == "interpret"
        cluster, clustered = pair.choose(
            counts, inputs.batch, inputs.sms, plan.declared_cluster, interpreted
        )
        return CtaTile(
            counts if cluster is None else cluster.tile_grid,
            cluster,
            a_rows=bm,
            b_cols=bn // (1 if cluster is None else CLUSTER_SIZE),
            epilogues=1,
            slot_rows=bm,
            lead=f"the products are tcgen05's ({plan.target.name}): the MMA warp accumulates "
            f"one tile while the epilogue stores the last; {clustered}",
        )

    def epilogue_count(self, tile: CtaTile) -> str:
        return ""

    def record(self, walk: WarpWalk, tile: CtaTile, inputs: WalkInputs) -> MmaWarpSpecialized:
        return MmaWarpSpecialized(**walk_fields(walk), accumulator_columns=inputs.blocks[1])


def plan_mma_warp(inputs: WalkInputs) -> MmaWarpSpecialized | None:
    """The tcgen05 warp-specialized launch of a matmul-shaped body, or None for another
    body, or when its accumulators do not fit twice in tensor memory. Declared stages that
    do not fit beside the epilogue are an error, with the largest count that fits."""
    return plan_walk(inputs, _Tcgen05())


@dataclasses.dataclass(frozen=True)
class _Pair:
    """Whether two CTAs pair up for 2-CTA MMAs: along the rows, each copying half of b's
    block of `bn` columns."""

    rows: str
    b: OperandPlan
    bn: int
    transpose_b: bool

    def halves(self) -> bool:
        """Whether half of b's block is whole tiles of its shared-memory layout: columns of
        one swizzle row where b is (K, N), rows of 8 where it is stored (N, K)."""
        half = self.bn // CLUSTER_SIZE
        if self.transpose_b:
            return half % 8 == 0
        return half % (self.b.swizzle or hw.per_bytes(hw.SWIZZLE_BYTES, self.b.dtype)) == 0

    def choose(
        self,
        counts: tuple[int, int],
        batch: tuple[int, ...],
        sms: int,
        declared: bool | None,
        interpreted: bool,
    ) -> tuple[CtaCluster | None, str]:
        """The pairs, and why (or why not), for the plan. A kernel's `cluster` constant
        decides instead of the launch's size: False takes none, True pairs wherever the
        blocks allow."""
        tiles = math.prod(batch) * counts[0] * counts[1]
        if declared is False:
            return None, "no 2-CTA MMA: cluster=False"
        if interpreted:
            return None, "no 2-CTA MMA: the interpreter runs the single-CTA form"
        if counts[0] < CLUSTER_SIZE:
            return None, "no 2-CTA MMA: one block of rows"
        if not self.halves():
            return None, (
                f"no 2-CTA MMA: half of `{self.b.name}`'s {self.bn} columns is not whole "
                "tiles of its swizzled layout"
            )
        if declared is None and tiles < MIN_TILES_PER_CTA * sms:
            return None, f"no 2-CTA MMA: {tiles} tile(s), under {MIN_TILES_PER_CTA} a CTA"
        pairs = (hw.cdiv(counts[0], CLUSTER_SIZE), counts[1])
        cluster = CtaCluster(self.rows, 0, self.b.name, pairs)
        why = "cluster=True" if declared else f"{tiles} tiles, {MIN_TILES_PER_CTA} or more a CTA"
        return cluster, f"pairs of CTAs issue 2-CTA MMAs: {why}"
