"""Scans along the columns of a block: `jnp.cumsum`, `jnp.cumprod`, `lax.cummax` and
`lax.cummin` over axis 1, forward or reversed, of a dim the block holds whole.

Mosaic GPU has no scan of registers, and the WGMMA layout spreads a row over four threads, so
the scan runs in shared memory the body scopes for it (`pl.run_scoped`), in the Hillis-Steele
order: the block is stored once, then each of log2(columns) rounds combines every element
with the one `s` columns before it (s = 1, 2, 4, ...), reading both from shared memory with
one element a thread at a time (the warpgroup-strided layout of 1-element vectors, which any
offset suits) and writing the round back. A round's reads and writes are split by the
warpgroup barriers `plgpu.commit_smem` issues. The block is read back in the WGMMA layout.

The buffer holds the block's rows and its columns plus half of them: the elements a shift
reads before the first column (after the last, reversed) land in that margin and are masked.
Its bytes are counted in the plan's shared memory. 16-bit floats are scanned in float32 and
rounded once at the end: the sum of a row of bfloat16 rounds each partial sum as float32.
"""

from collections.abc import Mapping

from ..._compat import has_plgpu_store
from ..ir.names import value_part
from ..ir.nodes import (
    Assign,
    BinOp,
    Call,
    Const,
    DType,
    Expr,
    ExprStmt,
    FunctionDef,
    Keyword,
    Kind,
    Literal,
    Name,
    Operator,
    Return,
    Slice,
    Stmt,
    Subscript,
)
from ..ir.nodes import call as ir_call
from ..ir.pallas import layout, store
from ..trace.body import Atom, Eqn
from .context import Rule, Support, Translator, Where
from .rules import materialized_block, reduction_identity

__all__ = ["SCAN_RULES"]

# The combine of each scan, and the reduction whose identity masks what a shift reads past
# the row's start.
_COMBINES = {
    "cumsum": ("lax.add", "reduce_sum"),
    "cumprod": ("lax.mul", None),
    "cummax": ("lax.max", "reduce_max"),
    "cummin": ("lax.min", "reduce_min"),
}
_WRITTEN_AS = {
    "cumsum": "jnp.cumsum",
    "cumprod": "jnp.cumprod",
    "cummax": "lax.cummax",
    "cummin": "lax.cummin",
}
_SCANNED = ("float32", "int32", "uint32")
_WIDENED = ("bfloat16", "float16", "int16", "uint16")


def _scan(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    logical = tr.logical_shape(atom)
    if tr.kind(atom) is Kind.SCALAR and len(logical) == 2:
        atom = materialized_block(tr, eqn, atom)  # a constant block held as its scalar
    reverse = bool(eqn.param("reverse"))
    _check_input(tr, eqn, atom, int(eqn.param("axis")))
    dtype = tr.dtype(atom)
    work = dtype if dtype in _SCANNED else ("float32" if "float" in dtype else "int32")
    out = eqn.outputs[0]
    rows = tr.g.rows
    width = tr.g.own_width(Kind.TILE, logical) or tr.g.cols
    # The logical columns: a shift from the right must not read the padded ones.
    columns = logical[1]
    margin = _margin(width)
    src = tr.source(atom)
    if work != dtype:
        src = ir_call("lax.convert_element_type", src, DType(work))
    buffer = Name(value_part(out, "buffer"))
    window = Name(value_part(out, "window"))
    first = 0 if reverse else margin
    body: list[Stmt] = [Assign((window,), _at(buffer, None, first, width))]
    new_api = has_plgpu_store()
    body += [store(window, src, new_api), _commit()]
    group = _group_rows(rows, width)
    strided = Name(value_part(out, "strided"))
    layout_of_group = ir_call("plgpu.Layout.WG_STRIDED", Const((group, width)), Const(1))
    body.append(Assign((strided,), layout_of_group))
    positions = Name(value_part(out, "columns"))
    iota = ir_call("plgpu.broadcasted_iota", DType("int32"), Const((group, width)), Const(1))
    body.append(Assign((positions,), _with_layout(iota, strided)))
    combine, identity_of = _COMBINES[eqn.prim]
    identity = Literal(
        1 if identity_of is None else reduction_identity(identity_of, work), work, weak_type=True
    )
    shift = 1
    while shift < width:
        start = shift if reverse else margin - shift
        inside: Expr = (
            BinOp(Operator.LT, BinOp(Operator.ADD, positions, Const(shift)), Const(columns))
            if reverse
            else BinOp(Operator.GT, positions, Const(shift - 1))
        )
        # Each group of rows is combined in registers, then written back once every thread
        # has read the round's window: the groups bound the values a thread holds.
        totals: list[tuple[Expr, Name]] = []
        for g in range(rows // group):
            rows_of_group = (g * group, group)
            total = Name(value_part(out, f"total{g}"))
            earlier = Name(value_part(out, f"earlier{g}"))
            body.append(
                Assign((earlier,), _load(_at(buffer, rows_of_group, start, width), strided))
            )
            mine = Name(value_part(out, f"mine{g}"))
            body.append(Assign((mine,), _load(_at(buffer, rows_of_group, first, width), strided)))
            combined = ir_call(combine, mine, ir_call("jnp.where", inside, earlier, identity))
            body.append(Assign((total,), combined))
            totals.append((_at(buffer, rows_of_group, first, width), total))
        body.append(_commit())  # every thread has read the window before it changes
        body += [store(ref, total, new_api) for ref, total in totals]
        body.append(_commit())
        shift *= 2
    scanned: Expr = _load(window, layout(Kind.TILE))
    if work != dtype:
        scanned = ir_call("lax.convert_element_type", scanned, DType(dtype))
    body.append(Return(scanned))
    function = value_part(out, "scan")
    tr.lines.append(FunctionDef(function, (buffer.text,), tuple(body)))
    smem = ir_call("plgpu.SMEM", Const((rows, width + margin)), DType(work))
    tr.assign(eqn, Kind.TILE, ir_call("pl.run_scoped", Name(function), smem))
    tr.scratch_bytes = max(tr.scratch_bytes, rows * (width + margin) * _itemsize(work))


def _check_input(tr: Translator, eqn: Eqn, atom: Atom, axis: int) -> None:
    kind, dtype = tr.kind(atom), tr.dtype(atom)
    written = _WRITTEN_AS[eqn.prim]
    if kind is not Kind.TILE or axis != 1:
        what = f"over the rows of a block (axis={axis})" if kind is Kind.TILE else f"of a {kind}"
        raise tr.fail(
            eqn,
            f"the body takes {written} {what}; a scan runs along the columns of a block",
            "scan along axis=1 of a 2-D block; for the rows, pass the transposed operand and "
            "scan its columns",
        )
    if tr.g.col_tiled or tr.g.col_looped:
        split = "tiled" if tr.g.col_tiled else "looped"
        raise tr.fail(
            eqn,
            f"the body takes {written} along dim {tr.g.col_dim}, which is {split}: each block "
            "would scan only its own columns",
            f"hold {tr.g.col_dim} whole in every block (drop it from {split[:4]}=)",
            dim=tr.g.col_dim,
        )
    if tr.g.in_step:
        raise tr.fail(
            eqn,
            f"the body takes {written} inside a loop's step",
            "scan the value the loop returns, after the loop",
        )
    if dtype not in _SCANNED + _WIDENED:
        raise tr.fail(
            eqn,
            f"the body takes {written} of {dtype} values",
            "cast them to float32 or int32 first",
            actual=dtype,
            expected=f"one of {', '.join(_SCANNED + _WIDENED)}",
        )


def _margin(width: int) -> int:
    """Columns before the window (after it, reversed) for the longest shift: half the
    width's power of two, even, so that the WGMMA layout's 2-element stores stay aligned."""
    longest = 1
    while longest * 2 < width:
        longest *= 2
    return max(2, longest)


def _at(buffer: Name, rows: tuple[int, int] | None, start: int, width: int) -> Expr:
    """The window of the buffer from column `start`, `width` wide, of the rows (first,
    count), or all of them."""
    row_index: Expr = Slice() if rows is None else ir_call("pl.ds", Const(rows[0]), Const(rows[1]))
    columns = ir_call("pl.ds", Const(start), Const(width))
    return Subscript(Name(f"{buffer.text}.at"), (row_index, columns))


def _group_rows(rows: int, width: int) -> int:
    """Rows combined at once in a round: at most 32 elements a thread, in whole rows that
    split the block evenly and fill the warpgroup's 128 threads."""
    group = rows
    while group * width > 32 * 128 and (group // 2) * width % 128 == 0 and group % 2 == 0:
        group //= 2
    return group


def _load(ref: Expr, how: Expr) -> Expr:
    return ir_call("plgpu.load", ref, layout=how, optimized=Const(False))


def _with_layout(iota: Call, how: Expr) -> Expr:
    return Call(iota.func, iota.args, (*iota.keywords, Keyword("layout", how)))


def _commit() -> ExprStmt:
    return ExprStmt(ir_call("plgpu.commit_smem"))


def _itemsize(dtype: str) -> int:
    return 2 if "16" in dtype else 4


_RULE = Rule(
    _scan,
    support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.NO), (Where.STEP, Support.NO)),
    note="it runs in shared memory on the block form's whole block; the row form's rows and "
    "the strided block have no shared-memory scan, and a loop's step does not scan",
)
SCAN_RULES: Mapping[str, Rule] = {prim: _RULE for prim in _COMBINES}
