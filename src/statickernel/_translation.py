"""What translation reads and produces: the register geometry of a body, and the translated
body, with a `LoopBlock` for each loop. Planning and code generation read these."""

import dataclasses

from ._ir import Kind

__all__ = ["Carry", "DotUpdate", "Geometry", "LoopBlock", "Translation"]


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

    def step(self, axis: str) -> "Geometry":
        return dict(self.steps)[axis]

    def shape(self, kind: str) -> tuple[int, ...]:
        return {
            Kind.TILE: (self.rows, self.cols),
            Kind.ROW: (self.rows,),
            Kind.COL: (self.cols,),
            Kind.SCALAR: (),
        }[Kind(kind)]


@dataclasses.dataclass(frozen=True)
class Carry:
    """One carry of a folding loop: its variable inside the step, its first and last value."""

    var: str
    kind: str
    dtype: str
    init: str  # source of the initial value, in the carry's kind and layout
    update: str  # source of the step's new value; "" for an accumulator
    accumulator: bool  # updated only by WGMMA, held in an accumulator ref


@dataclasses.dataclass(frozen=True)
class DotUpdate:
    carry: str  # the accumulator carry's variable
    a: str
    b: str
    transpose_b: bool  # b is stored (N, K)


@dataclasses.dataclass(frozen=True)
class LoopBlock:
    """A loop of the body, translated: the step's statements and what flows in and out."""

    index: int
    axis: str
    mode: str  # "fold" (sk.loop) or "map" (sk.map_blocks)
    operands: tuple[str, ...]  # operands whose blocks the step reads, in order of first use
    loads: tuple[str, ...]  # of those, the ones loaded into registers
    fills: tuple[tuple[str, object], ...]  # what each load reads past the edge
    masks: frozenset[str]
    lines: tuple[str, ...]
    carries: tuple[Carry, ...]
    dots: tuple[DotUpdate, ...]
    finals: tuple[str, ...]  # the body's variables for the final carries
    blocks: tuple[str, ...]  # map: source of each output block, per step


@dataclasses.dataclass(frozen=True)
class Translation:
    lines: tuple["str | LoopBlock", ...]
    outputs: tuple[str, ...]  # source expressions of the results, in their declared kinds
    masks: frozenset[str]  # mask names the statements use: row_ok, col_ok
    streamed: tuple[tuple[int, int, int], ...] = ()  # (result, loop, block) written by a map

    @property
    def loops(self) -> tuple[LoopBlock, ...]:
        return tuple(line for line in self.lines if isinstance(line, LoopBlock))
