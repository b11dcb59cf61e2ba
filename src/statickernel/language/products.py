"""`sk.dot`: the product of two blocks on the tensor cores (WGMMA), in a loop's step.

`a` is an operand's block or a 16-bit value the step computed (WGMMA reads it from
registers); `b` is an operand's block, read straight from shared memory, or a 16-bit value the
step computed from a block of the loop dim and the kernel's columns (a weight dequantized in
registers), which the generated code stages through swizzled shared memory for WGMMA.
"""

from typing import Any

import jax
import jax.numpy as jnp
from jax import core as jax_core
from jax.extend import core as jex_core

from .._errors import BodyError
from . import context as _trace_context
from .tile import Tile

__all__ = ["dot", "dot_p"]


def _abstract_dot(lhs: Any, rhs: Any, *, contract: tuple[int, int], **_: Any) -> Any:
    rows = lhs.shape[1 - contract[0]]
    cols = rhs.shape[1 - contract[1]]
    # WGMMA accumulates integers (int8) in int32, floats in float32.
    integer = jnp.issubdtype(lhs.dtype, jnp.integer)
    return jax_core.ShapedArray((rows, cols), jnp.int32 if integer else jnp.float32)


dot_p = jex_core.Primitive("sk_dot")
dot_p.def_abstract_eval(_abstract_dot)


def dot(a: Any, b: Any) -> jax.Array:
    """The float32 product `a @ b` of two blocks on the tensor cores (WGMMA), in a loop step.

    `b` is an operand: the step's block of it, read straight from shared memory. `a` is an
    operand too, or a 16-bit value the step computed (it stays in registers). The contracted dim
    is `a`'s last one, which `b` holds as well, either first or last:

    - the loop dim: `a` is `"M K"` (or a value `(BM, BK)`), `b` is `"K N"` or `"N K"`, and the
      loop adds one block's product a step: `acc + sk.dot(a, b)`. Blocks past the edge of K
      read zeros, and a value's columns past it count as zeros, so a ragged K is exact;
    - a whole dim that both blocks hold: `q` `"M D"` by `k` `"N D"` gives the `"M N"` scores of
      a loop over N (attention's `s = sk.dot(q, k)`).

    The product is `(rows of a, the other dim of b)`: a block along the loop dim, or, when `b`'s
    other dim is the kernel's column dim, a block of the body around the loop (an attention
    accumulator: `acc * rescale[:, None] + sk.dot(p.astype(jnp.bfloat16), v)`).

    `b` may also be a 16-bit value the step computed, `(block of the loop dim, block of the
    kernel's columns)`: a `"K N"` weight loaded in the step of the loop over K and dequantized
    in registers (`(sk.load(w).astype(jnp.float32) * scale).astype(jnp.bfloat16)`). It is
    staged through swizzled shared memory, where WGMMA reads it; its rows past a ragged K count
    as zeros.
    """
    context = _trace_context.current()
    loops = context.loops if context else ()
    if not isinstance(b, Tile):
        return _dot_of_value_b(a, b, context)
    a_name = a.name if isinstance(a, Tile) else "a"
    if not loops:
        raise BodyError(
            f"sk.dot({a_name}, {b.name}) was called outside a loop step",
            operand=b.name,
            fix='call it inside the step of sk.loop, e.g. sk.loop("K", lambda acc: acc + '
            "sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))",
        )
    assert context is not None
    axis = loops[-1]
    if len(b.dims) != 2:
        # The dim b should share with a, and a name for its other dim unlike every other.
        over = a.dims[-1] if isinstance(a, Tile) and a.dims else axis
        taken = {*b.dims, over, *(a.dims if isinstance(a, Tile) else ())}
        other = next(d for d in ("N", "P", "Q", "R", "S", "T") if d not in taken)
        raise BodyError(
            f"sk.dot's `{b.name}` is not a 2-D operand",
            operand=b.name,
            dim=over,
            expected=f"'{over} {other}' or '{other} {over}' for {b.name}",
            actual=f"'{' '.join(b.dims)}'",
            fix=f"annotate {b.name} with the contracted dim {over} and one other",
        )
    if isinstance(a, Tile):
        over = _tile_contraction(a, b, axis)
        a_value = a.block_for_dot(fill=0)
    else:
        over = _value_contraction(a, b, axis, context)
        a_value = a
    if over != axis and (over in context.tiled or over in context.loop_dims):
        split = "split across the grid" if over in context.tiled else "a loop dim of another loop"
        raise BodyError(
            f"sk.dot({a_name}, {b.name}) contracts {over}, which is {split}: each block would "
            f"hold only part of the sum",
            operand=b.name,
            dim=over,
            expected=f"the loop dim {axis}, or a whole dim",
            actual=f"{over}, {split}",
            fix=f"leave {over} out of tile= and loop= so that each block holds all of it, or "
            f"contract it in its own loop",
        )
    return dot_p.bind(
        a_value,
        b.block_for_dot(fill=0),
        contract=(1, b.dims.index(over)),
        a=a.name if isinstance(a, Tile) else "",
        b=b.name,
        over=over,
        b_dims=tuple(b.dims),
    )


def _tile_contraction(a: Tile, b: Tile, axis: str) -> str:
    """The dim `sk.dot(a, b)` contracts for an operand `a`: its last, which `b` must hold."""
    if len(a.dims) != 2:
        raise BodyError(
            f"sk.dot's operand `{a.name}` is not a 2-D operand",
            operand=a.name,
            expected="two dims besides its batch dims: its rows, then the contracted dim",
            actual=f"'{' '.join(a.dims)}'",
            fix=f"annotate {a.name} with its rows and the dim it shares with {b.name}",
        )
    rows, over = a.dims
    if over in b.dims and over != rows:
        return over
    other = next((d for d in b.dims if d not in a.dims), "N")
    if rows in b.dims:
        raise BodyError(
            f"sk.dot's `{a.name}` has the contracted dim {rows} first",
            operand=a.name,
            dim=rows,
            expected=f"'{over} {rows}': a's rows, then the dim it shares with {b.name}",
            actual=f"'{' '.join(a.dims)}'",
            fix=f"pass {a.name}.T from outside the kernel and annotate it '{over} {rows}'",
        )
    raise BodyError(
        f"sk.dot({a.name}, {b.name}): {a.name}'s last dim {over} is not a dim of {b.name}",
        operand=b.name,
        dim=over,
        expected=f"'{over} {other}' or '{other} {over}' for {b.name}",
        actual=f"'{' '.join(b.dims)}'",
        fix=f"annotate both operands with the dim they contract; sk.dot contracts {a.name}'s "
        "last dim",
    )


def _value_contraction(a: Any, b: Tile, axis: str, context: _trace_context.TraceContext) -> str:
    """The dim `sk.dot(a, b)` contracts for a value `a`: the dim of `b` whose block has the
    size of `a`'s columns, the loop dim first."""
    shape = tuple(jnp.shape(a))
    dtype = jnp.result_type(a)
    if len(shape) != 2:
        raise BodyError(
            f"sk.dot's `a` is a {len(shape)}-D value",
            operand=b.name,
            expected="a 2-D block computed in the step, (rows, the contracted dim)",
            actual=f"{dtype}{list(shape)}",
            fix="multiply a block of the step, e.g. sk.dot(p.astype(jnp.bfloat16), v)",
        )
    if dtype not in (jnp.bfloat16, jnp.float16):
        # b's own 16-bit dtype; at the declaration a `Float` operand traces as float32.
        cast = jnp.dtype(b.dtype).name if b.dtype in (jnp.bfloat16, jnp.float16) else "bfloat16"
        raise BodyError(
            f"sk.dot's `a` is a {dtype} value; WGMMA reads a from registers only as a 16-bit float",
            operand=b.name,
            expected="a bfloat16 or float16 block",
            actual=f"{dtype}{list(shape)}",
            fix=f"cast it first, e.g. sk.dot(p.astype(jnp.{cast}), {b.name}), and annotate "
            f"{b.name} with its 16-bit dtype (a `Float` operand is traced as float32 at the "
            "declaration)",
        )
    fits = [d for d in b.dims if context.blocks.get(d) == shape[1]]
    if axis in fits:
        return axis
    if fits:
        return fits[0]
    sizes = ", ".join(f"{d}: {context.blocks.get(d)}" for d in b.dims)
    raise BodyError(
        f"sk.dot(a, {b.name}): a's {shape[1]} columns match no dim of {b.name}'s block",
        operand=b.name,
        expected=f"a's last axis as long as {b.name}'s block along the contracted dim ({sizes})",
        actual=f"a: {dtype}{list(shape)}",
        fix=f"contract the loop dim {axis}: a block of the step has one column per element "
        f"of {axis}'s block",
    )


def _dot_of_value_b(a: Any, b: Any, context: _trace_context.TraceContext | None) -> jax.Array:
    """`sk.dot(a, b)` of a `b` computed in the step: a block of the loop dim by the kernel's
    columns, in 16 bits, staged through shared memory for WGMMA by the generated code."""
    a_name = a.name if isinstance(a, Tile) else "a"
    if not (hasattr(b, "shape") and hasattr(b, "dtype")):
        raise BodyError(
            "sk.dot's `b` is not an operand of the kernel nor a block computed in the step",
            expected="an operand of the kernel (sk.dot(p, v)), or a 16-bit block of the step",
            actual=type(b).__name__,
            fix="pass the operand itself as b, or a block computed from the step's loads",
        )
    shape, dtype = tuple(jnp.shape(b)), jnp.dtype(b.dtype)
    actual = f"a {dtype.name}{list(shape)} value"
    axis = context.loops[-1] if context and context.loops else None
    rows, cols = context.frame if context else ("", None)
    if context is None or axis is None or axis in (rows, cols) or cols is None:
        where = f"a loop over {axis}, a dim of the blocks" if axis else "no loop step"
        raise BodyError(
            f"sk.dot's `b` is a value computed in the body, in {where}: a computed b is a block "
            "of the step of a loop over a dim outside the blocks (a matmul's K) by the kernel's "
            "columns",
            expected="an operand of the kernel passed as it is (sk.dot(p, v)), or a value "
            "(block of the loop dim, block of the columns) in the step of a loop over K",
            actual=actual,
            fix="pass the operand itself as b and scale or cast the product instead: "
            "sk.dot(p, v) * s rather than sk.dot(p, sk.load(v) * s)",
        )
    want = (context.blocks.get(axis), context.blocks.get(cols))
    if shape != want:
        raise BodyError(
            f"sk.dot({a_name}, b): the value b is not a block of the step's {axis} by the "
            f"kernel's columns {cols}",
            dim=axis,
            expected=f"a ({axis} block, {cols} block) value: {list(want)}, computed from an "
            f"operand laid out '{axis} {cols}' loaded in the step",
            actual=actual,
            fix=f"annotate the operand b is computed from '{axis} {cols}' (a weight as "
            f"GPTQ stores it), or pass it as it is to sk.dot",
        )
    if dtype not in (jnp.bfloat16, jnp.float16):
        raise BodyError(
            f"sk.dot's `b` is a {dtype.name} value; WGMMA multiplies a computed b only as a "
            "16-bit float",
            dim=axis,
            expected="a bfloat16 or float16 block",
            actual=actual,
            fix="cast it last, e.g. sk.dot(x, (w * scale).astype(jnp.bfloat16))",
        )
    if isinstance(a, Tile):
        if len(a.dims) != 2 or a.dims[-1] != axis:
            raise BodyError(
                f"sk.dot({a.name}, b) of a computed b contracts the loop dim {axis}, which is "
                f"not {a.name}'s last dim",
                operand=a.name,
                dim=axis,
                expected=f"'{rows} {axis}' for {a.name}",
                actual=f"'{' '.join(a.dims)}'",
                fix=f"annotate {a.name} with its rows, then {axis}",
            )
        a_value = a.block_for_dot(fill=0)
    else:
        a_shape = tuple(jnp.shape(a))
        if len(a_shape) != 2 or a_shape[1] != want[0]:
            raise BodyError(
                f"sk.dot(a, b) of a computed b: a's columns are not the step's block of {axis}",
                dim=axis,
                expected=f"a (rows, {want[0]}) value",
                actual=f"a {jnp.result_type(a).name}{list(a_shape)} value",
                fix=f"multiply a block of the step whose columns run along {axis}",
            )
        a_value = a
    return dot_p.bind(
        a_value,
        b,
        contract=(1, 0),
        a=a.name if isinstance(a, Tile) else "",
        b="",
        over=axis,
        b_dims=(axis, cols),
    )
