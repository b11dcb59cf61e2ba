"""Code generation for one loop of a body: a `plgpu.emit_pipeline` and its step function.

The pipeline copies one block of every operand the step reads per step, `stages` blocks
ahead, with TMA filling zeros past the array's edge. The step loads what it computes on,
masks the last block with each load's fill, and either folds into the carry (WGMMA into an
accumulator ref, or register values threaded through the pipeline) or writes its output block.
"""

import dataclasses

from ...ir.names import (
    block_index,
    gmem_ref,
    loop_function,
    loop_part,
    smem_ref,
)
from ...ir.nodes import (
    PASS,
    Assign,
    BinOp,
    Call,
    Const,
    Expr,
    ExprStmt,
    FunctionDef,
    Keyword,
    Lambda,
    List,
    LoopMode,
    Mask,
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
from ..lower.translation import Carry, LoopBlock
from ..pallas import fill_past_edge, load, store
from ..plan.pipelining import LoopPlan
from ..plan.plan import DimPlan, LaunchPlan, OperandPlan
from .launches import ScheduleEmitter, WalkedPart
from .masks import MaskAxis, edge_mask_statements, fill_masks
from .paged import paged_pipeline, walks_pages
from .products import AccumulatorProducts, accumulator_products
from .slices import block_slice

__all__ = ["SharedLoop", "loop_statements", "shared_loop"]


def loop_statements(
    plan: LaunchPlan,
    block: LoopBlock,
    streamed: tuple[tuple[int, int, int], ...],
    new_store_api: bool,
    schedule: ScheduleEmitter,
) -> list[Stmt]:
    """The loop's statements in the block function; `streamed` says which results a map
    writes, as (result, loop, block); `schedule` says which part of the loop a CTA walks."""
    loop = _Loop.of(plan, block, schedule.walked_part(plan, block.axis))
    writes = [
        (plan.results[r], block.blocks[b])
        for r, loop_index, b in streamed
        if loop_index == block.index
    ]
    setup, pipeline = _pipeline(loop)
    lines: list[Stmt] = [_step_function(loop, writes, new_store_api), *setup]
    finals = _names(list(block.finals))
    if block.mode == LoopMode.MAP:  # a scan's carries come out of the pipeline too
        run = Assign((finals,), pipeline) if loop.registers else ExprStmt(pipeline)
        return [*lines, run, ExprStmt(call("plgpu.wait_smem_to_gmem", Const(0)))]
    if not loop.accumulators:
        return [*lines, Assign((finals,), pipeline)]
    return _accumulator_scope(loop, lines, pipeline, finals)


@dataclasses.dataclass(frozen=True)
class SharedLoop:
    """A loop warpgroups share, each step's blocks copied once for all of them (the consumers'
    of `plan.consumers`, whose pipeline `emit.consumers` writes): what the block function
    defines before the consumers' function (the step and its blocks' specs), what a consumer
    runs (its carries' first values, then the loop, through the pipeline function it is
    handed), and what the pipeline reads."""

    defined: tuple[Stmt, ...]
    run: tuple[Stmt, ...]
    step: Name
    """The step function."""
    steps: int
    stages: int
    specs: tuple[Name, ...]
    """The blocks' specs, one an operand the loop reads."""
    views: tuple[Expr, ...]
    """The operands' arrays the pipeline copies the blocks of."""


def shared_loop(plan: LaunchPlan, block: LoopBlock, new_store_api: bool) -> SharedLoop:
    """The loop of `block` as warpgroups share it: the producer copies each step's blocks
    once, for all of them."""
    assert not block.dots and block.mode is LoopMode.FOLD
    loop = _Loop.of(plan, block, None)
    ops = [plan.operand(n) for n in block.operands]
    specs = [_block_spec(plan, op, block.axis) for op in ops]
    spec_names = [loop_part(loop.name, f"{n}_spec") for n in block.operands]
    defined: list[Stmt] = [_step_function(loop, [], new_store_api)]
    defined += [Assign((Name(n),), s) for n, s in zip(spec_names, specs, strict=True)]
    init_names, inits = _carry_inits(loop)
    run: list[Stmt] = list(inits)
    # The pipeline function a consumer is handed runs the loop from the first carries.
    walk = Call(Name(loop.name), (_names(init_names),))
    run.append(Assign((_names(list(block.finals)),), walk))
    return SharedLoop(
        tuple(defined),
        tuple(run),
        step=Name(loop_part(loop.name, "step")),
        steps=loop.pipeline.steps,
        stages=loop.pipeline.stages,
        specs=tuple(Name(n) for n in spec_names),
        views=tuple(_gmem_view(plan, op, block.axis) for op in ops),
    )


@dataclasses.dataclass(frozen=True)
class _Loop:
    """One loop of the block function: what its step, its pipeline and the scope of its
    accumulators all read."""

    plan: LaunchPlan
    block: LoopBlock
    pipeline: LoopPlan
    name: str
    """The prefix of the loop's names: `loop0_step`, `loop0_index`, ..."""
    overlap: bool
    """With two or more stages, one WGMMA stays in flight across steps: each step waits only
    for the previous one, and the pipeline releases a step's blocks one step later to match."""
    registers: tuple[Carry, ...]
    """The carries threaded through the pipeline as register values."""
    accumulators: tuple[Carry, ...]
    """The carries WGMMA accumulates into, each an accumulator ref."""
    paged: bool
    """Whether the loop walks paged operands, which its own pipeline copies page by page
    (`emit.paged`) where `plgpu.emit_pipeline` copies one box a block."""
    part: WalkedPart | None
    """The part of the loop this CTA walks, where the schedule cuts it across CTAs."""
    products: AccumulatorProducts
    """How the target's tensor cores multiply into the accumulators."""

    @classmethod
    def of(cls, plan: LaunchPlan, block: LoopBlock, part: WalkedPart | None) -> "_Loop":
        pipeline = plan.loops[block.index]
        paged = walks_pages(plan, block.operands)
        products = accumulator_products(plan.tensor_cores)
        return cls(
            plan,
            block,
            pipeline,
            name=loop_function(block.index),
            # A paged loop's own pipeline refills a slot as soon as its step returns.
            overlap=bool(block.dots) and pipeline.stages >= 2 and not paged and products.overlaps,
            registers=tuple(c for c in block.carries if not c.accumulator),
            accumulators=tuple(c for c in block.carries if c.accumulator),
            paged=paged,
            part=part,
            products=products,
        )

    @property
    def starts_later(self) -> bool:
        """Whether the first step walks a later block than the first (`first`): a start's,
        or this CTA's part's of a split loop."""
        return self.block.start is not None or self.part is not None

    @property
    def index(self) -> Name:
        """The step's index along the loop dim."""
        return Name(loop_part(self.name, "index"))

    @property
    def first(self) -> Name:
        """The first block a loop with a start walks."""
        return Name(loop_part(self.name, "first"))


def _step_function(
    loop: _Loop, writes: list[tuple[OperandPlan, Expr]], new_store_api: bool
) -> FunctionDef:
    """The pipeline's step: it reads its blocks, computes, and folds into the carries or
    writes its output blocks."""
    block = loop.block
    step = _step_inputs(loop, writes)
    step += block.lines
    step += loop.products.step(loop.name, loop.block.dots, loop.overlap)
    step += _write_statements(loop, writes, new_store_api)
    if block.loads and not writes:
        # The pipeline refills this step's slots as soon as it returns, by TMA: order the
        # step's reads of them before that copy (a map's commit_smem above does it too).
        done = "the step's reads of its slots come before their refill"
        step.append(ExprStmt(call("plgpu.commit_smem"), comment=done))
    if loop.registers:
        updates = tuple(c.update for c in loop.registers if c.update is not None)
        assert len(updates) == len(loop.registers), "a register carry without its update"
        step.append(Return(Tuple(updates)))
    if not step:
        step.append(PASS)
    params = [loop_part(loop.name, "indices"), *[smem_ref(n) for n in block.operands]]
    if loop.registers:
        params.append(loop_part(loop.name, "carry"))
    return FunctionDef(loop_part(loop.name, "step"), tuple(params), tuple(step))


def _step_inputs(loop: _Loop, writes: list[tuple[OperandPlan, Expr]]) -> list[Stmt]:
    """The step's start: its index and carries unpacked, its loads, the edge masks it needs
    and each load's fill past the edge."""
    plan, block, name = loop.plan, loop.block, loop.name
    step: list[Stmt] = []
    masks = set(block.masks)
    fills = dict(loop.pipeline.fills)
    for op_name in block.loads:
        masks |= fill_masks(plan, plan.operand(op_name), fills.get(op_name))
    if masks or writes:
        step.append(Assign((Tuple((loop.index,)),), Name(loop_part(name, "indices"))))
        if loop.pipeline.reverse:
            walked = "the steps walk the blocks from the last to the first"
            last = Const(loop.pipeline.steps - 1)
            step.append(Assign((loop.index,), BinOp(Operator.SUB, last, loop.index), walked))
        if loop.starts_later:
            walked = "the steps walk the blocks from the start's"
            if loop.part is not None:
                walked = "the steps walk this CTA's part of the blocks"
            step.append(Assign((loop.index,), BinOp(Operator.ADD, loop.first, loop.index), walked))
    if loop.registers:
        step.append(
            Assign((_names([c.var for c in loop.registers]),), Name(loop_part(name, "carry")))
        )
    for op_name in block.loads:
        ref = Name(smem_ref(op_name))
        step.append(Assign((Name(op_name),), load(ref, plan.operand(op_name).kind)))
    step += _mask_statements(plan, masks, block.axis, loop.index)
    for op_name in block.loads:
        op = plan.operand(op_name)
        op_masks = fill_masks(plan, op, fills.get(op_name))
        if op_masks:
            step.append(fill_past_edge(op_name, op_masks, fills.get(op_name), op.dtype))
    return step


def _write_statements(
    loop: _Loop, writes: list[tuple[OperandPlan, Expr]], new_store_api: bool
) -> list[Stmt]:
    """A map's step writes each output block to its slot, then copies it out by TMA."""
    step: list[Stmt] = []
    for result, value in writes:
        wait = call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True))
        step.append(ExprStmt(wait, comment="the last block is read"))
        step.append(store(Name(smem_ref(result.name)), value, new_store_api))
        step.append(ExprStmt(call("plgpu.commit_smem")))
        view = _output_view(loop.plan, result, loop.block.axis, loop.index, loop.pipeline.block)
        step.append(ExprStmt(call("plgpu.copy_smem_to_gmem", Name(smem_ref(result.name)), view)))
    return step


def _pipeline(loop: _Loop) -> tuple[list[Stmt], Expr]:
    """The statements that set up the pipeline (its block specs, a traced trip count, the
    register carries' first values), and the call that runs it."""
    plan, block, name = loop.plan, loop.block, loop.name
    setup: list[Stmt] = []
    first_lines: list[Stmt] = []  # before the block specs, whose index maps read it
    steps: Expr = Const(loop.pipeline.steps)
    bounded = block.stop is not None or block.start is not None
    if block.start is not None:
        skipped = "blocks wholly before the start are skipped"
        first_lines.append(Assign((loop.first,), _first_block(loop, block.start), comment=skipped))
    if loop.part is not None:
        part = "this CTA's part of the split loop"
        first_lines.append(Assign((loop.first,), loop.part.first, comment=part))
        if loop.part.fewer is not None:
            steps = Name(loop_part(name, "steps"))
            fewer = "the last part walks the steps left"
            first_lines.append(Assign((steps,), loop.part.fewer, comment=fewer))
    if bounded:
        steps = Name(loop_part(name, "steps"))
        end: Expr = Const(loop.pipeline.steps)
        if block.stop is not None:
            end = _steps_before_stop(loop, block.stop)
        count = end
        if block.start is not None:
            walked = BinOp(Operator.SUB, end, _blocks_before(loop, block.start))
            # Positions at or past the dim's size do not exist: a start there walks none.
            size: Expr = Const(loop.pipeline.size)
            if block.stop is not None:
                size = call("lax.min", block.stop, size)
            inside = BinOp(Operator.LT, block.start, size)
            count = call("jnp.where", inside, call("lax.max", walked, Const(0)), Const(0))
        setup.append(Assign((steps,), count, comment=_bounds_comment(block)))
    init_names, inits = _carry_inits(loop)
    setup += inits
    init = _names(init_names) if loop.registers else None
    if loop.paged:
        walk, run = paged_pipeline(plan, loop.pipeline, block.operands, name, steps, init)
        return first_lines + setup + walk, run
    ops = [plan.operand(n) for n in block.operands]
    last = loop.pipeline.steps - 1 if loop.pipeline.reverse else None
    first = loop.first if loop.starts_later else None
    specs = [
        _block_spec(plan, op, block.axis, int(loop.overlap), last=last, first=first) for op in ops
    ]
    views = [_gmem_view(plan, op, block.axis) for op in ops]
    spec_names = [loop_part(name, f"{n}_spec") for n in block.operands]
    spec_lines = [Assign((Name(n),), s) for n, s in zip(spec_names, specs, strict=True)]
    grid: Expr = Tuple((steps,)) if bounded else Const((loop.pipeline.steps,))
    if loop.part is not None:
        assert not bounded and not loop.pipeline.reverse, "a split loop walks every block"
        grid = Const((loop.part.steps,))
        if loop.part.fewer is not None:  # traced above
            grid = Tuple((Name(loop_part(name, "steps")),))
    keywords = [
        Keyword("grid", grid),
        Keyword("in_specs", List(tuple(Name(n) for n in spec_names))),
        Keyword("max_concurrent_steps", Const(loop.pipeline.stages)),
    ]
    if init is not None:
        keywords.append(Keyword("init_carry", init))
    emit = Call(
        Name("plgpu.emit_pipeline"),
        (Name(loop_part(name, "step")),),
        tuple(keywords),
        one_per_line=True,
    )
    return first_lines + spec_lines + setup, Call(emit, tuple(views))


def _carry_inits(loop: _Loop) -> tuple[list[str], list[Stmt]]:
    """The register carries' first values: their names and the statements assigning them."""
    names = [loop_part(loop.name, f"init{i}") for i in range(len(loop.registers))]
    lines: list[Stmt] = []
    for n, c in zip(names, loop.registers, strict=True):
        assert c.init is not None
        lines.append(Assign((Name(n),), c.init))
    return names, lines


def _bounds_comment(block: LoopBlock) -> str:
    if block.start is None:
        return "blocks wholly past the stop are skipped: none before a stop <= 0"
    if block.stop is None:
        return "the blocks from the start's to the last: none from a start past the dim"
    return "the blocks from the start's to the stop's: none where start >= stop"


def _blocks_before(loop: _Loop, start: Expr) -> Expr:
    """The blocks wholly before `start`, not capped at the dim: a start past it skips all."""
    return call("lax.div", call("lax.max", start, Const(0)), Const(loop.pipeline.block))


def _first_block(loop: _Loop, start: Expr) -> Expr:
    """The block holding `start`, brought into the dim: a start before it walks from its first
    block, one past it walks the last."""
    steps, size = loop.pipeline.steps, loop.pipeline.block
    inside = call("lax.max", start, Const(0))
    return call("lax.min", call("lax.div", inside, Const(size)), Const(steps - 1))


def _steps_before_stop(loop: _Loop, stop: Expr) -> Expr:
    """The blocks before `stop`, none to all of them: a traced trip count. A stop past the
    last block's start is first brought down to one past it, which walks them all too, so
    that rounding up to whole blocks cannot overflow int32; one at or before 0 walks none (a
    pipeline of no step copies nothing and returns its first carry)."""
    steps, size = loop.pipeline.steps, loop.pipeline.block
    stop = call("lax.min", stop, Const((steps - 1) * size + 1))
    blocks = call("lax.div", BinOp(Operator.ADD, stop, Const(size - 1)), Const(size))
    return call("lax.max", call("lax.min", blocks, Const(steps)), Const(0))


def _accumulator_scope(loop: _Loop, lines: list[Stmt], pipeline: Expr, finals: Tuple) -> list[Stmt]:
    """A loop with accumulators runs in a scope that allocates them (`pl.run_scoped`) and
    returns every carry's final value: an accumulator read whole, a register carry from the
    pipeline's."""
    name = loop.name
    carry = Name(loop_part(name, "carry"))
    scope = [*lines, Assign((carry,), pipeline) if loop.registers else ExprStmt(pipeline)]
    scope += loop.products.after_loop(loop.overlap)
    reads, values = loop.products.read(name, loop.accumulators)
    scope += reads
    position = {c.var: i for i, c in enumerate(loop.registers)}
    outs: list[Expr] = [
        values[c.var] if c.accumulator else Subscript(carry, (Const(position[c.var]),))
        for c in loop.block.carries
    ]
    scope.append(Return(Tuple(tuple(outs))))
    plan = loop.plan
    shape = (plan.dim(plan.rows).extent, plan.dim(plan.cols).extent if plan.cols else 0)
    kinds = {d.carry: d.accumulator for d in loop.block.dots}
    allocated = loop.products.scope(name, loop.accumulators, shape, kinds)
    return [
        FunctionDef(name, allocated.params, tuple(scope)),
        Assign(
            (finals,),
            Call(
                Name("pl.run_scoped"),
                (Name(name), *allocated.allocations),
                one_per_line=allocated.one_per_line,
            ),
        ),
    ]


def _block_spec(
    plan: LaunchPlan,
    op: OperandPlan,
    axis: str,
    delay_release: int = 0,
    last: int | None = None,
    first: Expr | None = None,
) -> Expr:
    """The pipeline's block of `op` at each step; `last`, the last step's index, when the
    steps walk the blocks from the last to the first; `first`, the block the first step
    walks, when a start skips those before it."""
    block: Expr = Name("step") if last is None else BinOp(Operator.SUB, Const(last), Name("step"))
    if first is not None:
        block = BinOp(Operator.ADD, first, block)
    # A group dim is squeezed (None): each step copies its index `step` of it.
    groups = tuple(block for _ in op.groups)
    shape: tuple[int | None, ...] = (None,) * len(groups) + tuple(
        plan.dim(d).extent for d in op.dims
    )
    index = groups + tuple(block if d == axis else Const(0) for d in op.dims)
    if op.column_steps and op.dims[-1] == axis:  # (rows, steps, block): from column 0
        shape = (*shape[:-1], None, shape[-1])
        index = (*index[:-1], block, Const(0))
    keywords: dict[str, Expr] = {}
    if op.swizzle:
        keywords["transforms"] = wgmma_transforms(op.dtype, op.swizzle)
    if delay_release:
        keywords["delay_release"] = Const(delay_release)
    return call("plgpu.BlockSpec", Const(shape), Lambda(("step",), Tuple(index)), **keywords)


def _gmem_view(plan: LaunchPlan, op: OperandPlan, axis: str) -> Expr:
    """The operand's part for this block: tiled dims sliced at the block, the loop dim whole."""
    slices: list[Expr] = [Slice() for _ in op.groups]
    for d in op.dims:
        dim = plan.dim(d)
        slices.append(block_slice(dim) if d != axis and dim.tiled_by else Slice())
    if op.column_steps and op.dims[-1] != axis:
        # (rows, blocks, block): the grid's block of the columns is an index of the view, and
        # each copy starts at its column 0.
        slices[-1] = Name(block_index(op.dims[-1]))
        slices.append(Slice())
    elif op.column_steps:
        slices.append(Slice())
    if all(isinstance(s, Slice) for s in slices):
        return Name(gmem_ref(op.name))
    return Subscript(Name(f"{gmem_ref(op.name)}.at"), tuple(slices))


def _output_view(plan: LaunchPlan, op: OperandPlan, axis: str, index: Name, step: int) -> Expr:
    slices: list[Expr] = []
    for d in op.dims:
        dim = plan.dim(d)
        if d == axis:
            slices.append(call("pl.ds", BinOp(Operator.MUL, index, Const(step)), Const(step)))
        elif dim.tiled_by:
            slices.append(block_slice(dim))
        else:
            slices.append(Slice())
    return Subscript(Name(f"{gmem_ref(op.name)}.at"), tuple(slices))


def _mask_statements(plan: LaunchPlan, needed: set[Mask], axis: str, index: Name) -> list[Stmt]:
    """Edge masks for one step: the loop dim's positions start at the step's block."""
    if not needed:
        return []

    def mask_axis(dim: DimPlan | None) -> MaskAxis | None:
        if dim is None:
            return None
        start: Expr | None = None
        if dim.name == axis:
            start = BinOp(Operator.MUL, index, Const(dim.block))
        elif dim.tiled_by:
            start = BinOp(Operator.MUL, Name(block_index(dim.name)), Const(dim.block))
        return MaskAxis(dim.extent, dim.size, start)

    rows = mask_axis(plan.dim(plan.rows))
    assert rows is not None
    cols = mask_axis(plan.dim(plan.cols) if plan.cols else None)
    outside = axis not in (plan.rows, plan.cols)
    loop = mask_axis(plan.dim(axis)) if outside else None
    return edge_mask_statements(needed, rows, cols, loop, plan.block_tensor_cores)


def _names(names: list[str]) -> Tuple:
    return Tuple(tuple(Name(n) for n in names))
