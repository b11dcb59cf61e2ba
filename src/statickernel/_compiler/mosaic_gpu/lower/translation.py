"""What translation reads and produces: the register geometry of a body, and the translated
body as IR, with a `LoopBlock` for each loop. Planning and code generation read these."""

import dataclasses
from typing import TypeAlias

from ...._targets import TensorCores
from ....language.context import Halo
from ...ir.names import smem_ref
from ...ir.nodes import (
    Assign,
    Comment,
    Expr,
    FunctionDef,
    Kind,
    LoopMode,
    Mask,
    Name,
    SourceLine,
    Stmt,
    Tuple,
    mentions,
    names_read,
)
from ..pallas import FlatFrame, RowFrame, full

__all__ = [
    "Carry",
    "DotUpdate",
    "Geometry",
    "Line",
    "LoopBlock",
    "Product",
    "Translation",
    "line_reads",
    "shared_step_prelude",
]


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Physical register shapes and which axes have elements past the array's edge."""

    rows: int
    cols: int
    ragged_rows: bool
    ragged_cols: bool
    input_kinds: tuple[tuple[str, str], ...]  # operand name -> kind
    input_fills: tuple[tuple[str, float | int | bool], ...] = ()  # loaded operand -> its fill
    steps: tuple[tuple[str, "Geometry"], ...] = ()  # loop dim -> the geometry inside its steps
    looped_operands: tuple[tuple[str, str], ...] = ()  # operand -> the loop dim it has
    # For the interpreter: its reductions run on the CPU, where a row max or min can skip NaN;
    # Mosaic GPU's (max.NaN, min.NaN) carry it, as jnp's do. The interpreter's carry it too.
    interpreted: bool = False
    # The row form: one whole row of the block at a time (see `RowFrame`); None for the
    # block form, which holds the whole block in the WGMMA layout.
    row_frame: RowFrame | None = None
    # An elementwise body's whole block in the warpgroup-strided layout; None otherwise.
    flat_frame: FlatFrame | None = None
    # The dims of the (rows, cols) frame, by name; sk.dot's product is placed by them.
    row_dim: str = ""
    col_dim: str | None = None
    row_tiled: bool = False  # the rows split across the grid, from block_<row_dim>
    col_tiled: bool = False  # the columns split across the grid
    # In the step of a loop over a dim outside the frame: that dim, its block (the columns of
    # a LOOP_TILE) and whether the last step is ragged. Empty outside such a step.
    loop_dim: str | None = None
    loop_cols: int = 0
    ragged_loop: bool = False
    # The columns a block of the frame has in the body's trace: the dim's size when the block
    # holds it whole, else its block. A block or a per-column vector of another width is a
    # slice of the frame's (`v[:, :64]`), held in registers of its own width; 0: none can be.
    col_size: int = 0
    # At the declaration the sizes are probes, not the user's: what depends on the true
    # sizes (a slice's alignment) is checked at the call.
    probe_sizes: bool = False
    # The result dims a constant sizes (top-k's K) and the parts of a joined dim ("N1+N2"):
    # each one's size and its columns in registers, padded to the register tile's 8 and to
    # whole 16-byte rows.
    const_widths: tuple[tuple[int, int], ...] = ()
    # The parts of a joined column dim ("N1+N2"), in order, each with its size.
    part_sizes: tuple[tuple[str, int], ...] = ()
    col_looped: bool = False  # the columns are walked by a loop: a step holds some of them
    # A result's joined columns held part by part (`DimLayout.parts`): each part's first
    # register column and its size. Empty where the frame's columns are the array's.
    col_parts: tuple[tuple[int, int], ...] = ()
    # The tensor cores `sk.dot` multiplies on: WGMMA (Hopper), or tcgen05 (Blackwell), whose
    # products of a step go through tensor memory (`lower.dots`).
    tensor_cores: TensorCores = TensorCores.WGMMA
    row_size: int = 0  # the row dim's size (a probe at the declaration)
    col_array_size: int = 0  # the column dim's size in the array (a probe at the declaration)
    col_boxes: int = 1  # the TMA boxes a block's columns are copied in, each its own buffer
    # The rows around its block each operand read at a row offset is copied with.
    input_halos: tuple[tuple[str, Halo], ...] = ()
    # The stacks of parameter vectors ("4 C"): operand -> (the axis of its parameters, the
    # kind of each vector taken from it).
    param_stacks: tuple[tuple[str, tuple[int, str]], ...] = ()
    in_step: bool = False  # the geometry of a loop's step
    # The step of a scan (sk.map_blocks with a carry): a scan along the loop dim scans the
    # step's block, and the carry brings in what came before it.
    scan_step: bool = False
    # The step of a loop that walks its blocks from the last to the first (reverse=True): a
    # scan's carry brings in the blocks after the step's.
    reversed_step: bool = False

    def own_width(self, kind: str, logical: tuple[int, ...]) -> int | None:
        """The columns of a block or a per-column vector of `logical` shape when they are not
        the frame's (a slice of a block, or a concatenation of slices, or a block along a dim
        a constant sizes); None when they are."""
        if self.row_frame is not None or self.flat_frame is not None or not self.col_size:
            return None
        if Kind(kind) not in (Kind.TILE, Kind.COL) or not logical:
            return None
        if logical[-1] == self.col_size:
            return None
        return dict(self.const_widths).get(logical[-1], logical[-1])

    def padded_columns(self, kind: str, logical: tuple[int, ...]) -> bool:
        """Whether a block of its own width holds columns past its logical ones: a block along
        a dim a constant sizes, padded in registers (a top-k's K = 2 held in 8 columns)."""
        width = self.own_width(kind, logical)
        return width is not None and width != logical[-1]

    def register_shape(self, kind: str, logical: tuple[int, ...] | None) -> tuple[int, ...]:
        """The registers of a value of `kind` and `logical` shape (None: the frame's)."""
        shape = self.shape(kind)
        width = self.own_width(kind, logical) if logical is not None else None
        return shape if width is None else (*shape[:-1], width)

    def step(self, axis: str) -> "Geometry":
        return dict(self.steps)[axis]

    @property
    def one_row(self) -> bool:
        """The row form: one row at a time, each per-row value a scalar."""
        return self.row_frame is not None

    def row_layout(self) -> Expr:
        """The row form's layout of a row (its chunk's vector), for a rule that takes the
        row through shared memory and back (a scan)."""
        assert self.row_frame is not None
        return self.row_frame.layout()

    def constant(self, value: Expr, kind: Kind, dtype: str) -> Expr:
        """A constant of `kind`, in this geometry's registers."""
        return full(value, self.shape(kind), dtype, kind, self.row_frame)

    def shape(self, kind: str) -> tuple[int, ...]:
        if self.row_frame is not None:  # a row's chunk in registers (all of it, unchunked)
            width = (self.row_frame.chunk_width,)
            return {Kind.TILE: width, Kind.COL: width, Kind.ROW: (), Kind.SCALAR: ()}[Kind(kind)]
        return {
            Kind.TILE: (self.rows, self.cols),
            Kind.LOOP_TILE: (self.rows, self.loop_cols),
            Kind.LOOP_ROWS: (self.loop_cols, self.cols),
            Kind.ROW: (self.rows,),
            Kind.COL: (self.cols,),
            Kind.LOOP_COL: (self.loop_cols,),
            Kind.SCALAR: (),
        }[Kind(kind)]


@dataclasses.dataclass(frozen=True)
class Carry:
    """One carry of a folding loop: its variable inside the step, its first and last value."""

    var: str
    kind: str
    dtype: str
    init: Expr | None  # the initial value, in the carry's kind and layout; None: accumulator
    update: Expr | None  # the step's new value; None for an accumulator
    accumulator: bool  # updated only by WGMMA, held in an accumulator ref


@dataclasses.dataclass(frozen=True)
class DotUpdate:
    carry: str  # the accumulator carry's variable
    a: str
    b: str
    transpose_b: bool  # b is stored (N, K)
    accumulator: str = "float32"  # int32 for int8 operands


@dataclasses.dataclass(frozen=True)
class Product:
    """An `sk.dot` computed as a value of the step (not a loop accumulator)."""

    a: str  # the operand `a`, or "" for a value in registers
    b: str  # the operand `b`, or "" for a value the step computed, staged in shared memory
    transpose_b: bool  # b is stored (N, K)
    over: str  # the contracted dim
    along: str  # the product's column dim: the loop dim or the kernel's
    a_dtype: str
    b_dtype: str = ""  # b's dtype, as the body's trace has it
    # A computed b's swizzle in shared memory, in bytes; 0 for an operand b.
    staged_swizzle: int = 0
    # Where an operand is staged through shared memory of its own (a computed b; a computed
    # a in the interpreter): the staging function `pl.run_scoped` runs, and each buffer's
    # variable with its `plgpu.SMEM` type. A launch whose steps run in two warpgroups gives
    # each its own slot of kernel scratch instead (`emit.consumers`).
    staging: str = ""
    staged_buffers: tuple[tuple[str, Expr], ...] = ()


@dataclasses.dataclass(frozen=True)
class LoopBlock:
    """A loop of the body, translated: the step's statements and what flows in and out."""

    index: int
    axis: str
    mode: LoopMode
    operands: tuple[str, ...]  # operands whose blocks the step reads, in order of first use
    loads: tuple[str, ...]  # of those, the ones loaded into registers
    masks: frozenset[Mask]
    lines: tuple[Stmt, ...]
    carries: tuple[Carry, ...]
    dots: tuple[DotUpdate, ...]
    finals: tuple[str, ...]  # the body's variables for the final carries
    blocks: tuple[Expr, ...]  # map: each output block, per step
    products: tuple[Product, ...] = ()  # the step's other sk.dot products
    stop: Expr | None = None  # an int32 scalar: the loop skips the blocks wholly past it
    start: Expr | None = None  # an int32 scalar: the loop skips the blocks wholly before it
    reverse: bool = False  # the steps walk the blocks from the last to the first
    # What each operand the step loads reads past the edge (the loop's fills).
    fills: tuple[tuple[str, float | int | bool], ...] = ()


# A statement of the body, or one of its loops.
Line: TypeAlias = Stmt | LoopBlock


@dataclasses.dataclass(frozen=True)
class Translation:
    lines: tuple[Line, ...]
    outputs: tuple[Expr | None, ...]  # the results, in their declared kinds; None: a map's
    masks: frozenset[Mask]  # the edge masks the statements use: row_ok, col_ok
    streamed: tuple[tuple[int, int, int], ...] = ()  # (result, loop, block) written by a map
    result_kinds: tuple[Kind, ...] = ()  # the kind each result is computed in
    # Shared memory the body scopes for itself (a scan's buffer), the largest at any time.
    scratch_bytes: int = 0
    # The row form's reductions of a row to a scalar (variable, primitive, dtype), in order:
    # computed a chunk at a time, each chunk's combined by the primitive.
    row_reductions: tuple[tuple[str, str, str], ...] = ()
    # The variables that hold a vector of the row form (a row, a per-column vector).
    row_vectors: frozenset[str] = frozenset()
    # The variables that hold a scalar.
    scalars: frozenset[str] = frozenset()

    @property
    def loops(self) -> tuple[LoopBlock, ...]:
        return tuple(line for line in self.lines if isinstance(line, LoopBlock))


def line_reads(line: Line, name: str, *, mentioned: bool = False) -> bool:
    """True when a statement of the body, or of one of its loops' steps, reads `name`; with
    `mentioned`, also when a comment names it (the comment naming the user's line mentions
    the operands its statements read)."""
    if isinstance(line, LoopBlock):
        values = [
            *line.blocks,
            *(v for c in line.carries for v in (c.init, c.update) if v is not None),
        ]
        return any(line_reads(s, name, mentioned=mentioned) for s in line.lines) or any(
            name in names_read(v) for v in values
        )
    if isinstance(line, Comment | SourceLine):
        return mentioned and mentions(line, name)
    return name in names_read(line)


def shared_step_prelude(
    translation: Translation, operands: tuple[str, ...]
) -> tuple[Stmt, ...] | None:
    """The lines before the body's first loop that its step reads, with what they read and
    the comments above them, where they all compute scalars from constants, the block's
    indices and scalar operands; None where the step reads any other value the body holds
    outside it (a block loaded or computed before the loop). A step that reads only these,
    its carries and its own blocks can be defined once, before the code that loads the
    blocks and computes the carries' first values, with these lines above it (a consumer
    warpgroup's, `emit.consumers`)."""
    lines = translation.lines
    index = next((i for i, line in enumerate(lines) if isinstance(line, LoopBlock)), None)
    if index is None:
        return ()
    loop = lines[index]
    assert isinstance(loop, LoopBlock)
    before = lines[:index]
    assigned: dict[str, int] = {}
    for i, line in enumerate(before):
        for name in _targets(line):
            assigned[name] = i
    held = set(assigned) | {n for n in operands if n not in loop.operands}
    loaded = set(operands) | {smem_ref(n) for n in operands}
    updates = [c.update for c in loop.carries if c.update is not None]
    needed = list(set().union(*(names_read(s) for s in (*loop.lines, *updates))) & held)
    hoisted: set[int] = set()
    while needed:
        name = needed.pop()
        i = assigned.get(name)
        if i is None or name not in translation.scalars:
            return None  # an operand's block, or a value of the body in registers
        if i in hoisted:
            continue
        line = before[i]
        if not isinstance(line, Assign) or names_read(line) & loaded:
            return None
        hoisted.add(i)
        needed += list(names_read(line) & set(assigned))
    # The comments naming the user's lines above them come along.
    for i in sorted(hoisted):
        j = i - 1
        while j >= 0 and isinstance(before[j], Comment | SourceLine):
            hoisted.add(j)
            j -= 1
    return tuple(
        line for i, line in enumerate(before) if i in hoisted and not isinstance(line, LoopBlock)
    )


def _targets(line: Line) -> set[str]:
    """The names a line of the body assigns or defines."""
    if isinstance(line, FunctionDef):
        return {line.name}
    if isinstance(line, LoopBlock):
        return set(line.finals)
    if not isinstance(line, Assign):
        return set()
    names = set()
    for target in line.targets:
        items = target.items if isinstance(target, Tuple) else (target,)
        names |= {t.text for t in items if isinstance(t, Name)}
    return names
