"""Scans along the columns of a block: `jnp.cumsum`, `jnp.cumprod`, `lax.cummax` and
`lax.cummin` over axis 1, forward or reversed, of a dim the block holds whole; in the row
form, along the one row it holds (a 1-D buffer, the same rounds).

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

import dataclasses
from collections.abc import Mapping

from ...._compat import has_plgpu_store
from ...ir.names import value_part
from ...ir.nodes import (
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
from ...ir.nodes import call as ir_call
from ...trace.body import Atom, BodyTrace, Eqn
from .. import hardware as hw
from ..pallas import layout, store
from .context import NotInForm, Rule, Support, Translator, Where
from .rules import materialized_block, reduction_identity, refuse_split_columns

__all__ = ["SCAN_RULES", "row_scan_bytes", "row_scan_dtypes"]

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
# Scanned as float32 or int32 and cast back: 8- and 16-bit integers wrap as jax's do.
_WIDENED = ("bfloat16", "float16", "int16", "uint16", "int8", "uint8")


def _scan(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    logical = tr.logical_shape(atom)
    if tr.g.one_row:
        return _scan_row(tr, eqn, atom, logical)
    if tr.kind(atom) is Kind.SCALAR and len(logical) == 2:
        atom = materialized_block(tr, eqn, atom)  # a constant block held as its scalar
    _check_input(tr, eqn, atom, int(eqn.param("axis")))
    dtype = tr.dtype(atom)
    work = _work_dtype(dtype)
    out = eqn.outputs[0]
    # Rounds reach the logical columns only: past them, nothing is stored or read.
    columns = logical[1]
    width = tr.g.own_width(Kind.TILE, logical) or tr.g.cols
    buffer = _Buffer(out, tr.g.rows, width, _margin(columns), bool(eqn.param("reverse")))
    src = tr.source(atom)
    if work != dtype:
        src = ir_call("lax.convert_element_type", src, DType(work))
    new_api = has_plgpu_store()
    window = Name(value_part(out, "window"))
    body: list[Stmt] = [Assign((window,), buffer.window(None, buffer.first))]
    body += [store(window, src, new_api), _commit()]
    strided = Name(value_part(out, "strided"))
    layout_of_group = ir_call("plgpu.Layout.WG_STRIDED", Const((buffer.group, width)), Const(1))
    body.append(Assign((strided,), layout_of_group))
    positions = Name(value_part(out, "columns"))
    iota = ir_call("plgpu.broadcasted_iota", DType("int32"), Const((buffer.group, width)), Const(1))
    body.append(Assign((positions,), _with_layout(iota, strided)))
    combine, identity_of = _COMBINES[eqn.prim]
    identity = reduction_identity(identity_of, work) if identity_of else 1
    step = _Step(combine, Literal(identity, work, weak_type=True), strided, positions, new_api)
    shift = 1
    while shift < columns:
        body += buffer.round(step, shift, columns)
        shift *= 2
    scanned: Expr = _load(window, layout(Kind.TILE))
    if work != dtype:
        scanned = ir_call("lax.convert_element_type", scanned, DType(dtype))
    body.append(Return(scanned))
    function = value_part(out, "scan")
    tr.lines.append(FunctionDef(function, (buffer.name.text,), tuple(body)))
    smem = ir_call("plgpu.SMEM", Const((buffer.rows, width + buffer.margin)), DType(work))
    tr.assign(eqn, Kind.TILE, ir_call("pl.run_scoped", Name(function), smem))
    bytes_ = hw.nbytes(buffer.rows * (width + buffer.margin), work)
    tr.scratch_bytes = max(tr.scratch_bytes, bytes_)


def _scan_row(tr: Translator, eqn: Eqn, atom: Atom, logical: tuple[int, ...]) -> None:
    """The row form's scan of one whole row, a vector in the row's strided layout: stored
    into a 1-D buffer, scanned there in the same rounds as a block's, and read back. The
    block form takes what the row form cannot (a loop's step, columns walked by a loop)."""
    # A row taken in chunks takes no scan (the translator's `chunkable`): this is the row.
    if tr.g.in_step or tr.g.col_looped or tr.g.col_tiled or tr.kind(atom) is not Kind.TILE:
        raise NotInForm("the row form scans a whole row held in registers, outside loops")
    _check_input(tr, eqn, atom, int(eqn.param("axis")))
    dtype = tr.dtype(atom)
    work = _work_dtype(dtype)
    out = eqn.outputs[0]
    columns, (width,) = logical[1], tr.g.shape(Kind.TILE)
    buffer = _RowBuffer(out, width, _margin(columns), bool(eqn.param("reverse")))
    src = tr.source(atom)
    if work != dtype:
        src = ir_call("lax.convert_element_type", src, DType(work))
    new_api = has_plgpu_store()
    window = Name(value_part(out, "window"))
    body: list[Stmt] = [Assign((window,), buffer.window(buffer.first))]
    body += [store(window, src, new_api), _commit()]
    strided = Name(value_part(out, "strided"))
    body.append(
        Assign((strided,), ir_call("plgpu.Layout.WG_STRIDED", Const((buffer.group,)), Const(1)))
    )
    positions = Name(value_part(out, "columns"))
    iota = ir_call("plgpu.broadcasted_iota", DType("int32"), Const((buffer.group,)), Const(0))
    body.append(Assign((positions,), _with_layout(iota, strided)))
    combine, identity_of = _COMBINES[eqn.prim]
    identity = reduction_identity(identity_of, work) if identity_of else 1
    step = _Step(combine, Literal(identity, work, weak_type=True), strided, positions, new_api)
    shift = 1
    while shift < columns:
        body += buffer.round(step, shift, columns)
        shift *= 2
    scanned: Expr = _load(window, tr.g.row_layout())
    if work != dtype:
        scanned = ir_call("lax.convert_element_type", scanned, DType(dtype))
    body.append(Return(scanned))
    function = value_part(out, "scan")
    tr.lines.append(FunctionDef(function, (buffer.name.text,), tuple(body)))
    smem = ir_call("plgpu.SMEM", Const((width + buffer.margin,)), DType(work))
    tr.assign(eqn, Kind.TILE, ir_call("pl.run_scoped", Name(function), smem))
    tr.scratch_bytes = max(tr.scratch_bytes, hw.nbytes(width + buffer.margin, work))


@dataclasses.dataclass(frozen=True)
class _RowBuffer:
    """The row form's scan buffer: one row, `width` + `margin` elements, the row's window
    after the margin (before it, reversed), combined `group` elements at a time."""

    out: str
    width: int
    margin: int
    reverse: bool

    @property
    def name(self) -> Name:
        return Name(value_part(self.out, "buffer"))

    @property
    def first(self) -> int:
        return 0 if self.reverse else self.margin

    @property
    def group(self) -> int:
        """At most 32 elements a thread of the warpgroup's 128 at once: the row's width,
        halved while it is over 4096 and stays a multiple of 128 elements."""
        group = self.width
        while group > 32 * 128 and group % 2 == 0 and (group // 2) % 128 == 0:
            group //= 2
        return group

    def window(self, start: int, count: int | None = None) -> Expr:
        columns = ir_call("pl.ds", Const(start), Const(count or self.width))
        return Subscript(Name(f"{self.name.text}.at"), (columns,))

    def round(self, step: "_Step", shift: int, columns: int) -> list[Stmt]:
        """One round, as a block's (`_Buffer.round`), on the row's groups of elements.

        A row of one group keeps its totals in registers from round to round. A wider row
        is combined a group at a time, in the order that leaves the elements a later group
        reads unwritten (from the last group to the first; reversed, the first to the last):
        each group's reads, a barrier, its writes. A thread then holds one group at a time,
        where holding every group's totals until one write would take twice the row's
        registers."""
        start = self.first + shift if self.reverse else self.first - shift
        groups = range(self.width // self.group)
        single = len(groups) == 1
        body: list[Stmt] = []
        for g in groups if self.reverse else reversed(groups):
            at = g * self.group
            where: Expr = BinOp(Operator.ADD, step.positions, Const(at)) if at else step.positions
            inside: Expr = (
                BinOp(Operator.LT, BinOp(Operator.ADD, where, Const(shift)), Const(columns))
                if self.reverse
                else BinOp(Operator.GT, where, Const(shift - 1))
            )
            earlier = Name(value_part(self.out, f"earlier{g}"))
            total = Name(value_part(self.out, f"total{g}"))
            body.append(
                Assign((earlier,), _load(self.window(start + at, self.group), step.strided))
            )
            mine = total
            if shift == 1 or not single:
                mine = Name(value_part(self.out, f"mine{g}"))
                own = _load(self.window(self.first + at, self.group), step.strided)
                body.append(Assign((mine,), own))
            before = ir_call("jnp.where", inside, earlier, step.identity)
            body.append(Assign((total,), ir_call(step.combine, mine, before)))
            body.append(_commit())  # the group's elements are read before they change
            body.append(store(self.window(self.first + at, self.group), total, step.new_api))
        return [*body, _commit()]


@dataclasses.dataclass(frozen=True)
class _Step:
    """What every round does to an element: combine it with the one a shift before it, or
    with the identity where that one lies before the row's start (after its end, reversed)."""

    combine: str
    identity: Literal
    strided: Name  # the layout of a group of rows, one element a thread at a time
    positions: Name  # each element's column, in that layout
    new_api: bool


@dataclasses.dataclass(frozen=True)
class _Buffer:
    """The scan's shared memory: `rows` by `width` + `margin` columns, the block's window
    after the margin (before it, reversed), so that a shifted window stays inside."""

    out: str
    rows: int
    width: int
    margin: int
    reverse: bool

    @property
    def name(self) -> Name:
        return Name(value_part(self.out, "buffer"))

    @property
    def first(self) -> int:
        """The column the block's window starts at."""
        return 0 if self.reverse else self.margin

    @property
    def group(self) -> int:
        return _group_rows(self.rows, self.width)

    def window(self, rows: tuple[int, int] | None, start: int) -> Expr:
        """The window `width` wide from column `start`, of the rows (first, count) or all."""
        row_index: Expr = (
            Slice() if rows is None else ir_call("pl.ds", Const(rows[0]), Const(rows[1]))
        )
        columns = ir_call("pl.ds", Const(start), Const(self.width))
        return Subscript(Name(f"{self.name.text}.at"), (row_index, columns))

    def round(self, step: _Step, shift: int, columns: int) -> list[Stmt]:
        """One round: each group of rows is combined in registers, then written back once
        every thread has read the round's window; the groups bound what a thread holds."""
        start = self.first + shift if self.reverse else self.first - shift
        inside: Expr = (
            BinOp(Operator.LT, BinOp(Operator.ADD, step.positions, Const(shift)), Const(columns))
            if self.reverse
            else BinOp(Operator.GT, step.positions, Const(shift - 1))
        )
        body: list[Stmt] = []
        written: list[Stmt] = []
        for g in range(self.rows // self.group):
            rows = (g * self.group, self.group)
            earlier, mine = (
                Name(value_part(self.out, f"{part}{g}")) for part in ("earlier", "mine")
            )
            body.append(Assign((earlier,), _load(self.window(rows, start), step.strided)))
            body.append(Assign((mine,), _load(self.window(rows, self.first), step.strided)))
            total = Name(value_part(self.out, f"total{g}"))
            before = ir_call("jnp.where", inside, earlier, step.identity)
            body.append(Assign((total,), ir_call(step.combine, mine, before)))
            written.append(store(self.window(rows, self.first), total, step.new_api))
        # Every thread has read the window before it changes, and written it before the next.
        return [*body, _commit(), *written, _commit()]


def row_scan_dtypes(trace: BodyTrace) -> tuple[str, ...]:
    """The dtype each scan of the body (outside its loops) runs in: its buffers' elements."""
    return tuple(
        _work_dtype(trace.aval(e.inputs[0].var)[1] if e.inputs[0].var else "float32")
        for e in trace.eqns
        if e.prim in _COMBINES
    )


def row_scan_bytes(width: int, work: str) -> int:
    """The shared memory of a scan of the row form's row of `width` elements: the row and the
    margin its longest shift reads (at most half the width)."""
    return hw.nbytes(width + _margin(width), work)


def _work_dtype(dtype: str) -> str:
    return dtype if dtype in _SCANNED else ("float32" if "float" in dtype else "int32")


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
    if tr.g.scan_step and tr.g.col_looped:
        # The step's block of the loop dim: the carry brings in the steps the loop walked
        # before it, so the scan runs the loop's way (against it, it would need the steps
        # not walked yet, and would read the ragged step's fill into its elements).
        if bool(eqn.param("reverse")) != tr.g.reversed_step:
            walked = "from the last block to the first" if tr.g.reversed_step else "forward"
            scan = "a reversed" if eqn.param("reverse") else "a forward"
            fix = (
                f"scan with reverse={tr.g.reversed_step} in the step, the way the loop walks; "
                f"for a {'prefix' if tr.g.reversed_step else 'suffix'} scan, walk the loop "
                f"{'forward' if tr.g.reversed_step else 'backwards'}: sk.map_blocks("
                f"{tr.g.col_dim!r}, step, init=..., reverse={not tr.g.reversed_step})"
            )
            raise tr.fail(
                eqn,
                f"the body takes {scan} {written} along the loop dim {tr.g.col_dim} in the "
                f"step of a scan walked {walked}: the carry holds the blocks walked before "
                "the step's",
                fix,
                dim=tr.g.col_dim,
            )
    elif tr.g.in_step:
        along = (
            f"; or, along the loop dim, carry the running value across the steps: "
            f"sk.map_blocks({tr.g.col_dim!r}, step, init=...) scans each step's block"
            if tr.g.col_looped
            else ""
        )
        raise tr.fail(
            eqn,
            f"the body takes {written} inside a loop's step",
            "scan the value the loop returns, after the loop" + along,
        )
    else:
        refuse_split_columns(tr, eqn, f"takes {written} along", "scan")
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


_RULE = Rule(
    _scan,
    support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.PARTLY), (Where.STEP, Support.NO)),
    note="it runs in shared memory on the block form's whole block, or on the row form's "
    "row held whole in registers outside loops; the strided block has no shared-memory scan; "
    "a loop's step scans only in a scan along the loop dim (sk.map_blocks with init=)",
)
SCAN_RULES: Mapping[str, Rule] = {prim: _RULE for prim in _COMBINES}
