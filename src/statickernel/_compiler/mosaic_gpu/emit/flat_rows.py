"""Rows whose bytes are not a multiple of 16, addressed in their array flattened (the row
form's `OperandPlan.flat`).

TMA needs every stride but the last of an array to be a multiple of 16 bytes, so a 2-D array
of 4095 float32 columns has no tensor map; its rows would have to be padded on the host (a
copy of the whole array before the launch and another after it). Flattened to 1-D (a
reshape, no copy) the array has no stride at all, and a row is the run of elements from
`row * columns`:
  - a row is loaded by 1-D TMA boxes from its first element: a box starts at any element,
    and the last one reads past the row's end, into the next row's first elements (zeros
    past the array's end), which land in shared memory past the row's end, where the row
    form's loads select the fill;
  - a result's row is stored from registers, an element a thread (a store may start at any
    element; a box would end in the next row, which another CTA writes): pieces read from
    shared memory at one element a thread, and a last piece of one element a thread that ends
    at the row's last element, overlapping the piece before it (those elements are written
    twice, with the same values, by the same threads in order).
"""

from ...ir.names import LocalNames, gmem_ref
from ...ir.nodes import (
    Assign,
    BinOp,
    Comment,
    Const,
    Expr,
    ExprStmt,
    FunctionDef,
    Name,
    Operator,
    Stmt,
    Subscript,
    call,
)
from .. import hardware as hw
from ..plan.plan import OperandPlan

__all__ = ["flat_box", "flat_copies", "flat_row_loads", "flat_row_stores"]

# TMA's largest box along a dim, in elements.
_MAX_BOX = 256
# The elements of one piece of a stored row: one a thread of the warpgroup.
_THREADS = 128
# A stored row's pieces are up to this many elements: 16 registers a thread.
_PIECE = 16 * _THREADS
_ZEROS = Name("plgpu.OOBFillMode.ZEROS")


def flat_box(width: int, dtype: str) -> int:
    """The elements of each 1-D TMA box of a row held `width` elements wide in shared memory:
    the largest box of at most 256 elements and a multiple of 16 bytes that divides it."""
    unit = hw.per_bytes(hw.TMA_ALIGN_BYTES, dtype)  # 256 is a multiple of every unit
    return next(b for b in range(_MAX_BOX, 0, -unit) if width % b == 0)


def flat_copies(op: OperandPlan) -> int:
    """The TMA copies one row of `op` takes (each arrives on its block's barrier)."""
    width = op.block_shape[-1]
    return width // flat_box(width, op.dtype)


def _flat_span(op: OperandPlan, row: Expr | None, start: Expr, size: int) -> Expr:
    """`size` elements of the flattened array from column `start` of `row` (of the vector
    when `row` is None)."""
    if row is None:
        offset = start
    else:
        at_row = BinOp(Operator.MUL, row, Const(op.shape[-1]))
        offset = at_row if start == Const(0) else BinOp(Operator.ADD, at_row, start)
    return Subscript(Name(f"{gmem_ref(op.name)}.at"), (call("pl.ds", offset, Const(size)),))


def _smem_span(smem_row: Expr, start: Expr, size: int) -> Expr:
    assert isinstance(smem_row, Subscript)
    return Subscript(smem_row.value, (*smem_row.index, call("pl.ds", start, Const(size))))


def flat_row_loads(
    op: OperandPlan, row: Expr | None, smem_row: Expr, barrier: Expr, names: LocalNames
) -> list[Stmt]:
    """The 1-D TMA boxes that copy `row` of the flattened `op` (the whole vector `op` when
    `row` is None, its last box filled with zeros past the end) into `smem_row` (its row's
    shared memory, e.g. `x_smem.at[slot, r]`)."""
    width = op.block_shape[-1]
    box = flat_box(width, op.dtype)

    def copy(start: Expr) -> Stmt:
        gmem = _flat_span(op, row, start, box)
        smem = _smem_span(smem_row, start, box)
        return ExprStmt(call("plgpu.copy_gmem_to_smem", gmem, smem, barrier, oob_mode=_ZEROS))

    # A loop walks the boxes even where there is one: its traced start lets a box run past
    # the array's end (TMA fills zeros there), where a static slice past a vector of 129
    # elements would be refused as out of bounds.
    counter = Name(names.local("box"))
    start = BinOp(Operator.MUL, counter, Const(box))
    loop = call("pl.loop", Const(0), Const(width // box))
    return [
        FunctionDef(names.local("load_boxes"), (counter.text,), (copy(start),), decorators=(loop,))
    ]


def flat_row_stores(op: OperandPlan, row: Expr, smem_row: Expr, names: LocalNames) -> list[Stmt]:
    """The stores of `row` of the flattened result `op` from its row's shared memory
    `smem_row`, through registers: whole pieces of up to `_PIECE` elements, then a piece of
    one element a thread that ends at the row's last element."""
    columns = op.shape[-1]
    assert columns >= _THREADS, "a flat result's row holds one piece at least"
    values = Name(names.local("piece_values"))

    def piece(start: Expr, size: int) -> list[Stmt]:
        layout = call("plgpu.Layout.WG_STRIDED", Const((size,)), Const(1))
        load = call("plgpu.load", _smem_span(smem_row, start, size), layout=layout)
        target = Subscript(_flat_span(op, row, start, size), (Name("..."),))
        return [Assign((values,), load), Assign((target,), values)]

    whole = columns // _PIECE
    lines: list[Stmt] = []
    if whole > 1:
        counter = Name(names.local("piece"))
        start = BinOp(Operator.MUL, counter, Const(_PIECE))
        loop = call("pl.loop", Const(0), Const(whole))
        body = tuple(piece(start, _PIECE))
        lines.append(
            FunctionDef(names.local("store_pieces"), (counter.text,), body, decorators=(loop,))
        )
    elif whole == 1:
        lines += piece(Const(0), _PIECE)
    done = whole * _PIECE
    rest = (columns - done) // _THREADS * _THREADS
    if rest:
        lines += piece(Const(done), rest)
    if (columns - done) % _THREADS:
        lines.append(Comment("The row's last elements, overlapping the piece before."))
        lines += piece(Const(columns - _THREADS), _THREADS)
    return lines
