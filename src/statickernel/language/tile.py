"""What a kernel body receives and calls: a `Tile` per operand, `sk.load` and `sk.dim`.

A `Tile` holds an operand's abstract block while the body is traced. Loading it records the
fill that elements past the array's edge read, per loop for an operand read block by block,
into the trace's fill table; the flattener turns that table into the load records the plan is
derived from.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax import core as jax_core
from jax.extend import core as jex_core

from .. import _dtypes
from .._errors import BodyError
from .._targets import DEFAULT_TARGET, TARGETS
from .._where import call_site, caller_user_line
from . import context as _trace_context
from .context import LoadRecord

__all__ = ["Tile", "dim", "load", "shift_p"]

# A block read at a row offset: the block's value, then `offset` rows of `dim` further. The
# translation reads it from the rows its operand's copy holds around the block (its halo).
shift_p = jex_core.Primitive("sk_shift")
shift_p.def_abstract_eval(
    lambda block, *, operand, dim, offset: jax_core.ShapedArray(block.shape, block.dtype)
)


def dim(name: str) -> int:
    """The size a dim is bound to, as a Python int; call it inside a kernel body.

    Whole dims are already the true size of the tile the body sees; use this for the size of a
    tiled dim, or for any dim in scalar arithmetic.
    """
    context = _trace_context.current()
    if context is None:
        raise BodyError(
            f"sk.dim({name!r}) was called outside a kernel body",
            where=call_site(),
            fix="call sk.dim inside the body of an @sk.kernel function",
        )
    dims = context.dims
    if name not in dims:
        raise BodyError(
            f"sk.dim({name!r}) names a dim the kernel does not declare",
            dim=name,
            expected=f"one of {', '.join(dims)}",
            actual=repr(name),
            fix="use a dim name from the operand annotations",
        )
    return dims[name]


def load(
    operand: Any, *, fill: float | int | bool = 0, offset: Mapping[str, int] | None = None
) -> jax.Array:
    """Loads an operand's block inside a kernel body; elements past the array's edge read `fill`.

    `offset={"L": -3}` reads the block 3 rows of `L` earlier: element `i` of the block is the
    array's element `i - 3` along `L`, and `fill` where that lies outside the array (a causal
    convolution's taps). The same as `operand.load(fill=..., offset=...)`, spelled so that type
    checkers accept it on operands annotated as jaxtyping arrays.
    """
    if not isinstance(operand, Tile):
        raise BodyError(
            "sk.load was given something that is not an operand of the kernel body",
            actual=f"{type(operand).__name__}",
            fix="call sk.load(x) on a parameter of the @sk.kernel function, inside its body",
        )
    return operand.load(fill=fill, offset=offset)


class Tile:
    """What a kernel body receives for each operand: the operand's block, ready to load.

    `shape` is the operand's true shape and `block_shape` the shape of the value `load` returns.
    """

    def __init__(
        self,
        name: str,
        value: Any,
        shape: tuple[int, ...],
        loads: list[LoadRecord],
        dims: tuple[str, ...] = (),
        frame: tuple[str, str | None] = ("", None),
        misplaced: list[tuple[str, str | None]] | None = None,
        grouped_by: str | None = None,
    ):
        self.name = name
        self.dims = dims
        self._grouped_by = grouped_by
        self._frame = frame
        self._misplaced = misplaced if misplaced is not None else []
        self._value = value
        self.shape = shape
        self.block_shape: tuple[int, ...] = tuple(value.shape)
        self.dtype = value.dtype
        self._loads = loads

    def load(
        self, *, fill: float | int | bool = 0, offset: Mapping[str, int] | None = None
    ) -> jax.Array:
        """This block of the operand; elements past the array's edge read as `fill`. With
        `offset={dim: k}`, the block `k` elements further along `dim` (see `sk.load`)."""
        shift = self._shift(offset)
        if self._check_frame() and (fill != 0 or str(fill) == "-0.0"):
            raise BodyError(
                f"`{self.name}` is a block of the loop dim and a dim of the blocks, loaded in "
                f"the loop's step with fill={fill!r}: such a block reads 0 past its edge",
                operand=self.name,
                expected="fill=0 (the default)",
                actual=f"fill={fill!r}",
                fix=f"load it with fill 0 and mask it with sk.position: jnp.where(inside, "
                f"sk.load({self.name}), {fill!r})",
            )
        dtype = np.dtype(self.dtype).name
        if dtype in _dtypes.DOT_ONLY_DTYPES:
            raise BodyError(
                f"`{self.name}` is {dtype}, which only sk.dot reads: a load has no path for it",
                operand=self.name,
                expected="sk.dot(a, b) of the operand, which WGMMA reads from shared memory",
                actual=f"sk.load({self.name}) of {dtype}",
                fix=f"multiply it with sk.dot, or cast {self.name} to bfloat16 outside the kernel",
            )
        if dtype in _dtypes.SUB_BYTE_DTYPES and (shift or fill != 0 or str(fill) == "-0.0"):
            # Its edge mask and its shifted windows would compute on 4-bit values, which
            # Mosaic GPU only converts.
            written = f"offset={dict(offset or {})!r}" if shift else f"fill={fill!r}"
            raise BodyError(
                f"`{self.name}` is {dtype}, loaded with {written}: a 4-bit load is its block "
                "as it is, past the edge 0",
                operand=self.name,
                expected=f"sk.load({self.name}) with fill 0 and no offset",
                actual=f"sk.load({self.name}, {written})",
                fix=f"load it plainly and convert it, then mask or shift the converted value: "
                f"jnp.where(inside, sk.load({self.name}).astype(jnp.float32), {fill!r})",
            )
        value = self.block_for_dot(fill=fill, shift=shift)
        if not shift:
            return value
        dim, rows = shift
        return shift_p.bind(value, operand=self.name, dim=dim, offset=rows)

    def _shift(self, offset: Mapping[str, int] | None) -> tuple[str, int] | None:
        """The one (dim, offset) of a shifted load; None for the block itself."""
        if offset is None:
            return None
        if not isinstance(offset, Mapping) or len(offset) != 1:
            raise BodyError(
                f"the offset of `{self.name}.load` must name one dim and its offset",
                operand=self.name,
                expected="a dict of one dim and an int, e.g. offset={'L': -3}",
                actual=repr(offset),
                fix="pass offset={dim: k}; to read several offsets, load once for each",
            )
        ((dim, rows),) = offset.items()
        context = _trace_context.current()
        if context is not None and dim in context.batch:
            raise BodyError(
                f"the offset of `{self.name}.load` names the batch dim {dim}, of which each grid "
                "step reads one entry",
                operand=self.name,
                dim=str(dim),
                expected=f"a dim of its blocks: {', '.join(self.dims)}",
                actual=repr(dim),
                fix=f"shift along a dim of the blocks; to read another entry of {dim}, pass "
                f"`{self.name}` rolled along {dim} outside the kernel",
            )
        if dim not in self.dims:
            raise BodyError(
                f"the offset of `{self.name}.load` names {dim!r}, which `{self.name}` does not "
                "have",
                operand=self.name,
                dim=str(dim),
                expected=f"one of its dims: {', '.join(self.dims)}",
                actual=repr(dim),
                fix=f"name the dim along which to shift `{self.name}`",
            )
        if isinstance(rows, np.integer):
            rows = int(rows)
        if not isinstance(rows, int) or isinstance(rows, bool):
            raise BodyError(
                f"the offset of `{self.name}.load` along {dim} is not a Python int",
                operand=self.name,
                dim=dim,
                expected="a static int, e.g. -3",
                actual=repr(rows),
                fix="compute the offset from constants and sk.dim, not from loaded values",
            )
        # The target's, or outside a trace (a tile kept past its body) the default target's.
        limits = (context or TARGETS[DEFAULT_TARGET]).limits
        if abs(rows) > limits.copy_extent_max:
            raise BodyError(
                f"`{self.name}` is loaded {abs(rows)} elements away along {dim}, more than one "
                f"copy reaches",
                operand=self.name,
                dim=dim,
                expected=f"an offset of at most {limits.copy_extent_max} either way",
                actual=str(rows),
                fix="shift by at most one block: compute further taps in another kernel",
            )
        return (dim, rows) if rows else None

    def block_for_dot(
        self, *, fill: float | int | bool = 0, shift: tuple[str, int] | None = None
    ) -> jax.Array:
        """The block as `sk.dot` reads it: from shared memory, in any layout."""
        self._check_loop_context()
        if isinstance(fill, np.generic):
            fill = fill.item()
        if isinstance(fill, jax.Array | np.ndarray):
            if getattr(fill, "shape", None) != ():
                raise BodyError(
                    f"the fill of `{self.name}.load` must be a scalar",
                    operand=self.name,
                    actual=f"an array of shape {fill.shape}",
                    fix="pass a Python number, e.g. fill=0.0 or fill=-jnp.inf",
                )
            try:
                fill = fill.item()
            except Exception:
                raise BodyError(
                    f"the fill of `{self.name}.load` is a traced value",
                    operand=self.name,
                    actual=repr(fill),
                    fix="pass a Python or NumPy number, e.g. fill=0.0, fill=-jnp.inf or "
                    "fill=float(jnp.finfo(jnp.float32).min)",
                ) from None
        if not isinstance(fill, bool | int | float):
            raise BodyError(
                f"the fill of `{self.name}.load` is not a number",
                operand=self.name,
                actual=repr(fill),
                fix="pass a Python number, e.g. fill=0.0 or fill=-jnp.inf",
            )
        _check_fill_fits(self.name, fill, np.dtype(self.dtype))
        context = _trace_context.current()
        looped = self._grouped_by is not None or any(
            d in (context.loop_dims if context else {}) for d in self.dims
        )
        # Each loop reads its own copy of a looped operand, so each may choose its fill; any
        # other operand has one copy, read by the body and its loops alike.
        loop = context.loop_id if context and looped else None
        # A 2-D block's columns are its second dim: a shift along them is a column window.
        along_columns = shift is not None and len(self.dims) == 2 and shift[0] == self.dims[1]
        shifts = (shift[1],) if shift and not along_columns else ()
        column_shifts = (shift[1],) if shift and along_columns else ()
        previous = next((r for r in self._loads if r.operand == self.name and r.loop == loop), None)
        if previous is None:
            record = LoadRecord(
                self.name, loop, fill, caller_user_line(), shifts, column_shifts=column_shifts
            )
            self._loads.append(record)
        elif not _same_fill(previous.fill, fill):
            raise BodyError(
                f"`{self.name}` is loaded twice with different fills",
                operand=self.name,
                expected=repr(previous.fill),
                actual=repr(fill),
                fix="load each operand with one fill, its shifted loads too, and reuse the value",
            )
        elif shifts and shifts[0] not in previous.shifts:
            place = self._loads.index(previous)
            self._loads[place] = dataclasses.replace(previous, shifts=(*previous.shifts, *shifts))
        elif column_shifts and column_shifts[0] not in previous.column_shifts:
            place = self._loads.index(previous)
            both = (*previous.column_shifts, *column_shifts)
            self._loads[place] = dataclasses.replace(previous, column_shifts=both)
        return self._value

    def _check_frame(self) -> bool:
        """Records a load of an operand laid out unlike the blocks. It is reported after the
        body is translated, so that a `jnp.dot` of it is reported as what it is. True for a
        block of the rows and the loop dim, or of the loop dim and the columns, loaded in the
        loop's step (the step's block)."""
        rows, cols = self._frame
        if not self.dims or not rows:  # a Tile built without its dims has no frame to check
            return False
        laid_out = self.dims == (rows, cols) if len(self.dims) == 2 else self.dims[0] in self._frame
        context = _trace_context.current()
        # In the step of a loop over a dim outside the frame, a block of the rows and that dim
        # is the step's, as a product's `a` computed there is (a weight dequantized for sk.dot).
        in_step = (
            len(self.dims) == 2
            and self.dims[0] == rows
            and context is not None
            and self.dims[1] in context.loops
            and self.dims[1] != cols
        )
        # Likewise a block of that loop dim and the columns, a product's `b` computed there (a
        # "K N" weight dequantized for sk.dot(x, w)).
        in_step = in_step or (
            len(self.dims) == 2
            and cols is not None
            and self.dims[1] == cols
            and context is not None
            and self.dims[0] in context.loops
            and self.dims[0] != rows
        )
        # A vector along the loop dim outside the frame, loaded in that loop's step, runs
        # along the step's columns (a key's segment id, a query's log-sum-exp).
        step_vector = (
            len(self.dims) == 1
            and context is not None
            and self.dims[0] in context.loops
            and self.dims[0] not in self._frame
        )
        if not laid_out and not in_step and not step_vector:
            self._misplaced.append((self.name, caller_user_line()))
        return in_step

    def _check_loop_context(self) -> None:
        context = _trace_context.current()
        looped = [d for d in self.dims if d in (context.loop_dims if context else {})]
        active = context.loops if context else ()
        # A page's rows run along its loop's dim: said as of any operand along a loop dim.
        grouped = self._grouped_by is not None and self._grouped_by not in self.dims
        if grouped and self._grouped_by not in active:
            loop = self._grouped_by
            where = f"a loop over {active[-1]!r}" if active else "the body outside any loop"
            raise BodyError(
                f"`{self.name}` has a group dim numbering the steps of the loop over {loop}, but "
                f"it is loaded in {where}",
                operand=self.name,
                dim=loop,
                expected=f"a load inside sk.loop({loop!r}, ...): each step reads its group's index",
                actual=f"`{self.name}` loaded there",
                fix=f"move the load into the step of the loop over {loop}",
            )
        if looped and looped[0] not in active:
            where = f"a loop over {active[-1]!r}" if active else "the body outside any loop"
            raise BodyError(
                f"`{self.name}` has the loop dim {looped[0]}, but it is loaded in {where}",
                operand=self.name,
                dim=looped[0],
                expected=f"a load inside sk.loop({looped[0]!r}, ...) or "
                f"sk.map_blocks({looped[0]!r}, ...)",
                actual=f"`{self.name}` ('{' '.join(self.dims)}') loaded there",
                fix=f"move the load into the step of a loop over {looped[0]}, which sees one block "
                "of it at a time",
            )

    def __repr__(self) -> str:
        return f"Tile({self.name}, block_shape={self.block_shape}, dtype={self.dtype})"


def _same_fill(a: Any, b: Any) -> bool:
    return bool(np.asarray(a) == np.asarray(b)) or bool(np.isnan(a) and np.isnan(b))


def _check_fill_fits(name: str, fill: Any, dtype: np.dtype) -> None:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        if (isinstance(fill, float) and not float(fill).is_integer()) or not (
            info.min <= fill <= info.max
        ):
            raise BodyError(
                f"the fill of `{name}.load` cannot be represented in {dtype}",
                operand=name,
                expected=f"an integer in [{info.min}, {info.max}]",
                actual=repr(fill),
                fix=f"use e.g. fill={info.min} for a running max over {dtype}",
            )
