"""Group dims (`groups={"G": "K"}`): a dim that numbers the steps of a loop, so an operand
laid out along it (a quantized weight's scales, "G N", one row of scales per group of BK
elements of K) gives each step of the loop over K its own index of G. Checked here at the
declaration; the size (G == cdiv(K, BK)) is checked when the call binds the dims."""

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..._errors import AnnotationError
from .declaration import Blocking
from .operand import OperandSpec

__all__ = ["apply_groups"]


def apply_groups(
    groups: Mapping[str, str],
    operands: list[OperandSpec],
    results: list[OperandSpec],
    blocking: Blocking,
    err: dict[str, Any],
    paged: frozenset[str] = frozenset(),
) -> list[OperandSpec]:
    """The operands, each with the group dims that lead it (after its batch dims) marked.
    A group dim in `paged` is one an index operand addresses (`index=`): each step copies the
    page its index names, a block of one or two dims ("Hkv P S D": a page "S D")."""
    loop = blocking.loop
    if not isinstance(groups, Mapping) or not all(
        isinstance(d, str) and isinstance(w, str) for d, w in groups.items()
    ):
        raise AnnotationError(
            "groups= must map each group dim to the loop dim whose steps it numbers",
            **err,
            expected='a dict of dim names, e.g. groups={"G": "K"}',
            actual=repr(groups),
            fix='write groups={"G": "K"} with loop={"K": "BK"}',
        )
    for dim, walked in groups.items():
        _check_group(dim, walked, blocking, err)
        if not any(dim in op.dims for op in operands):
            raise AnnotationError(
                f"group dim {dim} is declared, but no operand has it",
                **err,
                dim=dim,
                expected=f"an operand laid out '{dim} N' (a row of scales per group of {walked})",
                actual="no operand with " + dim,
                fix=f"drop {dim} from groups=, or add the operand it numbers",
            )
    for result in results:
        held = [d for d in result.dims if d in groups]
        if held:
            raise AnnotationError(
                f"result `{result.name}` has the group dim {held[0]}, which only operands have",
                **err,
                operand=result.name,
                dim=held[0],
                expected="a result laid out along the kernel's blocks",
                actual=f"'{' '.join(result.dims)}'",
                fix=f"drop {held[0]} from the result; a group dim only selects an operand's "
                "index in each step of its loop",
            )
    return [_marked(op, groups, loop, err, paged) for op in operands]


def _check_group(dim: str, walked: Any, blocking: Blocking, err: dict[str, Any]) -> None:
    loop, batch = blocking.loop, blocking.batch
    if not isinstance(walked, str) or walked not in loop:
        raise AnnotationError(
            f"group dim {dim} names {walked!r}, which is not a loop dim",
            **err,
            dim=dim,
            expected=f"one of the loop dims ({', '.join(loop) or 'none declared'})",
            actual=repr(walked),
            fix=f'name the loop whose steps {dim} numbers, e.g. groups={{"{dim}": "K"}} with '
            'loop={"K": "BK"}',
        )
    if dim in blocking.split or dim in batch:
        role = "batch" if dim in batch else "tiled or looped"
        raise AnnotationError(
            f"group dim {dim} is also {role}",
            **err,
            dim=dim,
            expected="a dim of its own, numbering the steps of the loop over " + walked,
            actual=f"{dim} in {'batch=' if dim in batch else 'tile= or loop='}",
            fix=f"declare {dim} in one place only",
        )


def _marked(
    op: OperandSpec,
    groups: Mapping[str, str],
    loop: Mapping[str, str],
    err: dict[str, Any],
    paged: frozenset[str],
) -> OperandSpec:
    held = [d for d in op.dims if d in groups]
    if not held:
        return op
    lead = len(op.batch)
    body = op.dims[lead + len(held) :]
    if held[0] in paged and tuple(op.dims[lead : lead + 1]) == (held[0],) and len(held) == 1:
        return _paged(op, held[0], body, groups[held[0]], loop, err)
    if tuple(op.dims[lead : lead + len(held)]) != tuple(held) or len(held) > 1 or len(body) != 1:
        raise AnnotationError(
            f"operand `{op.name}` ('{' '.join(op.dims)}') has the group dim {held[0]} where "
            "it cannot lead a vector",
            **err,
            operand=op.name,
            dim=held[0],
            expected=f"one group dim, after the batch dims, then one dim: '{held[0]} N'",
            actual=f"'{' '.join(op.dims)}'",
            fix=f"lay `{op.name}` out with {held[0]} first and a vector after it "
            "(transpose it outside the kernel once, where it is stored)",
        )
    if body[0] in loop:
        raise AnnotationError(
            f"operand `{op.name}` ('{' '.join(op.dims)}') runs along the loop dim {body[0]} "
            f"after its group dim {held[0]}, which numbers the steps of another loop",
            **err,
            operand=op.name,
            dim=body[0],
            expected=f"'{held[0]} N': a vector along a dim of the blocks, one a step of the loop "
            f"over {groups[held[0]]}",
            actual=f"'{' '.join(op.dims)}'",
            fix=f"lay `{op.name}` out along a dim of the kernel's blocks, or multiply it with "
            "sk.dot in the loop it runs along",
        )
    return dataclasses.replace(op, groups=(held[0],))


def _paged(
    op: OperandSpec,
    dim: str,
    page: tuple[str, ...],
    walked: str,
    loop: Mapping[str, str],
    err: dict[str, Any],
) -> OperandSpec:
    """`op` with its page dim marked: each step of the loop over `walked` copies one page, a
    block over the dims after it, the step's block of `walked` among them."""
    looped = [d for d in page if d in loop and d != walked]
    if walked not in page or looped or len(page) > 2:
        raise AnnotationError(
            f"operand `{op.name}` ('{' '.join(op.dims)}') has pages {dim} that are not blocks "
            f"of the loop over {walked}",
            **err,
            operand=op.name,
            dim=looped[0] if looped else dim,
            expected=f"'{dim} {walked} D': each page one step's block of {walked}, whole along "
            "the dim after it",
            actual=f"'{' '.join(op.dims)}'",
            fix=f"lay the pages out as '{dim} {walked} D', the page's rows the loop's block",
        )
    return dataclasses.replace(op, groups=(dim,))
