"""`jnp.take_along_axis(x, i, axis=1)` of a narrow block: each row's elements at the columns its
indices name (a streamed top-K's merge: the indices of the K largest of a carry's K and a
step's K, from the positions `jax.lax.top_k` of their concatenation gives).

Mosaic GPU has no gather of registers, and the WGMMA layout spreads a row over four threads,
so the element of column c is taken to every thread of its row by a reduction: for each of
the source's columns, its bits (a masked int32 sum, exact for every value, NaN and -0.0
included) are spread to the indices naming it. That is one row reduction a column, so the
source is a block of its own narrow width (at most 64 columns), not the frame's.

As jnp's: an index past the row (after jnp wrapped the negative ones) reads the gather's fill
(NaN for floats, the dtype's lowest integer or `fill_value=`), or the row's edge with
`mode="clip"`.
"""

from collections.abc import Mapping

import numpy as np

from ...ir.names import value_part
from ...ir.nodes import Assign, BinOp, Const, DType, Expr, Kind, Literal, Name, Operator
from ...ir.nodes import call as ir_call
from ...trace.body import Eqn
from .context import CompositeLocals, Rule, Support, Translator, Where
from .rules import own_column_positions

__all__ = ["TAKE_ALONG_RULES"]

# The widest source: one reduction a column.
_MOST_COLUMNS = 64
_BITS = {"float32": "int32", "bfloat16": "int16", "float16": "int16"}
_WIDENED = ("int32", "int16", "int8", "uint16", "uint8", "uint32", "bool")


def _take_along(tr: Translator, eqn: Eqn) -> None:
    source, indices = eqn.inputs
    _check_pattern(tr, eqn)
    src_logical = tr.logical_shape(source)
    out_logical = tuple(tr.trace.aval(eqn.outputs[0])[0])
    if tr.kind(source) is not Kind.TILE or tr.kind(indices) is not Kind.TILE:
        raise tr.fail(
            eqn,
            "the body takes along the columns of a value that is not a block of the rows",
            "take along axis=1 of a 2-D block, with a 2-D block of indices",
        )
    width = src_logical[-1]
    if width > _MOST_COLUMNS:
        raise tr.fail(
            eqn,
            f"the body takes along a row of {width} columns; a row's element reaches the "
            f"threads that need it by one reduction a column, so at most {_MOST_COLUMNS}",
            "take along a narrow block (a top-K's K columns, or two of them joined)",
            actual=f"{width} columns",
        )
    dtype = tr.dtype(source)
    out = eqn.outputs[0]
    src_shape = tr.g.register_shape(Kind.TILE, src_logical)
    out_shape = tr.g.register_shape(Kind.TILE, out_logical)
    bits_dtype = _BITS.get(dtype, dtype if dtype in _WIDENED else None)
    if bits_dtype is None:
        raise tr.fail(
            eqn,
            f"the body takes along a block of {dtype} values",
            "cast them to float32 or int32 first",
            actual=dtype,
        )
    bits: Expr = tr.source(source)
    if bits_dtype != dtype and dtype in _BITS:
        bits = ir_call("lax.bitcast_convert_type", bits, DType(bits_dtype))
    if bits_dtype != "int32":
        bits = ir_call("lax.convert_element_type", bits, DType("int32"))
    local = CompositeLocals(tr, out)
    bits_name = local.local("bits", bits)
    columns = local.local(
        "columns",
        ir_call(
            "lax.broadcast_in_dim",
            own_column_positions(src_shape[-1]),
            Const(src_shape),
            Const((1,)),
        ),
    )
    index: Expr = ir_call("lax.convert_element_type", tr.source(indices), DType("int32"))
    mode = str(eqn.param("mode"))
    clipped = "CLIP" in mode or "PROMISE" in mode
    if clipped:
        index = ir_call("jnp.clip", index, _int(0), _int(width - 1))
    index_name = local.local("index", index)
    taken = Name(value_part(out, "taken"))
    for c in range(width):  # one statement a column: the indices naming it take its bits
        hit = BinOp(Operator.EQ, columns, _int(c))
        masked = ir_call("jnp.where", hit, bits_name, _int(0))
        column = local.local(f"column{c}", ir_call("lax.reduce_sum", masked, Const((1,))))
        spread = ir_call("lax.broadcast_in_dim", column, Const(out_shape), Const((0,)))
        earlier = taken if c else _int(0)
        named = BinOp(Operator.EQ, index_name, _int(c))
        tr.lines.append(Assign((taken,), ir_call("jnp.where", named, spread, earlier)))
    value = _from_bits(taken, dtype, bits_dtype)
    if not clipped:
        inside = ir_call(
            "jnp.logical_and",
            BinOp(Operator.GT, index_name, _int(-1)),
            BinOp(Operator.LT, index_name, _int(width)),
        )
        value = ir_call("jnp.where", inside, value, _fill(eqn, dtype))
    tr.assign(eqn, Kind.TILE, value)


def _from_bits(taken: Expr, dtype: str, bits_dtype: str) -> Expr:
    if bits_dtype != "int32":
        taken = ir_call("lax.convert_element_type", taken, DType(bits_dtype))
    if dtype in _BITS:
        return ir_call("lax.bitcast_convert_type", taken, DType(dtype))
    if dtype == "bool":
        return BinOp(Operator.NE, taken, Literal(0, bits_dtype, weak_type=False))
    return taken


def _fill(eqn: Eqn, dtype: str) -> Literal:
    """What an index past the row reads: the gather's `fill_value`, else jax's default."""
    fill = eqn.param("fill_value")
    if fill is None:
        if "float" in dtype:
            fill = float("nan")
        elif dtype == "bool":
            fill = True
        else:
            info = np.iinfo(np.dtype(dtype))
            fill = int(info.min) if info.min < 0 else int(info.max)
    return Literal(fill, dtype, weak_type=False)


def _check_pattern(tr: Translator, eqn: Eqn) -> None:
    """The gather jnp.take_along_axis(x, i, axis=1) writes for 2-D x and i: each row's own
    elements, one a column of i."""
    numbers = eqn.param("dimension_numbers")
    pattern = (
        tuple(numbers.offset_dims) == ()
        and tuple(numbers.collapsed_slice_dims) == (1,)
        and tuple(numbers.start_index_map) == (1,)
        and tuple(getattr(numbers, "operand_batching_dims", ())) == (0,)
        and tuple(getattr(numbers, "start_indices_batching_dims", ())) == (0,)
        and tuple(eqn.param("slice_sizes")) == (1, 1)
    )
    if not pattern:
        raise tr.fail(
            eqn,
            "the body indexes with arrays (a gather) other than jnp.take_along_axis(x, i, "
            "axis=1), which Mosaic GPU cannot lower",
            "to read the rows of an operand that an integer operand gives (an embedding's "
            'table[ids]), declare them: index={"V": "ids"} with `table` laid out "V D" makes '
            "row t of sk.load(table) row ids[t] of it; otherwise take along axis=1 of a narrow "
            "block, or index the operand outside the kernel",
        )


def _int(value: int) -> Literal:
    return Literal(value, "int32", weak_type=False)


_RULE = Rule(
    _take_along,
    support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.NO)),
    note="jnp.take_along_axis(x, i, axis=1) of a block of at most 64 columns of its own; "
    "the row form's vectors and the strided block have no narrow blocks",
)
TAKE_ALONG_RULES: Mapping[str, Rule] = {"gather": _RULE}
