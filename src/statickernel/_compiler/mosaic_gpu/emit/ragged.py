"""Code generation for ragged rows in the warp-specialized matmul (`plan.warpspec.RaggedRows`).

Along the rows the CTAs walk items, not row blocks. `group_rows(item)` walks the groups in
order, reading each size from global memory, and finds the (group, row block) pair the item
numbers, with the rows of the block that are the group's: `first_row` and `row_count`,
relative to the block. Group g's items are the blocks from its first row's to its last
row's, numbered after the g items of boundaries before it, so item i of group g is block
i - g. The consumers compute the whole block with group g's operand blocks and store only
those rows: `store_rows` stores them as the binary digits of their count, one TMA store of 2^i
rows each under `pl.when` (a TMA box is static; the count is data), committed as one group.
"""

from ...ir.names import RAGGED, gmem_ref, ragged_item
from ...ir.nodes import (
    Assign,
    BinOp,
    Call,
    Comment,
    Const,
    Expr,
    ExprStmt,
    FunctionDef,
    Name,
    Operator,
    Return,
    Stmt,
    Subscript,
    Tuple,
    call,
)
from ..pallas import attribute, ref_at
from ..plan.warp_walk import RaggedRows

__all__ = [
    "group_rows_function",
    "item_header",
    "piece_store",
    "selected_group",
    "store_rows",
    "with_rows",
]

_LOCAL = RAGGED


def _where(test: Expr, yes: Expr, no: Expr) -> Expr:
    return call("jnp.where", test, yes, no)


def _clip(x: Expr, high: int) -> Expr:
    return call("jnp.clip", x, Const(0), Const(high))


def group_rows_function(ragged: RaggedRows) -> FunctionDef:
    """`group_rows(item)`: the item's group, its row block, and the first and count of the
    block's rows that are the group's (none for an item past the last). Its locals are
    `walk_*`, a family no operand may take."""
    g, carry, item = Name("walk_index"), Name("walk_carry"), Name("walk_item")
    start, end, size = Name("walk_start"), Name("walk_end"), Name("walk_size")
    group, block, lo, hi = Name("group"), Name("walk_block"), Name("walk_lo"), Name("walk_hi")
    first, mine = Name("walk_first"), Name("walk_mine")
    count, bm = ragged.groups, ragged.block
    sizes = Name(gmem_ref(ragged.sizes))
    # Group `count` is the rows past the sizes' sum: a negative size counts as 0.
    # A size is read as int32 and clipped to [0, M], and each group's end to M: a negative
    # size counts as 0, and sizes summing past M are cut there without overflowing the sum.
    stored = Subscript(sizes, (call("jnp.minimum", g, Const(count - 1)),))
    as_int32 = call(attribute(stored, "astype"), Name("jnp.int32"))
    read = call("jnp.clip", as_int32, Const(0), Const(ragged.rows))
    rest = call("jnp.maximum", BinOp(Operator.SUB, Const(ragged.rows), start), Const(0))
    after_last = BinOp(
        Operator.ADD, call("lax.div", BinOp(Operator.SUB, end, Const(1)), Const(bm)), Const(1)
    )
    visit = FunctionDef(
        "walk_visit",
        ("walk_index", "walk_carry"),
        (
            Assign((Tuple((start, group, block, lo, hi)),), carry),
            Assign((size,), _where(BinOp(Operator.LT, g, Const(count)), read, rest)),
            Assign(
                (end,), call("jnp.minimum", BinOp(Operator.ADD, start, size), Const(ragged.rows))
            ),
            Comment("Its items: the blocks its rows touch, numbered after g group boundaries."),
            Assign((first,), BinOp(Operator.ADD, call("lax.div", start, Const(bm)), g)),
            Assign((Name("walk_last"),), BinOp(Operator.ADD, after_last, g)),
            Assign(
                (mine,),
                BinOp(
                    Operator.AND,
                    BinOp(Operator.LE, first, item),
                    BinOp(Operator.LT, item, Name("walk_last")),
                ),
            ),
            Return(
                Tuple(
                    (
                        end,
                        _where(mine, g, group),
                        _where(mine, BinOp(Operator.SUB, item, g), block),
                        _where(mine, start, lo),
                        _where(mine, end, hi),
                    )
                )
            ),
        ),
    )
    zero = call("jnp.int32", Const(0))
    walk = Call(
        Name("lax.fori_loop"),
        (Const(0), Const(count + 1), Name(visit.name), Tuple((zero,) * 5)),
        one_per_line=True,
    )
    block_start = Name("walk_block_start")
    first_row = _clip(BinOp(Operator.SUB, lo, block_start), bm)
    last_row = _clip(
        BinOp(Operator.SUB, call("jnp.minimum", hi, Const(ragged.rows)), block_start), bm
    )
    blocks = -(-ragged.rows // bm)
    return FunctionDef(
        _LOCAL.group_rows,
        ("walk_item",),
        (
            Comment(
                f"Item `item` along {ragged.split} is a (group, row block) pair: the groups in "
                f"order, each over the blocks its rows touch; group {count} is the rows past "
                "the sizes' sum."
            ),
            visit,
            Assign((Tuple((Name("walk_total"), group, block, lo, hi)),), walk),
            Assign((block_start,), BinOp(Operator.MUL, block, Const(bm))),
            Assign((Name(_LOCAL.first_row),), first_row),
            Assign(
                (Name(_LOCAL.row_count),),
                call(
                    "jnp.maximum", BinOp(Operator.SUB, last_row, Name(_LOCAL.first_row)), Const(0)
                ),
            ),
            Return(
                Tuple(
                    (
                        group,
                        call("jnp.minimum", block, Const(blocks - 1)),
                        Name(_LOCAL.first_row),
                        Name(_LOCAL.row_count),
                    )
                )
            ),
        ),
    )


def item_header(ragged: RaggedRows, tile_rows: Name) -> Stmt:
    """The item's group, row block (the CTA tile's rows) and rows, from its index."""
    placed = (Name(_LOCAL.group), tile_rows, Name(_LOCAL.first_row), Name(_LOCAL.row_count))
    return Assign((Tuple(placed),), call(_LOCAL.group_rows, Name(ragged_item(ragged.split))))


def selected_group(ragged: RaggedRows) -> Expr:
    """The group whose blocks the item reads: the rows past the sizes' sum (group G) read
    the last group's, and store zeros."""
    return call("jnp.minimum", Name(_LOCAL.group), Const(ragged.groups - 1))


def store_rows(slot_rows: int) -> FunctionDef:
    """`store_rows(slot, target, first, count)`: the slot's rows among [first, first + count)
    (relative to its first row; either may be past it) into the same rows of `target`, one
    TMA store under `pl.when` for each binary digit of the count, committed as one group (so
    that a slot's wait counts one group a slot, stored or not). Its locals are `ladder_*`,
    a family no operand may take."""
    first, count = Name("ladder_first"), Name("ladder_count")
    body: list[Stmt] = [
        Comment("The item's rows among the slot's, then one store of 2^i rows a binary digit"),
        Comment("of their count: a TMA box is static, and the count is data."),
        Assign((Name("ladder_end"),), _clip(BinOp(Operator.ADD, first, count), slot_rows)),
        Assign((first,), _clip(first, slot_rows)),
        Assign((count,), BinOp(Operator.SUB, Name("ladder_end"), first)),
    ]
    rows = slot_rows
    while rows >= 1:
        digit = BinOp(Operator.AND, count, Const(rows))
        copy = call(
            "plgpu.copy_smem_to_gmem",
            ref_at(Name("ladder_slot"), call("pl.ds", first, Const(rows))),
            ref_at(Name("ladder_target"), call("pl.ds", first, Const(rows))),
            commit_group=Const(False),
        )
        when = call("pl.when", BinOp(Operator.NE, digit, Const(0)))
        body.append(FunctionDef(f"ladder_{rows}", (), (ExprStmt(copy),), decorators=(when,)))
        if rows > 1:
            body.append(Assign((first,), BinOp(Operator.ADD, first, digit)))
        rows //= 2
    body.append(ExprStmt(call("plgpu.commit_smem_to_gmem_group")))
    return FunctionDef(
        _LOCAL.store_rows,
        ("ladder_slot", "ladder_target", "ladder_first", "ladder_count"),
        tuple(body),
    )


def piece_store(slot: Expr, target: Expr, row: int, inside: Expr | None) -> Stmt:
    """The store of one epilogue piece, rows [row, row + slot_rows) of the block: the item's
    rows among them; none where the piece's columns are past the array's (`inside` false:
    a row is copied as plain bytes, which would run into the next row)."""
    first: Expr = Name(_LOCAL.first_row)
    if row:
        first = BinOp(Operator.SUB, first, Const(row))
    count: Expr = Name(_LOCAL.row_count)
    if inside is not None:
        count = call("jnp.where", inside, count, Const(0))
    return ExprStmt(call(_LOCAL.store_rows, slot, target, first, count))


def with_rows(run: Stmt) -> FunctionDef:
    """The tile's pipeline run only where its item has rows: an item past the last, or of
    an empty group, stores nothing. Every warpgroup places the item alike, so all skip it."""
    when = call("pl.when", BinOp(Operator.GT, Name(_LOCAL.row_count), Const(0)))
    return FunctionDef(_LOCAL.run_item, (), (run,), decorators=(when,))
