"""In-place results (`update="cache"`): the kernel's result is an operand's array, updated.

The result is laid out as the operand is (the same dims), and the kernel writes its blocks
into that operand's array instead of a new one; what it does not write keeps the operand's
values. With an indexed dim (`index={"Slots": "slot_mapping"}`) the result's rows are
scattered: row t of the body's block is written to row `slot_mapping[t]`, so the kernel
moves only the rows it writes (a KV-cache update). Under `jax.jit` with the operand donated
no copy of it is made. Checked here at the declaration; the dtypes at the call.
"""

from collections.abc import Mapping
from typing import Any

from ..._errors import AnnotationError
from .declaration import Declaration
from .operand import OperandSpec

__all__ = ["check_update"]


def check_update(
    declaration: Declaration,
    operands: list[OperandSpec],
    results: list[OperandSpec],
    result_is_tuple: bool,
    err: dict[str, Any],
) -> str | None:
    """The name of the operand the result updates in place (`update=`), checked; None without
    one. The index is the declaration's: the page dims `pages=` adds to it are group dims,
    which no result has (`groups.apply_groups` refused one)."""
    update, tile, index = declaration.update, declaration.tile, declaration.index
    if update is None:
        return None
    names = [op.name for op in operands]
    if not isinstance(update, str) or update not in names:
        raise AnnotationError(
            f"update= names {update!r}, which is not an operand of the kernel",
            **err,
            expected=f"the name of the operand the result updates in place, one of: "
            f"{', '.join(names)}",
            actual=repr(update),
            fix='write update="cache" with the operand `cache` laid out as the result',
        )
    if result_is_tuple or len(results) != 1:
        count = f"a tuple of {len(results)}" if result_is_tuple else str(len(results))
        raise AnnotationError(
            f"update={update!r} is given to a kernel whose results are {count}",
            **err,
            operand=update,
            expected="one result, the operand updated in place",
            actual=f"{len(results)} results",
            fix="return the updated operand alone, and compute the other results in a kernel "
            "of their own",
        )
    (result,) = results
    operand = operands[names.index(update)]
    if operand.dims != result.dims:
        raise AnnotationError(
            f"the result is laid out '{' '.join(result.dims)}', but it updates `{update}` "
            f"('{' '.join(operand.dims)}') in place",
            **err,
            operand=update,
            expected=f"the result annotated '{' '.join(operand.dims)}', as `{update}` is",
            actual=f"'{' '.join(result.dims)}'",
            fix=f"annotate the result with the dims of `{update}`",
        )
    # A dim an index addresses is written along the index's dims.
    by_name = {op.name: op for op in operands}
    seen = set(result.dims)
    if isinstance(index, Mapping):
        for dim, name in index.items():
            if dim in seen and name in by_name:
                seen |= set(by_name[name].dims)
    lacking = [d for d in tile if d not in seen]
    if lacking:
        raise AnnotationError(
            f"the result updates `{update}` in place, but it lacks the tiled dim {lacking[0]}: "
            "each block's part of it is combined with the others' after the launch, not "
            "written into an array",
            **err,
            operand=update,
            dim=lacking[0],
            expected=f"a result with every tiled dim ({', '.join(tile)}), each block writing "
            "its own part",
            actual=f"'{' '.join(result.dims)}'",
            fix="drop update= and combine the result with the operand outside the kernel",
        )
    return update
