"""The row form: whole rows too wide for the block form, a few rows a block and one row at a
time in registers.

The block form holds a block of 64 rows (the WGMMA layout's unit) in shared memory and in
registers, input and output: f32 rows fit only up to about 450 columns, and past about 200
there is room for a single block per SM, which leaves HBM idle while it computes. A body that
treats every row on its own (elementwise ops, reductions along the row, per-column operands)
does not need 64 rows at once. The row form gives each block as many rows as keep several
blocks resident on an SM, and computes on one row at a time: the row is a vector in the
warpgroup-strided layout, so its reductions are full reductions and its per-row values scalars.

This module decides whether a specialization takes the row form, and with how many rows.
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from ...._errors import ErrorContext, SharedMemoryError
from ...declare.spec import KernelSpec
from ...trace.body import BodyTrace
from .. import hardware as hw
from ..layout.blocks import BlockLayout
from ..layout.smem import block_bytes, smem_bytes
from ..lower.translation import LoopBlock
from ..pallas import RowFrame
from . import schedule as _schedule
from .pipelining import MODE_TEXT
from .schedule import Persistent

__all__ = [
    "RowChoice",
    "TooWide",
    "choose_rows",
    "per_row_operands",
    "row_aliases",
    "row_candidate",
    "row_form_notes",
    "row_loop_lines",
    "rows_read_less",
    "too_wide_error",
]

# The block form is kept while it leaves room for this many resident blocks per SM.
BLOCK_FORM_MIN_CTAS = 2
# Rows this many times narrower than their padded vector keep the block form when it fits.
MAX_ROW_PADDING = 2
# A persistent launch keeps this many blocks' buffers a CTA, else two.
PERSISTENT_STAGES = 3
# The row form aims for this many resident blocks per SM (each block's loads in flight while
# another computes); with fewer, the widest rows still run, one block at a time.
ROW_FORM_CTAS = 3


@dataclasses.dataclass(frozen=True)
class RowChoice:
    """The row form's blocks: `rows` rows a block, each row `frame.width` wide in registers."""

    rows: int
    frame: RowFrame
    layout: BlockLayout
    smem_bytes: int
    aliases: Mapping[str, str]
    """Result -> the operand whose shared-memory block it is written into, row by row."""
    block_form_smem: int
    """The shared memory the block form's blocks would need: why the row form was taken."""
    persistent: Persistent | None = None
    """The persistent launch, when there are blocks enough for it; None: one block a CTA."""
    reads_in_place: frozenset[str] = frozenset()
    """The loaded per-row operands: each row reads its element from global memory."""

    def check_invariants(self) -> None:
        self.frame.check_invariants()
        assert self.rows >= 1 and self.smem_bytes <= hw.SMEM_BYTES
        assert self.layout.dim(self.layout.rows).block == self.rows
        assert self.layout.cols is not None
        assert self.layout.dim(self.layout.cols).extent == self.frame.width


@dataclasses.dataclass(frozen=True)
class TooWide:
    """Even one row does not fit: its bytes in shared memory, input and output."""

    smem_bytes: int
    frame: RowFrame


def rows_read_less(
    spec: KernelSpec, layout: BlockLayout, dtypes: Mapping[str, str], trace: BodyTrace
) -> bool:
    """Whether the row form moves fewer bytes than the block form's loops: where the block
    form reads an operand more than once a block (in two loops, a softmax's statistics then
    its normalized blocks, or in a loop and outside it), or pads rows that are not a multiple
    of 16 bytes on the host (the row form holds each row once, and addresses those flat)."""
    passes: dict[str, set[int | None]] = {}
    for record in trace.loads:
        passes.setdefault(record.operand, set()).add(record.loop)
    if any(len(loops) > 1 for loops in passes.values()):
        return True
    assert spec.cols is not None
    size = layout.dim(spec.cols).size
    return any(
        hw.nbytes(size, dtypes[o.name]) % hw.TMA_ALIGN_BYTES
        for o in spec.operands + spec.results
        if o.dims == (spec.rows, spec.cols)
    )


def per_row_operands(spec: KernelSpec) -> frozenset[str]:
    """The operands over (rows,): the row form reads each row's element from global memory
    where the body uses it (a scalar in its registers), with no copy and no shared memory."""
    return frozenset(o.name for o in spec.operands if o.dims == (spec.rows,))


def row_candidate(spec: KernelSpec, accumulated: frozenset[str] = frozenset()) -> bool:
    """Whether the spec's blocks can be taken row by row: rows tiled, whole columns (or looped
    over: a loop's steps walk the row), no batch dims; operands over (rows, cols), (cols,) or
    (rows,), or scalars, results over (rows, cols) or (rows,), or over (cols,) for the
    `accumulated` ones, sums over the rows that each CTA adds up row by row. (Whether the
    body keeps rows apart, translation decides.)"""
    rows, cols = spec.rows, spec.cols
    if cols is None or rows not in spec.tile_map or cols in spec.tile_map:
        return False
    # Loops walk the columns of the row held in shared memory.
    if spec.batch or any(d != cols for d in spec.loop_map):
        return False
    full = (rows, cols)
    params = tuple((d,) for d in spec.param_dims)  # parameter vectors, read by index
    if any(o.dims not in (full, (cols,), (rows,), (), *params) for o in spec.operands):
        return False
    return all(
        r.dims in (full, (rows,)) or (r.dims == (cols,) and r.name in accumulated)
        for r in spec.results
    )


def _frame(spec: KernelSpec, layout: BlockLayout, dtypes: Mapping[str, str]) -> RowFrame | None:
    """16 bytes a thread of the narrowest dtype along the row; the row padded to whole
    warpgroups of those vectors. With loops over the columns, the row is padded to whole
    steps and a thread holds what fills a step's block on 128 threads (at most 16 bytes, at
    least 2 elements: None where a step's block is narrower)."""
    cols = spec.cols
    assert cols is not None
    vector = max(
        hw.per_bytes(hw.TMA_ALIGN_BYTES, dtypes[o.name])
        for o in spec.operands + spec.results
        if cols in o.dims
    )
    size = layout.dim(cols).size
    if not spec.loop:
        return RowFrame(hw.round_up(size, 128 * vector), vector)
    step = layout.dim(cols).block
    while vector > 2 and step % (128 * vector):
        vector //= 2
    if step % (128 * vector):
        return None
    return RowFrame(hw.round_up(size, step), vector, step_block=step)


def row_aliases(spec: KernelSpec, dtypes: Mapping[str, str], loaded: set[str]) -> dict[str, str]:
    """Each result over (rows, cols) is written into the block of a loaded operand of its
    shape and dtype, when there is one: a row is read into registers before its result is
    written, by the same threads at the same places, so one buffer serves both and the
    blocks take half the shared memory."""
    full = (spec.rows, spec.cols)
    free = [o.name for o in spec.operands if o.dims == full and o.name in loaded]
    aliases: dict[str, str] = {}
    for r in spec.results:
        match = (
            next((n for n in free if dtypes[n] == dtypes[r.name]), None) if r.dims == full else None
        )
        if match is not None:
            aliases[r.name] = match
            free.remove(match)
    return aliases


def _with_rows(layout: BlockLayout, rows: int, frame: RowFrame) -> BlockLayout:
    """The row form's layout: `rows` rows a block, the columns whole (a loop's too), padded to
    the frame."""
    assert layout.cols is not None
    return layout.with_block(layout.rows, rows).with_whole(layout.cols, frame.width)


def choose_rows(
    spec: KernelSpec,
    layout: BlockLayout,
    dtypes: Mapping[str, str],
    loaded: set[str],
    accumulated: frozenset[str] = frozenset(),
    scan_bytes: Callable[[int], int] = lambda width: 0,
) -> RowChoice | TooWide | None:
    """The row form for this call, or None when the block form suits it. A candidate spec
    takes it when its block-form blocks do not fit in shared memory, or leave room for only
    one block per SM while the row pads to at most twice its width. Its blocks have as many
    rows as make a block for every SM, at most the tiling constant's block, and keep three
    blocks resident (else two, else one). `TooWide` when even one row does not fit.
    `scan_bytes` gives the shared memory the body's scans take beside the blocks, for a row
    of a width."""
    if not row_candidate(spec, accumulated):
        return None
    assert spec.cols is not None
    block_form = smem_bytes(spec, layout, dtypes, loaded)
    in_place = per_row_operands(spec) & loaded
    loaded = loaded - in_place
    # A body with loops takes it where the row fits, and reads each operand once where the
    # block form's loops read it again (`RowsForm` asks only then).
    if not spec.loop and block_form * BLOCK_FORM_MIN_CTAS <= hw.SMEM_BYTES:
        return None
    rows_dim = layout.dim(spec.rows)
    frame = _row_frame(spec, layout, dtypes, block_form)
    if frame is None:
        return None
    aliases = row_aliases(spec, dtypes, loaded)
    # A per-row result is written where it is computed, with no shared memory.
    held = {r.name for r in spec.results if r.dims != (spec.rows,)} - set(aliases)
    most = min(rows_dim.block, rows_dim.size)
    candidates = [1 << k for k in range(most.bit_length())]  # the powers of two up to most
    scratch = hw.round_up(scan_bytes(frame.width), hw.SMEM_BUFFER_ALIGN)
    fits = {
        r: smem_bytes(spec, _with_rows(layout, r, frame), dtypes, loaded, results=held) + scratch
        for r in candidates
    }
    tiles = [o.name for o in spec.operands if o.dims == (spec.rows, spec.cols) and o.name in loaded]

    stage_bytes = {
        r: _stage_bytes(spec, _with_rows(layout, r, frame), dtypes, tiles) for r in candidates
    }

    def staged(r: int, stages: int) -> int:
        """Shared memory with `stages` buffers of each row-wise operand's block."""
        return fits[r] + (stages - 1) * (stage_bytes[r] + hw.BARRIER_BYTES * len(tiles))

    row_bytes = sum(hw.nbytes(frame.width, dtypes[n]) for n in tiles)

    def in_flight(rows: int, stages: int, resident: int, ctas: int) -> int:
        return min(resident, hw.cdiv(ctas, _schedule.sm_count())) * stages * rows * row_bytes

    one_block = _one_block_choice(
        candidates, fits, rows_dim.size, frame, layout, aliases, block_form
    )
    if one_block is None:
        return TooWide(fits[1], frame)
    one_block = dataclasses.replace(one_block, reads_in_place=in_place)
    one_block_flight = in_flight(
        one_block.rows,
        1,
        hw.SMEM_BYTES // one_block.smem_bytes,
        hw.cdiv(rows_dim.size, one_block.rows),
    )
    # Persistent: each SM's CTAs walk their blocks, several blocks' loads in flight, when
    # there are blocks for at least two a CTA and that keeps more bytes in flight.
    for resident in (BLOCK_FORM_MIN_CTAS, 1):
        for stages in (PERSISTENT_STAGES, 2):
            inside = [
                r
                for r in candidates
                if staged(r, stages) * resident <= hw.SMEM_BYTES
                and hw.cdiv(rows_dim.size, r) >= 2 * _schedule.sm_count() * resident
            ]
            if inside:
                best = max(inside)
                ctas = min(hw.cdiv(rows_dim.size, best), _schedule.sm_count() * resident)
                if in_flight(best, stages, resident, ctas) < one_block_flight:
                    continue
                persistent = Persistent(ctas, stages)
                layout_rows = _with_rows(layout, best, frame)
                choice = RowChoice(
                    best,
                    frame,
                    layout_rows,
                    staged(best, stages),
                    aliases,
                    block_form,
                    persistent,
                    in_place,
                )
                choice.check_invariants()
                return choice
    if spec.loop and hw.SMEM_BYTES // one_block.smem_bytes < BLOCK_FORM_MIN_CTAS:
        # One block an SM at a time, and none ahead: its loads would wait for its loops,
        # where the block form's pipelines overlap them (reading the row once a loop).
        return None
    return one_block


def _row_frame(
    spec: KernelSpec, layout: BlockLayout, dtypes: Mapping[str, str], block_form: int
) -> RowFrame | None:
    """The row's frame, or None where the row form does not suit the row: one under a copy's
    128 bytes, or one padded to over twice its width while the block form fits."""
    assert spec.cols is not None
    size = layout.dim(spec.cols).size
    # Each row is copied in whole 128-byte pieces, the last one overlapping the one before.
    if any(
        hw.nbytes(size, dtypes[o.name]) < hw.COPY_BYTES_QUANTUM
        for o in spec.operands + spec.results
        if spec.cols in o.dims
    ):
        return None
    frame = _frame(spec, layout, dtypes)
    fits_block_form = block_form <= hw.SMEM_BYTES or bool(spec.loop)
    if frame is not None and fits_block_form and frame.width > MAX_ROW_PADDING * size:
        # A narrow row padded to a warpgroup of vectors wastes most of the row form's work;
        # the block form, which fits, does better even one block an SM.
        return None
    return frame


def _stage_bytes(
    spec: KernelSpec, layout: BlockLayout, dtypes: Mapping[str, str], tiles: list[str]
) -> int:
    """One buffer of each row-wise operand's block: the shared memory a stage adds."""
    return sum(
        hw.round_up(block_bytes(spec, n, layout, dtypes), hw.SMEM_BUFFER_ALIGN) for n in tiles
    )


def _one_block_choice(
    candidates: list[int],
    fits: Mapping[int, int],
    size: int,
    frame: RowFrame,
    layout: BlockLayout,
    aliases: Mapping[str, str],
    block_form: int,
) -> RowChoice | None:
    """One block a CTA: enough blocks for every SM first, then as many rows a block as keep
    three blocks resident (else two, else one); None when one row does not fit."""
    for resident in (ROW_FORM_CTAS, BLOCK_FORM_MIN_CTAS, 1):
        inside = [r for r in candidates if fits[r] * resident <= hw.SMEM_BYTES]
        if inside:
            busy = [r for r in inside if hw.cdiv(size, r) >= _schedule.sm_count()]
            best = max(busy or [min(inside)])
            layout_rows = _with_rows(layout, best, frame)
            choice = RowChoice(best, frame, layout_rows, fits[best], aliases, block_form)
            choice.check_invariants()
            return choice
    return None


def too_wide_error(
    spec: KernelSpec, layout: BlockLayout, wide: TooWide, ctx: ErrorContext
) -> SharedMemoryError:
    """One row does not fit in shared memory: the fix is the rewrite that streams the row."""
    assert spec.cols is not None
    cols, rows = spec.cols, spec.rows
    size = layout.dim(cols).size
    x = next(o.name for o in spec.operands if o.dims == (rows, cols))
    return ctx.error(
        SharedMemoryError,
        f"one row of {cols}={size} needs {wide.smem_bytes:,} B of shared memory (its blocks, a "
        f"row at a time), over the {hw.SMEM_BYTES:,} B a block has, so the row cannot be held "
        "on chip in one pass",
        dim=cols,
        expected=f"<= {hw.SMEM_BYTES:,} B for one row",
        actual=f"{wide.smem_bytes:,} B at {cols}={size}",
        fix=(
            f"stream the row: walk dim {cols} in blocks, with "
            f'loop={{"{cols}": "B{cols}"}} and `B{cols}: sk.Const[int] = 256` in the decorator; '
            f'in the body, sk.loop("{cols}", step, init) folds its blocks into per-row values '
            f'and sk.map_blocks("{cols}", fn) writes each result block, as '
            "examples/softmax_online.py does for a softmax:\n"
            f'    row_max, row_sum = sk.loop("{cols}", statistics, init=(jnp.full((B{rows},), '
            f"-jnp.inf, jnp.float32), jnp.zeros((B{rows},), jnp.float32)))\n"
            f'    return sk.map_blocks("{cols}", lambda: jnp.exp(sk.load({x}).astype(jnp.float32)'
            " - row_max[:, None]) / row_sum[:, None])"
        ),
    )


def row_form_notes(
    spec: KernelSpec,
    layout: BlockLayout,
    consts: Mapping[str, object],
    block_form_smem: int,
    persistent: Persistent | None,
    aliases: Mapping[str, str],
) -> list[str]:
    """What the plan says of the row form it took, and why."""
    written = [
        f"`{result}` is written into `{operand}`'s block, row by row"
        for result, operand in aliases.items()
    ]
    if spec.loop:
        return _row_loop_notes(spec, layout, consts, persistent) + written
    const = spec.tile_map[spec.rows]
    room = (
        "more than a block has" if block_form_smem > hw.SMEM_BYTES else "room for one block per SM"
    )
    how = (
        f"pipelined {persistent.stages} blocks deep"
        if persistent is not None
        else "keep more blocks resident"
    )
    notes = [
        f"whole rows of {layout.dim(spec.cols or '').size} take the row form: blocks of "
        f"{consts[const]} rows ({const}={consts[const]}) would need {block_form_smem:,} B of "
        f"shared memory ({room}); {layout.dim(spec.rows).block} row(s) a block, computed a "
        f"row at a time, {how}"
    ]
    return notes + written


def _row_loop_notes(
    spec: KernelSpec,
    layout: BlockLayout,
    consts: Mapping[str, object],
    persistent: Persistent | None,
) -> list[str]:
    """Why a body with loops took the row form, and how its loops run."""
    cols = spec.cols or ""
    tile, loop = spec.tile_map[spec.rows], spec.loop_map[cols]
    how = f", pipelined {persistent.stages} blocks deep" if persistent is not None else ""
    return [
        f"whole rows of {cols}={layout.dim(cols).size} fit in shared memory: "
        f"{layout.dim(spec.rows).block} row(s) a block{how}, each read from global memory "
        f"once, where blocks of {consts[tile]} rows ({tile}={consts[tile]}) would be read once "
        f"a loop; the loops over {cols} walk the row where it lies, {consts[loop]} columns a "
        f"step ({loop}={consts[loop]})"
    ]


def row_loop_lines(loops: Sequence[LoopBlock], size: int, step: int) -> list[str]:
    """Each loop of the row form, as the plan's notes say it: its steps and what they read."""
    lines = []
    for block in loops:
        what = MODE_TEXT[block.mode]
        order = ", last to first" if block.reverse else ""
        reads = ", ".join(f"{n} (fill {f!r})" for n, f in block.fills) or "-"
        lines.append(
            f"loop {block.index}: {block.axis} in {hw.cdiv(size, step)} step(s) of {step} over "
            f"the row in shared memory{order}, {what}; reads {reads}"
        )
    return lines
