"""The translation rules of a body's ops: elementwise ops, reductions, and the shape-only ops
jnp adds around vectors.

Every value lives in one register kind (see `ir.nodes.Kind`); these rules decide the kind of each
result and broadcast explicitly where a vector meets a tile, because Mosaic GPU cannot broadcast
implicitly.
"""

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from ...ir.casts import FP8_MAX, to_fp8
from ...ir.names import value_part
from ...ir.nodes import (
    Assign,
    BinOp,
    Comment,
    Const,
    DType,
    Expr,
    Kind,
    Literal,
    Mask,
    Name,
    Operator,
)
from ...ir.nodes import call as ir_call
from ...trace.body import Atom, Eqn
from ..pallas import broadcast, is_8bit, layout, select
from .context import NotInForm, Rule, Support, Translator, Where
from .counts import existing_count
from .remainder import exact_float_remainder

__all__ = [
    "BODY_RULES",
    "identity_past_edge",
    "materialized_block",
    "own_column_positions",
    "reduction_carrying_nan",
    "reduction_identity",
    "refuse_columns_meeting_loop",
    "refuse_split_columns",
]

TILE, ROW, COL, SCALAR = Kind.TILE, Kind.ROW, Kind.COL, Kind.SCALAR
LOOP_TILE, LOOP_COL, LOOP_ROWS = Kind.LOOP_TILE, Kind.LOOP_COL, Kind.LOOP_ROWS

UNARY = {
    "neg": "lax.neg",
    "exp": "lax.exp",
    "exp2": "lax.exp2",
    "log": "lax.log",
    "log2": "lax.log2",
    "tanh": "lax.tanh",
    "logistic": "lax.logistic",
    "rsqrt": "lax.rsqrt",
    "sqrt": "lax.sqrt",
    "sin": "lax.sin",
    "cos": "lax.cos",
    "abs": "lax.abs",
    "sign": "lax.sign",
    "erf": "lax.erf",
    "not": "lax.bitwise_not",
}
BINARY = {
    "add": "lax.add",
    "sub": "lax.sub",
    "mul": "lax.mul",
    "div": "lax.div",
    "max": "lax.max",
    "min": "lax.min",
    "rem": "lax.rem",
    "atan2": "lax.atan2",
    "and": "lax.bitwise_and",
    "or": "lax.bitwise_or",
    "xor": "lax.bitwise_xor",
    "lt": "lax.lt",
    "le": "lax.le",
    "gt": "lax.gt",
    "ge": "lax.ge",
    "eq": "lax.eq",
    "ne": "lax.ne",
    "shift_left": "lax.shift_left",
    "shift_right_logical": "lax.shift_right_logical",
    "shift_right_arithmetic": "lax.shift_right_arithmetic",
}
REDUCTIONS = {
    "reduce_sum": "lax.reduce_sum",
    "reduce_max": "lax.reduce_max",
    "reduce_min": "lax.reduce_min",
}
# stop_gradient is the identity in a forward pass (jax.nn.softmax calls it).
SHAPE_ONLY = {
    "broadcast_in_dim",
    "reshape",
    "squeeze",
    "expand_dims",
    "copy",
    "copy_p",
    "stop_gradient",
}
OTHER = {"integer_pow", "square", "convert_element_type", "select_n", "clamp", "round"}
# Mosaic GPU computes on 8-bit integers only with bitwise ops and equality tests; the rest
# (arithmetic, order comparisons, selects) needs a 16- or 32-bit type.
EIGHT_BIT_OPS = frozenset({"and", "or", "xor", "not", "eq", "ne", "convert_element_type"})
_WRITTEN_AS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%", "neg": "-x"}
_WRITTEN_AS |= {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "select_n": "jnp.where"}
_WRITTEN_AS |= {"max": "jnp.maximum", "min": "jnp.minimum", "clamp": "jnp.clip"}


_NAN_COMMENT = Comment("NaN where a NaN is reduced: the interpreter's max and min skip it.")


def refuse_columns_meeting_loop(
    tr: Translator, eqn: Eqn, kinds: set[Kind], actual: str | None = None
) -> None:
    """A value along the kernel's columns and one along the loop dim have different blocks:
    they meet only when their block shapes happen to be equal, which a shape change breaks."""
    if kinds & {TILE, COL} and kinds & {LOOP_TILE, LOOP_COL}:
        raise tr.fail(
            eqn,
            "the body combines a value along the kernel's columns with one along the loop dim",
            "keep values along the loop dim (the scores of sk.dot(q, k)) and values along the "
            "kernel's columns (the accumulator) apart; only per-row vectors meet both",
            actual,
        )


def _loop_rows_operands(tr: Translator, eqn: Eqn, kinds: set[Kind]) -> set[Kind]:
    """A block of the loop dim by the columns (a computed `b` of sk.dot) meets per-column
    vectors (a row of scales) and scalars; a frame's block only where it has the same shape,
    and so the same registers (a per-column vector spread to it)."""
    same = tr.g.shape(TILE) == tr.g.shape(LOOP_ROWS)
    if kinds - {LOOP_ROWS, COL, *((TILE,) if same else ())}:
        raise tr.fail(
            eqn,
            "the body combines a block of the loop dim by the columns (a computed `b` of "
            "sk.dot) with a value along the rows or the loop dim",
            "combine such a block only with per-column vectors (a row of scales) and scalars",
        )
    return {LOOP_ROWS}


def elementwise(tr: Translator, eqn: Eqn) -> None:
    eqn = existing_count(tr, eqn)
    kinds = {tr.kind(a) for a in eqn.inputs} - {SCALAR}
    out_shape = tr.trace.aval(eqn.outputs[0])[0]
    if LOOP_ROWS in kinds:
        kinds = _loop_rows_operands(tr, eqn, kinds)
    if {TILE, LOOP_TILE} <= kinds:
        # Only equal shapes get here (jnp broadcasts nothing else): the block is one spread
        # from a vector, which is as much along the loop dim as along the frame's columns.
        kinds -= {TILE}
    for row, col, block in ((ROW, COL, TILE), (ROW, LOOP_COL, LOOP_TILE)):
        if kinds == {row, col} and len(out_shape) == 2:
            # A (rows, 1) and a (1, cols) vector, as jnp writes an outer sum or product (a
            # causal mask): lax broadcasts both to the block, and so do the statements below.
            kinds = {block}
    refuse_columns_meeting_loop(tr, eqn, kinds)
    if kinds in ({ROW, COL}, {ROW, LOOP_COL}):
        raise tr.fail(
            eqn,
            "the body combines a per-row and a per-column vector without broadcasting",
            "broadcast one of them to the block shape first",
        )
    kind = next((k for k in (LOOP_TILE, TILE) if k in kinds), None)
    kind = kind or (kinds.pop() if kinds else SCALAR)
    kind = _widened(tr, kind, out_shape)
    narrow = [tr.dtype(a) for a in eqn.inputs if a.var is not None]
    narrow = [d for d in narrow if is_8bit(d)]
    if narrow and eqn.prim not in EIGHT_BIT_OPS and narrow[0] in FP8_MAX:
        raise tr.fail(
            eqn,
            f"the body computes {_WRITTEN_AS.get(eqn.prim, eqn.prim)} (`{eqn.prim}`) on "
            f"{narrow[0]} values; Mosaic GPU computes on fp8 values only by casting them",
            f"compute in float32 and cast last, e.g. (y / scale).astype(jnp.{narrow[0]}); "
            "an fp8 value is read back with .astype(jnp.float32)",
        )
    if narrow and eqn.prim not in EIGHT_BIT_OPS:
        raise tr.fail(
            eqn,
            f"the body computes {_WRITTEN_AS.get(eqn.prim, eqn.prim)} (`{eqn.prim}`) on "
            f"{narrow[0]} values; Mosaic GPU computes on 8-bit integers only with &, |, ^, "
            "~, == and !=",
            f"cast to int32 after loading, e.g. sk.load(x).astype(jnp.int32), and cast the "
            f"result back with .astype(jnp.{narrow[0]})",
        )
    like = tuple(out_shape)
    if eqn.prim == "select_n" and kind != SCALAR:
        # lax.select_n broadcasts nothing: every case, and a non-scalar predicate, must be a
        # value of the result's shape (jnp.where(c, x, 0.0) gives it a scalar case).
        args = [tr.as_kind(a, kind, like) for a in eqn.inputs]
        if tr.kind(eqn.inputs[0]) == SCALAR:
            args[0] = tr.source(eqn.inputs[0])
    else:
        args = [
            tr.as_kind(a, kind, like) if tr.kind(a) != SCALAR else tr.source(a) for a in eqn.inputs
        ]
    if eqn.prim == "rem" and "int" not in tr.dtype(eqn.inputs[0]):
        # Mosaic GPU has no float remainder: computed exactly from the operands' bits.
        return exact_float_remainder(tr, eqn, kind, args[0], args[1])
    tr.assign(eqn, kind, _elementwise_expr(eqn, args, tr.dtype(eqn.inputs[0])))


def _elementwise_expr(eqn: Eqn, args: list[Expr], source: str) -> Expr:
    """The op on its translated arguments; `source` is the first argument's dtype."""
    prim = eqn.prim
    if prim in UNARY:
        return ir_call(UNARY[prim], args[0])
    if prim in BINARY:
        return ir_call(BINARY[prim], args[0], args[1])
    if prim == "integer_pow":
        return ir_call("lax.integer_pow", args[0], Const(int(eqn.param("y"))))
    if prim == "square":
        return ir_call("lax.mul", args[0], args[0])
    if prim == "convert_element_type":
        dtype = str(np.dtype(eqn.param("new_dtype")))
        if dtype in FP8_MAX:
            return to_fp8(args[0], dtype, source)
        return ir_call("lax.convert_element_type", args[0], DType(dtype))
    if prim == "round":
        method = ir_call("lax.RoundingMethod", Const(int(eqn.param("rounding_method"))))
        return ir_call("lax.round", args[0], method)
    if prim == "select_n":
        return ir_call("lax.select_n", *args)
    return ir_call("lax.clamp", *args)  # clamp(lo, x, hi)


def reduce(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    kind = tr.kind(atom)
    axes = tuple(eqn.param("axes"))
    if kind in (TILE, LOOP_TILE) and axes in ((0,), (1,)):
        return _reduce_block(tr, eqn, atom, axes[0])
    if kind == LOOP_ROWS:
        raise tr.fail(
            eqn,
            "the body reduces a block of the loop dim by the columns (a computed `b` of "
            "sk.dot), whose vectors have no register form",
            "reduce the operand's block outside the loop, or pass the statistic as an operand",
        )
    if kind in (ROW, COL, LOOP_COL) and _vector_axis(tr, atom, kind) not in axes:
        return tr.alias(eqn, atom, kind)
    if kind == ROW and tr.source(atom) == Name(Mask.ROW_POSITION) and eqn.prim != "reduce_sum":
        return _row_position_bound(tr, eqn)
    if kind == SCALAR:
        shape = tuple(tr.trace.aval(atom.var)[0]) if atom.var else ()
        if all(shape[a] == 1 for a in axes):
            return tr.alias(eqn, atom, kind)
        if len(shape) == 2 and axes in ((0,), (1,)):
            # A constant block (jnp.ones_like(v), jnp.full_like(v, c)) held as its scalar:
            # its reduction counts every element inside the edge, so it needs the block.
            block = materialized_block(tr, eqn, atom)
            return reduce(tr, dataclasses.replace(eqn, inputs=(block,)))
    raise tr.fail(
        eqn,
        "the body reduces a block or a vector to a scalar, which Mosaic GPU cannot lower",
        "reduce a 2-D block over one axis (axis=0 or axis=1) and keep the vector",
        actual=f"`{eqn.prim}` over axes {axes} of a {kind}"
        + (f" in: {eqn.source}" if eqn.source else ""),
    )


def refuse_split_columns(tr: Translator, eqn: Eqn, takes: str, verb: str) -> None:
    """An op along a row that needs every column of it (a top-k, a scan) refused where the
    columns are split across the grid or a loop: each block would `verb` only its own. `takes`
    says what the body does, as the message's start ("takes top_k over the columns of")."""
    if not (tr.g.col_tiled or tr.g.col_looped):
        return
    split = "tiled" if tr.g.col_tiled else "looped"
    raise tr.fail(
        eqn,
        f"the body {takes} dim {tr.g.col_dim}, which is {split}: each block would {verb} only "
        "its own columns",
        f"hold {tr.g.col_dim} whole in every block (drop it from {split[:4]}=)",
        dim=tr.g.col_dim,
    )


def materialized_block(tr: Translator, eqn: Eqn, atom: Atom) -> Atom:
    """A constant block held as its scalar (`jnp.ones_like(v)`), spread over registers of its
    logical shape for an op that reads each element: a reduction, a top-k."""
    block = value_part(eqn.outputs[0], "block")
    tr.define(block, TILE, tr.dtype(atom))
    like = tr.logical_shape(atom) or None
    tr.lines.append(Assign((Name(block),), tr.as_kind(atom, TILE, like)))
    return Atom(block)


def _row_position_bound(tr: Translator, eqn: Eqn) -> None:
    """The first or last row of the block, `sk.position(rows).min()` or `.max()`: a scalar of
    the block (a loop's stop), computed from where the block starts, not from registers."""
    if tr.form() is not Where.BLOCK:
        raise NotInForm("positions are vectors of the block form")
    first: Expr = Const(0)
    if tr.g.row_tiled:
        first = BinOp(Operator.MUL, Name(f"block_{tr.g.row_dim}"), Const(tr.g.rows))
    bound = first if eqn.prim == "reduce_min" else BinOp(Operator.ADD, first, Const(tr.g.rows - 1))
    tr.assign(eqn, SCALAR, ir_call("jnp.int32", bound))


def _reduce_block(tr: Translator, eqn: Eqn, atom: Atom, axis: int) -> None:
    if tr.form() is Where.STRIDED:
        raise NotInForm("a reduction has no place in an elementwise body's strided block")
    if tr.form() is Where.ROWS and axis == 0:
        raise NotInForm("a reduction over the rows mixes the rows the row form keeps apart")
    src = tr.source(atom)
    dtype = tr.dtype(atom)
    along_loop = tr.kind(atom) == LOOP_TILE
    if along_loop and axis == 0:
        raise tr.fail(
            eqn,
            "the body reduces a block along the loop dim over its rows",
            "reduce the block over the loop dim (axis=1), a per-row statistic as softmax takes",
        )
    # A slice of the frame's columns lies inside the array: its own columns need no mask.
    width = tr.g.own_width(tr.kind(atom), tr.logical_shape(atom))
    if axis == 1:
        ragged = (tr.g.ragged_loop if along_loop else tr.g.ragged_cols) and width is None
    else:
        ragged = tr.g.ragged_rows
    if ragged:
        edge = (Mask.LOOP_OK if along_loop else Mask.COL_OK) if axis == 1 else Mask.ROW_OK
        mask: Expr = Name(edge)
        if width is not None:  # the block mask has the frame's columns
            edge = Mask.ROW_OK_VEC
            mask = broadcast(Name(edge), (tr.g.rows, width), 0)
        src = identity_past_edge(tr, eqn.prim, atom, src, edge, mask)
    logical = tr.logical_shape(atom)
    if axis == 1 and width is not None and tr.g.padded_columns(tr.kind(atom), logical):
        src = _identity_past_own_columns(tr, eqn.prim, atom, src, logical[-1], width)
    # The row form holds one row as a vector: its row reduction is the vector's full one.
    axes = (0,) if tr.form() is Where.ROWS else (axis,)
    reduced = reduction_carrying_nan(tr, eqn.prim, eqn.outputs[0], src, axes, dtype)
    tr.assign(eqn, ROW if axis == 1 else (LOOP_COL if along_loop else COL), reduced)
    if tr.form() is Where.ROWS:
        tr.row_reductions.append((eqn.outputs[0], eqn.prim, dtype))


def identity_past_edge(
    tr: Translator, prim: str, atom: Atom, src: Expr, edge: Mask, mask: Expr
) -> Expr:
    """`src` with the reduction's identity where `mask` (built from `edge`) says the element
    lies past the array's edge, so that it takes no part. A loaded operand already holds its
    fill there; if that is the identity, no mask is needed."""
    dtype = tr.dtype(atom)
    identity = reduction_identity(prim, dtype)
    fill = dict(tr.g.input_fills).get(atom.var or "")
    if fill is not None and fill == identity:
        return src
    tr.masks.add(edge)
    return select(mask, src, Literal(identity, dtype, weak_type=True), dtype)


def _identity_past_own_columns(
    tr: Translator, prim: str, atom: Atom, src: Expr, columns: int, width: int
) -> Expr:
    """`src`, a block of `width` registers of which the first `columns` hold values (a dim
    a constant sizes, padded), with the reduction's identity in the others."""
    dtype = tr.dtype(atom)
    inside = Name(value_part(atom.var or "value", f"first_{columns}"))
    less = BinOp(Operator.LT, own_column_positions(width), Const(columns))
    tr.lines.append(
        Assign((inside,), broadcast(less, (tr.g.rows, width), 1, tensor_cores=tr.g.tensor_cores))
    )
    identity = Literal(reduction_identity(prim, dtype), dtype, weak_type=True)
    return select(inside, src, identity, dtype)


def own_column_positions(width: int) -> Expr:
    """The positions 0 .. width - 1 of a block's columns of its own width, per column."""
    return ir_call(
        "plgpu.broadcasted_iota",
        DType("int32"),
        Const((width,)),
        Const(0),
        layout=layout(COL),
    )


def reduction_carrying_nan(
    tr: Translator, prim: str, out: str, src: Expr, axes: tuple[int, ...], dtype: str
) -> Expr:
    """`prim` of `src` over `axes`. The interpreter's max and min run on the CPU, where they
    can skip a NaN; Mosaic GPU's carry it, as jnp's do: in the interpreter a sum of the NaNs
    alone, NaN exactly where `src` holds one, carries it."""
    reduction = REDUCTIONS[prim]
    if not (tr.g.interpreted and prim != "reduce_sum" and "float" in dtype):
        return ir_call(reduction, src, Const(axes))
    if not isinstance(src, Name):
        tr.lines.append(Assign((Name(value_part(out, "in")),), src))
        src = Name(value_part(out, "in"))
    nans = Name(value_part(out, "nans"))
    zero = Literal(0.0, dtype, weak_type=True)
    tr.lines.append(_NAN_COMMENT)
    is_nan = BinOp(Operator.NE, src, src)
    only_nans = ir_call("jnp.where", is_nan, src, zero)
    tr.lines.append(Assign((nans,), ir_call("lax.reduce_sum", only_nans, Const(axes))))
    if tr.form() is Where.ROWS:
        tr.row_reductions.append((nans.text, "reduce_sum", dtype))
    return ir_call(
        "jnp.where", BinOp(Operator.NE, nans, nans), nans, ir_call(reduction, src, Const(axes))
    )


def _widened(tr: Translator, kind: Kind, shape: tuple[int, ...]) -> Kind:
    """The kind of an elementwise result of logical `shape`. jnp broadcasts a vector against
    a constant block held as its scalar (`r[:, None] * jnp.ones_like(v)`): the result spans
    the block, so it is a block, not the vector."""
    if len(shape) != 2:
        return kind
    if (kind == ROW and shape[1] != 1) or (kind in (COL, LOOP_COL) and shape[0] != 1):
        return tr.block_kind(shape, kind)
    return kind


def _vector_axis(tr: Translator, atom: Atom, kind: Kind) -> int:
    """The axis of a vector value's logical shape that holds its elements."""
    shape = tr.trace.aval(atom.var)[0] if atom.var else ()
    return 0 if len(shape) == 1 or kind == ROW else 1


def reshape(tr: Translator, eqn: Eqn) -> None:
    atom = eqn.inputs[0]
    kind = tr.kind(atom)
    in_shape = tr.trace.aval(atom.var)[0] if atom.var else ()
    out_shape = tr.trace.aval(eqn.outputs[0])[0]
    if kind == SCALAR:
        return tr.alias(eqn, atom, SCALAR)
    if kind in (TILE, LOOP_TILE, LOOP_ROWS):
        # A unit dim after the block's (jnp.take_along_axis's indices, (M, K, 1)) is the block.
        unit_after = kind is TILE and tuple(out_shape) == (*in_shape, 1)
        if tuple(in_shape) == tuple(out_shape) or unit_after:
            return tr.alias(eqn, atom, kind)
        raise tr.fail(
            eqn,
            f"the body reshapes or broadcasts a block from {list(in_shape)} to "
            f"{list(out_shape)}, which the register layout cannot express",
            "keep blocks at their shape; reshape operands outside the kernel",
        )
    # A vector: jnp adds and drops unit dims around it (keepdims), or broadcasts it.
    vector_axis = _vector_axis(tr, atom, kind)
    if eqn.prim == "broadcast_in_dim":
        out_axis = tuple(eqn.param("broadcast_dimensions"))[vector_axis]
    else:
        out_axis = 0 if kind == ROW or len(out_shape) == 1 else 1
    expected_axis = 0 if kind == ROW or len(out_shape) == 1 else 1
    if out_axis != expected_axis:
        raise tr.fail(
            eqn,
            "the body turns a per-row vector into a per-column one (or back), which needs a "
            "transpose",
            "keep per-row vectors along the rows; compute column statistics with axis=0",
            actual=f"{kind} vector {list(in_shape)} to {list(out_shape)}",
        )
    spread = len(out_shape) == 2 and out_shape[1 - out_axis] != 1
    if spread:
        block = tr.block_kind(tuple(out_shape), kind)
        return tr.assign(eqn, block, tr.as_kind(atom, block, tuple(out_shape)))
    return tr.alias(eqn, atom, kind)


def reduction_identity(prim: str, dtype: str) -> float | int:
    """What an element that takes no part in the reduction `prim` holds."""
    if prim == "reduce_sum":
        return 0
    if "int" in dtype:
        info = np.iinfo(np.dtype(dtype))
        return int(info.min if prim == "reduce_max" else info.max)
    return -math.inf if prim == "reduce_max" else math.inf


# Elementwise ops lower everywhere. A reduction keeps the strided block (which holds no
# vector) only when it reduces nothing, and the row form only over the columns; a broadcast
# of a vector has no place in the strided block.
_REDUCE = Rule(
    reduce,
    support=((Where.STRIDED, Support.PARTLY), (Where.ROWS, Support.PARTLY)),
    note="over the columns in the row form (a reduction over the rows mixes the rows it keeps "
    "apart); in the strided block only of an axis of one element",
)
_RESHAPE = Rule(
    reshape,
    support=((Where.STRIDED, Support.PARTLY),),
    note="in the strided block only between blocks (it holds no per-row or per-column vector)",
)
BODY_RULES: Mapping[str, Rule] = {
    **{prim: Rule(elementwise) for prim in (*UNARY, *BINARY, *OTHER)},
    **{prim: _REDUCE for prim in REDUCTIONS},
    **{prim: _RESHAPE for prim in SHAPE_ONLY},
}
