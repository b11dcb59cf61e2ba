"""Declarations for kernels written the way they were before statickernel had them.

A kernel ported from jnp or from an older statickernel reads rows chosen by data in its body
(an embedding's `table[ids]`), writes rows of an operand in place (a KV cache's
`.at[slots].set`), walks groups or pages whose sizes the data gives, or stacks a few
parameter vectors under a dim of its own. Its arrays then do not share the blocks' frame,
and the checks that refuse them would propose a rename or a reduction. Each function here
recognizes one of those layouts from the arrays' dims and dtypes and gives the declaration
that does the job (`index=`, `update=`, `ragged=`, `pages=`, `groups=`, a stack `"4 C"`), with
a short example; None when the layout is none of them.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..._compat import annotation_dtypes, plain_dim_names
from .operand import OperandSpec

__all__ = ["Array", "arrays_of_hints", "arrays_of_specs", "frame_fix", "rank_fix"]

_INTEGERS = frozenset({"int32", "int16", "int8", "uint32", "uint16", "uint8", "int64"})


@dataclasses.dataclass(frozen=True)
class Array:
    """An operand or a result as far as the declaration tells: its dims after its batch dims,
    and whether it holds integers only (an index, a table, group sizes)."""

    name: str
    dims: tuple[str, ...]
    integer: bool
    result: bool = False
    rank: int = 0  # with its batch dims


def arrays_of_hints(hints: Mapping[str, Any], batch: Sequence[str]) -> list[Array]:
    """The arrays of a signature's annotations (`typing.get_type_hints`), read leniently: an
    annotation that is not a plain jaxtyping array is left out, a tuple of results unpacked."""
    arrays = []
    for name, hint in hints.items():
        unpacked = getattr(hint, "__args__", None) if name == "return" else None
        for one in unpacked or (hint,):
            array = _array(name, one, batch, result=name == "return")
            if array is not None:
                arrays.append(array)
    return arrays


def arrays_of_specs(operands: Sequence[OperandSpec], results: Sequence[OperandSpec]) -> list[Array]:
    def integer(op: OperandSpec) -> bool:
        return bool(op.dtypes) and all(str(d) in _INTEGERS for d in op.dtypes)

    return [Array(o.name, o.block_dims, integer(o), rank=len(o.dims)) for o in operands] + [
        Array(r.name, r.block_dims, integer(r), result=True, rank=len(r.dims)) for r in results
    ]


def _array(name: str, hint: Any, batch: Sequence[str], *, result: bool) -> Array | None:
    try:
        dims = plain_dim_names(hint, fixed_sizes=True, sums=result)
        dtypes = annotation_dtypes(hint)
    except (AttributeError, TypeError):
        return None
    if dims is None:
        return None
    block = tuple(d for d in dims if d not in batch)
    integer = dtypes is not None and bool(dtypes) and all(str(d) in _INTEGERS for d in dtypes)
    return Array(name, block, integer, result, rank=len(dims))


def rank_fix(name: str, block: Sequence[str], arrays: Sequence[Array]) -> str | None:
    """For an operand of rank 3 past its batch dims: ragged groups (`"G K N"` beside group
    sizes `" G"`) or pages (`"P S D"` beside a table of pages `"B Pages"`)."""
    if len(block) != 3 or any(block[0] in a.dims for a in arrays if a.result):
        return None
    lead, first, second = block
    operands = [a for a in arrays if not a.result and a.name != name]
    sizes = next((a for a in operands if a.integer and a.dims == (lead,)), None)
    rows = next((r.dims[0] for r in arrays if r.result and len(r.dims) == 2), None)
    if sizes is not None and rows is not None:
        a = next((o.name for o in operands if o.dims == (rows, first)), "x")  # sk.dot's a
        return (
            f'declare ragged={{"{rows}": "{sizes.name}"}}: the rows of {rows} split into '
            f"consecutive groups, `{sizes.name}[g]` rows in group g, and `{name}` "
            f"'{' '.join(block)}' one block over '{first} {second}' a group, which the body "
            f"reads as sk.load({name}), its rows' group's (a grouped matmul, "
            f'sk.loop("{first}", lambda acc: acc + sk.dot({a}, {name}), init=...) with '
            f'loop={{"{first}": "B{first}"}})'
        )
    # A table of pages: a row of page numbers a sequence, "B Pages" (B a batch dim or not).
    table = next((a for a in operands if a.integer and a.rank == 2 and lead not in a.dims), None)
    if table is not None:
        return (
            f'declare pages={{"{lead}": "{table.name}"}}: `{name}` holds {lead} pages of {first} '
            f"rows and `{table.name}` lists each sequence's pages in order; walk them with "
            f'loop={{"{first}": "B{first}"}} and sk.loop("{first}", step, init=..., '
            f"stop=length), in whose step sk.load({name}) is the block over '{first} {second}' "
            "of the pages the table lists"
        )
    return None


def frame_fix(
    offender: str,
    arrays: Sequence[Array],
    rows: str,
    cols: str | None,
    loop: Mapping[str, str] | None,
) -> tuple[str, bool] | None:
    """For an array off the blocks' frame (rows, cols): the declaration of the layout it takes
    part in, if it is one a declaration gives, and whether the arrays say so for sure (an
    integer operand indexes: `update=`, `index=`) or only if a dim means what it may (a
    dim of groups or of parameters: the fix is then a condition, followed by the check's)."""
    for recognize, sure in (
        (_update_fix, True),
        (_index_fix, True),
        (_groups_fix, False),
        (_stack_fix, False),
    ):
        fix = recognize(offender, arrays, (rows, cols), loop or {})
        if fix is not None:
            return fix, sure
    return None


def _update_fix(
    offender: str, arrays: Sequence[Array], frame: tuple[str, str | None], loop: Mapping[str, str]
) -> str | None:
    """A result laid out as an operand (`cache` 'Slots E'), written with the rows of another
    operand ('T E'): an in-place update of the rows an index gives."""
    operands = [a for a in arrays if not a.result]
    for result in (a for a in arrays if a.result and len(a.dims) == 2):
        target = next((a for a in operands if a.dims == result.dims), None)
        if target is None:
            continue
        slots, width = target.dims
        rows = next(
            (a for a in operands if len(a.dims) == 2 and a.dims[1] == width and a.dims[0] != slots),
            None,
        )
        if rows is None:
            continue
        along = rows.dims[0]
        ids = next((a for a in operands if a.integer and a.dims == (along,)), None)
        # Without rows to write to, a start (a scalar integer, dynamic_update_slice's).
        start = next((a for a in operands if a.integer and all(d.isdigit() for d in a.dims)), None)
        if (ids is None and start is None) or offender not in {
            target.name,
            rows.name,
            result.name,
            ids.name if ids else None,
        }:
            continue
        if ids is None:
            assert start is not None
            index = f'index={{"{slots}": "slots"}}'
            operand = (
                f' with an operand `slots: Int32[Array, " {along}"]`, the row of '
                f"`{target.name}` each row of `{rows.name}` goes to (for a run from the start, "
                f"slots = {start.name}.reshape(()) + jnp.arange({along}))"
            )
        else:
            index, operand = f'index={{"{slots}": "{ids.name}"}}', ""
        return (
            f'declare update="{target.name}", {index}{operand}: the result is `{target.name}` '
            f"updated in place, and row t of the body's block is written to row "
            f"{ids.name if ids else 'slots'}[t] of it; the body returns the new rows, "
            f"sk.load({rows.name})"
        )
    return None


def _index_fix(
    offender: str, arrays: Sequence[Array], frame: tuple[str, str | None], loop: Mapping[str, str]
) -> str | None:
    """A table 'V D' whose rows no result has, beside an integer vector along a dim a result
    has: rows gathered by the vector's values (an embedding lookup)."""
    results = [a for a in arrays if a.result]
    operands = [a for a in arrays if not a.result]
    for table in (a for a in operands if len(a.dims) == 2 and not a.integer):
        rows, width = table.dims
        if any(rows in r.dims for r in results):
            continue
        for ids in (a for a in operands if a.integer and len(a.dims) == 1):
            along = ids.dims[0]
            if along == rows or not any(along in r.dims for r in results):
                continue
            if offender not in {table.name, ids.name} and not any(
                offender == r.name for r in results
            ):
                continue
            return (
                f'declare index={{"{rows}": "{ids.name}"}}: row t of the body\'s '
                f"sk.load({table.name}) is row {ids.name}[t] of `{table.name}`, a block over "
                f"'{along} {width}' (an embedding lookup: return sk.load({table.name})); the "
                f"body never indexes `{table.name}` with `{ids.name}` itself"
            )
    return None


def _groups_fix(
    offender: str, arrays: Sequence[Array], frame: tuple[str, str | None], loop: Mapping[str, str]
) -> str | None:
    """A 2-D operand along a frame dim and a dim no other array has, in a kernel with a loop
    outside the frame: one vector a group of the loop's steps (GPTQ's scales 'G N')."""
    looped = [d for d in loop if d not in frame]
    mine = next((a for a in arrays if a.name == offender and not a.result), None)
    if not looped or mine is None or len(mine.dims) != 2:
        return None
    foreign = [d for d in mine.dims if d not in frame]
    shared = [d for d in mine.dims if d in frame]
    if len(foreign) != 1 or len(shared) != 1 or foreign[0] in loop:
        return None
    group, along = foreign[0], shared[0]
    if any(group in a.dims for a in arrays if a.name != offender):
        return None
    step = looped[0]
    layout = "" if mine.dims[0] == group else f" (pass {offender}.T, annotated '{group} {along}')"
    return (
        f"if {group} numbers groups of {step} (GPTQ's scales, a vector a group), declare "
        f'groups={{"{group}": "{step}"}}: {group} then numbers the steps of the loop over '
        f"{step}, B{step} is the group's size ({group} = cdiv({step}, B{step})), and in step k "
        f"the body's sk.load({offender}) is the vector along {along} of index k of "
        f"{group}{layout}"
    )


def _stack_fix(
    offender: str, arrays: Sequence[Array], frame: tuple[str, str | None], loop: Mapping[str, str]
) -> str | None:
    """A 2-D operand along a frame dim and a named dim no other array has: a few parameter
    vectors (a convolution's taps 'C W'), declared with the dim named by its size."""
    mine = next((a for a in arrays if a.name == offender and not a.result), None)
    if mine is None or len(mine.dims) != 2 or mine.integer:
        return None
    foreign = [d for d in mine.dims if d not in frame]
    shared = [d for d in mine.dims if d in frame]
    if len(foreign) != 1 or len(shared) != 1 or shared[0] in loop:
        return None
    count, along = foreign[0], shared[0]
    if count.isdigit() or any(count in a.dims for a in arrays if a.name != offender):
        return None
    rows, _ = frame
    if along == rows or mine.dims[0] == count:
        annotation = " ".join("4" if d == count else d for d in mine.dims)
        passed, taken = "", "[:, k]" if mine.dims[0] == along else "[k]"
    else:  # vectors along the columns lie along a stack's rows: "4 C"
        annotation, passed, taken = f"4 {along}", f", pass {offender}.T", "[k]"
    return (
        f"if {count} counts a few parameter vectors along {along} (a convolution's taps), name "
        f"it by its size: a stack of parameter vectors, `{offender}: Float32[Array, "
        f'"{annotation}"]` for 4 of them{passed}, whose vector k the body takes as '
        f"sk.load({offender}){taken}"
    )
