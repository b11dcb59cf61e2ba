"""The state of a body's trace: one frozen context, set while the body is traced.

`sk.dim`, `sk.load`, `sk.loop`, `sk.map_blocks` and `sk.dot` are plain functions the body
calls; what they need to know of the trace (the bound dims, the loop dims' blocks, which
loop's step is being traced) is read from here. A step's trace runs in a context of its own,
entered with `in_loop`, and the enclosing one is back when it returns.
"""

import contextlib
import contextvars
import dataclasses
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping

from .._targets import TargetLimits

__all__ = [
    "Halo",
    "LoadRecord",
    "LoopDim",
    "TraceContext",
    "current",
    "in_loop",
    "operand_fills",
    "operand_halos",
    "tracing",
]


@dataclasses.dataclass(frozen=True)
class LoadRecord:
    """One operand's load in a body: the block copy it reads, what that copy reads past the
    array's edge, and the user's line of the first load.

    The body's records are the one table of fills: translation reads them for what a loaded
    value holds past the edge, and the plan derives every operand's and every loop's fill from
    them, which is all the generated code reads."""

    operand: str
    loop: int | None
    """The loop whose pipeline copies the block read, by its place among the body's loops (while
    tracing, the loop's trace id); None for the block copied once per block."""
    fill: float | int | bool
    line: str | None
    shifts: tuple[int, ...] = ()
    """The row offsets, other than 0, at which the body reads the block (`sk.load(x,
    offset=...)`), in the order first read."""
    column_shifts: tuple[int, ...] = ()
    """The column offsets, other than 0, at which the body reads a 2-D block, in the order
    first read."""


@dataclasses.dataclass(frozen=True)
class Halo:
    """The rows a block copy reads around its block for the body's shifted loads: `before`
    rows above its first (an offset of -3 reads 3), `after` below its last; and, for loads
    shifted along the columns, a window of the block's own size for each column offset,
    stacked below it (`column_shifts`, `window_rows` each).

    A row offset is a window of the rows around the block, which starts at a row, so every
    vector the layout loads stays aligned. A column offset would start inside a vector: its
    window is a TMA copy of its own, from the shifted columns, into rows of its own."""

    before: int = 0
    after: int = 0
    column_shifts: tuple[int, ...] = ()
    """The column offsets the body reads the block at, sorted; each has a window below the
    block (and below the rows after it)."""
    window_rows: int = 0
    """The rows of each column window: the block's."""

    @property
    def rows(self) -> int:
        """The buffer's rows besides its block's: the row halo's and the column windows'."""
        return self.before + self.after + len(self.column_shifts) * self.window_rows

    def window_start(self, offset: int, block_rows: int) -> int:
        """The buffer row at which the window of the column offset `offset` starts."""
        place = self.column_shifts.index(offset)
        return self.before + block_rows + self.after + place * self.window_rows

    def aligned(self, row_bytes: int, align_bytes: int, boxes: int = 1) -> "Halo":
        """The halo as a buffer of rows of `row_bytes` holds it: the rows above the block
        rounded up so that the block's copy starts on a boundary of `align_bytes` (the
        back-end's copy destination's, a TMA copy's 128 bytes on Mosaic GPU), and, where the
        columns are copied in `boxes` buffers one after the other, the rows below too, so that
        the next buffer starts on one."""
        step = align_bytes // math.gcd(align_bytes, row_bytes)
        # Column windows start below the rows after the block: those are rounded too.
        rounded = boxes > 1 or bool(self.column_shifts)
        after = -(-self.after // step) * step if rounded else self.after
        return dataclasses.replace(self, before=-(-self.before // step) * step, after=after)


def operand_halos(loads: Iterable[LoadRecord]) -> dict[str, Halo]:
    """The halo of each operand the body reads at an offset (its column windows without
    their rows, which the layout gives)."""
    halos: dict[str, Halo] = {}
    for record in loads:
        if record.shifts or record.column_shifts:
            before = max(0, -min(record.shifts, default=0))
            after = max(0, max(record.shifts, default=0))
            halos[record.operand] = Halo(before, after, tuple(sorted(record.column_shifts)))
    return halos


def operand_fills(loads: Iterable[LoadRecord]) -> dict[str, float | int | bool]:
    """Each loaded operand's fill: that of its one block copy, or, for an operand its loops
    copy block by block, that of the first loop to load it."""
    fills: dict[str, float | int | bool] = {}
    for record in loads:
        fills.setdefault(record.operand, record.fill)
    return fills


@dataclasses.dataclass(frozen=True)
class LoopDim:
    """A loop dim as the body's trace sees it: its bound size and its loop block."""

    size: int
    block: int


@dataclasses.dataclass(frozen=True)
class TraceContext:
    dims: Mapping[str, int]
    """Every dim's size; at the declaration, probe sizes."""
    loop_dims: Mapping[str, LoopDim]
    """The kernel's loop dims."""
    limits: TargetLimits
    """The limits of the target the body is traced for, which the language's checks read."""
    loops: tuple[str, ...] = ()
    """The loop dims whose steps are being traced, innermost last."""
    loop_id: int | None = None
    """The loop whose step is being traced; loads inside it record their fill under it."""
    frame: tuple[str, str | None] = ("", None)
    """The (rows, cols) dims of the kernel's blocks; `sk.position` runs along one of them."""
    batch: tuple[str, ...] = ()
    """The batch dims, which the body never sees."""
    blocks: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """The block the body sees along each dim: a split dim's constant, a whole dim's size."""
    tiled: frozenset[str] = frozenset()
    """The dims split across the grid; `sk.dot` may contract any dim but these."""


_CONTEXT: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "statickernel_trace", default=None
)
_LOOP_IDS = itertools.count()


def current() -> TraceContext | None:
    """The context of the body being traced, or None outside a body."""
    return _CONTEXT.get()


@contextlib.contextmanager
def tracing(context: TraceContext) -> Iterator[TraceContext]:
    """Sets `context` while a body (or, in tests, its reference) runs."""
    token = _CONTEXT.set(context)
    try:
        yield context
    finally:
        _CONTEXT.reset(token)


@contextlib.contextmanager
def in_loop(axis: str) -> Iterator[TraceContext]:
    """The context of a step of the loop over `axis`, with an id of its own."""
    outer = _CONTEXT.get()
    assert outer is not None, "a loop's step is traced inside a body"
    step = dataclasses.replace(outer, loops=(*outer.loops, axis), loop_id=next(_LOOP_IDS))
    with tracing(step):
        yield step
