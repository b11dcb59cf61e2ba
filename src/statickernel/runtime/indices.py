"""The checked mode of index operands: `with sk.checked_indices(): ...`.

An index outside the dim it addresses is defined behaviour on the device (a gathered row
reads zeros, a scattered row is skipped), but it is usually a bug in the caller's data. In
the checked mode each call of a kernel with index operands first reads their values on the
host and raises an `OperandError` naming the kernel, the operand, the first bad position and
its value, and the bound. For an index that scatters a result's rows, -1 is the padding slot
(skipped, as its contract says) and a slot written twice is an error too (which row it keeps
is not defined); in a page table (`pages=`), -1 pads a row past its sequence's pages. The
sizes of ragged groups (`ragged=`) are checked too: a negative size (counted as 0 on the
device) and sizes summing past the rows they split (the groups past the end are cut) are
errors. The check reads concrete operands: under `jax.jit` the values are tracers, unknown
until the kernel runs, and are not checked.
"""

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from jax.core import Tracer

from .._compiler.declare.spec import KernelSpec
from .._errors import OperandError
from .._where import call_site

__all__ = ["check_indices", "checked_indices", "checking_indices"]

_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "statickernel_checked_indices", default=False
)


@contextlib.contextmanager
def checked_indices(enabled: bool = True) -> Iterator[None]:
    """Within the block, every call of a kernel with index operands (`index=`) checks their
    values first, on the host, and raises `OperandError` for an index outside the dim it
    addresses (or a slot a scatter writes twice). Calls under `jax.jit` are not checked."""
    token = _CHECKED.set(enabled)
    try:
        yield
    finally:
        _CHECKED.reset(token)


def checking_indices() -> bool:
    """Whether the calls made here check their index operands."""
    return _CHECKED.get()


def check_indices(spec: KernelSpec, args: Sequence[Any]) -> None:
    """Raises `OperandError` for the first bad value of an index operand among `args`."""
    names = [op.name for op in spec.operands]
    scattering = {r.indexed.index for r in spec.results if r.indexed is not None}
    tables = set(spec.page_tables.values())
    for dim, name in spec.index:
        values = args[names.index(name)]
        if isinstance(values, Tracer):
            continue
        shape = np.shape(values)
        ids = np.asarray(values).astype(np.int64).reshape(-1)
        holder = next(op for op in spec.operands if dim in op.dims and op.name != name)
        bound = int(np.shape(args[names.index(holder.name)])[holder.dims.index(dim)])
        # -1 pads a scatter's slots (skipped by contract) and a page table's rows past a
        # sequence's pages (a page of zeros): not a mistake.
        padded = name in scattering or name in tables
        padding = (ids == -1) if padded else np.zeros(ids.shape, bool)
        outside = np.flatnonzero(((ids < 0) | (ids >= bound)) & ~padding)
        if outside.size:
            first = int(outside[0])
            at = tuple(int(i) for i in np.unravel_index(first, shape)) if shape else ()
            position = str(at[0]) if len(at) == 1 else str(at)
            shown = ", ".join(map(str, at))
            what = "skip its row" if name in scattering else "read zeros"
            raise OperandError(
                f"`{name}` holds an index outside {dim} at position {position}: {int(ids[first])}",
                kernel=spec.name,
                where=call_site(),
                operand=name,
                dim=dim,
                expected=f"indices in [0, {bound}) ({dim} of `{holder.name}`)"
                + (", or -1 for padding" if padded else ""),
                actual=f"{name}[{shown}] = {int(ids[first])}, and {outside.size - 1} more outside",
                fix=f"fix the indices, or call outside sk.checked_indices() to let an index "
                f"outside {dim} {'read a page of zeros' if name in tables else what}",
            )
        if name in scattering:
            _check_unique(spec, name, dim, ids, padding)
    for split, name in spec.ragged:
        _check_group_sizes(spec, args, split, name)


def _check_group_sizes(spec: KernelSpec, args: Sequence[Any], split: str, name: str) -> None:
    """Ragged groups' sizes are not negative and sum to at most the rows they split."""
    names = [op.name for op in spec.operands]
    values = args[names.index(name)]
    if isinstance(values, Tracer):
        return
    sizes = np.asarray(values).astype(np.int64).reshape(-1)
    holder = next(op for op in spec.operands if split in op.dims)
    rows = int(np.shape(args[names.index(holder.name)])[holder.dims.index(split)])
    (group,) = next(op for op in spec.operands if op.name == name).dims
    negative = np.flatnonzero(sizes < 0)
    if negative.size:
        first = int(negative[0])
        raise OperandError(
            f"`{name}` holds a negative group size at position {first}: {int(sizes[first])}",
            kernel=spec.name,
            where=call_site(),
            operand=name,
            dim=group,
            expected="sizes >= 0, the rows of each group in order",
            actual=f"{name}[{first}] = {int(sizes[first])}, and {negative.size - 1} more negative",
            fix="fix the sizes, or call outside sk.checked_indices() to count a negative size as 0",
        )
    total = int(sizes.sum())
    if total > rows:
        ends = np.cumsum(sizes)
        first = int(np.flatnonzero(ends > rows)[0])
        raise OperandError(
            f"the group sizes `{name}` sum to {total}, past the {rows} rows of {split}",
            kernel=spec.name,
            where=call_site(),
            operand=name,
            dim=split,
            expected=f"sum({name}) <= {rows} ({split} of `{holder.name}`); rows past the sum "
            "are zeros",
            actual=f"sum = {total}; group {first} ends at row {int(ends[first])}",
            fix=f"fix the sizes, or call outside sk.checked_indices() to cut the groups at "
            f"row {rows}",
        )


def _check_unique(
    spec: KernelSpec, name: str, dim: str, ids: np.ndarray, padding: np.ndarray
) -> None:
    """A scatter's slots are each written once: a repeated one keeps either row."""
    ids = np.where(padding, -1 - np.arange(ids.size), ids)  # padding slots never collide
    order = np.argsort(ids, kind="stable")
    repeated = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if not repeated.size:
        return
    first, second = sorted(int(p) for p in order[repeated[0] : repeated[0] + 2])
    raise OperandError(
        f"`{name}` writes the row {int(ids[first])} of {dim} twice, at positions {first} and "
        f"{second}",
        kernel=spec.name,
        where=call_site(),
        operand=name,
        dim=dim,
        expected="each index once: two rows scattered to one row leave either of them",
        actual=f"{name}[{first}] = {name}[{second}] = {int(ids[first])}",
        fix="deduplicate the indices (keeping the row that should win) before the call",
    )
