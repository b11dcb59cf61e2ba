"""Joined dims: a result's columns declared as the concatenation of operands' columns.

`-> Float[Array, "M N1+N2"]` beside operands `a: "M N1"` and `b: "M N2"` (DeepSeek's MLA joins
a head's no-position part and its rotated part this way): the sum is the kernel's column dim,
held whole, and each part is the columns of the operands that have it, which the body sees as
blocks of their own width (a slice's registers), joined with `jnp.concatenate`. jaxtyping
checks the result's size against the sum at the call, as it checks any expression."""

from typing import Any

from ..._errors import AnnotationError
from .declaration import BlockFrame, Blocking
from .dims import frame, param_dims
from .operand import OperandSpec

__all__ = ["check_joined", "frame_beside_parts", "joined_dims", "piece_operands"]


def joined_dims(results: list[OperandSpec]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each result dim that is a sum of names ("N1+N2"), with its parts in order."""
    found = {d: tuple(d.split("+")) for r in results for d in r.dims if "+" in d}
    return tuple(found.items())


def piece_operands(
    operands: list[OperandSpec], joined: tuple[tuple[str, tuple[str, ...]], ...]
) -> frozenset[str]:
    """The operands along a part of a joined dim: blocks of their own width, off the frame."""
    parts = {p for _, ps in joined for p in ps}
    return frozenset(o.name for o in operands if set(o.block_dims) & parts)


def frame_beside_parts(
    seen: list[OperandSpec],
    results: list[OperandSpec],
    joined: tuple[tuple[str, tuple[str, ...]], ...],
    constant_dims: tuple[str, ...],
    blocking: Blocking,
    err: dict[str, Any],
) -> BlockFrame:
    """The blocks' (rows, cols) frame (`dims.frame`) and the dims of parameter vectors beside
    it, set by the arrays the body sees but a joined dim's operands, blocks of their own
    width."""
    pieces = piece_operands(seen, joined)
    parts = {p for _, ps in joined for p in ps}
    split = blocking.split
    parameters = tuple(
        d for d in param_dims(seen, results, split, blocking.batch) if d not in parts
    )
    framed = [o for o in seen if o.name not in pieces]
    rows, cols = frame(framed, results, err, blocking.loop, constant_dims, parameters)
    return BlockFrame(rows, cols, parameters)


def check_joined(
    joined: tuple[tuple[str, tuple[str, ...]], ...],
    operands: list[OperandSpec],
    results: list[OperandSpec],
    frame: BlockFrame,
    blocking: Blocking,
    err: dict[str, Any],
) -> None:
    """A joined dim is the columns of the kernel's blocks, held whole; each part is an operand
    dim no constant splits, and the columns of each operand that has it, over the rows."""
    if not joined:
        return
    rows, cols, loop = frame.rows, frame.cols, blocking.loop
    if loop:
        # A loop's steps hold blocks of the frame; the parts are held beside it, whole.
        raise AnnotationError(
            f"the result's columns are joined ({joined[0][0]}) in a kernel with loop=",
            **err,
            dim=joined[0][0],
            expected="a kernel without loop= (its blocks tiled by tile= alone)",
            actual=f"loop={dict(loop)!r}",
            fix="return the parts as results of their own and join them with "
            "jnp.concatenate outside the kernel, or join them in a kernel without loops",
        )
    blocked = blocking.split
    operand_dims = {d for o in operands for d in o.dims}
    for name, parts in joined:
        for part in parts:
            if part not in operand_dims:
                raise AnnotationError(
                    f"the joined dim {name} has the part {part}, which no operand has",
                    **err,
                    dim=part,
                    expected=f"parts among the operands' dims ({', '.join(sorted(operand_dims))})",
                    actual=repr(name),
                    fix=f"declare an operand along {part}, whose columns the result joins",
                )
            if part in blocked or part == rows:
                raise AnnotationError(
                    f"the joined dim {name} has the part {part}, which "
                    + ("is the kernel's rows" if part == rows else "a constant splits"),
                    **err,
                    dim=part,
                    expected="parts held whole: the columns of their operands",
                    actual=repr(name),
                    fix=f"leave {part} out of tile= and loop=; each block holds it whole"
                    if part != rows
                    else f"join columns: declare the result '{rows} {name}' over other parts",
                )
        part_rows = _rows_of_parts(operands, parts, rows)
        for result in (r for r in results if name in r.dims):
            if result.block_dims != (part_rows, name) or cols != name:
                raise AnnotationError(
                    f"{result.name} has the joined dim {name}, not as its columns over the "
                    f"rows {part_rows}",
                    **err,
                    operand=result.name,
                    dim=name,
                    expected=f"'{part_rows} {name}' (after any batch dims)",
                    actual=f"'{' '.join(result.dims)}'",
                    fix=f"declare it '{part_rows} {name}': each block of rows joins its "
                    "operands' columns",
                )
    parts_of = {p: (name, ps) for name, ps in joined for p in ps}
    for op in operands:
        dims = op.block_dims
        part = next((d for d in dims if d in parts_of), None)
        if part is None:
            continue
        name, parts = parts_of[part]
        part_rows = _rows_of_parts(operands, parts, rows)
        if dims in ((part_rows, part), (part,)):
            continue
        raise AnnotationError(
            f"operand `{op.name}` ('{' '.join(op.dims)}') has {part}, a part of the joined dim "
            f"{name}, not as its columns over the rows {part_rows}",
            **err,
            operand=op.name,
            dim=part,
            expected=f"'{part_rows} {part}', or a vector ' {part}'",
            actual=f"'{' '.join(op.dims)}'",
            fix=f"lay it out '{part_rows} {part}' outside the kernel; a part is the columns of "
            "the operands that have it",
        )


def _rows_of_parts(operands: list[OperandSpec], parts: tuple[str, ...], rows: str) -> str:
    """The rows the parts' 2-D operands run along: the frame's, unless every array along the
    joined dim is a vector (then the frame runs along the joined dim itself)."""
    return next(
        (o.block_dims[0] for o in operands if len(o.block_dims) == 2 and o.block_dims[1] in parts),
        rows,
    )
