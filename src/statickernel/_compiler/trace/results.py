"""The body's results against the declared ones: the structure it returns (one tile, or a
tuple of them), then each result's block shape and dtype."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import jax

from ..._errors import ResultMismatchError
from ..declare.spec import KernelSpec

__all__ = ["TracedResults", "check_outputs", "check_result_structure"]


class TracedResults(Protocol):
    """What the checks read of a body's trace (`trace.body.BodyTrace`): its results, each an
    atom with a variable (or a constant's dtype), and each variable's shape and dtype."""

    @property
    def outputs(self) -> Sequence[Any]: ...

    def aval(self, var: str) -> tuple[tuple[int, ...], str]: ...


def _is_tile(value: Any) -> bool:
    return jax.tree_util.treedef_is_leaf(jax.tree.structure(value)) and value is not None


def check_result_structure(spec: KernelSpec, out: Any) -> None:
    """The body's return against the declared results: one tile, or a tuple of tiles.

    The results are matched by position once the return is flattened, so another structure
    would be matched silently in its flattened order (a dict's is sorted by key). A count
    that differs is left to `check_outputs`, which says so."""
    if len(jax.tree.leaves(out)) != len(spec.results):
        return
    if spec.result_is_tuple:
        if isinstance(out, tuple | list) and all(_is_tile(v) for v in out):
            return
        n = len(spec.results)
        expected = f"a tuple of {n} tile{'s' if n != 1 else ''}, one per declared result in order"
        fix = f"return a tuple, ({', '.join(r.name for r in spec.results)})"
    else:
        if _is_tile(out):
            return
        expected = "one tile, as the result is not a tuple"
        fix = "return the result's tile itself, not a container holding it"
    raise ResultMismatchError(
        "the body returns a value whose structure differs from the declared results",
        kernel=spec.name,
        where=spec.location,
        expected=expected,
        actual=_structure_text(out),
        fix=fix + "; the declared results are matched by position",
    )


def _structure_text(value: Any) -> str:
    """A returned value's structure: containers spelled out, tiles as their dtype and shape."""
    if isinstance(value, dict):
        items = ", ".join(f"{k!r}: {_structure_text(v)}" for k, v in value.items())
        return f"dict {{{items}}}"
    if isinstance(value, tuple | list):
        items = ", ".join(_structure_text(v) for v in value)
        return f"{type(value).__name__} ({items})"
    if value is None:
        return "None"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{value.dtype}{list(value.shape)}"
    return type(value).__name__


def check_outputs(
    spec: KernelSpec,
    trace: TracedResults,
    expected_shapes: list[tuple[int, ...]],
    where: str,
    bindings: Mapping[str, int],
    error_location: Callable[[], str] | None = None,
) -> tuple[str, ...]:
    """Checks the body's results against the declared results; returns their dtypes."""
    n_expected = len(spec.results)
    if len(trace.outputs) != n_expected:
        raise ResultMismatchError(
            f"the body returns {len(trace.outputs)} value(s) but {n_expected} result(s) are declared",
            kernel=spec.name,
            where=where,
            expected=f"{n_expected} result(s)",
            actual=f"{len(trace.outputs)} value(s)",
            bindings=bindings,
            fix="return one tile per declared result, in order (a tuple for several)",
        )
    dtypes = []
    for result, atom, shape in zip(spec.results, trace.outputs, expected_shapes, strict=True):
        if atom.var is None:
            got_shape, got_dtype = (), atom.dtype
        else:
            got_shape, got_dtype = trace.aval(atom.var)
        dims = " ".join(result.dims)
        if len(got_shape) != len(shape) or tuple(got_shape) != tuple(shape):
            raise ResultMismatchError(
                f"{result.name} has the wrong block shape",
                kernel=spec.name,
                where=where,
                operand=result.name,
                expected=f"{list(shape)} (the block of '{dims}')",
                actual=f"{list(got_shape)}",
                bindings=bindings,
                fix="return a tile of the declared result's block shape; reduce with axis= to "
                "drop a dim, and broadcast to add one",
            )
        if got_dtype not in result.dtypes:
            raise ResultMismatchError(
                f"{result.name} has a dtype its annotation does not allow",
                kernel=spec.name,
                where=where,
                operand=result.name,
                expected=" or ".join(result.dtypes),
                actual=got_dtype,
                bindings=bindings,
                fix=f"cast the returned tile with .astype(...) or widen the annotation "
                f"({result.annotation})",
            )
        dtypes.append(got_dtype)
    return tuple(dtypes)
