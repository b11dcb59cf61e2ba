"""Binding: a call's arguments are checked and its dims become Python ints.

statickernel's own checks run first, because they can name the operand, the dim and both
values; jaxtyping with beartype then checks the same call against the declared annotations.
"""

import dataclasses
import functools
import math
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ... import _dtypes
from ..._errors import (
    DtypeError,
    ErrorContext,
    OperandError,
    OverrideError,
    Phase,
    ShapeError,
    SymbolicDimError,
)
from ..._targets import TargetLimits
from ..._where import call_site
from .consts import check_const_value, check_stage_count
from .limits import check_dim_size
from .operand import OperandSpec
from .spec import KernelSpec

__all__ = ["Binding", "bind", "call_site", "check_argument", "check_arguments"]

_UNSUPPORTED_DTYPES = {
    "float64": "use float32 (cast with x.astype(jnp.float32))",
    "bool": "pass an int8 or int32 array (x.astype(jnp.int32)) and compare inside the body",
    "complex64": "split real and imaginary parts into two float32 operands",
    "complex128": "split real and imaginary parts into two float32 operands",
    "int64": "use int32 (enable_x64 off, or x.astype(jnp.int32))",
    "uint64": "use uint32",
}


@dataclasses.dataclass(frozen=True)
class Binding:
    sizes: tuple[tuple[str, int], ...]
    dtypes: tuple[tuple[str, str], ...]  # operand name -> dtype
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    consts: tuple[tuple[str, Any], ...]
    defaulted: frozenset[str] = frozenset()
    """The constants the call left at the kernel's declared defaults."""

    @property
    def size_map(self) -> dict[str, int]:
        return dict(self.sizes)


def bind(
    spec: KernelSpec,
    args: Sequence[Any],
    defaults: Mapping[str, Any],
    overrides: Mapping[str, Any],
    *,
    limits: TargetLimits,
    call: bool = False,
) -> Binding:
    """Checks the arguments and binds the dims, within the `limits` of the target the call
    compiles for; `call` is True for a call that will run, which needs arrays, where plan, emit
    and lower also take a `jax.ShapeDtypeStruct`."""
    ctx = ErrorContext(spec.name, call_site(), Phase.CALL)
    _check_operand_count(spec, args, ctx)
    sizes: dict[str, int] = {}
    origin: dict[str, str] = {}
    dtypes: dict[str, str] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for op, arg in zip(spec.operands, args, strict=True):
        check_argument(op.name, op.dims, arg, ctx, call=call)
        shape, dtype = arg.shape, arg.dtype
        dtype_name = str(np.dtype(dtype))
        bound = ctx.bound(sizes)  # the dims that the operands before this one bound
        _check_rank(op, shape, bound)
        _check_dtype(op, dtype_name, bound)
        _bind_dims(op, shape, sizes, origin, limits, ctx)
        dtypes[op.name] = dtype_name
        shapes[op.name] = tuple(int(s) for s in shape)
    consts = bind_consts(spec, defaults, overrides, ctx.bound(sizes))
    for dim in spec.const_dims:  # a result dim sized by its constant (top-k's K)
        sizes[dim] = int(consts[dim])  # positive, as every int constant
    sizes.update(spec.joined_sizes(sizes))  # a result's columns joined from its operands'
    _check_groups(spec, sizes, consts, ctx.bound(sizes))
    _bind_pages(spec, sizes, consts, dtypes, limits, ctx.bound(sizes))
    _typecheck(spec, args, ctx.bound(sizes))
    return Binding(
        sizes=tuple(sizes.items()),
        dtypes=tuple(dtypes.items()),
        shapes=tuple(shapes.items()),
        consts=tuple(consts.items()),
        defaulted=frozenset(
            c.name
            for c in spec.consts
            if c.name not in overrides and _same(consts[c.name], c.default)
        ),
    )


def _same(value: Any, default: Any) -> bool:
    """Whether a constant's value is its declared default (of the same type: 1 is not True)."""
    return type(value) is type(default) and value == default


def _check_groups(
    spec: KernelSpec, sizes: dict[str, int], consts: dict[str, Any], ctx: ErrorContext
) -> None:
    """A group dim has one index per step of its loop: G == cdiv(K, BK)."""
    for group, walked in spec.groups:
        if group in spec.page_tables:  # any number of pages: the table picks them
            continue
        const = spec.loop_map[walked]
        block = int(consts[const])
        steps = -(-sizes[walked] // block)
        if sizes[group] == steps:
            continue
        holders = [o.name for o in spec.operands if group in o.dims]
        # The loop's block is the group: the data's group size, which only the data knows
        # (with a partial last group, K / G is not it).
        fix = (
            f"set {const} to the group size the data was quantized with, so that "
            f"{group} = cdiv({walked}, {const}); or pass one index of {group} per {block} "
            f"elements of {walked}"
        )
        raise ctx.error(
            ShapeError,
            f"group dim {group} numbers the steps of the loop over {walked}, but it has "
            f"{sizes[group]} where the loop takes {steps}",
            operand=holders[0] if holders else None,
            dim=group,
            expected=f"{group} = cdiv({walked}, {const}) = cdiv({sizes[walked]}, {block}) = {steps}",
            actual=f"{group} = {sizes[group]}",
            fix=fix,
        )


def _bind_pages(
    spec: KernelSpec,
    sizes: dict[str, int],
    consts: dict[str, Any],
    dtypes: dict[str, str],
    limits: TargetLimits,
    ctx: ErrorContext,
) -> None:
    """The loop over a paged dim copies whole pages a step, or an equal part of one. (Its
    size, the table's length times the page size, is the layout's: `sizes` keeps the page's.)"""
    for group in spec.page_tables:
        walked = spec.group_map[group]
        const = spec.loop_map[walked]
        page, block = sizes[walked], int(consts[const])
        holder = next(o.name for o in spec.operands if group in o.dims)
        if page % 8:
            raise ctx.error(
                ShapeError,
                f"the pages of `{holder}` are {page} rows, not a multiple of 8",
                operand=holder,
                dim=walked,
                expected="pages of a multiple of 8 rows (a copy fills whole 8-row tiles of "
                "shared memory)",
                actual=f"pages of {page} rows, {const}={block}",
                fix="store the cache in pages of 8, 16, 32 ... rows",
            )
        table = next(o for o in spec.operands if o.name == spec.page_tables[group])
        if sizes[table.dims[-1]] * page > limits.index_max:
            raise ctx.error(
                ShapeError,
                f"the sequences `{table.name}` lists are {sizes[table.dims[-1]]:,} pages of "
                f"{page} rows, past {limits.index_type}",
                operand=table.name,
                dim=table.dims[-1],
                expected=f"{table.dims[-1]} x {page} <= {limits.index_max:,} (positions along "
                f"{walked} are {limits.index_type})",
                actual=f"{sizes[table.dims[-1]] * page:,}",
                fix=f"split `{table.name}`'s rows into parts of fewer pages",
            )
        for op in (o for o in spec.operands if group in o.dims):
            _check_page_copy(spec, op, walked, min(page, block), sizes, consts, dtypes, limits, ctx)
        if block % page and page % block:
            # Blocks of whole 64-row tiles (WGMMA's rows), each whole pages or a part of one.
            fits = [b for b in range(64, 257, 64) if b % page == 0 or page % b == 0]
            fix = (
                f"set {const} to one of {', '.join(map(str, fits))}"
                if fits
                else f"store the cache in pages that divide 256 rows (16, 32, 64, ...): "
                f"no block of at most 256 rows is whole pages of {page}"
            )
            raise ctx.error(
                ShapeError,
                f"the loop over {walked} copies blocks of {block} rows, which are neither whole "
                f"pages of `{holder}` ({page} rows) nor an equal part of one",
                operand=holder,
                dim=walked,
                expected=f"{const} a multiple of the page size {page}, or a divisor of it",
                actual=f"{const}={block}, pages of {page}",
                fix=fix,
            )


def _check_page_copy(
    spec: KernelSpec,
    op: OperandSpec,
    walked: str,
    rows: int,
    sizes: dict[str, int],
    consts: dict[str, Any],
    dtypes: dict[str, str],
    limits: TargetLimits,
    ctx: ErrorContext,
) -> None:
    """A copy of a page moves a whole number of the target's copy quantum (128 bytes on Mosaic
    GPU, which splits a copy's bytes over the 128 threads of the warpgroup that issues it)."""
    quantum = limits.copy_bytes_quantum
    blocks = spec.block_map
    rest = op.dims[op.dims.index(walked) + 1 :]
    elements = rows * math.prod(
        int(consts[blocks[d]]) if d in spec.tile_map else sizes[d] for d in rest
    )
    moved = _dtypes.nbytes(elements, dtypes[op.name])
    if moved % quantum == 0:
        return
    raise ctx.error(
        ShapeError,
        f"a copy of a page of `{op.name}` moves {moved} bytes, not a multiple of {quantum}",
        operand=op.name,
        dim=walked,
        expected=f"{rows} rows of '{' '.join(rest) or '(one element)'}' a copy, a multiple "
        f"of {quantum} bytes (the warpgroup's threads each copy a part)",
        actual=f"{moved} B of {dtypes[op.name]}",
        fix=f"store `{op.name}` in larger pages, or lay it out with a dim after its rows "
        "(per-token scales beside the values they scale)",
    )


def _check_operand_count(spec: KernelSpec, args: Sequence[Any], ctx: ErrorContext) -> None:
    names = [o.name for o in spec.operands]
    if len(args) != len(spec.operands):
        raise ctx.error(
            OperandError,
            f"it takes {len(spec.operands)} operand(s) but was called with {len(args)}",
            expected=f"{len(spec.operands)}: {', '.join(names)}",
            actual=len(args),
            fix=f"call {spec.name}({', '.join(names)}); pass constants by keyword",
        )


def _check_rank(op: OperandSpec, shape: Sequence[Any], ctx: ErrorContext) -> None:
    if len(shape) != op.rank:
        raise ctx.error(
            ShapeError,
            f"operand `{op.name}` has rank {len(shape)}, but its annotation has rank {op.rank}",
            operand=op.name,
            expected=f"rank {op.rank} ('{' '.join(op.dims)}')",
            actual=f"shape {tuple(shape)}",
            fix=f"pass a {op.rank}-D array for `{op.name}`",
        )


def _check_dtype(op: OperandSpec, dtype_name: str, ctx: ErrorContext) -> None:
    """A dtype Mosaic GPU supports, and one the operand's annotation allows."""
    if dtype_name in _UNSUPPORTED_DTYPES or dtype_name not in op.dtypes:
        fix = _UNSUPPORTED_DTYPES.get(dtype_name, f"cast it with .astype(jnp.{op.dtypes[0]})")
        if dtype_name in _dtypes.SUB_BYTE_DTYPES and dtype_name not in _UNSUPPORTED_DTYPES:
            kind = "Int4" if dtype_name == "int4" else "UInt4"
            fix = f"annotate `{op.name}` {kind}[Array, ...] (4-bit operands are declared as such)"
        what = (
            f"operand `{op.name}` is {dtype_name}, which Mosaic GPU does not support"
            if dtype_name in _UNSUPPORTED_DTYPES
            else f"operand `{op.name}` is {dtype_name}, which its annotation does not allow"
        )
        raise ctx.error(
            DtypeError,
            what,
            operand=op.name,
            expected=" or ".join(op.dtypes),
            actual=dtype_name,
            fix=fix,
        )


def _bind_dims(
    op: OperandSpec,
    shape: Sequence[Any],
    sizes: dict[str, int],
    origin: dict[str, str],
    limits: TargetLimits,
    ctx: ErrorContext,
) -> None:
    """Binds each dim of the operand to its axis's size, into `sizes`, with the operand that
    bound it first in `origin`: a dim met again must have the same size. Each error carries
    the dims bound so far."""
    for axis, (dim, size) in enumerate(zip(op.dims, shape, strict=True)):
        bound = ctx.bound(sizes)
        size = _static_size(op, axis, dim, size, shape, bound)
        check_dim_size(dim, size, op.name, axis, limits, bound)
        if dim in sizes and sizes[dim] != size:
            raise bound.error(
                ShapeError,
                f"dim {dim} is {sizes[dim]} in `{origin[dim]}` but {size} in `{op.name}`",
                operand=op.name,
                dim=dim,
                expected=f"{dim}={sizes[dim]} (bound by `{origin[dim]}`)",
                actual=f"{dim}={size} (axis {axis} of `{op.name}`, shape {tuple(shape)})",
                fix=f"make axis {axis} of `{op.name}` match, or give it its own dim name",
            )
        sizes.setdefault(dim, size)
        origin.setdefault(dim, op.name)


def _static_size(
    op: OperandSpec, axis: int, dim: str, size: Any, shape: Sequence[Any], ctx: ErrorContext
) -> int:
    """An axis's size as a Python int: static, since a Mosaic GPU grid is, and at least 1."""
    if not isinstance(size, int | np.integer):
        raise ctx.error(
            SymbolicDimError,
            f"dim {dim} of operand `{op.name}` is symbolic ({size}); a Mosaic GPU grid "
            "must be static",
            operand=op.name,
            dim=dim,
            expected="a Python int",
            actual=f"{size!r} ({type(size).__name__})",
            fix=f"export or trace with a concrete size for {dim} (axis {axis} of "
            f"`{op.name}`), e.g. one export per batch size; Mosaic GPU has no shape "
            "polymorphism",
        )
    size = int(size)
    if size <= 0:
        raise ctx.error(
            ShapeError,
            f"dim {dim} of operand `{op.name}` is {'zero' if size == 0 else 'negative'}",
            operand=op.name,
            dim=dim,
            expected="a size >= 1",
            actual=size if size == 0 else f"{size} (axis {axis}, shape {tuple(shape)})",
            fix="skip the kernel call for empty arrays"
            if size == 0
            else f"give the jax.ShapeDtypeStruct the array's true shape, with {dim} >= 1",
        )
    return size


def check_arguments(spec: KernelSpec, args: Sequence[Any], *, call: bool) -> None:
    """Refuses an argument that is not an array (nor, outside a call, a ShapeDtypeStruct).

    `bind` runs the same check; this one is for arguments that meet a cached specialization,
    which `bind` never sees."""
    ctx = ErrorContext(spec.name, call_site(), Phase.CALL)
    for op, arg in zip(spec.operands, args, strict=False):
        check_argument(op.name, op.dims, arg, ctx, call=call)


def check_argument(
    name: str, dims: Sequence[str], arg: Any, ctx: ErrorContext, *, call: bool
) -> None:
    """An operand's argument is a jax or numpy array; outside a call, also a ShapeDtypeStruct."""
    if isinstance(arg, jax.Array | np.ndarray | np.generic):
        return
    shape_text = f"an array of shape '{' '.join(dims)}'"
    if isinstance(arg, jax.ShapeDtypeStruct):
        if not call:
            return
        raise ctx.error(
            OperandError,
            f"operand `{name}` is a jax.ShapeDtypeStruct, which has no data to run on",
            operand=name,
            expected=f"{shape_text}: a jax.Array or a numpy array",
            actual=f"ShapeDtypeStruct(shape={tuple(arg.shape)}, dtype={arg.dtype})",
            fix="pass an array, e.g. jnp.zeros(s.shape, s.dtype); kernel.plan, kernel.emit and "
            "kernel.lower take a ShapeDtypeStruct",
        )
    ducked = hasattr(arg, "shape") and hasattr(arg, "dtype")
    raise ctx.error(
        OperandError,
        f"operand `{name}` is a {type(arg).__name__}, which has .shape and .dtype but is not an "
        "array"
        if ducked
        else f"operand `{name}` is not an array",
        operand=name,
        expected=f"{shape_text}: a jax.Array or a numpy array"
        + ("" if call else ", or a jax.ShapeDtypeStruct"),
        actual=f"{type(arg).__name__}: {arg!r}"[:120],
        fix=(
            f"convert it first: jnp.asarray({name})"
            if ducked
            else "pass a jax.Array, e.g. jnp.asarray(...)"
        )
        + (
            ""
            if call
            else "; kernel.plan, kernel.emit and kernel.lower also take a jax.ShapeDtypeStruct"
        ),
    )


def bind_consts(
    spec: KernelSpec,
    defaults: Mapping[str, Any],
    overrides: Mapping[str, Any],
    ctx: ErrorContext,
) -> dict[str, Any]:
    by_name = {c.name: c for c in spec.consts}
    checked: dict[str, Any] = {}
    for name, value in overrides.items():
        if name not in by_name:
            raise ctx.error(
                OverrideError,
                f"`{name}` is not a constant of the kernel",
                constant=name,
                expected=f"one of {', '.join(by_name) or '(no constants)'}",
                actual=repr(name),
                fix="override a declared constant, e.g. "
                + (f"{next(iter(by_name))}=128" if by_name else "declare it first"),
            )
        if isinstance(value, jax.Array):
            traced = "Tracer" in type(value).__name__
            raise ctx.error(
                OverrideError,
                f"constant `{name}` is a {'traced value' if traced else 'jax array'}",
                constant=name,
                expected=f"a Python {by_name[name].type.__name__}",
                actual=f"{type(value).__name__}",
                fix="compute block sizes from static shapes (x.shape) with Python ints, or mark "
                "the argument static in jax.jit (static_argnames)",
            )
        # The declared default is a value known to suit this constant.
        checked[name] = check_const_value(
            name,
            by_name[name].type,
            value,
            ctx.facts(),
            OverrideError,
            example=by_name[name].default,
            optional=by_name[name].optional,
        )
        if name == spec.stages:
            check_stage_count(name, checked[name], ctx.facts(), OverrideError)
    return {**defaults, **checked}


@functools.cache
def _checker(spec: KernelSpec) -> Any:
    """A function with the kernel's operand annotations, checked by jaxtyping and beartype."""
    import inspect

    from beartype import beartype
    from jaxtyping import jaxtyped

    sig = inspect.signature(spec.fn)
    params = [
        p.replace(default=inspect.Parameter.empty)
        for p in sig.parameters.values()
        if p.kind != p.KEYWORD_ONLY
    ]

    def check(*args: Any) -> None:
        return None

    check.__signature__ = sig.replace(parameters=params, return_annotation=None)  # type: ignore[attr-defined]
    hints = typing.get_type_hints(spec.fn, include_extras=True)
    check.__annotations__ = {p.name: hints[p.name] for p in params}
    return jaxtyped(typechecker=beartype)(check)


def _typecheck(spec: KernelSpec, args: Sequence[Any], ctx: ErrorContext) -> None:
    checker = _checker(spec)
    try:
        jax.eval_shape(checker, *args)
    except Exception as exc:
        raise ctx.error(
            ShapeError,
            "the call does not match the kernel's annotations",
            expected=", ".join(f"{o.name}: '{' '.join(o.dims)}'" for o in spec.operands),
            actual=str(exc).strip().splitlines()[0][:300],
            fix="pass arrays whose shapes and dtypes match the annotations",
        ) from None
