"""`sk.position(dim)`: the global indices of the body's current block along a dim.

The body traces one `sk_position` equation. Translation turns it into the vector of positions
that the edge masks compare with the dim's size (`emit.masks`): an iota in the per-row or
per-column layout plus where the block starts, or, in a loop's step, where the step's block
starts. A position therefore costs what a mask costs, and shares its registers with one.
"""

from collections.abc import Mapping

import jax
import jax.numpy as jnp
from jax import core as jax_core
from jax.extend import core as jex_core

from .._errors import BodyError
from .._where import call_site
from . import context as _trace_context

__all__ = ["position", "position_p"]

position_p = jex_core.Primitive("sk_position")
position_p.def_abstract_eval(
    lambda *, dim, axis, length: jax_core.ShapedArray((length,), jnp.int32)
)


def position(dim: str) -> jax.Array:
    """The global int32 indices of the current block along `dim`; call it inside a kernel body.

    Along the row dim it is a per-row vector (`(BM,)` for a tiled dim), along the column dim a
    per-column one; inside the step of `sk.loop` or `sk.map_blocks` over `dim`, the indices of
    that step's block. Broadcast it as jnp does, `sk.position("M")[:, None]` against
    `sk.position("N")[None, :]`, for a causal mask. Positions past the dim's size, in the last
    block of a ragged dim, are just larger indices: their elements are never stored, and a
    reduction over them is masked.
    """
    context = _trace_context.current()
    if context is None:
        raise BodyError(
            f"sk.position({dim!r}) was called outside a kernel body: it is only valid inside "
            "one, where it gives the indices of the block being computed",
            where=call_site(),
            dim=str(dim),
            expected="a call inside the body of an @sk.kernel function",
            actual="a call outside any kernel body",
            fix="call sk.position inside the body of an @sk.kernel function; on whole arrays, "
            "use jnp.arange(n) for the indices of a dim of size n",
        )
    rows, cols = context.frame
    frame = [d for d in (rows, cols) if d]
    if dim not in context.dims:
        raise BodyError(
            f"sk.position({dim!r}) names a dim the kernel does not declare",
            dim=str(dim),
            expected=f"one of {', '.join(frame)}",
            actual=repr(dim),
            fix="use a dim name from the operand annotations",
        )
    if dim in context.batch:
        raise BodyError(
            f"sk.position({dim!r}) asks for a batch dim, which the body never sees: each grid "
            "step computes one entry of it",
            dim=dim,
            expected=f"a dim of the blocks: {', '.join(frame)}",
            actual=repr(dim),
            fix="compute what depends on the batch index outside the kernel and pass it as an "
            "operand",
        )
    in_step = dim in context.loops and dim in context.loop_dims
    if dim not in frame and not in_step:
        raise BodyError(
            f"sk.position({dim!r}) asks for a dim that is neither the rows nor the columns of "
            "the kernel's blocks",
            dim=dim,
            expected=f"one of {', '.join(frame)}",
            actual=repr(dim),
            fix="positions run along the blocks' rows or columns, and inside the step of a "
            "loop, along its loop dim",
        )
    loops: Mapping[str, _trace_context.LoopDim] = context.loop_dims
    if dim in loops and dim not in context.loops:
        raise BodyError(
            f"sk.position({dim!r}) asks for the loop dim {dim} outside its loop",
            dim=dim,
            expected=f"a call inside the step of sk.loop({dim!r}, ...) or "
            f"sk.map_blocks({dim!r}, ...)",
            actual="a call in the body outside that loop",
            fix=f"call sk.position({dim!r}) inside the step, which sees one block of {dim} at a "
            "time",
        )
    length = loops[dim].block if dim in loops else context.blocks[dim]
    axis = 0 if dim == rows else (1 if dim == cols else 2)  # 2: a loop dim outside the frame
    return position_p.bind(dim=dim, axis=axis, length=length)
