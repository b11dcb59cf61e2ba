"""Ragged groups (`ragged={"M": "group_sizes"}`): the rows of a tiled dim split into
consecutive groups whose sizes an integer operand gives, each group's rows multiplied by its
own block of another operand (a grouped GEMM, `jax.lax.ragged_dot`).

`x: "M K"`, `w: "G K N"` and `group_sizes: "G"` under `ragged={"M": "group_sizes"}` declare
that rows [sum(sizes[:g]), sum(sizes[:g + 1])) of M belong to group g: the body sees `w` as a
block over "K N", group g's, wherever the rows of its block belong to g. The group dim G is
the sizes operand's own dim; an operand with it leads with it (after no batch dims) and the
body never sees it, as it never sees a group dim of a loop (`groups=`). Checked here at the
declaration; how row blocks that straddle two groups are computed is the plan's
(`plan.warpspec`), and the form that computes them the warp-specialized matmul's.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..._compat import plain_dim_names
from ..._errors import AnnotationError
from .arrays import array_spec
from .indexing import INDEX_DTYPES
from .operand import OperandSpec

__all__ = ["apply_ragged", "check_ragged_rows", "ragged_group_dims"]


def ragged_group_dims(
    ragged: Any,
    hints: Mapping[str, Any],
    operands: tuple[str, ...],
    blocked: frozenset[str],
    err: dict[str, Any],
) -> dict[str, str]:
    """The group dim of each sizes operand of `ragged=` (its one dim), read from its
    annotation before the operands' ranks are checked, which do not count the group dims.
    `blocked` are the tiled, looped and batch dims, which no group dim may be."""
    if ragged is None:
        return {}
    if not isinstance(ragged, Mapping) or not all(
        isinstance(d, str) and isinstance(s, str) for d, s in ragged.items()
    ):
        raise AnnotationError(
            "ragged= must map the dim split into groups to the operand of the groups' sizes",
            **err,
            expected='a dict of a dim name to an operand name, e.g. ragged={"M": "group_sizes"}',
            actual=repr(ragged),
            fix='write ragged={"M": "group_sizes"} for `x: "M K"`, `w: "G K N"` and '
            '`group_sizes: Int32[Array, "G"]`',
        )
    if len(ragged) > 1:
        raise AnnotationError(
            f"ragged= splits {len(ragged)} dims into groups; a kernel splits one",
            **err,
            expected="one dim, the rows: ragged={'M': 'group_sizes'}",
            actual=repr(dict(ragged)),
            fix="split one dim's rows into groups; call the kernel once for each other split",
        )
    groups: dict[str, str] = {}
    for dim, name in ragged.items():
        if name not in operands:
            raise AnnotationError(
                f"ragged= names `{name}` as the sizes of {dim}'s groups, but no operand is "
                "called that",
                **err,
                operand=name,
                dim=dim,
                expected="the name of an integer operand laid out along the group dim, "
                '`group_sizes: Int32[Array, "G"]`',
                actual=f"operands: {', '.join(operands) or 'none'}",
                fix=f'add the operand `{name}: Int32[Array, "G"]`, or name the one that is',
            )
        sizes = array_spec(name, hints[name], err, role="operand")
        if sizes.rank != 1:
            raise AnnotationError(
                f"the group sizes `{name}` are laid out '{' '.join(sizes.dims)}', not along "
                "one dim of their own",
                **err,
                operand=name,
                expected='one size a group: `Int32[Array, "G"]`',
                actual=f"rank {sizes.rank}",
                fix=f'annotate `{name}` as Int32[Array, "G"]',
            )
        groups[sizes.dims[0]] = name
    for group, name in groups.items():
        _check_group_early(group, name, dict(ragged), hints, operands, blocked, err)
    return groups


def _check_group_early(
    group: str,
    name: str,
    ragged: dict[str, str],
    hints: Mapping[str, Any],
    operands: tuple[str, ...],
    blocked: frozenset[str],
    err: dict[str, Any],
) -> None:
    """Before the operands' ranks are checked: the group dim is a dim of its own (not split,
    tiled, looped or batched), and leads every operand with it. Otherwise the rank check
    would refuse the weights ('G' counted as a dim) without naming the sizes or the dim."""
    split = next(iter(ragged))
    if group in blocked or group == split:
        raise AnnotationError(
            f"the group sizes `{name}` run along {group}, a dim of the kernel's blocks, not "
            "a dim of their own",
            **err,
            operand=name,
            dim=group,
            expected=f"one size a group, along a dim of its own that counts the groups of "
            f'{split}: `{name}: Int32[Array, "G"]`',
            actual=f"`{name}` laid out '{group}', which is tiled, looped, batched or split",
            fix=f'annotate `{name}` as Int32[Array, "G"] and lay the weights out "G K N"',
        )
    for operand in operands:
        dims = plain_dim_names(hints.get(operand)) if operand != name else None
        if dims and group in dims and dims[0] != group:
            raise AnnotationError(
                f"operand `{operand}` ('{' '.join(dims)}') has the group dim {group} of "
                f"`{name}`, but not first",
                **err,
                operand=operand,
                dim=group,
                expected=f"'{group} K N': {group} first, then the two dims of each group's block",
                actual=f"'{' '.join(dims)}'",
                fix=f"lay `{operand}` out as '{group} K N' (transpose it once where it is stored)",
            )


def apply_ragged(
    ragged: Mapping[str, str] | None,
    operands: list[OperandSpec],
    results: list[OperandSpec],
    tile: Mapping[str, str],
    unblocked: frozenset[str],
    err: dict[str, Any],
) -> tuple[list[OperandSpec], tuple[tuple[str, str], ...]]:
    """The operands, each selected by a group dim marked with it (it leads, unseen by the
    body), and the ragged map as the spec holds it. `unblocked` are the dims that may not be
    a group dim: loop, batch, group, indexed and paged dims."""
    if not ragged:
        return operands, ()
    ((split, name),) = ragged.items()
    by_name = {op.name: op for op in operands}
    sizes = by_name[name]
    (group,) = sizes.dims
    if split not in tile:
        raise AnnotationError(
            f"ragged= splits {split} into groups, but {split} is not tiled",
            **err,
            dim=split,
            expected=f"a tiled dim, the rows of the kernel's blocks: tile={{'{split}': 'BM'}}",
            actual=f"tiled dims: {', '.join(tile) or 'none'}",
            fix=f"tile {split}: each row block is computed once for each group it holds",
        )
    if not set(sizes.dtypes) <= set(INDEX_DTYPES):
        raise AnnotationError(
            f"the group sizes `{name}` are not integers",
            **err,
            operand=name,
            expected="an integer dtype: " + ", ".join(INDEX_DTYPES),
            actual=", ".join(sizes.dtypes),
            fix=f'annotate `{name}` as Int32[Array, "{group}"]',
        )
    if group in tile or group in unblocked or group == split:
        raise AnnotationError(
            f"the group dim {group} of `{name}` is also tiled, looped, batched or indexed",
            **err,
            operand=name,
            dim=group,
            expected=f"a dim of its own, counting the groups of {split}",
            actual=f"{group} declared elsewhere too",
            fix=f'give `{name}` a dim of its own, e.g. "G"',
        )
    holders = [op for op in operands if group in op.dims and op.name != name]
    if not holders:
        raise AnnotationError(
            f"no operand has the group dim {group} of `{name}`",
            **err,
            dim=group,
            expected=f'an operand with one block a group, e.g. `w: "{group} K N"`',
            actual="only the sizes have " + group,
            fix=f"lay out the per-group operand with {group} first, or drop ragged=",
        )
    for array in holders + [r for r in results if group in r.dims]:
        _check_holder(array, group, split, results, err)
    marked = [dataclasses.replace(op, groups=(group,)) if op in holders else op for op in operands]
    return marked, ((split, name),)


def _check_holder(
    op: OperandSpec,
    group: str,
    split: str,
    results: list[OperandSpec],
    err: dict[str, Any],
) -> None:
    """An operand with the group dim leads with it, has no batch dims and does not run along
    the split rows; no result has it."""
    if op in results:
        raise AnnotationError(
            f"result `{op.name}` has the group dim {group}, which only selects an operand's block",
            **err,
            operand=op.name,
            dim=group,
            expected=f"a result laid out along the kernel's blocks, its rows {split}",
            actual=f"'{' '.join(op.dims)}'",
            fix=f"drop {group} from the result",
        )
    if split in op.dims:
        raise AnnotationError(
            f"operand `{op.name}` ('{' '.join(op.dims)}') runs along {split}, the dim whose "
            f"rows ragged= splits into groups, and has the group dim {group}",
            **err,
            operand=op.name,
            dim=split,
            expected=f"the rows ({split}) split, each group's block of `{op.name}` over two "
            f"other dims: '{group} K N' beside `x: '{split} K'`",
            actual=f"'{' '.join(op.dims)}'",
            fix=f"split the rows: ragged={{'<rows>': '...'}} names the first dim of the "
            f"operand `{op.name}` multiplies, and drop {split} from `{op.name}`",
        )
    if op.dims[0] != group or op.batch or op.rank != 3:
        raise AnnotationError(
            f"operand `{op.name}` ('{' '.join(op.dims)}') is not laid out one block of its "
            f"group dim {group} after another",
            **err,
            operand=op.name,
            dim=group,
            expected=f"'{group} K N': {group} first, then the two dims of each group's block, "
            f"neither of them {split}",
            actual=f"'{' '.join(op.dims)}'",
            fix=f"lay `{op.name}` out as '{group} K N' (transpose it once where it is stored)",
        )


def check_ragged_rows(ragged: tuple[tuple[str, str], ...], rows: str, err: dict[str, Any]) -> None:
    """The dim split into groups is the rows of the kernel's blocks: items walk row blocks."""
    for split, name in ragged:
        if split != rows:
            raise AnnotationError(
                f"ragged= splits {split} into groups, but the rows of the kernel's blocks are "
                f"{rows}",
                **err,
                operand=name,
                dim=split,
                expected=f"ragged={{'{rows}': '{name}'}}: the rows split into groups",
                actual=f"ragged={{'{split}': '{name}'}}",
                fix=f"lay the operands out with {split} as their rows (first dim)",
            )
