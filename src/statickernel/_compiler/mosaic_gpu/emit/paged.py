"""The pipeline of a loop that walks paged operands (`pages={"P": "block_tables"}`): each
step's block is copied page by page from the pages its table lists.

`plgpu.emit_pipeline` copies one box a block, at coordinates its index map gives; a paged
block of BS tokens is BS / S pages of S rows wherever the pool holds them. So the loop runs
a pipeline of its own, as emit_pipeline would: `stages` slots of each operand's block in
shared memory, one barrier a slot, every slot's copies started before the first step, and
a slot refilled with the step `stages` ahead as soon as the step that read it returns (the
step has waited for its WGMMAs and committed its reads). A step's copies each move a page
(or, when the block is part of a page, that part) into its rows of the slot; the barrier of
the slot counts one arrival a copy.

Each copy reads its page's id from the table in global memory. An id outside [0, pool), and
a page past the table's end (the last block of a sequence that is not whole blocks), is sent
to a page past the end of the whole array, where TMA reads zeros, as it does past any
array's edge: a block's rows past the sequence read zeros, as every loop's do. (Not page
`pool` of this batch entry: Mosaic GPU merges the leading dims of a copy of more than 5
tiled dims into one, the batch dims with the pages, where page `pool` of one head is page 0
of the next. Nor a pool of one page, whose dim a copy drops: it is padded to two.)
"""

from ...ir.names import gmem_ref, loop_part
from ...ir.nodes import (
    Assign,
    BinOp,
    Call,
    Comment,
    Const,
    DType,
    Expr,
    ExprStmt,
    FunctionDef,
    Name,
    Operator,
    Return,
    Slice,
    Stmt,
    Subscript,
    Tuple,
    call,
)
from ..lower.dots import wgmma_transforms
from ..pallas import select
from ..plan.operands import OperandPlan, PageCopies
from ..plan.pipelining import LoopPlan
from ..plan.plan import LaunchPlan
from .slices import block_slice

__all__ = ["paged_pipeline", "walks_pages"]


def walks_pages(plan: LaunchPlan, operands: tuple[str, ...]) -> bool:
    """Whether a loop over `operands` copies them page by page."""
    return any(plan.operand(n).pages is not None for n in operands)


def paged_pipeline(
    plan: LaunchPlan,
    loop: LoopPlan,
    operands: tuple[str, ...],
    name: str,
    steps: Expr,
    init: Expr | None,
) -> tuple[list[Stmt], Expr]:
    """The functions that run the loop `name` over paged `operands` in `steps` steps (a
    traced count when the loop stops early), and the call that runs them: it returns the
    register carries, from `init` (None when the loop threads none)."""
    ops = [plan.operand(n) for n in operands]
    buffers = [Name(loop_part(name, f"{op.name}_buffers")) for op in ops]
    barriers = Name(loop_part(name, "barriers"))
    fetch = _fetch_function(plan, loop, ops, buffers, barriers, name)
    run = _run_function(loop, fetch, buffers, barriers, name, steps, init)
    scratch = [_buffer(op, loop.stages) for op in ops]
    copies = sum(_copies(op).copies for op in ops)
    barrier = call("plgpu.Barrier", num_arrivals=Const(copies), num_barriers=Const(loop.stages))
    scoped = Call(Name("pl.run_scoped"), (Name(run.name), *scratch, barrier), one_per_line=True)
    return [run], scoped


def _copies(op: OperandPlan) -> PageCopies:
    assert op.pages is not None, f"`{op.name}` walked by a paged loop is not paged"
    return op.pages


def _buffer(op: OperandPlan, stages: int) -> Expr:
    """A slot of the operand's block for each stage, swizzled for WGMMA when sk.dot reads it."""
    keywords = {"transforms": wgmma_transforms(op.dtype, op.swizzle)} if op.swizzle else {}
    return call("plgpu.SMEM", Const((stages, *op.block_shape)), DType(op.dtype), **keywords)


def _fetch_function(
    plan: LaunchPlan,
    loop: LoopPlan,
    ops: list[OperandPlan],
    buffers: list[Name],
    barriers: Name,
    name: str,
) -> FunctionDef:
    """`fetch(step, slot)`: start the copies of step `step`'s pages into slot `slot`."""
    fetched, slot = Name(loop_part(name, "fetched")), Name(loop_part(name, "slot"))
    body: list[Stmt] = []
    ids: dict[tuple[str, int], tuple[Name, Expr]] = {}
    for op, buffer in zip(ops, buffers, strict=True):
        pages = _copies(op)
        for j in range(pages.copies):
            key = (pages.table, j)
            if key not in ids:
                ids[key] = _page_of_copy(plan, loop, pages, j, len(ids), fetched, name, body)
            page, row = ids[key]
            rows = call("pl.ds", row, Const(pages.copy_rows))
            source = Subscript(Name(f"{gmem_ref(op.name)}.at"), (page, rows, *_rest(plan, op)))
            into = call("pl.ds", Const(j * pages.copy_rows), Const(pages.copy_rows))
            target = Subscript(Name(f"{buffer.text}.at"), (slot, into))
            barrier = Subscript(Name(f"{barriers.text}.at"), (slot,))
            body.append(ExprStmt(call("plgpu.copy_gmem_to_smem", source, target, barrier)))
    return FunctionDef(loop_part(name, "fetch"), (fetched.text, slot.text), tuple(body))


def _page_of_copy(
    plan: LaunchPlan,
    loop: LoopPlan,
    pages: PageCopies,
    j: int,
    number: int,
    fetched: Name,
    name: str,
    body: list[Stmt],
) -> tuple[Name, Expr]:
    """The page copy `j` of step `fetched` reads, and its first row in that page; the
    statements that compute them, their locals numbered `number`, are appended to `body`."""
    token = BinOp(Operator.MUL, fetched, Const(loop.block))
    if j:
        token = BinOp(Operator.ADD, token, Const(j * pages.copy_rows))
    entry = Name(loop_part(name, f"entry{number}"))
    page = Name(loop_part(name, f"page{number}"))
    inside = Name(loop_part(name, f"inside{number}"))
    length = plan.operand(pages.table).shape[-1]
    body.append(Comment(f"Copy {j} of the step: the page of its entry of `{pages.table}`."))
    body.append(Assign((entry,), call("lax.div", token, Const(pages.page_rows))))
    read: Expr = Subscript(
        Name(gmem_ref(pages.table)), (call("lax.min", entry, Const(length - 1)),)
    )
    if plan.operand(pages.table).dtype != "int32":
        read = call("lax.convert_element_type", read, DType("int32"))
    body.append(Assign((page,), read))
    in_pool: Expr = BinOp(
        Operator.AND,
        BinOp(Operator.GT, page, Const(-1)),
        BinOp(Operator.LT, page, Const(pages.pool)),
    )
    if plan.dim(loop.axis).ragged:  # the last block runs past the table's end
        in_pool = BinOp(Operator.AND, in_pool, BinOp(Operator.LT, entry, Const(length)))
    body.append(Assign((inside,), in_pool))
    outside = "a page outside the pool, or past the table's end, reads zeros"
    body.append(Assign((page,), select(inside, page, Const(pages.outside), "int32"), outside))
    row: Expr = Const(0)
    if pages.copy_rows < pages.page_rows:  # the block is part of a page: its place in it
        row = call("lax.rem", token, Const(pages.page_rows))
    return page, row


def _rest(plan: LaunchPlan, op: OperandPlan) -> tuple[Expr, ...]:
    """The slices of the dims after a page's rows: a tiled dim at this block, others whole."""
    return tuple(block_slice(plan.dim(d)) if plan.dim(d).tiled_by else Slice() for d in op.dims[1:])


def _run_function(
    loop: LoopPlan,
    fetch_function: FunctionDef,
    buffers: list[Name],
    barriers: Name,
    name: str,
    steps: Expr,
    init: Expr | None,
) -> FunctionDef:
    """The pipeline: the first `stages` steps' copies started, then each step waits for its
    slot, runs, and refills the slot with the step `stages` ahead."""
    fetch = Name(loop_part(name, "fetch"))
    static = isinstance(steps, Const)
    body: list[Stmt] = [fetch_function]
    body.append(Comment("Start the copies of the first steps, one slot each."))
    for stage in range(loop.stages):
        if static and stage >= loop.steps:
            break
        start = ExprStmt(Call(fetch, (Const(stage), Const(stage))))
        if static:
            body.append(start)
            continue
        when = call("pl.when", BinOp(Operator.LT, Const(stage), steps))
        prime = loop_part(name, f"prime{stage}")
        body.append(FunctionDef(prime, (), (start,), decorators=(when,)))
    body.append(_step_function(loop, buffers, barriers, name, steps, init))
    carry = init if init is not None else Tuple(())
    run = call("lax.fori_loop", Const(0), steps, Name(loop_part(name, "walk")), carry)
    body.append(Return(run))
    params = (*(b.text for b in buffers), barriers.text)
    return FunctionDef(loop_part(name, "pages"), params, tuple(body))


def _step_function(
    loop: LoopPlan,
    buffers: list[Name],
    barriers: Name,
    name: str,
    steps: Expr,
    init: Expr | None,
) -> FunctionDef:
    """One step of the walk: wait for the slot, run the loop's step on it, refill it."""
    index, carry = Name(loop_part(name, "at")), Name(loop_part(name, "carry"))
    slot = Name(loop_part(name, "slot"))
    waits = Subscript(Name(f"{barriers.text}.at"), (slot,))
    slots = [Subscript(Name(f"{b.text}.at"), (slot,)) for b in buffers]
    step = Call(
        Name(loop_part(name, "step")), (Tuple((index,)), *slots, *([carry] if init else []))
    )
    body: list[Stmt] = [
        Assign((slot,), call("lax.rem", index, Const(loop.stages))),
        ExprStmt(call("plgpu.barrier_wait", waits)),
        Assign((carry,), step) if init is not None else ExprStmt(step),
    ]
    ahead = Name(loop_part(name, "ahead"))
    body.append(Assign((ahead,), BinOp(Operator.ADD, index, Const(loop.stages))))
    refill = ExprStmt(Call(Name(loop_part(name, "fetch")), (ahead, slot)))
    when = call("pl.when", BinOp(Operator.LT, ahead, steps))
    body.append(Comment("The step has read its slot: refill it with the step `stages` ahead."))
    body.append(FunctionDef(loop_part(name, "refill"), (), (refill,), decorators=(when,)))
    body.append(Return(carry))
    return FunctionDef(loop_part(name, "walk"), (index.text, carry.text), tuple(body))
