"""One array of a declaration, an operand or a result, from its jaxtyping annotation: its
named dims, its leading batch dims and the dtypes it allows, checked to be of a rank kernels
take."""

from collections.abc import Mapping
from typing import Any

from jaxtyping import AbstractArray

from ..._compat import plain_dim_names, public_type_name
from ..._errors import AnnotationError
from .consts import type_name
from .dims import check_batch_leads
from .dtypes import allowed_dtypes
from .operand import OperandSpec
from .spellings import arrays_of_hints, rank_fix

__all__ = ["array_spec"]


def _rank_fix(*, batched: bool) -> str:
    """The fix for an array of a rank kernels do not take (rank 3 or more past its batch
    dims; a 0-d array per batch entry is taken): reshape it to 2-D."""
    return "reshape the array to 2-D outside the kernel, e.g. x.reshape(-1, x.shape[-1])" + (
        ", or declare its leading dims in batch=" if not batched else ""
    )


def array_spec(
    name: str,
    hint: Any,
    err: dict[str, Any],
    *,
    role: str,
    batch: tuple[str, ...] = (),
    groups: frozenset[str] = frozenset(),
    signature: Mapping[str, Any] | None = None,
) -> OperandSpec:
    """The array `name` annotated `hint`; `signature`, every annotation of the kernel, which
    an error may read to name the declaration the array's layout needs."""
    example = f'`{name}: Float[Array, "M N"]`' if role == "operand" else '`-> Float[Array, "M N"]`'
    if not (isinstance(hint, type) and issubclass(hint, AbstractArray)):
        raise AnnotationError(
            f"{role} `{name}` is not annotated with a jaxtyping array type",
            **err,
            operand=name,
            expected="a jaxtyping array type with named dims",
            actual=type_name(hint),
            fix=f"annotate it like {example}",
        )
    # A result's columns may be a sum of operand dims ("M N1+N2": operands' columns joined).
    names = plain_dim_names(hint, sums=role == "result")
    if names is None and role == "operand":
        # Parameters of a fixed count (a vector "3", or a vector a row "4 C"): a dim named
        # by its size, which `param_dims` then finds.
        names = plain_dim_names(hint, fixed_sizes=True)
    if names is None:
        raise AnnotationError(
            f"{role} `{name}` has a dim that is not a plain name",
            **err,
            operand=name,
            expected="named dims such as 'M N'",
            actual=repr(hint.dim_str),
            fix="name every dim; fixed sizes, '*', '...', '#' and expressions are not "
            "supported in kernel signatures, but for a result's columns joined from operands' "
            "(a sum of their names, 'M N1+N2')"
            + (
                f"; a vector of a few parameters is passed as 0-d operands, `{name}0: "
                f'Float32[Array, ""]` and so on, each read with sk.load({name}0)'
                if hint.dim_str.strip().isdigit()
                else ""
            ),
        )
    dims = list(names)
    check_batch_leads(name, dims, batch, err, role=role)
    # Its batch dims lead it, in the order of batch= (`check_batch_leads`): all of them, or
    # some (GroupNorm's weight `"G C"` under batch=("B", "G"), shared by every B).
    leading = 0
    while leading < len(dims) and dims[leading] in batch:
        leading += 1
    batched = leading
    # Group dims after them are unseen by the body too (a page of a paged cache, "Hkv P S D"
    # under groups={"P": ...}, is a block "S D"); where they may stand is `apply_groups`'s.
    while leading < len(dims) and dims[leading] in groups:
        leading += 1
    # A 0-d operand is a scalar the kernel reads from global memory (a seed, a step count):
    # a runtime value, unlike a constant, so a new value reuses the compiled kernel. A 0-d
    # result is a reduction across every block (`trace.crossblock`).
    # A 0-d operand per batch entry ("B H" under batch=("B", "H"), an ALiBi slope per head)
    # is a scalar of each grid step.
    ranks = (0, 1, 2) if role == "result" or leading == len(dims) else (1, 2)
    if len(dims) - leading not in ranks:
        batch_text = f" after its batch dims ({' '.join(batch)})" if batched else ""
        raise AnnotationError(
            f"{role} `{name}` has rank {len(dims) - leading}{batch_text}; kernels take rank 1 "
            "and 2 arrays" + (" (and scalar results)" if role == "result" else ""),
            **err,
            operand=name,
            expected="rank 1 or 2"
            + (", after leading batch dims" if batch else "")
            + (
                ", or 0 for a scalar operand" if role == "operand" else ", or 0 for a scalar result"
            ),
            actual=f"rank {len(dims)} ({hint.dim_str!r})",
            fix=rank_fix(name, dims[leading:], arrays_of_hints(signature or {}, batch))
            or _rank_fix(batched=bool(batch)),
        )
    if len(set(dims)) != len(dims):
        raise AnnotationError(
            f"{role} `{name}` repeats a dim name",
            **err,
            operand=name,
            actual=repr(hint.dim_str),
            fix="give each axis its own dim name",
        )
    allowed = allowed_dtypes(name, hint, err, role)
    return OperandSpec(
        name, tuple(dims), allowed, repr(public_type_name(hint)), tuple(dims[:batched])
    )
