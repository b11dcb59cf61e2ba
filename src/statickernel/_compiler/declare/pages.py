"""Paged operands (`pages={"P": "block_tables"}`): a sequence stored in pages of a pool, in
the order a table lists them (a paged KV cache).

`k_pages: "Hkv P S D"` holds P pages of S rows; `block_tables: "B Pages"` lists, for each
batch entry, the pages its sequence is stored in. With `loop={"S": "BS"}`, the loop over S
walks that sequence: its token t is row `t % S` of page `block_tables[b, t // S]`, and the
body sees `k_pages` as each step's block over "S D", as it sees any operand the loop walks.
The loop's size is Pages * S, the table's length times the page size.

Here the declaration is checked and brought to the forms the compiler already has: P is a
group dim of the loop over S (one index of it a page, dropped from the blocks the body sees)
addressed by the table's values (`index=`). Where the table may stand is `apply_index`'s.
"""

from collections.abc import Mapping
from typing import Any

from ..._errors import AnnotationError
from .declaration import Declaration
from .operand import OperandSpec

__all__ = ["apply_pages", "check_pages_map"]


def apply_pages(
    declaration: Declaration,
    operands: list[OperandSpec],
    results: list[OperandSpec],
    loop: Mapping[str, str],
    err: dict[str, Any],
) -> tuple[Mapping[str, str] | None, Mapping[str, str] | None]:
    """The groups and index of the declaration with each page dim added: a group dim of the
    loop its pages' rows are walked by, addressed by its table. (A groups= or index= that is
    not a mapping is left for its own check to refuse.)"""
    pages, groups, index = declaration.pages, declaration.groups, declaration.index
    if not all(isinstance(m, Mapping | None) for m in (groups, index)):
        return groups, index
    for dim in set(groups or ()) & set(index or ()):
        assert index is not None
        raise AnnotationError(
            f"indexed dim {dim} is also a group dim",
            **err,
            dim=dim,
            expected=f"a dim the values of its index alone address, or pages a table lists "
            f"(pages={{'{dim}': '{index[dim]}'}})",
            actual=f"{dim} in groups= and in index=",
            fix=f"drop {dim} from groups=; for a pool of pages that `{index[dim]}` lists, "
            f"declare pages={{'{dim}': '{index[dim]}'}} instead of groups= and index=",
        )
    if not pages:
        return groups, index
    check_pages_map(pages, err)
    groups, index = dict(groups or {}), dict(index or {})
    for dim, table in pages.items():
        if dim in groups or dim in index:
            raise AnnotationError(
                f"page dim {dim} is also in {'groups=' if dim in groups else 'index='}",
                **err,
                dim=dim,
                expected=f"{dim} in pages= only",
                actual=f"{dim} in pages= and {'groups=' if dim in groups else 'index='}",
                fix=f"drop {dim} from {'groups=' if dim in groups else 'index='}",
            )
        groups[dim] = _walked(dim, frozenset(pages), operands, results, loop, err)
        index[dim] = table
    return groups, index


def check_pages_map(pages: Any, err: dict[str, Any]) -> frozenset[str]:
    """The page dims of `pages=`, checked to be a mapping of dim names to operand names (before
    the operands' ranks are, which do not count the page dims)."""
    if pages is None:
        return frozenset()
    if not isinstance(pages, Mapping) or not all(
        isinstance(d, str) and isinstance(t, str) for d, t in pages.items()
    ):
        raise AnnotationError(
            "pages= must map each page dim to the table that lists the pages",
            **err,
            expected='a dict of a dim name to an operand name, e.g. pages={"P": "block_tables"}',
            actual=repr(pages),
            fix='write pages={"P": "block_tables"} for `k_pages: "Hkv P S D"` and '
            '`block_tables: "B Pages"`',
        )
    return frozenset(pages)


def _walked(
    dim: str,
    paged: frozenset[str],
    operands: list[OperandSpec],
    results: list[OperandSpec],
    loop: Mapping[str, str],
    err: dict[str, Any],
) -> str:
    """The loop dim the pages of `dim` hold the rows of: the dim after it in every operand
    with it, walked by a loop, and in no other array."""
    holders = [op for op in operands if dim in op.dims]
    after = {op.dims[op.dims.index(dim) + 1] for op in holders if op.dims[-1] != dim}
    walked = next(iter(after)) if len(after) == 1 else None
    if not holders or walked is None or walked not in loop:
        shown = ", ".join(f"`{o.name}` '{' '.join(o.dims)}'" for o in holders) or "none"
        raise AnnotationError(
            f"page dim {dim} is not followed, in every operand with it, by the loop dim its "
            "pages hold the rows of",
            **err,
            dim=dim,
            expected=f"operands laid out '{dim} S D' with loop={{'S': 'BS'}}: each page S rows "
            "of the sequence the loop walks",
            actual=f"operands with {dim}: {shown}; loop dims: {', '.join(loop) or 'none'}",
            fix=f"lay the pages out as '{dim} S D' and walk S in a loop: loop={{'S': 'BS'}}",
        )
    others = [a for a in operands + results if walked in a.dims and not paged & set(a.dims)]
    if others:
        other = others[0]
        raise AnnotationError(
            f"`{other.name}` ('{' '.join(other.dims)}') runs along {walked}, which only the "
            f"pages of {dim} hold: the loop over {walked} walks each sequence page by page",
            **err,
            operand=other.name,
            dim=walked,
            expected=f"only operands paged by {dim} along {walked}",
            actual=f"'{' '.join(other.dims)}'",
            fix=f"store `{other.name}` in pages too, '{dim} {walked} ...', listed by the same "
            "table",
        )
    return walked
