"""Index operands (`index={"V": "ids"}`): a dim addressed by the values of an integer operand.

An embedding's `table: "V D"` beside `ids: "T"` declares that the row of `table` each row of
the kernel's blocks reads is `ids[t]`: the body sees `table` as a block over `"T D"`, its rows
gathered by the ids, and the plan copies them row by row. Checked here at the declaration:
the index is an integer vector operand along a dim of its own, the indexed dim is no block's
(neither tiled, looped, batch nor a group) and no result's, and every operand with it leads
with it. That the index runs along the kernel's rows is the frame's check, once the gathered
operands are seen as the body sees them.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..._errors import AnnotationError
from .declaration import Blocking
from .operand import IndexedDim, OperandSpec

__all__ = ["INDEX_DTYPES", "apply_index"]

# The dtypes of an index: each is read from global memory as a scalar and compared in int32.
INDEX_DTYPES = ("int32", "int16", "int8", "uint16", "uint8")


def apply_index(
    index: Mapping[str, str],
    operands: list[OperandSpec],
    results: list[OperandSpec],
    blocking: Blocking,
    update: str | None,
    err: dict[str, Any],
) -> tuple[list[OperandSpec], list[OperandSpec]]:
    """The operands and results, each indexed one marked with the dim its index runs along:
    an operand's rows are gathered, the result that updates an operand in place
    (`update=`) has its rows scattered. The group dims are `blocking`'s, checked."""
    loop, batch, groups = blocking.loop, blocking.batch, blocking.groups
    if not isinstance(index, Mapping) or not all(
        isinstance(d, str) and isinstance(o, str) for d, o in index.items()
    ):
        raise AnnotationError(
            "index= must map each indexed dim to the integer operand whose values address it",
            **err,
            expected='a dict of a dim name to an operand name, e.g. index={"V": "ids"}',
            actual=repr(index),
            fix='write index={"V": "ids"} for a `table: "V D"` whose rows `ids: "T"` picks',
        )
    by_name = {op.name: op for op in operands}
    marked = {op.name: op for op in operands}
    scattered = list(results)
    for dim, name in index.items():
        if dim in groups:  # a page table: each loop step's page of `dim`
            blocked = blocking.split
            tables = frozenset(index[d] for d in index if d in groups)
            walked = groups[dim]
            _check_page_table(dim, name, by_name, results, walked, blocked, batch, tables, err)
            continue
        ids = _index_operand(dim, name, by_name, results, err)
        along = ids.dims[0]
        # The result that updates an operand in place may have the dim: its rows scattered.
        kept = [r for r in results if update is None or r.dims != by_name[update].dims]
        _check_indexed_dim(dim, along, blocking, kept, operands, err)
        if along in loop:
            raise AnnotationError(
                f"index `{name}` runs along {along}, which a loop walks: the rows an index "
                "picks are copied once a block, not a loop step at a time",
                **err,
                operand=name,
                dim=along,
                expected=f"{along} tiled (or whole)",
                actual=f"{along} in loop=",
                fix=f'tile {along} instead: tile={{"{along}": "B{along}"}}',
            )
        scattered = [
            _marked(r, dim, along, name, loop, err, "scattered") if dim in r.dims else r
            for r in scattered
        ]
        holders = [op for op in operands if dim in op.dims and op.name != name]
        if not holders:
            raise AnnotationError(
                f"index= addresses dim {dim} by `{name}`, but no operand has {dim}",
                **err,
                dim=dim,
                expected=f"an operand laid out '{dim} ...' whose {dim} `{name}` picks",
                actual="no operand with " + dim,
                fix=f"drop {dim} from index=, or name the dim of the operand `{name}` indexes",
            )
        for op in holders:
            marked[op.name] = _marked(marked[op.name], dim, along, name, loop, err)
    return [marked[op.name] for op in operands], scattered


def _named_operand(
    dim: str,
    name: str,
    by_name: Mapping[str, OperandSpec],
    results: list[OperandSpec],
    err: dict[str, Any],
) -> OperandSpec:
    """The operand `name` that index= names for `dim`."""
    ids = by_name.get(name)
    if ids is None:
        what = "a result" if any(r.name == name for r in results) else "no operand"
        raise AnnotationError(
            f"index= addresses dim {dim} by `{name}`, which is {what} of the kernel",
            **err,
            operand=name,
            dim=dim,
            expected=f"an integer operand, one of: {', '.join(by_name) or 'none'}",
            actual=repr(name),
            fix=f'pass the indices as an operand, `{name}: Int32[Array, " T"]`, and name it in '
            "index=",
        )
    return ids


def _index_operand(
    dim: str,
    name: str,
    by_name: Mapping[str, OperandSpec],
    results: list[OperandSpec],
    err: dict[str, Any],
) -> OperandSpec:
    """The operand `name`, checked to be an integer vector along a dim other than `dim`."""
    ids = _named_operand(dim, name, by_name, results, err)
    if len(ids.dims) != 1 or dim in ids.dims:
        raise AnnotationError(
            f"index operand `{name}` ('{' '.join(ids.dims)}') is not a vector along a dim of "
            f"its own: each element addresses one index of {dim}",
            **err,
            operand=name,
            dim=dim,
            expected=f"'T': one index of {dim} per row of the kernel's blocks",
            actual=f"'{' '.join(ids.dims)}'",
            fix=f"flatten `{name}` to 1-D outside the kernel (a free reshape) and annotate it "
            '" T", with the result\'s rows T',
        )
    _check_index_dtype(ids, err)
    return ids


def _check_index_dtype(ids: OperandSpec, err: dict[str, Any]) -> None:
    wrong = [d for d in ids.dtypes if d not in INDEX_DTYPES]
    if wrong:
        raise AnnotationError(
            f"index operand `{ids.name}` allows {wrong[0]} values; an index is compared as an "
            "int32: a signed integer of up to 32 bits, or an unsigned one of up to 16",
            **err,
            operand=ids.name,
            expected=f"one of {', '.join(INDEX_DTYPES)} (Int32[Array, ...])",
            actual=", ".join(ids.dtypes),
            fix=f'annotate `{ids.name}` Int32[Array, "{" ".join(ids.dims)}"] and pass '
            f"{ids.name}.astype(jnp.int32)",
        )


def _check_page_table(
    dim: str,
    name: str,
    by_name: Mapping[str, OperandSpec],
    results: list[OperandSpec],
    walked: str,
    blocked: Mapping[str, str],
    batch: tuple[str, ...],
    tables: frozenset[str],
    err: dict[str, Any],
) -> None:
    """A page table (`pages={"P": "block_tables"}`, which the declaration holds as a group
    dim P of the loop over `walked` addressed by the table) lists, for each batch entry, the
    pages of `dim` the loop reads: it is laid out over batch dims of the kernel, then a dim of
    its own that counts the pages."""
    table = _named_operand(dim, name, by_name, results, err)
    steps = table.dims[-1] if table.dims else None
    lead = table.dims[:-1]
    others = [o for o in by_name.values() if o.name not in tables and steps in o.dims]
    if (
        steps is None
        or steps in blocked
        or steps in batch
        or steps == dim
        or any(d not in batch for d in lead)
    ):
        expected = " ".join((*batch[:1], "Pages"))
        raise AnnotationError(
            f"page table `{name}` ('{' '.join(table.dims)}') does not list the pages of {dim} "
            f"that the steps of the loop over {walked} read",
            **err,
            operand=name,
            dim=dim,
            expected=f"'{expected}': batch dims of the kernel, then a dim of the table's own "
            f"(one page a step of the loop over {walked})",
            actual=f"'{' '.join(table.dims)}'",
            fix=f'annotate `{name}` Int32[Array, "{expected}"]: its row for each batch entry '
            f"lists the pages that entry reads, in order",
        )
    if others:
        raise AnnotationError(
            f"`{others[0].name}` ('{' '.join(others[0].dims)}') runs along {steps}, the dim of "
            f"page table `{name}` that counts each sequence's pages",
            **err,
            operand=others[0].name,
            dim=steps,
            expected=f"{steps} in page tables only: a loop over {walked} walks a sequence "
            "page by page, and no block runs along its pages",
            actual=f"`{others[0].name}`: '{' '.join(others[0].dims)}'",
            fix=f"lay `{others[0].name}` out along {walked} and store it in pages too, or name "
            "its dim differently",
        )
    _check_index_dtype(table, err)


def _check_indexed_dim(
    dim: str,
    along: str,
    blocking: Blocking,
    results: list[OperandSpec],
    operands: list[OperandSpec],
    err: dict[str, Any],
) -> None:
    """The indexed dim is addressed by the values alone: no block, batch entry, group or
    result runs along it (but the result that updates an operand in place)."""
    blocked, batch, groups = blocking.split, blocking.batch, blocking.groups
    role = (
        "tiled or looped"
        if dim in blocked
        else "a batch dim"
        if dim in batch
        else "a group dim"
        if dim in groups
        else None
    )
    if role:
        raise AnnotationError(
            f"indexed dim {dim} is also {role}",
            **err,
            dim=dim,
            expected=f"a dim the values of its index alone address: each row of {along} reads "
            f"one index of {dim}",
            actual=f"{dim} {role}",
            fix=f"drop {dim} from tile=, loop=, batch= and groups=",
        )
    for result in results:
        if dim in result.dims:
            base = next((o.name for o in operands if o.dims == result.dims), "cache")
            scatter = (
                f"; to write its rows into an operand laid out '{' '.join(result.dims)}' "
                f'in place, name it: update="{base}"'
            )
            raise AnnotationError(
                f"result `{result.name}` has the indexed dim {dim}, but updates no operand "
                "in place",
                **err,
                operand=result.name,
                dim=dim,
                expected=f"a result along the index's dim {along}: '{along} ...', or the "
                "operand it updates in place (update=)",
                actual=f"'{' '.join(result.dims)}'",
                fix=f"declare the result over {along}, the rows the indices give{scatter}",
            )


def _marked(
    op: OperandSpec,
    dim: str,
    along: str,
    name: str,
    loop: Mapping[str, str],
    err: dict[str, Any],
    moved: str = "gathered",
) -> OperandSpec:
    """`op` with its rows `dim` gathered (a result's scattered) by `name`'s values along
    `along`."""
    if op.batch or op.groups or len(op.dims) != 2 or op.dims[0] != dim:
        raise AnnotationError(
            f"operand `{op.name}` ('{' '.join(op.dims)}') has the indexed dim {dim} other than "
            "as the rows of a 2-D operand",
            **err,
            operand=op.name,
            dim=dim,
            expected=f"'{dim} D': rows of {dim} {moved}, each whole along D",
            actual=f"'{' '.join(op.dims)}'",
            fix=f"lay `{op.name}` out with {dim} first and one dim after it, transposing or "
            "flattening it outside the kernel",
        )
    if op.dims[1] in loop:
        raise AnnotationError(
            f"`{op.name}` ('{' '.join(op.dims)}') has rows {moved} by `{name}` and "
            f"columns {op.dims[1]} that a loop walks: {moved} rows are copied once a block",
            **err,
            operand=op.name,
            dim=op.dims[1],
            expected=f"{op.dims[1]} tiled or whole",
            actual=f"{op.dims[1]} in loop=",
            fix=f"tile {op.dims[1]} instead of looping over it",
        )
    if along in op.dims:
        raise AnnotationError(
            f"index `{name}` runs along {along}, which `{op.name}` ('{' '.join(op.dims)}') "
            f"has too: the index picks one row of {dim} for each row of the kernel's blocks, "
            f"and {op.name}'s rows are then seen along {along}",
            **err,
            operand=name,
            dim=along,
            expected=f"`{name}` along the rows of the result (' T'), a dim `{op.name}` does "
            "not have",
            actual=f"`{name}`: '{along}', `{op.name}`: '{' '.join(op.dims)}'",
            fix=f"annotate `{name}` with the result's row dim (the tokens it looks up), or, if "
            f"{along} is meant, name {op.name}'s other dim differently",
        )
    return dataclasses.replace(op, indexed=IndexedDim(dim, along, name))
