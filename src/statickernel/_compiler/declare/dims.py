"""The dims' frame: how the dims of a declaration's operands and results must agree.

Batch dims lead every result; every result dim is an operand dim; and every 2-D block of a
kernel shares one (rows, cols) frame, since blocks are not transposed or re-laid out inside it.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..._errors import AnnotationError
from .declaration import BlockFrame
from .operand import OperandSpec
from .spellings import arrays_of_specs, frame_fix

__all__ = [
    "check_batch",
    "check_batch_leads",
    "check_const_dims",
    "check_derivable",
    "check_stacked_params",
    "const_dims",
    "frame",
    "param_dims",
]


def check_batch(
    batch: tuple[str, ...],
    operands: list[OperandSpec],
    results: list[OperandSpec],
    err: dict[str, Any],
) -> None:
    """Batch dims lead every result, and appear nowhere but in the leading dims."""
    for op in operands + results:
        stray = [d for d in op.block_dims if d in batch]
        if stray:
            raise AnnotationError(
                f"`{op.name}` has the batch dim {stray[0]} after its leading dims",
                **err,
                operand=op.name,
                dim=stray[0],
                expected=f"batch dims first, in the order of batch= ({' '.join(batch)})",
                actual=f"'{' '.join(op.dims)}'",
                fix=f"move {stray[0]} to the front with jnp.moveaxis outside the kernel",
            )
    if not batch:
        return
    if not any(op.batch for op in operands):
        raise AnnotationError(
            f"batch= names {', '.join(batch)}, but no operand leads with it",
            **err,
            dim=batch[0],
            fix=f"annotate the batched operands with {batch[0]} first, e.g. '{batch[0]} M K'",
        )
    for result in results:
        if result.batch != batch:
            raise AnnotationError(
                f"{result.name} does not lead with every batch dim",
                **err,
                operand=result.name,
                expected=f"'{' '.join(batch)} ...'",
                actual=f"'{' '.join(result.dims)}'",
                fix="each grid step writes one batch entry, so the result must have them all, "
                "in the order of batch=",
            )


def check_batch_leads(
    name: str, dims: list[str], batch: tuple[str, ...], err: dict[str, Any], *, role: str
) -> None:
    """The batch dims an array has come first, in the order of batch=: each grid step takes
    one entry of them, and the blocks are the dims after them."""
    present = [d for d in batch if d in dims]
    leading = present + [d for d in dims if d not in batch]
    if leading == dims:
        return
    source = tuple(dims.index(d) for d in present)
    target = tuple(range(len(present)))

    def axes(positions: tuple[int, ...]) -> str:
        return str(positions[0]) if len(positions) == 1 else str(positions)

    stray = next(d for d, want in zip(dims, leading, strict=True) if d != want and d in batch)
    wanted = " ".join(leading)
    if role == "operand":
        fix = (
            f"move the batch dims to the front outside the kernel, "
            f"jnp.moveaxis({name}, {axes(source)}, {axes(target)}), and annotate it '{wanted}'"
        )
    else:
        fix = (
            f"declare the result '{wanted}' and move its axes back after the kernel, "
            f"jnp.moveaxis(out, {axes(target)}, {axes(source)})"
        )
    raise AnnotationError(
        f"{role} `{name}` does not lead with its batch dims: they come first, in the order "
        "of batch=",
        **err,
        operand=name,
        dim=stray,
        expected=f"the batch dims first, in the order of batch= ({' '.join(batch)}): '{wanted}'",
        actual=f"'{' '.join(dims)}'",
        fix=fix,
    )


def const_dims(
    operands: list[OperandSpec], results: list[OperandSpec], const_names: Mapping[str, bool]
) -> tuple[str, ...]:
    """The result dims no operand has that name an int constant (`K: sk.Const[int] = 2`, a
    router's top-k): their size is the constant's value. `const_names` maps each constant's
    name to whether it is an int."""
    operand_dims = {d for o in operands for d in o.dims}
    found = [
        d for r in results for d in r.dims if d not in operand_dims and const_names.get(d, False)
    ]
    return tuple(dict.fromkeys(found))


def param_dims(
    operands: list[OperandSpec],
    results: list[OperandSpec],
    split: Mapping[str, str],
    batch: tuple[str, ...],
) -> tuple[str, ...]:
    """The dims of parameter vectors: a dim no array has but operands of parameters (each
    batch entry's, after their batch dims), neither split nor a batch dim, of a 1-D operand
    (PolyNorm's 3 weights, `"3"` or `" P"`: its elements are read by index, no block of it is
    laid out) or, named by its size, of a 2-D one beside a dim of the kernel's blocks (a
    convolution's per-channel weights of its 4 taps, `"4 C"`: a stack of vectors, each taken
    by index)."""

    def parameters(o: OperandSpec, dim: str) -> bool:
        dims = o.block_dims  # after its batch dims: parameters of each batch entry
        return dim in dims and (len(dims) == 1 or (len(dims) == 2 and dim.isdigit()))

    found = []
    for op in operands:
        for dim in op.block_dims:
            if dim in split or dim in batch or dim in found or not parameters(op, dim):
                continue
            # Every array with the dim holds parameters (w: " P" and b: " P" both do).
            holders = [o for o in operands + results if dim in o.dims]
            if all(parameters(o, dim) and o in operands for o in holders):
                found.append(dim)
                break
    framed = {d for o in operands + results for d in o.block_dims if d not in found}
    if not framed:
        # No array has a dim but these: the blocks are vectors along them (each batch entry's
        # "B N" summed to a scalar), not parameters beside a block. A dim named by its size
        # stays a vector of parameters.
        return tuple(d for d in found if d.isdigit())
    return tuple(found)


def check_stacked_params(
    operands: list[OperandSpec],
    block_frame: BlockFrame,
    err: dict[str, Any],
    loop: Mapping[str, str] | None = None,
) -> None:
    """A 2-D operand of parameters stacks vectors along the kernel's rows or its columns, a
    dim no loop walks; vectors along the columns lie along its rows (`"4 C"`): a column of
    the buffer (`"C 4"`) is no vector Mosaic GPU loads."""
    parameters, rows, cols = block_frame.parameters, block_frame.rows, block_frame.cols
    for op in operands:
        dims = op.block_dims
        if len(dims) != 2 or not set(dims) & set(parameters):
            continue
        other = next((d for d in dims if d not in parameters), dims[1])
        if other in (loop or {}):
            raise AnnotationError(
                f"operand `{op.name}` ('{' '.join(op.dims)}') stacks vectors along {other}, "
                "which a loop walks: a stack is copied once, with the block",
                **err,
                operand=op.name,
                dim=other,
                expected=f"vectors along a dim no loop walks: '{rows}'"
                + (f" or '{cols}'" if cols and cols not in (loop or {}) else ""),
                actual=f"'{' '.join(op.dims)}'",
                fix=f"pass each vector as an operand of its own, `{op.name}0: "
                f'Float32[Array, " {other}"]`, which the loop copies block by block',
            )
        if (other == cols and dims[1] == other) or other == rows:
            continue
        if other == cols:
            raise AnnotationError(
                f"operand `{op.name}` ('{' '.join(op.dims)}') stacks vectors along the columns "
                f"{other} as the columns of its buffer, which Mosaic GPU cannot load as vectors",
                **err,
                operand=op.name,
                dim=other,
                expected=f"'{dims[1]} {dims[0]}'",
                actual=f"'{' '.join(op.dims)}'",
                fix=f"pass {op.name}.T and annotate it '{dims[1]} {dims[0]}': a stack of "
                f"parameter vectors along {other}, whose vector k the body takes as "
                f"sk.load({op.name})[k] (a row of the stack, where it took [:, k])",
            )
        raise AnnotationError(
            f"operand `{op.name}` ('{' '.join(op.dims)}') stacks vectors along {other}, which is "
            "neither the rows nor the columns of the kernel's blocks",
            **err,
            operand=op.name,
            dim=other,
            expected=f"vectors along '{rows}'" + (f" or '{cols}'" if cols else ""),
            actual=f"'{' '.join(op.dims)}'",
            fix="give the vectors the dim of the blocks' rows or columns they run along",
        )


def check_const_dims(
    results: list[OperandSpec],
    constant_dims: tuple[str, ...],
    rows: str,
    err: dict[str, Any],
) -> None:
    """A dim sized by a constant is the columns of a 2-D result over the kernel's rows: each
    block of rows writes its own K values per row, held whole."""
    for result in results:
        for dim in (d for d in result.dims if d in constant_dims):
            block = result.block_dims
            if len(block) == 2 and block == (rows, dim):
                continue
            raise AnnotationError(
                f"{result.name} has dim {dim}, sized by the constant {dim}, not as the "
                f"columns of a 2-D result over the rows {rows}",
                **err,
                operand=result.name,
                dim=dim,
                expected=f"'{rows} {dim}' (after any batch dims): K values per row",
                actual=f"'{' '.join(result.dims)}'",
                fix=f"declare it '{rows} {dim}', e.g. the values and indices of "
                f"jax.lax.top_k(v, {dim}) of a block over '{rows} ...'",
            )


def check_derivable(
    operands: list[OperandSpec],
    results: list[OperandSpec],
    err: dict[str, Any],
    constant_dims: tuple[str, ...] = (),
) -> None:
    operand_dims = {d for o in operands for d in o.dims}
    for result in results:
        for dim in result.dims:
            if dim not in operand_dims and dim not in constant_dims:
                raise AnnotationError(
                    f"{result.name} dim {dim} cannot be derived from the operands",
                    **err,
                    operand=result.name,
                    dim=dim,
                    expected=f"a dim among {', '.join(sorted(operand_dims))}",
                    actual=repr(dim),
                    fix="every result dim must be an operand dim, so its size is known at the "
                    f"call, or an int constant (`{dim}: sk.Const[int] = 2`) that sizes it",
                )


def frame(
    operands: list[OperandSpec],
    results: list[OperandSpec],
    err: dict[str, Any],
    loop: Mapping[str, str] | None = None,
    constant_dims: tuple[str, ...] = (),
    parameter_dims: tuple[str, ...] = (),
) -> tuple[str, str | None]:
    """Picks the (rows, cols) dim order every 2-D block of the kernel shares.

    With loop dims, the results set the frame, and a 2-D operand with a loop dim outside the
    frame (a matmul's `a` and `b`) is exempt: only `sk.dot` reads it, and checks it there. A
    result whose columns a constant sizes (`check_const_dims`) is exempt too."""
    arrays = arrays_of_specs(operands, results)  # all of them, for the errors' fixes
    results = [r for r in results if not set(r.dims) & set(constant_dims)]
    operands = [o for o in operands if not set(o.block_dims) & set(parameter_dims)]
    everything = [_body_view(o) for o in operands + results]
    results = [_body_view(r) for r in results]
    two_d = [o for o in everything if o.rank == 2]
    if loop:
        framed = [r for r in results if r.rank == 2] + two_d
        frame = framed[0].dims if framed else ()
        outside = set(loop) - set(frame)
        names = {r.name for r in results}

        def dot_only(o: OperandSpec) -> bool:
            # A matmul's a and b (a loop dim outside the frame), or an operand with the rows
            # and a dim outside the frame (an MLP's x "M K"), which only sk.dot can read.
            if o.rank != 2:
                return False
            rows_and_other = bool(frame) and o.dims[0] == frame[0] and o.dims[1] not in frame
            return bool(outside & set(o.dims)) or (o.name not in names and rows_and_other)

        everything = [o for o in everything if not dot_only(o)]
        two_d = [r for r in results if r.rank == 2] + [o for o in everything if o.rank == 2]
    one_d = {o.dims[0] for o in everything if o.rank == 1}
    if not two_d and len(one_d) == 1 and not loop:
        # Every array is a vector along one dim: its blocks are vectors along the rows.
        return one_d.pop(), None
    if not two_d:
        raise AnnotationError(
            "it has no 2-D operand or result; blocks are laid out as 2-D register tiles",
            **err,
            fix='declare the data as 2-D, e.g. `x: Float[Array, "M N"]`, reshaping 1-D arrays '
            "to (rows, cols) outside the kernel",
        )
    rows, cols = two_d[0].dims
    # A loop dim outside the frame: a step's block has it as its columns (attention's keys).
    # An operand along it is read a block a step; no result is written along it.
    outside_frame = {d for d in loop or {} if d not in (rows, cols)}
    operand_names = {o.name for o in operands}
    for other in everything:
        if other.rank == 2 and other.dims != (rows, cols):
            declared = frame_fix(other.name, arrays, rows, cols, loop)
            raise _layout_error(other, two_d[0], bool(loop), err, declared)
        if other.rank == 1 and other.dims[0] not in (rows, cols):
            if other.dims[0] in outside_frame and other.name in operand_names:
                continue  # a vector along a loop's steps (a key's segment id): per step
            declared = frame_fix(other.name, arrays, rows, cols, loop)
            raise AnnotationError(
                f"1-D `{other.name}` runs along dim {other.dims[0]}, which is neither the row "
                f"dim {rows} nor the column dim {cols}",
                **err,
                operand=other.name,
                expected=f"'{rows}' or '{cols}'",
                actual=f"'{other.dims[0]}'",
                fix=declared[0]
                if declared and declared[1]
                else f"annotate it ' {rows}' or ' {cols}' if it runs along one of them; a "
                "vector of a few parameters (a PolyNorm's 3 weights) takes a dim no other "
                f'array has, `{other.name}: Float32[Array, "3"]`, and the body reads its '
                f"elements by index, sk.load({other.name})[0]",
            )
    return rows, cols


def _layout_error(
    other: OperandSpec,
    first: OperandSpec,
    has_loops: bool,
    err: dict[str, Any],
    declared: tuple[str, bool] | None = None,
) -> AnnotationError:
    """`other` is 2-D but not laid out like the kernel's blocks, (rows, cols) of `first`;
    `declared`, the declaration of the layout it takes part in (`spellings.frame_fix`)."""
    rows, cols = first.dims
    actual = f"'{' '.join(other.dims)}'"
    if set(other.dims) == {rows, cols}:
        return AnnotationError(
            f"`{other.name}` orders its dims differently from `{first.name}`",
            **err,
            operand=other.name,
            expected=f"'{rows} {cols}'",
            actual=actual,
            fix=f"pass a transposed array ({other.name}.T) from outside the kernel and annotate it "
            f"'{rows} {cols}'; blocks are not transposed inside it",
        )
    extra = [d for d in other.dims if d not in (rows, cols)]
    shared = [d for d in other.dims if d in (rows, cols)]
    if len(shared) == 1 and other.dims.index(shared[0]) == first.dims.index(shared[0]):
        missing = cols if shared[0] == rows else rows
        same = f"if {extra[0]} always has the size of {missing}, name it {missing}; otherwise "
    else:
        same = ""
    reduce = (
        f"reduce `{other.name}` over {extra[0]} in a kernel of its own (returning "
        f'Float[Array, " {shared[0]}"]) and pass that vector here'
        if len(shared) == 1
        else f"compute what you need of `{other.name}` in a kernel of its own"
    )
    fix = (
        f"{same}{reduce}; for a matrix product over {extra[0]}, declare "
        f'loop={{"{extra[0]}": "B{extra[0]}"}} and multiply with sk.dot'
    )
    if declared is not None:
        fix = declared[0] if declared[1] else f"{declared[0]}; otherwise {fix}"
    return AnnotationError(
        f"2-D `{other.name}` is laid out '{' '.join(other.dims)}', but the kernel's 2-D blocks "
        f"are '{rows} {cols}', like `{first.name}`: every 2-D operand and result shares them",
        **err,
        operand=other.name,
        expected=f"'{rows} {cols}'"
        + (
            " (or a loop dim outside them, for an operand read only by sk.dot)" if has_loops else ""
        ),
        actual=actual,
        fix=fix,
    )


def _body_view(op: OperandSpec) -> OperandSpec:
    """The operand as the body sees it: without its batch and group dims."""
    return dataclasses.replace(op, dims=op.block_dims, batch=(), groups=())
