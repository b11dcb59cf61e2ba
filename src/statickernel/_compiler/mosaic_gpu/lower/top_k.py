"""`jax.lax.top_k` over the columns of a block (a router's experts, a sampler's candidates),
written with what Mosaic GPU lowers: K rounds of a row max and the smallest position holding it.

As jax's: the K largest of each row in descending order, the first index winning a tie, in
jax's total order of floats (a NaN above +inf, +0.0 above -0.0), so the values and indices are
jax's bit for bit. A float is compared as an int32 key that orders as the float does (its bits,
with the magnitude's flipped when the sign is set), so one integer max per round decides.

Each round takes the largest element that comes after the previous pick in that order: a
smaller key, or the same key further right. No element is marked as taken, so the block's
registers hold the data and the key alone. Elements past the array's edge never take part.

The K values and indices of a row are a block of K columns, a result dim that the constant K
sizes; its registers are padded to the 8 columns of a register tile.
"""

from collections.abc import Mapping

from ...ir.names import value_part
from ...ir.nodes import Assign, BinOp, Const, DType, Expr, Kind, Literal, Mask, Name, Operator
from ...ir.nodes import call as ir_call
from ...trace.body import Atom, Eqn
from .context import Rule, Support, Translator, Where
from .rules import materialized_block, own_column_positions, refuse_split_columns

__all__ = ["TOP_K_RULES"]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_FLOATS = ("float32", "bfloat16", "float16")
_INTS = ("int32", "int16", "int8", "uint16", "uint8")


def _top_k(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    k = int(eqn.param("k"))
    logical = tr.logical_shape(atom)
    if tr.kind(atom) is Kind.SCALAR and len(logical) == 2:
        atom = materialized_block(tr, eqn, atom)  # a constant block held as its scalar
    _check_input(tr, eqn, atom, logical)
    dtype = tr.dtype(atom)
    values_out, indices_out = eqn.outputs
    key = _key(tr, values_out, tr.source(atom), dtype)
    # A block of its own width (a concatenation of two top-K's, which a streamed top-K
    # merges) ranks its logical columns; the frame's, those inside the array.
    own = tr.g.own_width(Kind.TILE, logical)
    shape = tr.g.register_shape(Kind.TILE, logical)
    positions = _column_positions(tr, values_out, own, shape)
    valid: Expr | None = None
    if own is not None and own != logical[-1]:
        valid = BinOp(Operator.LT, positions, _int(logical[-1]))
    elif own is None and tr.g.ragged_cols:
        tr.masks.add(Mask.COL_OK)
        valid = Name(Mask.COL_OK)
    picks: list[tuple[Name, Name]] = []
    spread: tuple[Name, Name] | None = None  # the previous pick, spread over the block
    for round_ in range(k):
        eligible = valid
        if spread is not None:  # after the previous pick: a smaller key, or the same further on
            last_key, last_index = spread
            tie = BinOp(Operator.EQ, key, last_key)
            after = ir_call(
                "jnp.logical_or",
                BinOp(Operator.LT, key, last_key),
                BinOp(Operator.AND, tie, BinOp(Operator.GT, positions, last_index)),
            )
            eligible = after if eligible is None else BinOp(Operator.AND, eligible, after)
        best, index, best_spread = _pick(tr, values_out, round_, key, positions, eligible, shape)
        picks.append((best, index))
        if round_ + 1 < k:
            spread = (best_spread, _spread(tr, index, shape))
    # K columns of their own, or, when K is the frame's column count, the frame's.
    width = tr.g.own_width(Kind.TILE, (tr.g.rows, k)) or tr.g.cols
    columns = Name(value_part(values_out, "columns"))
    tr.lines.append(Assign((columns,), own_column_positions(width)))
    shape = (tr.g.rows, width)
    keys = Name(value_part(values_out, "keys"))
    _gather(tr, keys, columns, [key for key, _ in picks], shape)
    tr.define(values_out, Kind.TILE, dtype)
    if dtype in _FLOATS:
        bits = Name(value_part(values_out, "value_bits"))
        _flip_negatives(tr, bits, keys)
        keys = bits
    tr.lines.append(Assign((Name(values_out),), _value_of_key(keys, dtype)))
    tr.define(indices_out, Kind.TILE, "int32")
    _gather(tr, Name(indices_out), columns, [i for _, i in picks], shape)


def _check_input(tr: Translator, eqn: Eqn, atom: Atom, logical: tuple[int, ...]) -> None:
    kind, dtype = tr.kind(atom), tr.dtype(atom)
    if kind is not Kind.TILE:
        what = f"a {kind} value"
        raise tr.fail(
            eqn,
            f"the body takes top_k of {what}; it is taken over the columns of a block",
            "take jax.lax.top_k(v, K) of a 2-D block of the kernel's rows and columns",
        )
    # In the step of a loop over the columns, the step's block is ranked, as the body says:
    # a top-K over a row wider than a block merges each step's with its carry.
    if not (tr.g.in_step and tr.g.col_looped):
        refuse_split_columns(tr, eqn, "takes top_k over the columns of", "rank")
    if dtype not in _FLOATS + _INTS:
        raise tr.fail(
            eqn,
            f"the body takes top_k of {dtype} values",
            "cast them to float32 or int32 first",
            actual=dtype,
            expected=f"one of {', '.join(_FLOATS + _INTS)}",
        )


def _key(tr: Translator, out: str, src: Expr, dtype: str) -> Name:
    """An int32 per element that orders as jax's top_k orders the values."""
    key = Name(value_part(out, "key"))
    tr.define(key.text, Kind.TILE, "int32")
    if dtype not in _FLOATS:
        tr.lines.append(Assign((key,), ir_call("lax.convert_element_type", src, DType("int32"))))
        return key
    if dtype != "float32":
        src = ir_call("lax.convert_element_type", src, DType("float32"))
    bits = Name(value_part(out, "bits"))
    tr.lines.append(Assign((bits,), ir_call("lax.bitcast_convert_type", src, DType("int32"))))
    _flip_negatives(tr, key, bits)
    return key


def _flip_negatives(tr: Translator, out: Name, bits: Name) -> None:
    """`out` = the bits with the magnitude flipped where the sign is set: its own inverse."""
    sign = Name(f"{out.text}_sign")
    tr.lines.append(Assign((sign,), ir_call("lax.shift_right_arithmetic", bits, _int(31))))
    magnitude = ir_call("lax.bitwise_and", sign, _int(_INT32_MAX))
    tr.lines.append(Assign((out,), ir_call("lax.bitwise_xor", bits, magnitude)))


def _value_of_key(key: Expr, dtype: str) -> Expr:
    """The value of an integer key, or of a float key's bits (flipped back)."""
    if dtype not in _FLOATS:
        return ir_call("lax.convert_element_type", key, DType(dtype))
    value = ir_call("lax.bitcast_convert_type", key, DType("float32"))
    return value if dtype == "float32" else ir_call("lax.convert_element_type", value, DType(dtype))


def _column_positions(tr: Translator, out: str, own: int | None, shape: tuple[int, ...]) -> Name:
    """The block's own column of each element, from 0: the array's where the columns are
    whole; a loop step's own, where the loop walks them (each step starts at a multiple of
    its block); a block of its `own` width's."""
    name = Name(value_part(out, "positions"))
    tr.define(name.text, Kind.TILE, "int32")
    if own is not None:
        position: Expr = own_column_positions(own)
    else:
        tr.masks.add(Mask.COL_POSITION)
        position = Name(Mask.COL_POSITION)
        if tr.g.col_looped:
            position = ir_call("lax.rem", position, ir_call("jnp.int32", Const(tr.g.cols)))
    spread = ir_call("lax.broadcast_in_dim", position, Const(shape), Const((1,)))
    tr.lines.append(Assign((name,), spread))
    return name


def _spread(tr: Translator, row: Name, shape: tuple[int, ...]) -> Name:
    """A per-row vector spread over the block, named once for the comparisons that read it."""
    name = Name(f"{row.text}_spread")
    spread = ir_call("lax.broadcast_in_dim", row, Const(shape), Const((0,)))
    tr.lines.append(Assign((name,), spread))
    return name


def _pick(
    tr: Translator,
    out: str,
    round_: int,
    key: Name,
    positions: Name,
    eligible: Expr | None,
    shape: tuple[int, ...],
) -> tuple[Name, Name, Name]:
    """The round's largest eligible key per row, the first position holding it, and the key
    spread over the block."""
    candidates: Expr = key
    if eligible is not None:
        eligible_name = Name(value_part(out, f"eligible{round_}"))
        tr.lines.append(Assign((eligible_name,), eligible))
        eligible = eligible_name
        candidates = ir_call("jnp.where", eligible, key, _int(_INT32_MIN))
    best = Name(value_part(out, f"key{round_}"))
    tr.define(best.text, Kind.ROW, "int32")
    tr.lines.append(Assign((best,), ir_call("lax.reduce_max", candidates, Const((1,)))))
    hit = Name(value_part(out, f"hit{round_}"))
    best_spread = _spread(tr, best, shape)
    same: Expr = BinOp(Operator.EQ, key, best_spread)
    tr.lines.append(
        Assign((hit,), same if eligible is None else BinOp(Operator.AND, eligible, same))
    )
    index = Name(value_part(out, f"index{round_}"))
    tr.define(index.text, Kind.ROW, "int32")
    first = ir_call("jnp.where", hit, positions, _int(_INT32_MAX))
    tr.lines.append(Assign((index,), ir_call("lax.reduce_min", first, Const((1,)))))
    return best, index, best_spread


def _gather(
    tr: Translator, out: Name, columns: Name, rows: list[Name], shape: tuple[int, ...]
) -> None:
    """`out` = a block of `shape` whose column j holds the per-row vector rows[j] (the last
    one in the padded columns), one statement a column."""
    spread_columns = Name(f"{out.text}_columns")
    spread = ir_call("lax.broadcast_in_dim", columns, Const(shape), Const((1,)))
    tr.lines.append(Assign((spread_columns,), spread))
    last = ir_call("lax.broadcast_in_dim", rows[-1], Const(shape), Const((0,)))
    tr.lines.append(Assign((out,), last))
    for j in reversed(range(len(rows) - 1)):
        row = ir_call("lax.broadcast_in_dim", rows[j], Const(shape), Const((0,)))
        hit = BinOp(Operator.EQ, spread_columns, _int(j))
        tr.lines.append(Assign((out,), ir_call("jnp.where", hit, row, out)))


def _int(value: int) -> Literal:
    return Literal(value, "int32", weak_type=False)


_RULE = Rule(
    _top_k,
    support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.NO)),
    note="its K values of a row are a block of K columns, which the row form's vector of a "
    "row and the strided block have no place for",
)
TOP_K_RULES: Mapping[str, Rule] = {"top_k": _RULE}
