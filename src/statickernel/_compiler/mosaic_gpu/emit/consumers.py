"""Code generation for a loop two consumer warpgroups share (see `plan.consumers`).

The block function runs on three warpgroups. Each array's buffer and barrier is a pair in the
kernel's scratch, one a consumer, viewed at the warpgroup's index; the loop's step and its
blocks' specs are defined once; `plgpu.emit_pipeline_warp_specialized` runs the producer's
copies in the last warpgroup and hands each consumer a function that runs the loop. A
consumer's own function (`consumer`) copies its blocks in, computes the body around the loop
and stores its block of rows.
"""

import dataclasses

from ...ir.names import (
    CONSUMER_PAIR,
    WARP_SPECIALIZED,
    barrier_ref,
    block_function,
    block_index,
    loop_function,
    smem_ref,
)
from ...ir.nodes import (
    Assign,
    BinOp,
    Call,
    Comment,
    Const,
    Expr,
    ExprStmt,
    FunctionDef,
    Keyword,
    List,
    Name,
    Operator,
    Stmt,
    Subscript,
    call,
)
from ..lower.translation import LoopBlock, Translation, shared_step_prelude
from ..plan.consumers import CONSUMERS, PRODUCER_REGISTERS, ConsumerPair
from ..plan.plan import LaunchPlan
from .launches import BlockPieces, ModuleGenerator, ScheduleEmitter
from .loops import SharedLoop, shared_loop

__all__ = [
    "CONSUMER_PAIR_LOOP",
    "WG_AXIS",
    "consumer_pair_function",
    "consumers_buffer",
    "staged_buffers",
    "unscoped_staging",
]

WG_AXIS = WARP_SPECIALIZED.warpgroup
_WG = Name(WG_AXIS)
_CONSUMER = WARP_SPECIALIZED.consumer
_CONSUMER_BLOCK = Name(CONSUMER_PAIR.consumer_block)


def staged_buffers(plan: LaunchPlan, translation: Translation) -> tuple[tuple[str, Expr], ...]:
    """The buffers the loop's products stage their computed operands in (the interpreter's
    `a`), each variable with its `plgpu.SMEM` type: kernel scratch of the consumers'."""
    if not isinstance(plan.schedule_variant, ConsumerPair):
        return ()
    return tuple(
        buffer
        for loop in translation.loops
        for product in loop.products
        for buffer in product.staged_buffers
    )


def consumers_buffer(smem: Expr) -> Expr:
    """A staged operand's `plgpu.SMEM` type as the consumers' pair of buffers."""
    assert isinstance(smem, Call) and isinstance(smem.args[0], Const)
    shape = smem.args[0].value
    assert isinstance(shape, tuple)
    return dataclasses.replace(smem, args=(Const((CONSUMERS, *shape)), *smem.args[1:]))


def unscoped_staging(block: LoopBlock) -> LoopBlock:
    """The step with its products' staged operands written into the consumer's slot of the
    kernel's scratch: a scoped allocation in one warpgroup would need all three."""
    stagings = {p.staging for p in block.products if p.staging}
    buffers = {name for p in block.products for name, _ in p.staged_buffers}
    if not stagings:
        return block
    lines: list[Stmt] = []
    for line in block.lines:
        if isinstance(line, Assign) and _assigns(line, buffers):
            continue  # the buffer is the consumer's slot, viewed at the block function's top
        value = line.value if isinstance(line, Assign) else None
        if isinstance(value, Call) and _runs_scoped(value, stagings):
            line = dataclasses.replace(line, value=Call(value.args[0], value.args[1:]))
        lines.append(line)
    return dataclasses.replace(block, lines=tuple(lines))


def _assigns(line: Assign, names: set[str]) -> bool:
    return (
        len(line.targets) == 1
        and isinstance(line.targets[0], Name)
        and (line.targets[0].text in names)
    )


def _runs_scoped(value: Call, functions: set[str]) -> bool:
    return (
        isinstance(value.func, Name)
        and value.func.text == "pl.run_scoped"
        and isinstance(value.args[0], Name)
        and value.args[0].text in functions
    )


def consumer_pair_function(gen: BlockPieces) -> FunctionDef:
    """The block function: the warpgroup's index and its block of rows, each pair of buffers
    viewed at it, the shared loop's step, the consumers' function, the pipeline."""
    plan = gen.plan
    pair = _pair(plan)
    (block,) = gen.t.loops
    block = unscoped_staging(block)
    shared = shared_loop(plan, block, gen.new_store_api)
    rows = pair.rows
    first = BinOp(
        Operator.ADD,
        BinOp(Operator.MUL, call("lax.axis_index", Const(rows)), Const(CONSUMERS)),
        _WG,
    )
    index: list[Stmt] = [
        Comment(
            f"Consumer {WG_AXIS} computes block 2i + {WG_AXIS} of {rows} in CTA i; the producer"
        ),
        Comment(f"({WG_AXIS} {CONSUMERS}) copies the loop's blocks for both."),
    ]
    if pair.odd:
        index.append(Assign((_CONSUMER_BLOCK,), first))
        last = Const(pair.blocks - 1)
        twin = "past the last block, a consumer computes it again and stores nothing"
        index.append(
            Assign((Name(block_index(rows)),), call("lax.min", _CONSUMER_BLOCK, last), twin)
        )
    else:
        index.append(Assign((Name(block_index(rows)),), first))
    top: list[Stmt] = [Assign((_WG,), call("lax.axis_index", Const(WG_AXIS)))]
    top += gen.block_header({rows: index})
    top += _views(gen, [name for name, _ in staged_buffers(plan, gen.t)])
    top += gen.masks()
    # The scalars the step reads, computed before it (from constants and the block's indices).
    prelude = shared_step_prelude(gen.t, tuple(op.name for op in plan.operands))
    assert prelude is not None, "the plan took a step that reads the body's values"
    top += prelude
    top += shared.defined
    consumer: list[Stmt] = [
        *gen.load_statements(),
        *gen.computed(lambda _: list(shared.run), prelude),
    ]
    stores = gen.store()
    if pair.odd:
        inside = call("pl.when", BinOp(Operator.LT, _CONSUMER_BLOCK, Const(pair.blocks)))
        consumer.append(FunctionDef("store_results", (), tuple(stores), (inside,)))
    else:
        consumer += stores
    top.append(FunctionDef(_CONSUMER, (loop_function(block.index),), tuple(consumer)))
    top.append(_shared_pipeline(shared))
    return FunctionDef(block_function(plan.kernel), gen.params(), tuple(top))


def _views(gen: BlockPieces, staged: list[str]) -> list[Stmt]:
    """Each pair of buffers and barriers viewed at this warpgroup's: the producer's index is
    past them, and it never reads one."""
    names = [smem_ref(op.name) for op in (*gen.loaded, *gen.kernel_results)]
    names += staged
    names += [barrier_ref(op.name) for op in gen.loaded]
    if not names:
        return []
    lines: list[Stmt] = [Comment("This consumer's buffers and barriers.")]
    for n in names:
        lines.append(Assign((Name(n),), Subscript(Name(f"{n}.at"), (_WG,))))
    return lines


def _shared_pipeline(shared: SharedLoop) -> Stmt:
    """The pipeline every warpgroup calls: the producer's copies run in the last warpgroup,
    and each consumer runs the loop in its function (`consumer`), which it is handed."""
    pipeline = Call(
        Name("plgpu.emit_pipeline_warp_specialized"),
        (shared.step,),
        (
            Keyword("grid", Const((shared.steps,))),
            Keyword("memory_registers", Const(PRODUCER_REGISTERS)),
            Keyword("in_specs", List(shared.specs)),
            Keyword("wg_axis", Const(WG_AXIS)),
            Keyword("num_compute_wgs", Const(CONSUMERS)),
            Keyword("max_concurrent_steps", Const(shared.stages)),
            Keyword("compute_context", Name(_CONSUMER)),
        ),
        one_per_line=True,
    )
    return ExprStmt(Call(pipeline, shared.views))


def _pair(plan: LaunchPlan) -> ConsumerPair:
    pair = plan.schedule_variant
    assert isinstance(pair, ConsumerPair)
    return pair


@dataclasses.dataclass(frozen=True)
class _ConsumerPairLoop(ScheduleEmitter):
    """Two consumer warpgroups a CTA, a block of rows each: each buffer and barrier a pair
    of the kernel's scratch."""

    def scopes_stores(self) -> bool:
        return False

    def launch_grid(self, plan: LaunchPlan) -> tuple[int, ...]:
        pair = _pair(plan)  # a CTA a pair of blocks of rows
        return tuple(
            pair.pairs if n == pair.rows else g
            for n, g in zip(plan.grid_names, plan.grid, strict=True)
        )

    def grid_text(self, plan: LaunchPlan, launched: tuple[int, ...], blocks: str) -> str:
        return f"{launched}: the blocks {blocks}, two of {_pair(plan).rows} a CTA"

    def smem_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (CONSUMERS, *shape)

    def barriers(self) -> int | None:
        return CONSUMERS  # one a consumer

    def block_function(self, gen: ModuleGenerator) -> FunctionDef:
        return consumer_pair_function(gen)


CONSUMER_PAIR_LOOP = _ConsumerPairLoop()
