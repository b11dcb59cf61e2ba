"""What the two warp-specialized, persistent matmuls share: which bodies they take, the
walk of persistent CTAs over the tiles in an L2-friendly snake order, the epilogue slots
through which a block is stored, and the stages fitted to the shared memory the epilogue
leaves.

What differs is how the MMAs are issued (`MmaIssue`): WGMMA from consumer warpgroups that
hold their accumulators in registers (`plan.warpspec`), or tcgen05 from one thread of an MMA
warp into tensor memory (`plan.mma_warp`). The issue lays the blocks out in a CTA tile
(`CtaTile`), counts its barriers and makes the launch's record of its own, a `WarpWalk`.
"""

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ...._errors import BlockAlignmentError, SharedMemoryError
from ...ir.nodes import Kind, LoopMode
from .. import hardware as hw
from ..layout.blocks import BlockLayout
from ..lower.translation import DotUpdate, LoopBlock
from .cluster import CLUSTER_SIZE, CtaCluster
from .inputs import PlanInputs
from .loops import MAX_STAGES
from .operands import OperandPlan
from .pipelining import pipeline_bytes
from .schedule import target_sm_count

__all__ = [
    "EPILOGUE_ROWS",
    "CtaTile",
    "EpilogueSlots",
    "MmaIssue",
    "RaggedRows",
    "WalkInputs",
    "WarpWalk",
    "epilogue_operands",
    "epilogue_slots",
    "plan_walk",
    "ragged_rows",
    "stage_count",
    "walk_fields",
]

# An epilogue slot is at most 64 rows (one WGMMA row group) by one 128-byte swizzle row.
EPILOGUE_ROWS = hw.WGMMA_ROWS
_EPILOGUE_SLOTS = 2
# A consumer's accumulator stays in registers: at most 128 f32 registers a thread of it.
_MAX_ACC_ELEMENTS = 128 * 128
# The snake order walks bands of this many tiles along the minor dim.
_BAND = 8


@dataclasses.dataclass(frozen=True)
class RaggedRows:
    """Rows split into consecutive groups whose sizes an operand gives (`ragged={"M":
    "group_sizes"}`), each group's rows multiplied by its block of the operands along the
    group dim (a grouped matmul's `w: "G K N"`).

    The CTAs walk items along the rows, not row blocks: item i is the (group, row block)
    pair it numbers in the order of the groups, so a block that straddles groups is an item
    of each, computed in full with that group's weights and storing only that group's rows
    (TMA stores of 2^i rows: a store's box is static, the rows' count is data). The sizes'
    cumulative sums number the items; they are read from global memory as each CTA tile
    starts. The rows past the sum of the sizes form one more group, stored as zeros. There
    are at most cdiv(rows, block) + groups items: each group boundary inside a block adds
    one, and an item past the last computes nothing that is stored."""

    split: str
    """The dim whose rows the groups split ("M")."""
    group: str
    """The group dim ("G"): the sizes operand's, leading the operands a group selects."""
    sizes: str
    """The operand of the groups' sizes."""
    groups: int
    rows: int
    """The split dim's size."""
    block: int
    """Its block: the rows of one item."""

    @property
    def items(self) -> int:
        """Items along the rows: every row block, one more a group boundary inside a block,
        and the group of the rows past the sizes' sum."""
        return hw.cdiv(self.rows, self.block) + self.groups

    def __str__(self) -> str:
        return (
            f"ragged rows: {self.split} split into the {self.groups} group(s) `{self.sizes}` "
            f"sizes; the CTAs walk {self.items} (group, {self.block}-row block) items "
            f"(cdiv({self.rows}, {self.block}) + {self.groups}): a block straddling groups is "
            "computed once for each and stores only that group's rows, by TMA stores of 2^i "
            "rows; the rows past the sizes' sum are stored as zeros"
        )


def ragged_rows(layout: BlockLayout, rows: str) -> RaggedRows | None:
    """The groups the rows are split into (`ragged=`), from the layout's group dim of
    them; None when the rows are not split."""
    group = next((d for d in layout.dims if d.sized_by), None)
    if group is None or group.sized_by is None:
        return None
    split = layout.dim(rows)
    return RaggedRows(rows, group.name, group.sized_by, group.size, split.size, split.block)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarpWalk:
    """What a warp-specialized, persistent matmul's launch is, however its MMAs are issued:
    persistent CTAs walking tiles in a snake order, K blocks in stages, epilogue slots. Each
    way of issuing them adds its own fields (`WarpSpecialized`, `MmaWarpSpecialized`)."""

    tile_grid: tuple[int, int]
    """Tiles along (rows, cols)."""
    batch: tuple[int, ...]
    """The batch dims' sizes: each batch entry has its own tiles."""
    ctas: int
    """Persistent CTAs, at most one an SM."""
    minor: int
    """The axis of the walked grid the snake order walks in bands: 0 for rows, 1 for cols."""
    band: int
    """Tiles a band of the snake order is wide."""
    stages: int
    """K blocks in flight: fitted to the shared memory left by the epilogue, or declared."""
    epilogue: tuple[int, int]
    """One epilogue slot's (rows, cols): a block is stored slot by slot."""
    slots: int
    """Epilogue slots an epilogue: two, so one drains while the next is written."""
    swizzled: bool
    """Whether the epilogue slots are tiled and swizzled (the result's dims allow it)."""
    stage_bytes: int
    """Shared memory of one stage: a's and b's blocks of one K step."""
    pipeline_bytes: int
    """Shared memory of the pipeline: its stages and their barriers."""
    smem_bytes: int
    """Shared memory of the whole CTA: the stages, the epilogue slots, barriers, reserve."""
    reason: str
    """Why this configuration, for the plan."""
    cluster: CtaCluster | None = None
    """The clusters of two CTAs that share a block, when the launch has them."""

    @property
    def tiles(self) -> int:
        return math.prod(self.batch) * self.tile_grid[0] * self.tile_grid[1]

    @property
    def walked_grid(self) -> tuple[int, int]:
        """The tiles the persistent walk hands out along (rows, cols): cluster tiles in a
        clustered launch, else the tiles."""
        return self.tile_grid if self.cluster is None else self.cluster.tile_grid

    @property
    def walked_tiles(self) -> int:
        return math.prod(self.batch) * self.walked_grid[0] * self.walked_grid[1]

    @property
    def launched(self) -> int:
        """The launch grid: persistent CTAs, or clusters of them."""
        return self.ctas if self.cluster is None else self.ctas // self.cluster.size

    def check_invariants(self) -> None:
        assert self.minor in (0, 1) and 1 <= self.band <= self.walked_grid[self.minor]
        assert self.stages >= 1 and self.slots in (1, 2)
        assert self.smem_bytes <= hw.SMEM_BYTES

    def walk_text(self, walk: str) -> str:
        """`walk` (the CTAs and the tiles they walk), the snake order, the stages and the
        epilogue slots, for the plan."""
        order = ("rows", "cols")[self.minor]
        return (
            f"{walk}, snake order in bands of {self.band} along {order}; {self.stages} "
            f"stage(s) of {self.stage_bytes:,} B; epilogue {self.slots} x "
            f"{self.epilogue[0]}x{self.epilogue[1]} "
            f"{'swizzled' if self.swizzled else 'untiled'} slot(s)"
        )


def walk_fields(walk: WarpWalk) -> dict[str, Any]:
    """The walk's fields by name, for the record of a way of issuing the MMAs."""
    return {f.name: getattr(walk, f.name) for f in dataclasses.fields(WarpWalk)}


@dataclasses.dataclass(frozen=True)
class WalkInputs:
    """A specialization as the warp-specialized matmuls read it: what planning reads and
    its arrays planned, with what they take from them."""

    plan: PlanInputs
    operands: tuple[OperandPlan, ...]
    results: tuple[OperandPlan, ...]

    @property
    def layout(self) -> BlockLayout:
        return self.plan.layout

    @property
    def rows(self) -> str:
        return self.plan.spec.rows

    @property
    def tiled(self) -> dict[str, int]:
        return {d.name: d.block for d in self.layout.dims if d.tiled_by}

    @property
    def loop(self) -> LoopBlock:
        return self.plan.loops[0]

    @property
    def dot(self) -> DotUpdate:
        return self.loop.dots[0]

    @property
    def a(self) -> OperandPlan:
        return self.operand(self.dot.a)

    @property
    def b(self) -> OperandPlan:
        return self.operand(self.dot.b)

    @property
    def result(self) -> OperandPlan:
        return self.results[0]

    @property
    def names(self) -> tuple[str, str]:
        """The tile's dims (rows, cols); only for a body `eligible` takes."""
        cols = self.plan.spec.cols
        assert cols is not None
        return self.rows, cols

    @property
    def blocks(self) -> tuple[int, int, int]:
        """The blocks (BM, BN, BK)."""
        rows, cols = self.names
        return self.tiled[rows], self.tiled[cols], self.layout.dim(self.loop.axis).block

    @property
    def counts(self) -> tuple[int, int]:
        """Blocks along (rows, cols)."""
        rows, cols = self.names
        bm, bn, _ = self.blocks
        return hw.cdiv(self.layout.dim(rows).size, bm), hw.cdiv(self.layout.dim(cols).size, bn)

    @property
    def batch(self) -> tuple[int, ...]:
        return tuple(self.layout.dim(d).size for d in self.result.batch)

    @property
    def steps(self) -> int:
        k = self.layout.dim(self.loop.axis)
        return hw.cdiv(k.size, k.block)

    @property
    def sms(self) -> int:
        return target_sm_count(self.plan.target)

    @functools.cached_property
    def ragged(self) -> RaggedRows | None:
        return ragged_rows(self.layout, self.rows)

    def operand(self, name: str) -> OperandPlan:
        return next(op for op in self.operands if op.name == name)


@dataclasses.dataclass(frozen=True)
class CtaTile:
    """How a way of issuing the MMAs lays a CTA tile out: the tiles and the clusters, the
    blocks of a and b one stage holds, the epilogues of a tile and their slots' rows."""

    tile_grid: tuple[int, int]
    cluster: CtaCluster | None
    a_rows: int
    """The rows of a's block a stage holds."""
    b_cols: int
    """The columns of b's block a stage holds."""
    epilogues: int
    """Epilogues a CTA: each has its own slots and vector buffers."""
    slot_rows: int
    """The most rows an epilogue slot takes."""
    lead: str
    """Why this tile, before the stages in the plan's reason."""
    tail: str = ""
    """Why, after them."""
    paired: str | None = None
    """The dim whose consecutive blocks a CTA's epilogues take, where there are two."""


C = TypeVar("C", bound=WarpWalk, covariant=True)


class MmaIssue(Protocol[C]):
    """How the MMAs of a warp-specialized matmul are issued, and what that changes of its
    walk: the CTA tile, the barriers, the words of its refusal, its record."""

    title: str
    """The matmul in an error's words."""
    barriers_per_stage: int
    fixed_barriers: int
    """Barriers besides the stages' (an accumulator's)."""
    zero_filled_edges: bool
    """Whether a vector the epilogue loads must read zeros past a ragged edge."""

    def tile(self, inputs: WalkInputs) -> CtaTile | None:
        """The CTA tile, or None where this issue does not take the product."""
        ...

    def epilogue_count(self, tile: CtaTile) -> str:
        """The epilogues' count in an error's words ("2 x "), or nothing."""
        ...

    def record(self, walk: WarpWalk, tile: CtaTile, inputs: WalkInputs) -> C: ...


def eligible(inputs: WalkInputs, zero_filled_edges: bool) -> bool:
    """A body the warp-specialized matmuls compute: one loop folding `acc + sk.dot(a, b)`
    over a dim outside the (rows, cols) tile, both tiled; besides a and b, only scalars and
    vectors along the rows or the columns (a bias), reading zeros past a ragged edge where
    `zero_filled_edges`; and one 2-D result."""
    loops, results, tiled = inputs.plan.loops, inputs.results, inputs.tiled
    rows, cols = inputs.rows, inputs.plan.spec.cols
    ragged = (
        frozenset(d.name for d in inputs.layout.dims if d.ragged)
        if zero_filled_edges
        else frozenset()
    )
    if len(loops) != 1 or cols is None or inputs.plan.masked_reductions:
        return False
    (loop,) = loops
    if loop.mode is not LoopMode.FOLD or len(loop.dots) != 1 or loop.products:
        return False
    if loop.stop is not None or loop.start is not None or loop.reverse or loop.loads or loop.masks:
        return False
    if loop.axis in (rows, cols):
        return False
    dot = loop.dots[0]
    if set(loop.operands) != {dot.a, dot.b} or rows not in tiled or cols not in tiled:
        return False
    others = [op for op in inputs.operands if op.loaded and op.name not in (dot.a, dot.b)]
    for op in others:
        if op.kind is Kind.PARAMS and op.batch:
            return False  # read by index where the body takes it, from its batch entry
        if op.in_place:
            continue
        if op.kind not in (Kind.ROW, Kind.COL):
            return False
        if op.dims[0] in ragged and op.fill not in (0, None):  # TMA fills zeros, no mask
            return False
    if len(results) != 1 or results[0].kind != Kind.TILE or results[0].per_block:
        return False
    # Each operand is read at its entry of the batch dims it has (all, some or none).
    if not inputs.a.batch and not inputs.b.batch and results[0].batch:
        return False
    return tiled[rows] * tiled[cols] <= _MAX_ACC_ELEMENTS


@dataclasses.dataclass(frozen=True)
class EpilogueSlots:
    """The epilogue slots through which a block is stored, piece by piece."""

    slot: tuple[int, int]
    """One slot's (rows, cols)."""
    slots: int
    bytes: int
    """Shared memory of every epilogue's slots."""
    swizzled: bool
    """Whether the slots are tiled and swizzled: the result's dims allow it."""


def epilogue_slots(
    bm: int,
    bn: int,
    epilogues: int,
    result: OperandPlan,
    untiled: bool = False,
    slot_rows: int = EPILOGUE_ROWS,
) -> EpilogueSlots:
    """Two slots an epilogue (one where the block is one slot) of up to `slot_rows` rows (one
    WGMMA row group; a TCGEN05 epilogue takes a whole block's rows) by one 128-byte swizzle
    row of columns where that divides the block, else the widest multiple of 8 columns (the
    register tile) that does, in untiled slots; swizzled where the result's dims allow it."""
    swizzle_cols = hw.per_bytes(hw.SWIZZLE_BYTES, result.dtype)
    cols = next(c for c in range(min(bn, swizzle_cols), 0, -hw.WGMMA_COLS) if bn % c == 0)
    slot = (min(slot_rows, bm), cols)
    slots = min(_EPILOGUE_SLOTS, (bm * bn) // (slot[0] * slot[1]))
    slots_bytes = hw.round_up(
        hw.nbytes(epilogues * slots * slot[0] * slot[1], result.dtype), hw.SMEM_BUFFER_ALIGN
    )
    rows_gmem, cols_gmem = result.gmem_shape[-2:]
    swizzled = (
        not untiled
        and cols == swizzle_cols
        and (rows_gmem <= 8 or rows_gmem % 8 == 0)
        and (cols_gmem <= cols or cols_gmem % cols == 0)
    )
    return EpilogueSlots(slot, slots, slots_bytes, swizzled)


@dataclasses.dataclass(frozen=True)
class _SharedMemory:
    """A CTA's shared memory for a stage count: the pipeline's stages of a's and b's blocks
    and its barriers, the epilogue slots, the vector operands' buffers and the reserve."""

    blocks: tuple[int, int]
    barriers_per_stage: int
    fixed_barriers: int
    fixed: int
    """The epilogue slots and the vectors' buffers."""

    def pipeline(self, stages: int) -> int:
        barriers = hw.BARRIER_BYTES * (self.barriers_per_stage * stages + self.fixed_barriers)
        return pipeline_bytes(list(self.blocks), stages) + barriers

    def total(self, stages: int) -> int:
        return self.pipeline(stages) + self.fixed + hw.SMEM_RESERVED_BYTES


def stage_count(
    declared_stages: int | None, steps: int, smem_total: Callable[[int], int]
) -> tuple[int, str] | None:
    """The stages in flight and how they were chosen: those declared, at most one a step, or
    the most whose CTA's shared memory (`smem_total` of a stage count) fits; None when not
    even one fits."""
    if declared_stages is not None:
        return min(declared_stages, steps), "declared"
    fitting = [s for s in range(min(MAX_STAGES, steps), 0, -1) if smem_total(s) <= hw.SMEM_BYTES]
    if not fitting:
        return None
    return fitting[0], "fitted to shared memory"


def epilogue_operands(
    operands: tuple[OperandPlan, ...], loop: LoopBlock
) -> tuple[tuple[OperandPlan, ...], tuple[OperandPlan, ...]]:
    """The operands the epilogue reads besides the product's: the vectors it loads (a bias)
    and the others, read whole (a scale)."""
    dot = loop.dots[0]
    read = [op for op in operands if op.loaded and op.name not in (dot.a, dot.b)]
    vectors = tuple(op for op in read if op.kind in (Kind.ROW, Kind.COL))
    scalars = tuple(op for op in read if op not in vectors and op.kind != Kind.PARAMS)
    return vectors, scalars


def plan_walk(inputs: WalkInputs, issue: MmaIssue[C]) -> C | None:
    """The warp-specialized launch of a matmul-shaped body with MMAs issued by `issue`, or
    None for another body (or when one stage does not fit). Declared stages that do not fit
    beside the epilogue are an error, with the largest count that fits."""
    if not eligible(inputs, issue.zero_filled_edges):
        return None
    tile = issue.tile(inputs)
    if tile is None:
        return None
    (bm, bn, bk), a, result, ragged = inputs.blocks, inputs.a, inputs.result, inputs.ragged
    blocks = (hw.nbytes(tile.a_rows * bk, a.dtype), hw.nbytes(tile.b_cols * bk, a.dtype))
    epilogue = epilogue_slots(
        bm, bn, tile.epilogues, result, untiled=ragged is not None, slot_rows=tile.slot_rows
    )
    # Each epilogue copies its block of each vector operand into a buffer of its own.
    vectors = sum(
        hw.round_up(tile.epilogues * op.smem_bytes, hw.SMEM_BUFFER_ALIGN)
        + hw.BARRIER_BYTES * tile.epilogues
        for op in epilogue_operands(inputs.operands, inputs.loop)[0]
    )
    smem = _SharedMemory(
        blocks, issue.barriers_per_stage, issue.fixed_barriers, epilogue.bytes + vectors
    )
    counted = stage_count(inputs.plan.declared_stages, inputs.steps, smem.total)
    if counted is None:
        return None
    stages, fitted = counted
    if ragged is not None:
        _check_ragged_rows(epilogue, inputs)
    if smem.total(stages) > hw.SMEM_BYTES:
        _refuse_stages(inputs, issue, tile, epilogue, stages, smem)
    walked = tile.tile_grid if tile.cluster is None else tile.cluster.tile_grid
    size = 1 if tile.cluster is None else CLUSTER_SIZE
    launched = min(inputs.sms // size, math.prod(inputs.batch) * walked[0] * walked[1])
    minor = 1 if walked[1] >= walked[0] else 0
    untiled = (
        ""
        if epilogue.swizzled
        else "; the epilogue slots are untiled: a ragged item stores a slot's rows from any row"
        if ragged is not None
        else f"; the result's {list(result.gmem_shape[-2:])} is not tiled"
    )
    walk = WarpWalk(
        tile_grid=tile.tile_grid,
        batch=inputs.batch,
        ctas=launched * size,
        minor=minor,
        band=min(_BAND, walked[minor]),
        stages=stages,
        epilogue=epilogue.slot,
        slots=epilogue.slots,
        swizzled=epilogue.swizzled,
        stage_bytes=sum(blocks),
        pipeline_bytes=smem.pipeline(stages),
        smem_bytes=smem.total(stages),
        reason=f"{tile.lead}; {stages} stage(s) {fitted}{untiled}{tile.tail}",
        cluster=tile.cluster,
    )
    record = issue.record(walk, tile, inputs)
    record.check_invariants()
    return record


def _refuse_stages(
    inputs: WalkInputs,
    issue: MmaIssue[WarpWalk],
    tile: CtaTile,
    epilogue: EpilogueSlots,
    stages: int,
    smem: _SharedMemory,
) -> None:
    """Raises the error of declared stages that do not fit beside the epilogue, with the
    largest count that does."""
    best = stage_count(None, inputs.steps, smem.total)
    total, name = smem.total(stages), inputs.plan.spec.stages
    fix = (
        f"set {name if isinstance(name, str) else 'stages'}={best[0]} (the largest stage count that fits beside the "
        "epilogue), or leave it None to fit it"
        if best is not None
        else "lower the block constants"
    )
    raise inputs.plan.ctx.error(
        SharedMemoryError,
        f"the {issue.title}'s {stages} stage(s) and epilogue need "
        f"{total:,} B of shared memory, over the {hw.SMEM_BYTES:,} B a block has",
        expected=f"<= {hw.SMEM_BYTES:,} B",
        actual=f"{total:,} B ({stages} stage(s) x {sum(smem.blocks):,} B, "
        f"epilogue {issue.epilogue_count(tile)}{epilogue.slots} x "
        f"{epilogue.slot[0]}x{epilogue.slot[1]} {inputs.result.dtype})",
        fix=fix,
    )


def _check_ragged_rows(epilogue: EpilogueSlots, inputs: WalkInputs) -> None:
    """A ragged item stores its rows from any row of an epilogue slot, and a TMA store starts
    at a shared-memory address aligned to 128 bytes: a slot's row must be 128 bytes (the
    columns a block needs for it)."""
    result, (_, cols) = inputs.result, inputs.names
    row_bytes = hw.nbytes(epilogue.slot[1], result.dtype)
    if row_bytes % hw.TMA_SMEM_ALIGN_BYTES == 0:
        return
    need = hw.per_bytes(hw.TMA_SMEM_ALIGN_BYTES, result.dtype)
    raise inputs.plan.ctx.error(
        BlockAlignmentError,
        f"ragged rows are stored a row at a time from {row_bytes}-byte rows of the "
        f"epilogue's slots, and a TMA store starts at a 128-byte aligned address",
        operand=result.name,
        dim=cols,
        expected=f"a block of a multiple of {need} {result.dtype} columns along {cols} "
        "(128-byte rows)",
        actual=f"slots of {epilogue.slot[1]} columns ({row_bytes} B a row)",
        fix=f"set the block constant of {cols} to a multiple of {need}",
    )
