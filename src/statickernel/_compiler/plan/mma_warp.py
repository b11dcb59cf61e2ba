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

The configuration is chosen here from the shape (`plan_mma_warp`); block constants and a
stage constant the user sets are kept, and what was chosen, and why, is part of the plan.
"""

import dataclasses
import math

from ... import _hardware as hw
from ..._errors import ErrorContext, SharedMemoryError
from ..._targets import GpuTarget
from ..layout.blocks import BlockLayout
from ..lower.translation import LoopBlock
from .loops import MAX_STAGES
from .operands import OperandPlan
from .pipelining import pipeline_bytes
from .schedule import target_sm_count
from .warpspec import eligible, epilogue_vectors

__all__ = ["ACCUMULATOR_BUFFERS", "MmaWarpSpecialized", "plan_mma_warp"]

# Accumulators in tensor memory a CTA: one being accumulated, one being stored.
ACCUMULATOR_BUFFERS = 2
# Tensor memory an SM has: 128 lanes by 512 columns of 32 bits; an allocation is a power of
# two columns, at least 32.
TMEM_COLUMNS = 512
_MIN_TMEM_ALLOCATION = 32
_EPILOGUE_SLOTS = 2
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
    """Tiles along (rows, cols): each is one block of the body's."""
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
    warpgroups: int = 2
    cluster: None = None
    """No clusters yet: each CTA issues its own MMAs (a 2-CTA MMA is not generated)."""

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
        return self.ctas

    @property
    def threads(self) -> int:
        return 128 * self.warpgroups

    @property
    def tmem_columns(self) -> int:
        """The tensor memory the CTA allocates: both accumulators, as a power of two."""
        need = ACCUMULATOR_BUFFERS * self.accumulator_columns
        return max(_MIN_TMEM_ALLOCATION, 1 << (need - 1).bit_length())

    def check_invariants(self) -> None:
        assert 1 <= self.ctas <= self.tiles
        assert self.minor in (0, 1) and 1 <= self.band <= self.walked_grid[self.minor]
        assert self.stages >= 1 and self.slots in (1, 2)
        assert self.tmem_columns <= TMEM_COLUMNS
        assert self.smem_bytes <= hw.SMEM_BYTES

    def __str__(self) -> str:
        order = ("rows", "cols")[self.minor]
        return (
            "warp-specialized, tcgen05: a TMA warp and an MMA warp, 1 epilogue warpgroup; "
            f"{ACCUMULATOR_BUFFERS} accumulators of {self.accumulator_columns} columns in "
            f"tensor memory ({self.tmem_columns} allocated), one stored while the next "
            f"accumulates; {self.ctas} persistent CTAs over {self.tiles} tile(s) "
            f"{list(self.tile_grid)}, snake order in bands of {self.band} along {order}; "
            f"{self.stages} stage(s) of {self.stage_bytes:,} B; epilogue {self.slots} x "
            f"{self.epilogue[0]}x{self.epilogue[1]} "
            f"{'swizzled' if self.swizzled else 'untiled'} slot(s), stored by TMA. "
            f"Why: {self.reason}"
        )


@dataclasses.dataclass(frozen=True)
class _Epilogue:
    slot: tuple[int, int]
    slots: int
    bytes: int
    swizzled: bool


def _epilogue(bm: int, bn: int, result: OperandPlan) -> _Epilogue:
    """Slots of all the block's rows (the TCGEN05 layout gives each thread a row) by one
    128-byte swizzle row of columns where that divides the block, else the widest multiple
    of 8 columns that does, untiled."""
    swizzle_cols = hw.per_bytes(hw.SWIZZLE_BYTES, result.dtype)
    cols = next(c for c in range(min(bn, swizzle_cols), 0, -8) if bn % c == 0)
    slots = min(_EPILOGUE_SLOTS, bn // cols)
    slot_bytes = hw.round_up(hw.nbytes(slots * bm * cols, result.dtype), hw.SMEM_BUFFER_ALIGN)
    rows_gmem, cols_gmem = result.gmem_shape[-2:]
    swizzled = (
        cols == swizzle_cols
        and (rows_gmem <= 8 or rows_gmem % 8 == 0)
        and (cols_gmem <= cols or cols_gmem % cols == 0)
    )
    return _Epilogue((bm, cols), slots, slot_bytes, swizzled)


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
    a = next(op for op in operands if op.name == dot.a)
    result = results[0]
    k = layout.dim(loop.axis)
    steps = hw.cdiv(k.size, k.block)
    stage_bytes = (hw.nbytes(bm * k.block, a.dtype), hw.nbytes(bn * k.block, a.dtype))
    epilogue = _epilogue(bm, bn, result)
    vectors = sum(
        hw.round_up(op.smem_bytes, hw.SMEM_BUFFER_ALIGN) + hw.BARRIER_BYTES
        for op in epilogue_vectors(operands, loop)
    )
    fixed = epilogue.bytes + vectors

    def fits(stages: int) -> bool:
        return _shared_memory(stages, stage_bytes, fixed)[1] <= hw.SMEM_BYTES

    if declared_stages is not None:
        stages, fitted = min(declared_stages, steps), "declared"
    else:
        fitting = [s for s in range(min(MAX_STAGES, steps), 0, -1) if fits(s)]
        if not fitting:
            return None
        stages, fitted = fitting[0], "fitted to shared memory"
    pipeline, smem = _shared_memory(stages, stage_bytes, fixed)
    if smem > hw.SMEM_BYTES:
        best = next((s for s in range(min(MAX_STAGES, steps), 0, -1) if fits(s)), None)
        raise ctx.error(
            SharedMemoryError,
            f"the warp-specialized tcgen05 matmul's {stages} stage(s) and epilogue need "
            f"{smem:,} B of shared memory, over the {hw.SMEM_BYTES:,} B a block has",
            expected=f"<= {hw.SMEM_BYTES:,} B",
            actual=f"{smem:,} B ({stages} stage(s) x {sum(stage_bytes):,} B, epilogue "
            f"{epilogue.slots} x {epilogue.slot[0]}x{epilogue.slot[1]} {result.dtype})",
            fix=f"set {stages_name}={best} (the largest stage count that fits beside the "
            "epilogue), or leave it None to fit it"
            if best is not None
            else "lower the block constants",
        )
    batch = tuple(layout.dim(d).size for d in result.batch)
    tile_grid = (hw.cdiv(layout.dim(rows).size, bm), hw.cdiv(layout.dim(cols).size, bn))
    tiles = math.prod(batch) * tile_grid[0] * tile_grid[1]
    minor = 1 if tile_grid[1] >= tile_grid[0] else 0
    untiled = (
        "" if epilogue.swizzled else f"; the result's {list(result.gmem_shape[-2:])} is not tiled"
    )
    config = MmaWarpSpecialized(
        tile_grid=tile_grid,
        batch=batch,
        ctas=min(target_sm_count(target), tiles),
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
        f"tile while the epilogue stores the last; {stages} stage(s) {fitted}{untiled}",
    )
    config.check_invariants()
    return config
