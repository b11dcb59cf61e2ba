"""The Pallas Mosaic GPU vocabulary of generated code, as IR: register layouts, constants in a
layout, selects, broadcasts, and the loads and stores between shared memory and registers.

Translation and code generation both build their statements from these, so one op is always
written one way.
"""

import dataclasses
import math
from collections.abc import Iterable

from ..._targets import TensorCores
from ..ir.names import gmem_ref
from ..ir.nodes import (
    Assign,
    BinOp,
    Const,
    DType,
    EllipsisIndex,
    Expr,
    ExprStmt,
    Kind,
    List,
    Literal,
    Mask,
    Name,
    Operator,
    Stmt,
    Subscript,
    call,
)
from ..ir.printer import expression_source
from . import hardware as hw

__all__ = [
    "FlatFrame",
    "RowFrame",
    "attribute",
    "broadcast",
    "fill_past_edge",
    "full",
    "is_8bit",
    "layout",
    "load",
    "load_buffer",
    "masks_and",
    "reads_zero",
    "ref_at",
    "select",
    "store",
    "tensor_core_barrier",
]

_WGMMA = Name("plgpu.Layout.WGMMA")


def attribute(value: Expr, name: str) -> Name:
    """`value.name`, written as a dotted name: the IR has no attribute node."""
    return Name(f"{expression_source(value)}.{name}")


def ref_at(ref: Expr, *index: Expr) -> Subscript:
    """A view of a ref: `ref.at[index]`."""
    return Subscript(attribute(ref, "at"), index)


@dataclasses.dataclass(frozen=True)
class RowFrame:
    """The registers of the row form: a block is taken one whole row at a time, as a vector of
    `width` elements spread over the warpgroup's 128 threads, `vector` contiguous elements a
    thread (16 bytes of the narrowest dtype). A full reduction of that vector is the row's
    reduction, and its result a scalar, so a per-row value is a scalar and a per-column one a
    vector as wide as the row."""

    width: int
    vector: int
    chunks: int = 1
    """The chunks a row is computed in: a row too wide for a warpgroup's registers is taken
    `chunk_width` columns at a time, each reduction over all chunks before what reads it."""
    step_block: int = 0
    """The columns of a step of the body's loops, which walk the row where it lies in shared
    memory (`sk.loop` over the columns); 0 for a body without loops."""

    @property
    def chunk_width(self) -> int:
        """The columns in registers at a time: the vector every value of the row is."""
        return self.width // self.chunks

    def layout(self) -> Expr:
        return call("plgpu.Layout.WG_STRIDED", Const((self.chunk_width,)), Const(self.vector))

    def step_frame(self) -> "RowFrame":
        """The registers of a loop's step: a vector of its block's columns. With the same
        `vector`, every element of the row sits in the same thread in both frames."""
        assert self.step_block
        return RowFrame(self.step_block, self.vector)

    def check_invariants(self) -> None:
        assert self.vector in (2, 4, 8, 16) and self.chunks >= 1
        assert self.width % self.chunks == 0 and self.chunk_width % (128 * self.vector) == 0
        if self.step_block:  # the loops' steps tile the row; a row computed whole
            assert self.chunks == 1 and self.width % self.step_block == 0
            assert self.step_block % (128 * self.vector) == 0


@dataclasses.dataclass(frozen=True)
class FlatFrame:
    """The registers of an elementwise body's block: the whole block spread over the
    warpgroup's 128 threads, `vector` contiguous elements a thread (16 bytes of the narrowest
    dtype). No reduction or per-row vector can live in it; its shared-memory transfers are
    16 bytes a thread and free of bank conflicts, where the WGMMA layout's plain transfer
    plan on untiled shared memory conflicts 8 ways."""

    shape: tuple[int, ...]
    """The block: (rows, cols), or (extent,) for a kernel of vectors alone."""
    vector: int

    def layout(self) -> Expr:
        return call("plgpu.Layout.WG_STRIDED", Const(self.shape), Const(self.vector))

    def fits(self) -> bool:
        """Whether the block splits into `vector`-element pieces, whole ones a row, that the
        128 threads share evenly: the strided layout's own rule. A plain test, not an
        assertion, since the form is chosen by it (and `python -O` drops assertions)."""
        elements, cols = math.prod(self.shape), self.shape[-1]
        return (
            self.vector in (2, 4, 8, 16)
            and elements % (128 * self.vector) == 0
            and cols % self.vector == 0
        )

    def check_invariants(self) -> None:
        assert self.fits(), f"the strided layout cannot hold a {self.shape} block"


Frame = RowFrame | FlatFrame


def layout(kind: str, rows: Frame | None = None) -> Expr:
    """The register layout of a kind: WGMMA for a block, reduced over one axis for a vector;
    in the row form, the row's vector layout for a row or a per-column vector; for an
    elementwise body, the block's strided layout."""
    if isinstance(rows, FlatFrame):
        assert Kind(kind) == Kind.TILE, "an elementwise body's values are blocks"
        return rows.layout()
    if rows is not None:
        assert Kind(kind) in (Kind.TILE, Kind.COL), "a per-row value of the row form is a scalar"
        return rows.layout()
    match Kind(kind):
        case Kind.TILE | Kind.LOOP_TILE | Kind.LOOP_ROWS:
            return _WGMMA
        case Kind.ROW:
            return call("plgpu.Layout.WGMMA.reduce", Const(1))
        case Kind.COL | Kind.LOOP_COL:
            return call("plgpu.Layout.WGMMA.reduce", Const(0))
        case Kind.SCALAR | Kind.PARAMS:
            raise AssertionError("a scalar (or a vector of parameters) has no register layout")


def tensor_core_barrier(barriers: int = 1) -> Expr:
    """The barriers a tcgen05 MMA commits to when it completes, ordering the tensor cores
    (Mosaic GPU refuses an MMA barrier without `orders_tensor_core`): one arrival each."""
    return call(
        "plgpu.Barrier",
        num_arrivals=Const(1),
        num_barriers=Const(barriers),
        orders_tensor_core=Const(True),
    )


def is_8bit(dtype: str) -> bool:
    return dtype != "bool" and hw.bits(dtype) == 8


def read_scalar(operand: str, ref: Name | None = None) -> Assign:
    """A 0-d operand read from global memory into a local of its own name: it is not copied
    into shared memory, and every block (or warpgroup) reads it. `ref` is where it is read
    from when not its array (a batch entry's)."""
    value = Subscript(ref or Name(gmem_ref(operand)), (EllipsisIndex(),))
    return Assign((Name(operand),), value, comment="a scalar, from global memory")


# The largest finite magnitude of each fp8 format a body may cast to.
def full(
    value: Expr, shape: tuple[int, ...], dtype: str, kind: str, rows: Frame | None = None
) -> Expr:
    """A constant value of `kind`, in that kind's register layout. A bare `jnp.full` is a
    splat, which reductions and carries do not take. (A per-row value of the row form is a
    scalar: the value itself, of its dtype.)"""
    if isinstance(rows, RowFrame) and Kind(kind) in (Kind.ROW, Kind.SCALAR):
        return call("jnp.asarray", value, DType(dtype))
    return call(
        "plgpu.layout_cast", call("jnp.full", Const(shape), value, DType(dtype)), layout(kind, rows)
    )


def broadcast(
    vector: Expr,
    shape: tuple[int, ...],
    dimension: int,
    rows: RowFrame | None = None,
    tensor_cores: TensorCores = TensorCores.WGMMA,
) -> Expr:
    """A vector spread over a block along `dimension` (0: a per-row vector, 1: per-column).
    In the row form a per-column vector already is the row's shape, and a per-row value is a
    scalar, spread over the row."""
    if rows is not None:
        if dimension == 1:
            return vector
        return call("lax.broadcast_in_dim", vector, Const(shape), Const(()))
    spread = call("lax.broadcast_in_dim", vector, Const(shape), Const((dimension,)))
    if dimension == 1 and tensor_cores is TensorCores.TCGEN05:
        # A per-column vector is laid out alike under WGMMA and TCGEN05, and Mosaic GPU
        # spreads it into WGMMA's unless told.
        return call("plgpu.layout_cast", spread, Name("plgpu.Layout.TCGEN05"))
    return spread


def select(mask: Expr, value: Expr, other: Expr, dtype: str) -> Expr:
    """`jnp.where(mask, value, other)` for a `value` of `dtype`. Mosaic GPU cannot select
    between 8-bit integers, so those are selected as int32 and cast back."""
    if not is_8bit(dtype):
        return call("jnp.where", mask, value, other)
    wide = call("lax.convert_element_type", value, DType("int32"))
    return call("lax.convert_element_type", call("jnp.where", mask, wide, other), DType(dtype))


def masks_and(masks: Iterable[Mask]) -> Expr:
    """The conjunction of edge masks, the rows' first."""
    ordered = sorted(masks, key=lambda m: not m.startswith("row"))
    expr: Expr = Name(ordered[0])
    for mask in ordered[1:]:
        expr = BinOp(Operator.AND, expr, Name(mask))
    return expr


def load(ref: Expr, kind: str, rows: Frame | None = None) -> Expr:
    """Shared memory to registers, in the kind's layout. The strided layouts (the row form's
    vectors, an elementwise body's blocks) load 16 bytes a thread, without bank conflicts; the
    WGMMA layout on untiled shared memory has no conflict-free transfer plan, so it takes the
    plain one."""
    if rows is not None:
        return call("plgpu.load", ref, layout=rows.layout(), optimized=Const(True))
    return call("plgpu.load", ref, layout=layout(kind), optimized=Const(False))


def load_buffer(
    buffer: str,
    kind: str,
    boxes: int,
    rows: Expr | None = None,
    frame: Frame | None = None,
    axis: int = 1,
) -> Expr:
    """A block from its shared-memory buffer `buffer` (its `rows`, where the buffer holds more
    around them): one load, or, where its columns were copied in `boxes` buffers, one a box,
    joined along the columns (`axis`: 0 for a 1-D block)."""
    held: tuple[Expr, ...] = (rows,) if rows is not None else ()
    if boxes == 1:
        return load(Subscript(Name(f"{buffer}.at"), held) if held else Name(buffer), kind, frame)
    parts = tuple(
        load(Subscript(Name(f"{buffer}.at"), (Const(k), *held)), kind) for k in range(boxes)
    )
    return call("jnp.concatenate", List(parts), axis=Const(axis))


def reads_zero(fill: object) -> bool:
    """True for a fill of +0 (not -0.0): what TMA itself reads past an array's edge."""
    return fill is not None and fill == 0 and not math.copysign(1.0, float(fill)) < 0  # pyright: ignore[reportArgumentType]


def fill_past_edge(name: str, masks: Iterable[Mask], fill: object, dtype: str) -> Stmt:
    """A loaded block reads its operand's fill where the masks say it is past the edge."""
    value = select(masks_and(masks), Name(name), Literal(fill, dtype, weak_type=False), dtype)
    return Assign((Name(name),), value, comment="past the edge reads the fill")


def store(
    ref: Expr, value: Expr, new_api: bool, rows: Frame | None = None, swizzled: bool = False
) -> Stmt:
    """Registers to shared memory: `plgpu.store` where jax has it (0.12), whose default no
    longer suits untiled refs in the WGMMA layout; an indexed assignment before. The row
    form's vectors store 16 bytes a thread, and a `swizzled` ref takes `stmatrix`."""
    if new_api:
        optimized = Const(rows is not None or swizzled)
        return ExprStmt(call("plgpu.store", ref, value, optimized=optimized))
    return Assign((Subscript(ref, (EllipsisIndex(),)),), value)
