"""A kernel under `jax.vmap` is batched by its launch's own rule, which adds the mapped axis
to the grid; a Mosaic GPU grid is static, so that axis must have an int size.

Binding checks the dims a kernel's operands declare, but `jax.vmap` hides the mapped axis
from the kernel: the call sees one element's shapes, all static, and the size of the axis
meets the launch only in its batching rule. Under `jax.export` with a symbolic batch
(`jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 64, 32"), ...)`) that size is a
symbolic dim, and Pallas stops at a bare `AssertionError` on the grid. An identity on the
launch's operands, batched before the launch is, refuses that size first, naming the operand.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
from jax.extend.core import Primitive

from .._compat import register_batching_rule, register_jvp_rule, register_lowering
from .._errors import SymbolicDimError
from .._where import call_site

__all__ = ["static_batch"]

_static_batch_p = Primitive("statickernel_static_batch")
_static_batch_p.multiple_results = True
_static_batch_p.def_impl(lambda *args, **_: args)
_static_batch_p.def_abstract_eval(lambda *avals, **_: avals)
register_lowering(_static_batch_p, lambda ctx, *operands, **_: operands)


def _batch(args: Any, dims: Any, *, kernel: str, operands: tuple[str, ...]) -> Any:
    for name, arg, axis in zip(operands, args, dims, strict=True):
        if axis is None:  # batching.not_mapped: this operand is shared by every element
            continue
        size = arg.shape[axis]
        if not isinstance(size, int | np.integer):
            mapped = tuple(n for n, a in zip(operands, dims, strict=True) if a is not None)
            raise _symbolic_batch(kernel, operands, mapped, name, axis, tuple(arg.shape))
    return _static_batch_p.bind(*args, kernel=kernel, operands=operands), dims


def _symbolic_batch(
    kernel: str,
    operands: tuple[str, ...],
    mapped: tuple[str, ...],
    operand: str,
    axis: int,
    shape: tuple[Any, ...],
) -> SymbolicDimError:
    size = shape[axis]
    element = tuple(s for i, s in enumerate(shape) if i != axis)
    moved = "" if axis == 0 else f" (lax.map maps axis 0: move axis {axis} there first)"
    return SymbolicDimError(
        f"operand `{operand}` is mapped by jax.vmap over a symbolic axis ({size}); the "
        "launch adds the mapped axis to its grid, and a Mosaic GPU grid must be static",
        kernel=kernel,
        where=call_site(),
        operand=operand,
        dim=str(size),
        expected="a mapped axis whose size is a Python int",
        actual=f"axis {axis} of the mapped `{operand}`, shape {shape}, is {size} "
        f"({type(size).__name__})",
        fix=f"export once per concrete size of {size}, or in place of jax.vmap map with "
        f"{_lax_map(kernel, operands, mapped)}: it launches the kernel once per element "
        f"(`{operand}` of shape {element}), whose dims are static, and exports with {size} "
        f"symbolic{moved}",
    ).with_traceback(None)


def _lax_map(kernel: str, operands: tuple[str, ...], mapped: tuple[str, ...]) -> str:
    """The `jax.lax.map` call that maps `kernel` over its `mapped` operands' leading axis."""
    if mapped == operands and len(mapped) == 1:
        return f"jax.lax.map({kernel}, {mapped[0]})"
    if len(mapped) == 1:
        return f"jax.lax.map(lambda {mapped[0]}: {kernel}({', '.join(operands)}), {mapped[0]})"
    if mapped == operands:
        return f"jax.lax.map(lambda xs: {kernel}(*xs), ({', '.join(mapped)}))"
    args = ", ".join(f"xs[{mapped.index(n)}]" if n in mapped else n for n in operands)
    return f"jax.lax.map(lambda xs: {kernel}({args}), ({', '.join(mapped)}))"


def _jvp(primals: Any, tangents: Any, **params: Any) -> Any:
    return _static_batch_p.bind(*primals, **params), list(tangents)


register_batching_rule(_static_batch_p, _batch)
register_jvp_rule(_static_batch_p, _jvp)


def static_batch(
    launch: Callable[..., Any], kernel: str, operands: tuple[str, ...]
) -> Callable[..., Any]:
    """`launch`, whose operands (named `operands`, in order) are refused under a `jax.vmap`
    over a symbolic axis, before the launch's own batching rule meets it."""

    def checked(*args: Any) -> Any:
        return launch(*_static_batch_p.bind(*args, kernel=kernel, operands=operands))

    return checked
