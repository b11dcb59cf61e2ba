"""The warp-specialized, persistent form of a matmul: when a body is one `sk.loop` of
`acc + sk.dot(a, b)` and an elementwise epilogue, and how its launch is configured.

Each CTA has a producer warpgroup, which only issues TMA copies (and gives up registers with
`setmaxnreg`), and one or two consumer warpgroups, which issue WGMMA and run the epilogue.
A CTA's consumers take consecutive blocks along one dim ("paired"), so that they share the
other operand's block: with the default 128 x 128 blocks a CTA tile is 128 x 256. The CTAs
are persistent, one an SM; each walks the CTA tiles in an L2-friendly snake order. Each
consumer stores its block through two small swizzled shared-memory slots with TMA, so the
stores of one tile drain while the next tile's main loop runs.

The configuration is chosen here from the shape (`choose_warp_specialized`); the block
constants and a stage constant the user sets are kept, and what was chosen, and why, is part
of the plan.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping

from ...._errors import BlockAlignmentError, ErrorContext, SharedMemoryError
from ...ir.nodes import Kind, LoopMode
from .. import hardware as hw
from ..layout.blocks import BlockLayout
from ..lower.translation import LoopBlock
from .cluster import CLUSTER_SIZE, CtaCluster, choose_cluster
from .loops import MAX_STAGES
from .operands import OperandPlan
from .pipelining import pipeline_bytes

__all__ = [
    "EPILOGUE_ROWS",
    "MEMORY_REGISTERS",
    "EpilogueSlots",
    "WarpSpecialized",
    "choose",
    "epilogue_operands",
    "epilogue_slots",
    "epilogue_vectors",
    "plan_warp_specialized",
    "ragged_rows",
    "stage_count",
]

# The producer keeps this many registers a thread; the consumers get the rest (setmaxnreg).
MEMORY_REGISTERS = 40
# An epilogue slot is 64 rows (one WGMMA row group) by one 128-byte swizzle row of columns.
EPILOGUE_ROWS = hw.WGMMA_ROWS
_EPILOGUE_SLOTS = 2
# A consumer's accumulator stays in registers: at most 128 f32 registers a thread of it.
_MAX_ACC_ELEMENTS = 128 * 128
# The snake order walks bands of this many CTA tiles along the minor dim.
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


@dataclasses.dataclass(frozen=True)
class WarpSpecialized:
    """The launch of a warp-specialized, persistent matmul."""

    consumers: int
    """Consumer warpgroups a CTA (two): each computes one block, as the body declares it."""
    paired: str
    """The dim whose consecutive blocks a CTA's consumers take."""
    tile_grid: tuple[int, int]
    """CTA tiles along (rows, cols): each is `consumers` blocks."""
    batch: tuple[int, ...]
    """The batch dims' sizes: each batch entry has its own CTA tiles."""
    ctas: int
    """Persistent CTAs, at most one an SM."""
    minor: int
    """The axis of `tile_grid` the snake order walks in bands: 0 for rows, 1 for cols."""
    band: int
    """CTA tiles a band of the snake order is wide."""
    stages: int
    """K blocks in flight: fitted to the shared memory left by the epilogue, or declared."""
    epilogue: tuple[int, int]
    """One epilogue slot's (rows, cols): a consumer stores its block slot by slot."""
    slots: int
    """Epilogue slots a consumer: two, so one drains while the next is written."""
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
    ragged: RaggedRows | None = None
    """The groups the rows are split into, when they are (`ragged=`): the tile grid's rows
    are then the items of `RaggedRows`, and each consumer stores only its item's rows."""
    cluster: CtaCluster | None = None
    """The clusters of two CTAs that share a block by TMA multicast, when the launch has
    them: the CTAs then walk cluster tiles, each CTA one CTA tile of its cluster's."""

    @property
    def tiles(self) -> int:
        return math.prod(self.batch) * self.tile_grid[0] * self.tile_grid[1]

    @property
    def walked_grid(self) -> tuple[int, int]:
        """The tiles the persistent walk hands out along (rows, cols): cluster tiles in a
        clustered launch, else CTA tiles."""
        return self.tile_grid if self.cluster is None else self.cluster.tile_grid

    @property
    def walked_tiles(self) -> int:
        return math.prod(self.batch) * self.walked_grid[0] * self.walked_grid[1]

    @property
    def launched(self) -> int:
        """The launch grid: persistent CTAs, or clusters of them."""
        return self.ctas if self.cluster is None else self.ctas // self.cluster.size

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    def check_invariants(self) -> None:
        assert self.consumers == 2
        assert 1 <= self.ctas <= self.tiles
        assert self.minor in (0, 1) and 1 <= self.band <= self.walked_grid[self.minor]
        assert self.stages >= 1 and self.slots in (1, 2)
        assert self.epilogue[0] % hw.WGMMA_ROWS == 0
        assert self.smem_bytes <= hw.SMEM_BYTES
        if self.ragged is not None:  # both consumers take the item's rows
            assert self.paired != self.ragged.split and not self.swizzled
            assert self.tile_grid[0] == self.ragged.items
        if self.cluster is not None:
            self.cluster.check_invariants(self.tile_grid)
            assert self.ragged is None and self.ctas % self.cluster.size == 0

    def __str__(self) -> str:
        order = ("rows", "cols")[self.minor]
        pair = f", paired along {self.paired}"
        walk = (
            f"{self.ctas} persistent CTAs over {self.tiles} CTA tile(s) {list(self.tile_grid)}"
            if self.cluster is None
            else f"{self.ctas} persistent CTAs in {self.cluster}, over {self.walked_tiles} "
            f"cluster tile(s) {list(self.walked_grid)}"
        )
        return (
            f"warp-specialized: 1 producer + {self.consumers} consumer warpgroup(s){pair} "
            f"(setmaxnreg {MEMORY_REGISTERS} for the producer); {walk}, snake order in "
            f"bands of {self.band} along {order}; {self.stages} stage(s) of "
            f"{self.stage_bytes:,} B; "
            f"epilogue {self.slots} x {self.epilogue[0]}x{self.epilogue[1]} "
            f"{'swizzled' if self.swizzled else 'untiled'} slot(s) a consumer, stored by TMA "
            f"while the next tile runs. Why: {self.reason}"
            + (f"; {self.ragged}" if self.ragged is not None else "")
        )


def eligible(
    loops: tuple[LoopBlock, ...],
    operands: tuple[OperandPlan, ...],
    results: tuple[OperandPlan, ...],
    rows: str,
    cols: str | None,
    tiled: Mapping[str, int],
    masked: bool,
    ragged: frozenset[str] = frozenset(),
) -> bool:
    """A body this form computes: one loop folding `acc + sk.dot(a, b)` over a dim outside
    the (rows, cols) tile, both tiled; besides a and b, only scalars and vectors along the rows
    or the columns (a bias) that read zeros past a `ragged` edge; and one 2-D result."""
    if len(loops) != 1 or cols is None or masked:
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
    others = [op for op in operands if op.loaded and op.name not in (dot.a, dot.b)]
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
    a_op, b_op = (next(op for op in operands if op.name == n) for n in (dot.a, dot.b))
    # Each operand is read at its entry of the batch dims it has (all, some or none).
    if not a_op.batch and not b_op.batch and results[0].batch:
        return False
    return tiled[rows] * tiled[cols] <= _MAX_ACC_ELEMENTS


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


def choose(
    a: OperandPlan,
    b: OperandPlan,
    result: OperandPlan,
    blocks: tuple[int, int, int],
    block_counts: tuple[int, int],
    batch: tuple[int, ...],
    names: tuple[str, str],
    steps: int,
    declared_stages: int | None,
    sms: int,
    vector_bytes: tuple[int, ...] = (),
    ragged: RaggedRows | None = None,
    declared_cluster: bool | None = None,
) -> WarpSpecialized | None:
    """The configuration for blocks (BM, BN, BK) and `block_counts` blocks along (rows,
    cols); None when no dim has two blocks for the consumers to pair, pairing would idle SMs
    of a skinny product (`_skinny`), or even one stage does not fit beside the epilogue (the
    pipelined form then keeps the kernel)."""
    bm, bn, bk = blocks
    pairing = (
        _pairing(blocks, block_counts, names)
        if ragged is None
        else _ragged_pairing(blocks, block_counts, names, ragged)
    )
    if pairing is None or _skinny(a, block_counts, pairing.tile_grid, batch, sms, ragged):
        return None
    paired, consumers, tile_grid = pairing.paired, pairing.consumers, pairing.tile_grid
    a_block = hw.nbytes((2 * bm if paired == names[0] else bm) * bk, a.dtype)
    b_block = hw.nbytes((2 * bn if paired == names[1] else bn) * bk, a.dtype)
    epilogue = epilogue_slots(bm, bn, consumers, result, untiled=ragged is not None)
    # Each consumer copies its block of each vector operand into a buffer of its own.
    vectors = sum(
        hw.round_up(consumers * n, hw.SMEM_BUFFER_ALIGN) + hw.BARRIER_BYTES * consumers
        for n in vector_bytes
    )
    smem = _SharedMemory(a_block, b_block, epilogue.bytes, vectors)
    counted = stage_count(declared_stages, steps, smem.total)
    if counted is None:
        return None
    stages, fitted = counted
    tiles = math.prod(batch) * tile_grid[0] * tile_grid[1]
    operand_names = (a.name, b.name)
    cluster, clustered = choose_cluster(
        tile_grid, names, paired, operand_names, tiles, sms, ragged is not None, declared_cluster
    )
    if cluster is None:
        # Why not, where the kernel asked for clusters.
        clustering = f"; {clustered}" if declared_cluster else ""
        walked, ctas = tile_grid, min(sms, tiles)
    else:
        walked, clustering = cluster.tile_grid, f"; {clustered}"
        ctas = CLUSTER_SIZE * min(sms // CLUSTER_SIZE, tiles // CLUSTER_SIZE)
    minor = 1 if walked[1] >= walked[0] else 0
    untiled = (
        ""
        if epilogue.swizzled
        else "; the epilogue slots are untiled: a ragged item stores a slot's rows from any row"
        if ragged is not None
        else f"; the result's {list(result.gmem_shape[-2:])} is not tiled"
    )
    config = WarpSpecialized(
        consumers=consumers,
        paired=paired,
        tile_grid=tile_grid,
        batch=batch,
        ctas=ctas,
        minor=minor,
        band=min(_BAND, walked[minor]),
        stages=stages,
        epilogue=epilogue.slot,
        slots=epilogue.slots,
        swizzled=epilogue.swizzled,
        stage_bytes=a_block + b_block,
        pipeline_bytes=smem.pipeline(stages),
        smem_bytes=smem.total(stages),
        reason=f"{pairing.reason}; {stages} stage(s) {fitted}{untiled}{clustering}",
        ragged=ragged,
        cluster=cluster,
    )
    return config


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


@dataclasses.dataclass(frozen=True)
class EpilogueSlots:
    """The epilogue slots through which a block is stored, piece by piece."""

    slot: tuple[int, int]
    """One slot's (rows, cols)."""
    slots: int
    bytes: int
    """Shared memory of every consumer's slots."""
    swizzled: bool
    """Whether the slots are tiled and swizzled: the result's dims allow it."""


def epilogue_slots(
    bm: int,
    bn: int,
    consumers: int,
    result: OperandPlan,
    untiled: bool = False,
    slot_rows: int = EPILOGUE_ROWS,
) -> EpilogueSlots:
    """Two slots a consumer (one where the block is one slot) of up to `slot_rows` rows (one
    WGMMA row group; a TCGEN05 epilogue takes a whole block's rows) by one 128-byte swizzle
    row of columns where that divides the block, else the widest multiple of 8 columns (the
    register tile) that does, in untiled slots; swizzled where the result's dims allow it."""
    swizzle_cols = hw.per_bytes(hw.SWIZZLE_BYTES, result.dtype)
    cols = next(c for c in range(min(bn, swizzle_cols), 0, -hw.WGMMA_COLS) if bn % c == 0)
    slot = (min(slot_rows, bm), cols)
    slots = min(_EPILOGUE_SLOTS, (bm * bn) // (slot[0] * slot[1]))
    slots_bytes = hw.round_up(
        hw.nbytes(consumers * slots * slot[0] * slot[1], result.dtype), hw.SMEM_BUFFER_ALIGN
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

    a_block: int
    b_block: int
    epilogue: int
    vectors: int

    def pipeline(self, stages: int) -> int:
        # The pipeline's produced and consumed barriers: one of each a stage.
        barriers = hw.BARRIER_BYTES * stages
        return pipeline_bytes([self.a_block, self.b_block], stages) + barriers

    def total(self, stages: int) -> int:
        return self.pipeline(stages) + self.epilogue + self.vectors + hw.SMEM_RESERVED_BYTES


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


def epilogue_vectors(operands: tuple[OperandPlan, ...], loop: LoopBlock) -> list[OperandPlan]:
    """The vector operands the epilogue loads (a bias along the rows or the columns)."""
    dot = loop.dots[0]
    return [
        op
        for op in operands
        if op.loaded and op.name not in (dot.a, dot.b) and op.kind in (Kind.ROW, Kind.COL)
    ]


def epilogue_operands(
    operands: tuple[OperandPlan, ...], loop: LoopBlock
) -> tuple[tuple[OperandPlan, ...], tuple[OperandPlan, ...]]:
    """The operands the epilogue reads besides the product's: the vectors it loads (a bias)
    and the others, read whole (a scale)."""
    dot = loop.dots[0]
    vectors = tuple(epilogue_vectors(operands, loop))
    scalars = tuple(
        op
        for op in operands
        if op.loaded
        and op.name not in (dot.a, dot.b)
        and op not in vectors
        and op.kind != Kind.PARAMS
    )
    return vectors, scalars


def _check_ragged_rows(
    config: WarpSpecialized, result: OperandPlan, cols: str, ctx: ErrorContext
) -> None:
    """A ragged item stores its rows from any row of an epilogue slot, and a TMA store starts
    at a shared-memory address aligned to 128 bytes: a slot's row must be 128 bytes (the
    columns a block needs for it)."""
    row_bytes = hw.nbytes(config.epilogue[1], result.dtype)
    if row_bytes % hw.TMA_SMEM_ALIGN_BYTES == 0:
        return
    need = hw.per_bytes(hw.TMA_SMEM_ALIGN_BYTES, result.dtype)
    raise ctx.error(
        BlockAlignmentError,
        f"ragged rows are stored a row at a time from {row_bytes}-byte rows of the "
        f"epilogue's slots, and a TMA store starts at a 128-byte aligned address",
        operand=result.name,
        dim=cols,
        expected=f"a block of a multiple of {need} {result.dtype} columns along {cols} "
        "(128-byte rows)",
        actual=f"slots of {config.epilogue[1]} columns ({row_bytes} B a row)",
        fix=f"set the block constant of {cols} to a multiple of {need}",
    )


def ragged_rows(layout: BlockLayout, rows: str) -> RaggedRows | None:
    """The groups the rows are split into (`ragged=`), from the layout's group dim of
    them; None when the rows are not split."""
    group = next((d for d in layout.dims if d.sized_by), None)
    if group is None or group.sized_by is None:
        return None
    split = layout.dim(rows)
    return RaggedRows(rows, group.name, group.sized_by, group.size, split.size, split.block)


def plan_warp_specialized(
    loops: tuple[LoopBlock, ...],
    operands: tuple[OperandPlan, ...],
    results: tuple[OperandPlan, ...],
    layout: BlockLayout,
    rows: str,
    cols: str | None,
    masked: bool,
    declared_stages: int | None,
    stages_name: str,
    sms: int,
    ctx: ErrorContext,
    declared_cluster: bool | None = None,
) -> WarpSpecialized | None:
    """The warp-specialized launch of a matmul-shaped body, or None for another body (or
    when one stage does not fit). Declared stages that do not fit beside the epilogue are an
    error, with the largest count that fits."""
    tiled = {d.name: d.block for d in layout.dims if d.tiled_by}
    ragged = frozenset(d.name for d in layout.dims if d.ragged)
    if not eligible(loops, operands, results, rows, cols, tiled, masked, ragged):
        return None
    assert cols is not None
    dot = loops[0].dots[0]
    a, b = (next(op for op in operands if op.name == n) for n in (dot.a, dot.b))
    k = layout.dim(loops[0].axis)
    batch = tuple(layout.dim(d).size for d in results[0].batch)
    counts = (
        hw.cdiv(layout.dim(rows).size, tiled[rows]),
        hw.cdiv(layout.dim(cols).size, tiled[cols]),
    )
    args = (a, b, results[0], (tiled[rows], tiled[cols], k.block), counts, batch, (rows, cols))
    steps = hw.cdiv(k.size, k.block)
    vectors = tuple(op.smem_bytes for op in epilogue_vectors(operands, loops[0]))
    ragged = ragged_rows(layout, rows)
    config = choose(*args, steps, declared_stages, sms, vectors, ragged, declared_cluster)
    if config is not None and ragged is not None:
        _check_ragged_rows(config, results[0], cols, ctx)
    if config is None or config.smem_bytes <= hw.SMEM_BYTES:
        if config is not None:
            config.check_invariants()
        return config
    fitted = choose(*args, steps, None, sms, vectors, ragged, declared_cluster)
    fix = (
        f"set {stages_name}={fitted.stages} (the largest stage count that fits beside the "
        "epilogue), or leave it None to fit it"
        if fitted is not None
        else "lower the block constants"
    )
    raise ctx.error(
        SharedMemoryError,
        f"the warp-specialized matmul's {config.stages} stage(s) and epilogue need "
        f"{config.smem_bytes:,} B of shared memory, over the {hw.SMEM_BYTES:,} B a block has",
        expected=f"<= {hw.SMEM_BYTES:,} B",
        actual=f"{config.smem_bytes:,} B ({config.stages} stage(s) x {config.stage_bytes:,} B, "
        f"epilogue {config.consumers} x {config.slots} x "
        f"{config.epilogue[0]}x{config.epilogue[1]} {results[0].dtype})",
        fix=fix,
    )
