"""The Pallas Mosaic GPU vocabulary of generated code, as IR: register layouts, constants in a
layout, selects, broadcasts, and the loads and stores between shared memory and registers.

Translation and code generation both build their statements from these, so one op is always
written one way.
"""

from collections.abc import Iterable

import numpy as np

from ._ir import (
    Assign,
    BinOp,
    Const,
    DType,
    EllipsisIndex,
    Expr,
    ExprStmt,
    Kind,
    Literal,
    Mask,
    Name,
    Operator,
    Stmt,
    Subscript,
    call,
)

__all__ = [
    "broadcast",
    "fill_past_edge",
    "full",
    "is_8bit",
    "layout",
    "load",
    "masks_and",
    "select",
    "store",
]

_WGMMA = Name("plgpu.Layout.WGMMA")


def layout(kind: str) -> Expr:
    """The register layout of a kind: WGMMA for a block, reduced over one axis for a vector."""
    match Kind(kind):
        case Kind.TILE:
            return _WGMMA
        case Kind.ROW:
            return call("plgpu.Layout.WGMMA.reduce", Const(1))
        case Kind.COL:
            return call("plgpu.Layout.WGMMA.reduce", Const(0))
        case Kind.SCALAR:
            raise AssertionError("a scalar has no register layout")


def is_8bit(dtype: str) -> bool:
    return dtype != "bool" and np.dtype(dtype).itemsize == 1


def full(value: Expr, shape: tuple[int, ...], dtype: str, kind: str) -> Expr:
    """A constant value of `kind`, in that kind's register layout. A bare `jnp.full` is a
    splat, which reductions and carries do not take."""
    return call(
        "plgpu.layout_cast", call("jnp.full", Const(shape), value, DType(dtype)), layout(kind)
    )


def broadcast(vector: Expr, shape: tuple[int, ...], dimension: int) -> Expr:
    """A vector spread over a block along `dimension` (0: a per-row vector, 1: per-column)."""
    return call("lax.broadcast_in_dim", vector, Const(shape), Const((dimension,)))


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


def load(ref: Expr, kind: str) -> Expr:
    """Shared memory to registers, in the kind's layout."""
    return call("plgpu.load", ref, layout=layout(kind), optimized=Const(False))


def fill_past_edge(name: str, masks: Iterable[Mask], fill: object, dtype: str) -> Stmt:
    """A loaded block reads its operand's fill where the masks say it is past the edge."""
    value = select(masks_and(masks), Name(name), Literal(fill, dtype, weak_type=False), dtype)
    return Assign((Name(name),), value, comment="past the edge reads the fill")


def store(ref: Expr, value: Expr, new_api: bool) -> Stmt:
    """Registers to shared memory: `plgpu.store` where jax has it (0.12), whose default no
    longer suits untiled refs; an indexed assignment before."""
    if new_api:
        return ExprStmt(call("plgpu.store", ref, value, optimized=Const(False)))
    return Assign((Subscript(ref, (EllipsisIndex(),)),), value)
