"""Sequential loop axes inside a kernel body: `sk.loop`, `sk.map_blocks` and `sk.dot`.

A dim declared in `loop=` is not split across the grid: each block walks it in blocks of its
constant, one step after another, through a software pipeline. The body says what a step does:

- `sk.loop(axis, step, init, stop=None)` folds the steps into a carry and returns the final
  carry, walking only the blocks before `stop` when it is given;
- `sk.map_blocks(axis, fn)` computes one output block per step and writes it as it goes;
- `sk.dot(a, b)` (`language.products`) inside a step multiplies two blocks on the tensor
  cores, over the loop dim or a whole dim both hold.

Each is recorded in the traced body as one primitive whose parameters hold the step's own traced
equations, so the import-time checks and the code generator see the loop as the user wrote it.
"""

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax import core as jax_core
from jax.extend import core as jex_core

from .._compat import convert_constvars_jaxpr
from .._errors import BodyError
from .._where import call_site
from . import context as _trace_context
from .context import LoopDim

__all__ = ["loop", "loop_p", "map_blocks", "map_p"]

_INT32 = jnp.iinfo(jnp.int32)


def _active_loops() -> tuple[str, ...]:
    context = _trace_context.current()
    return context.loops if context else ()


def _abstract_loop(*args: Any, jaxpr: Any, num_consts: int, **_: Any) -> list[Any]:
    return [v.aval for v in jaxpr.jaxpr.outvars]


loop_p = jex_core.Primitive("sk_loop")
loop_p.multiple_results = True
loop_p.def_abstract_eval(_abstract_loop)


def _abstract_map(*args: Any, jaxpr: Any, num_consts: int, axis_sizes: Any, **_: Any) -> list[Any]:
    """The whole results along the loop dim, then the carries' final values (a scan's)."""
    outvars = jaxpr.jaxpr.outvars
    outs = []
    for var, full in zip(outvars[: len(axis_sizes)], axis_sizes, strict=True):
        shape = list(var.aval.shape)
        shape[full[0]] = full[1]
        outs.append(jax_core.ShapedArray(tuple(shape), var.aval.dtype))
    return outs + [v.aval for v in outvars[len(axis_sizes) :]]


map_p = jex_core.Primitive("sk_map_blocks")
map_p.multiple_results = True
map_p.def_abstract_eval(_abstract_map)


def _loop_dims(what: str) -> Mapping[str, LoopDim]:
    context = _trace_context.current()
    if context is None:
        raise BodyError(
            f"{what} was called outside a kernel body",
            where=call_site(),
            fix=f"call {what} inside the body of an @sk.kernel function that declares loop=",
        )
    return context.loop_dims


def _check_axis(what: str, axis: Any) -> LoopDim:
    dims = _loop_dims(what)
    active = _active_loops()
    if axis not in dims:
        raise BodyError(
            f"{what} walks {axis!r}, which is not a loop dim of the kernel",
            dim=str(axis),
            expected=f"one of {', '.join(dims) or '(no loop dims declared)'}",
            actual=repr(axis),
            fix=f'declare it in the decorator, e.g. loop={{"{axis}": "B{axis}"}}, with a '
            f"constant `B{axis}: sk.Const[int]`",
        )
    if axis in active:
        raise BodyError(
            f"{what} walks {axis!r} inside a step that already walks it",
            dim=str(axis),
            fix="walk each loop dim in its own loop, one after another",
        )
    if active:
        raise BodyError(
            f"{what}({axis!r}) is nested in a loop over {active[-1]!r}",
            dim=str(axis),
            fix="write the loops one after another; nested loops are not supported",
        )
    return dims[axis]


def _trace_step(
    what: str, axis: str, fn: Callable[..., Any], leaves: list[Any], tree: Any
) -> tuple[Any, int]:
    with _trace_context.in_loop(axis) as step:

        def flat(*carry: Any) -> list[Any]:
            out = fn(jax.tree.unflatten(tree, carry)) if tree is not None else fn()
            return jax.tree.leaves(out)

        avals = [jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)) for x in leaves]
        closed = jax.make_jaxpr(flat)(*avals)
    assert step.loop_id is not None
    return closed, step.loop_id


def loop(
    axis: str,
    step: Callable[[Any], Any],
    init: Any,
    *,
    start: Any = None,
    stop: Any = None,
    reverse: bool = False,
) -> Any:
    """Walks the loop dim `axis` block by block, folding each step into a carry.

    `step(carry)` runs once per block and returns the next carry; inside it, `sk.load(x)` on an
    operand with dim `axis` gives that operand's current block, and `sk.dot(a, b)` multiplies
    the current blocks of two operands. `init` is the first carry: any pytree of arrays, e.g.
    `jnp.zeros((BM, BN), jnp.float32)` for a matmul accumulator or a tuple of per-row vectors.
    Returns the carry after the last block. Blocks past the dim's edge read each load's fill.

    `stop`, an int or an integer scalar of the block (`sk.position("M").max() + 1`), ends the
    loop early: the blocks of `axis` that lie wholly at or past it are skipped, loads and all;
    a stop at or before 0 walks none, and a stop past the dim walks it all, however wide its
    dtype. The step still sees the positions at or past `stop` in the last block it walks:
    mask them as the computation needs (a causal mask does).

    `start`, likewise an int or an integer scalar of the block (`sk.position("M").min()` for a
    causal backward's keys, `sk.position("M").min() - window` for a sliding window), begins the
    loop late: the blocks that lie wholly before it are skipped, and the first block walked
    is the one holding it (a start before the dim walks from its first block; one at or past
    the dim's size, or at or past `stop`, walks none). The step still sees the positions
    before `start` in the first block it walks: mask them in the step.

    A loop that walks no block returns `init`: a causal loop over the key blocks wholly
    before a block of queries (`stop=sk.position("M").min()`, unmasked) walks none for the
    first, and a second loop over the diagonal's blocks (`start=` that stop) masks alone.

    `reverse=True` walks the blocks from the last to the first, as `jax.lax.scan(...,
    reverse=True)` does; it cannot be combined with `start` or `stop`.
    """
    _check_axis("sk.loop", axis)
    _check_reverse("sk.loop", axis, reverse, stop, "stop")
    _check_reverse("sk.loop", axis, reverse, start, "start")
    starts = _position_operand(axis, start, "start")
    stops = _position_operand(axis, stop, "stop")
    leaves, tree = jax.tree.flatten(init)
    if not leaves:
        raise BodyError(
            "sk.loop was given an empty carry",
            dim=axis,
            fix="pass init=, e.g. init=jnp.zeros((BM, BN), jnp.float32); use sk.map_blocks for a "
            "loop that only writes output blocks",
        )
    leaves = [jnp.asarray(x) for x in leaves]
    closed, loop_id = _trace_step("sk.loop", axis, step, leaves, tree)
    out_tree = jax.tree.structure(
        jax.tree.unflatten(tree, [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves])
    )
    outs = closed.jaxpr.outvars
    if len(outs) != len(leaves) or any(
        (tuple(o.aval.shape), o.aval.dtype) != (tuple(x.shape), x.dtype)
        for o, x in zip(outs, leaves, strict=False)
    ):
        got = ", ".join(f"{o.aval.dtype}{list(o.aval.shape)}" for o in outs)
        want = ", ".join(f"{x.dtype}{list(x.shape)}" for x in leaves)
        raise BodyError(
            f"the step of sk.loop({axis!r}) returns a carry unlike its init",
            dim=axis,
            expected=f"({want})",
            actual=f"({got})",
            fix="return the carry with the structure, shapes and dtypes of init=; cast with "
            ".astype(...) where a dtype changed",
        )
    jaxpr = convert_constvars_jaxpr(closed.jaxpr)
    flat_out = loop_p.bind(
        *closed.consts,
        *leaves,
        *starts,
        *stops,
        jaxpr=jex_core.ClosedJaxpr(jaxpr, ()),
        num_consts=len(closed.consts),
        axis=axis,
        loop_id=loop_id,
        started=bool(starts),
        stopped=bool(stops),
        reverse=reverse,
    )
    return jax.tree.unflatten(out_tree, flat_out)


def _check_reverse(what: str, axis: str, reverse: Any, bound: Any, kind: str = "stop") -> None:
    """`reverse` is a Python bool, and a loop walked backwards has no `stop` (`kind`) or
    `start`."""
    if not isinstance(reverse, bool):
        raise BodyError(
            f"the reverse= of {what}({axis!r}) is not a Python bool",
            dim=axis,
            expected="True or False, known when the body is traced",
            actual=f"{type(reverse).__name__}",
            fix="pass reverse=True to walk the blocks from the last to the first, or leave it out",
        )
    if reverse and bound is not None:
        skipped = "at the end" if kind == "stop" else "at the start"
        raise BodyError(
            f"{what}({axis!r}) is given both reverse=True and {kind}=: a {kind} skips the "
            f"blocks {skipped}, which a reversed loop walks in the other order",
            dim=axis,
            expected=f"reverse=True without {kind}=, or {kind}= walking forward",
            actual=f"reverse=True, {kind}=...",
            fix=f"walk forward with {kind}=, or walk every block backwards and mask the "
            f"positions outside the {kind} in the step",
        )


def _position_operand(axis: str, position: Any, kind: str) -> list[Any]:
    """A loop's `start` or `stop` (`kind`) as an input of the loop primitive, or nothing."""
    if position is None:
        return []
    if isinstance(position, bool) or not (
        isinstance(position, int)
        or (jnp.shape(position) == () and jnp.issubdtype(jnp.result_type(position), jnp.integer))
    ):
        shape = jnp.shape(position) if hasattr(position, "shape") else ()
        example = 'sk.position("M").max() + 1' if kind == "stop" else 'sk.position("M").min()'
        meaning = "ends at, one past its last element" if kind == "stop" else "begins at"
        raise BodyError(
            f"the {kind} of sk.loop({axis!r}) is not an integer scalar",
            dim=axis,
            expected=f"an int, or an int32 scalar of the block such as {example}",
            actual=f"{type(position).__name__} {list(shape)}",
            fix=f"pass the position the loop {meaning}",
        )
    # The trip count is int32 math: a wider position is clamped into int32 first, not wrapped
    # (a uint32 2**32 - 1 would become -1). Any stop past the dim walks it all, and any start
    # before it walks from its first block, so the clamp changes no result.
    if isinstance(position, int):
        return [jnp.asarray(min(max(position, _INT32.min), _INT32.max), jnp.int32)]
    position = jnp.asarray(position)
    bits = jnp.iinfo(position.dtype)
    if bits.min < _INT32.min:
        position = jnp.maximum(position, _INT32.min)
    if bits.max > _INT32.max:
        position = jnp.minimum(position, _INT32.max)
    return [position.astype(jnp.int32)]


def map_blocks(
    axis: str, fn: Callable[..., Any], init: Any = None, *, reverse: bool = False
) -> Any:
    """Computes one output block per block of the loop dim `axis` and writes it at once.

    `fn()` runs once per block; inside it, `sk.load(x)` on an operand with dim `axis` gives that
    operand's current block. It returns the result block (or a tuple of them) for that step.
    The value `map_blocks` returns stands for the whole result along `axis`: return it from the
    body as the kernel's result.

    With `init=`, a scan: `fn(carry)` returns `(blocks, carry)`, the step's output blocks and
    the carry the next step receives (a running total per row, for a cumulative sum along a
    row wider than a block), and `map_blocks` returns `(results, final carry)`.

    `reverse=True` walks the blocks from the last to the first, as `jax.lax.scan(...,
    reverse=True)` does: a scan's carry then holds the blocks after the step's, so a suffix
    sum is `lax.cumsum(v, axis=1, reverse=True) + carry[:, None]`.
    """
    loop_dim = _check_axis("sk.map_blocks", axis)
    _check_reverse("sk.map_blocks", axis, reverse, None)
    size, block = loop_dim.size, loop_dim.block
    leaves, tree, counted = _scan_carry(axis, init)
    closed, loop_id = _trace_step("sk.map_blocks", axis, counted(fn), leaves, tree)
    n_blocks = len(closed.jaxpr.outvars) - len(leaves)
    _check_scan_carry(axis, closed.jaxpr.outvars[n_blocks:], leaves)
    axis_sizes = []
    for var in closed.jaxpr.outvars[:n_blocks]:
        shape = tuple(var.aval.shape)
        if block not in shape:
            raise BodyError(
                f"a block returned by the function of sk.map_blocks({axis!r}) has no axis of "
                f"the loop block size",
                dim=axis,
                expected=f"a block with an axis of {block} (one block of {axis})",
                actual=f"{var.aval.dtype}{list(shape)}",
                fix=f"return a block computed from the current blocks of the operands along {axis}",
            )
        axis_sizes.append((len(shape) - 1 - shape[::-1].index(block), size))
    jaxpr = convert_constvars_jaxpr(closed.jaxpr)
    outs = map_p.bind(
        *closed.consts,
        *leaves,
        jaxpr=jex_core.ClosedJaxpr(jaxpr, ()),
        num_consts=len(closed.consts),
        axis=axis,
        axis_sizes=tuple(axis_sizes),
        loop_id=loop_id,
        reverse=reverse,
    )
    results = outs[:n_blocks]
    mapped = results[0] if len(results) == 1 else tuple(results)
    if tree is None:
        return mapped
    return mapped, jax.tree.unflatten(tree, outs[n_blocks:])


def _scan_carry(axis: str, init: Any) -> tuple[list[Any], Any, Callable[..., Any]]:
    """A scan's carry leaves and structure, and `fn` wrapped so that its step returns the
    blocks' leaves, then the carry's; no carry without `init`."""
    if init is None:
        return [], None, lambda fn: fn
    leaves, tree = jax.tree.flatten(init)
    if not leaves:
        raise BodyError(
            f"sk.map_blocks({axis!r}, ..., init=) was given an empty carry",
            dim=axis,
            fix="pass init=, e.g. init=jnp.zeros((BM,), jnp.float32), or leave init out",
        )

    def counted(fn: Callable[..., Any]) -> Callable[..., Any]:
        def step(carry: Any) -> Any:
            out = fn(carry)
            if not (isinstance(out, tuple) and len(out) == 2):
                raise BodyError(
                    f"the function of sk.map_blocks({axis!r}, ..., init=) returns "
                    f"{type(out).__name__}, not (blocks, carry)",
                    dim=axis,
                    expected="a pair: the step's output block(s), then the next carry",
                    actual=type(out).__name__,
                    fix="return block, carry (or (block1, block2), carry)",
                )
            return out

        return step

    return [jnp.asarray(x) for x in leaves], tree, counted


def _check_scan_carry(axis: str, outs: Any, leaves: list[Any]) -> None:
    if len(outs) == len(leaves) and all(
        (tuple(o.aval.shape), o.aval.dtype) == (tuple(x.shape), x.dtype)
        for o, x in zip(outs, leaves, strict=True)
    ):
        return
    got = ", ".join(f"{o.aval.dtype}{list(o.aval.shape)}" for o in outs)
    want = ", ".join(f"{x.dtype}{list(x.shape)}" for x in leaves)
    raise BodyError(
        f"the function of sk.map_blocks({axis!r}, ..., init=) returns a carry unlike its init",
        dim=axis,
        expected=f"({want})",
        actual=f"({got})",
        fix="return the carry with the structure, shapes and dtypes of init=; cast with "
        ".astype(...) where a dtype changed",
    )
