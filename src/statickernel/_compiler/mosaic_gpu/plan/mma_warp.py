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

The configuration is chosen here from the shape (`plan_mma_warp`); block constants and a
stage constant the user sets are kept, and what was chosen, and why, is part of the plan.
"""

import dataclasses
import math

from ...._errors import ErrorContext, SharedMemoryError
from ...._targets import GpuTarget
from .. import hardware as hw
from ..layout.blocks import BlockLayout
from ..lower.translation import LoopBlock
from .cluster import CLUSTER_SIZE, MIN_TILES_PER_CTA, CtaCluster
from .operands import OperandPlan
from .pipelining import pipeline_bytes
from .schedule import target_sm_count
from .warpspec import eligible, epilogue_slots, epilogue_vectors, stage_count

__all__ = ["ACCUMULATOR_BUFFERS", "MmaWarpSpecialized", "plan_mma_warp"]

# Accumulators in tensor memory a CTA: one being accumulated, one being stored.
ACCUMULATOR_BUFFERS = 2
# Tensor memory an SM has: 128 lanes by 512 columns of 32 bits; an allocation is a power of
# two columns, at least 32.
TMEM_COLUMNS = 512
_MIN_TMEM_ALLOCATION = 32
_BAND = 8
# The barriers of the form: a loaded and a consumed barrier a stage, and an accumulator-done
# and an accumulator-free barrier an accumulator.
_BARRIERS_PER_STAGE = 2
_BARRIERS_PER_ACCUMULATOR = 2


@dataclasses.dataclass(frozen=True)
class MmaWarpSpecialized:
    """The launch of a warp-specialized, persistent matmul whose accumulators are in tensor
    memory: a TMA warp, an MMA warp, one epilogue warpgroup."""

    tile_grid: tuple[int, int]
    """Tiles the walk hands out along (rows, cols): a block, or with a cluster a pair's two
    blocks of rows."""
    batch: tuple[int, ...]
    """The batch dims' sizes: each batch entry has its own tiles."""
    ctas: int
    """Persistent CTAs, at most one an SM."""
    minor: int
    """The axis of `tile_grid` the snake order walks in bands: 0 for rows, 1 for cols."""
    band: int
    """Tiles a band of the snake order is wide."""
    stages: int
    """K blocks in flight: fitted to the shared memory the epilogue leaves, or declared."""
    epilogue: tuple[int, int]
    """One epilogue slot's (rows, cols): the epilogue stores its block slot by slot."""
    slots: int
    """Epilogue slots: two, so one drains while the next is written."""
    swizzled: bool
    """Whether the epilogue slots are tiled and swizzled (the result's dims allow it)."""
    stage_bytes: int
    """Shared memory of one stage: a's and b's blocks of one K step."""
    pipeline_bytes: int
    """Shared memory of the stages and their barriers."""
    smem_bytes: int
    """Shared memory of the whole CTA: the stages, the epilogue slots, barriers, reserve."""
    accumulator_columns: int
    """Tensor memory columns of one accumulator (a block's columns, 32-bit each)."""
    reason: str
    """Why this configuration, for the plan."""
    cluster: CtaCluster | None = None
    """The pairs of CTAs of 2-CTA MMAs, along the rows, sharing b's block; None where each
    CTA issues its own."""
    warpgroups: int = 2

    @property
    def tiles(self) -> int:
        return math.prod(self.batch) * self.tile_grid[0] * self.tile_grid[1]

    @property
    def walked_grid(self) -> tuple[int, int]:
        return self.tile_grid

    @property
    def walked_tiles(self) -> int:
        return self.tiles

    @property
    def launched(self) -> int:
        """The launch grid: persistent CTAs, or clusters of them."""
        return self.ctas if self.cluster is None else self.ctas // self.cluster.size

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
        assert self.minor in (0, 1) and 1 <= self.band <= self.walked_grid[self.minor]
        assert self.stages >= 1 and self.slots in (1, 2)
        assert self.tmem_columns <= TMEM_COLUMNS
        assert self.smem_bytes <= hw.SMEM_BYTES

    def __str__(self) -> str:
        order = ("rows", "cols")[self.minor]
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
            f"accumulates; {walk}, snake order in bands of {self.band} along {order}; "
            f"{self.stages} stage(s) of {self.stage_bytes:,} B; epilogue {self.slots} x "
            f"{self.epilogue[0]}x{self.epilogue[1]} "
            f"{'swizzled' if self.swizzled else 'untiled'} slot(s), stored by TMA. "
            f"Why: {self.reason}"
        )


def _shared_memory(stages: int, stage_bytes: tuple[int, int], fixed: int) -> tuple[int, int]:
    """(the pipeline's bytes, the CTA's) for `stages` stages beside `fixed` bytes."""
    barriers = hw.BARRIER_BYTES * (
        _BARRIERS_PER_STAGE * stages + _BARRIERS_PER_ACCUMULATOR * ACCUMULATOR_BUFFERS
    )
    pipeline = pipeline_bytes(list(stage_bytes), stages) + barriers
    return pipeline, pipeline + fixed + hw.SMEM_RESERVED_BYTES


def plan_mma_warp(
    loops: tuple[LoopBlock, ...],
    operands: tuple[OperandPlan, ...],
    results: tuple[OperandPlan, ...],
    layout: BlockLayout,
    rows: str,
    cols: str | None,
    masked: bool,
    declared_stages: int | None,
    stages_name: str,
    target: GpuTarget,
    ctx: ErrorContext,
    declared_cluster: bool | None = None,
    interpreted: bool = False,
) -> MmaWarpSpecialized | None:
    """The tcgen05 warp-specialized launch of a matmul-shaped body, or None for another
    body, or when its accumulators do not fit twice in tensor memory. Declared stages that
    do not fit beside the epilogue are an error, with the largest count that fits."""
    tiled = {d.name: d.block for d in layout.dims if d.tiled_by}
    if not eligible(loops, operands, results, rows, cols, tiled, masked):
        return None
    assert cols is not None
    bm, bn = tiled[rows], tiled[cols]
    if ACCUMULATOR_BUFFERS * bn > TMEM_COLUMNS:
        return None
    loop = loops[0]
    dot = loop.dots[0]
    a, b = (next(op for op in operands if op.name == n) for n in (dot.a, dot.b))
    result = results[0]
    k = layout.dim(loop.axis)
    steps = hw.cdiv(k.size, k.block)
    batch = tuple(layout.dim(d).size for d in result.batch)
    counts = (hw.cdiv(layout.dim(rows).size, bm), hw.cdiv(layout.dim(cols).size, bn))
    sms = target_sm_count(target)
    pair = _Pair(rows, b, bn, dot.transpose_b)
    cluster, clustered = pair.choose(counts, batch, sms, declared_cluster, interpreted)
    b_cols = bn // (1 if cluster is None else CLUSTER_SIZE)
    stage_bytes = (hw.nbytes(bm * k.block, a.dtype), hw.nbytes(b_cols * k.block, a.dtype))
    # The TCGEN05 layout gives each thread a row: the slots take all the block's rows.
    epilogue = epilogue_slots(bm, bn, 1, result, slot_rows=bm)
    vectors = sum(
        hw.round_up(op.smem_bytes, hw.SMEM_BUFFER_ALIGN) + hw.BARRIER_BYTES
        for op in epilogue_vectors(operands, loop)
    )
    fixed = epilogue.bytes + vectors

    def smem_total(stages: int) -> int:
        return _shared_memory(stages, stage_bytes, fixed)[1]

    counted = stage_count(declared_stages, steps, smem_total)
    if counted is None:
        return None
    stages, fitted = counted
    pipeline, smem = _shared_memory(stages, stage_bytes, fixed)
    if smem > hw.SMEM_BYTES:
        best = stage_count(None, steps, smem_total)
        raise ctx.error(
            SharedMemoryError,
            f"the warp-specialized tcgen05 matmul's {stages} stage(s) and epilogue need "
            f"{smem:,} B of shared memory, over the {hw.SMEM_BYTES:,} B a block has",
            expected=f"<= {hw.SMEM_BYTES:,} B",
            actual=f"{smem:,} B ({stages} stage(s) x {sum(stage_bytes):,} B, epilogue "
            f"{epilogue.slots} x {epilogue.slot[0]}x{epilogue.slot[1]} {result.dtype})",
            fix=f"set {stages_name}={best[0]} (the largest stage count that fits beside the "
            "epilogue), or leave it None to fit it"
            if best is not None
            else "lower the block constants",
        )
    tile_grid = counts if cluster is None else cluster.tile_grid
    tiles = math.prod(batch) * tile_grid[0] * tile_grid[1]
    launched = min(sms if cluster is None else sms // CLUSTER_SIZE, tiles)
    minor = 1 if tile_grid[1] >= tile_grid[0] else 0
    untiled = (
        "" if epilogue.swizzled else f"; the result's {list(result.gmem_shape[-2:])} is not tiled"
    )
    config = MmaWarpSpecialized(
        tile_grid=tile_grid,
        batch=batch,
        ctas=launched * (1 if cluster is None else CLUSTER_SIZE),
        minor=minor,
        band=min(_BAND, tile_grid[minor]),
        stages=stages,
        epilogue=epilogue.slot,
        slots=epilogue.slots,
        swizzled=epilogue.swizzled,
        stage_bytes=sum(stage_bytes),
        pipeline_bytes=pipeline,
        smem_bytes=smem,
        accumulator_columns=bn,
        reason=f"the products are tcgen05's ({target.name}): the MMA warp accumulates one "
        f"tile while the epilogue stores the last; {clustered}; {stages} stage(s) "
        f"{fitted}{untiled}",
        cluster=cluster,
    )
    config.check_invariants()
    return config


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
