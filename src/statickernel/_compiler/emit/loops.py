"""Code generation for one loop of a body: a `plgpu.emit_pipeline` and its step function.

The pipeline copies one block of every operand the step reads per step, `stages` blocks
ahead, with TMA filling zeros past the array's edge. The step loads what it computes on,
masks the last block with each load's fill, and either folds into the carry (WGMMA into an
accumulator ref, or register values threaded through the pipeline) or writes its output block.
"""

from ..ir.names import accumulator_ref, block_index, gmem_ref, loop_function, smem_ref
from ..ir.nodes import (
    PASS,
    Assign,
    BinOp,
    Call,
    Const,
    DType,
    EllipsisIndex,
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
from ..ir.pallas import fill_past_edge, load, store
from ..lower.dots import wgmma_transforms
from ..lower.translation import LoopBlock
from ..plan.plan import DimPlan, LaunchPlan, OperandPlan
from .masks import MaskAxis, edge_mask_statements, fill_masks

__all__ = ["loop_statements"]


def loop_statements(
    plan: LaunchPlan,
    block: LoopBlock,
    streamed: tuple[tuple[int, int, int], ...],
    new_store_api: bool,
) -> list[Stmt]:
    """The loop's statements in the block function; `streamed` says which results a map
    writes, as (result, loop, block)."""
    loop = plan.loops[block.index]
    name = loop_function(block.index)
    index = Name(f"{name}_index")
    ops = [plan.operand(n) for n in block.operands]
    # With two or more stages, one WGMMA stays in flight across steps: each step waits only for
    # the previous one, and the pipeline releases a step's blocks one step later to match.
    overlap = bool(block.dots) and loop.stages >= 2
    specs = [_block_spec(plan, op, block.axis, delay_release=int(overlap)) for op in ops]
    views = [_gmem_view(plan, op, block.axis) for op in ops]
    registers = [c for c in block.carries if not c.accumulator]
    accumulators = [c for c in block.carries if c.accumulator]

    step: list[Stmt] = []
    masks = set(block.masks)
    fills = dict(loop.fills)
    for op_name in block.loads:
        masks |= fill_masks(plan, plan.operand(op_name), fills.get(op_name))
    writes = [
        (plan.results[r], block.blocks[b])
        for r, loop_index, b in streamed
        if loop_index == block.index
    ]
    if masks or writes:
        step.append(Assign((Tuple((index,)),), Name(f"{name}_indices")))
    if registers:
        step.append(Assign((_names([c.var for c in registers]),), Name(f"{name}_carry")))
    for op_name in block.loads:
        ref = Name(smem_ref(op_name))
        step.append(Assign((Name(op_name),), load(ref, plan.operand(op_name).kind)))
    step += _mask_statements(plan, masks, block.axis, index)
    for op_name in block.loads:
        op = plan.operand(op_name)
        op_masks = fill_masks(plan, op, fills.get(op_name))
        if op_masks:
            step.append(fill_past_edge(op_name, op_masks, fills.get(op_name), op.dtype))
    step += block.lines
    for dot in block.dots:
        b_ref = Name(f"{dot.b}_smem.T" if dot.transpose_b else smem_ref(dot.b))
        acc = Name(accumulator_ref(dot.carry))
        step.append(ExprStmt(call("plgpu.wgmma", acc, Name(smem_ref(dot.a)), b_ref)))
    if block.dots and overlap:
        done = "the previous step's WGMMA is done; its blocks can go"
        step.append(ExprStmt(call("plgpu.wgmma_wait", Const(1)), comment=done))
    elif block.dots:
        # The pipeline refills this step's slots as soon as the step returns.
        step.append(ExprStmt(call("plgpu.wgmma_wait", Const(0))))
    for result, value in writes:
        wait = call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True))
        step.append(ExprStmt(wait, comment="the last block is read"))
        step.append(store(Name(smem_ref(result.name)), value, new_store_api))
        step.append(ExprStmt(call("plgpu.commit_smem")))
        view = _output_view(plan, result, block.axis, index, loop.block)
        step.append(ExprStmt(call("plgpu.copy_smem_to_gmem", Name(smem_ref(result.name)), view)))
    if block.loads and not writes:
        # The pipeline refills this step's slots as soon as it returns, by TMA: order the
        # step's reads of them before that copy (a map's commit_smem above does it too).
        done = "the step's reads of its slots come before their refill"
        step.append(ExprStmt(call("plgpu.commit_smem"), comment=done))
    if registers:
        updates = tuple(c.update for c in registers if c.update is not None)
        assert len(updates) == len(registers), "a register carry without its update"
        step.append(Return(Tuple(updates)))
    if not step:
        step.append(PASS)

    params = [f"{name}_indices", *[smem_ref(n) for n in block.operands]]
    if registers:
        params.append(f"{name}_carry")
    lines: list[Stmt] = [FunctionDef(f"{name}_step", tuple(params), tuple(step))]
    spec_names = [f"{name}_{n}_spec" for n in block.operands]
    lines += [Assign((Name(n),), s) for n, s in zip(spec_names, specs, strict=True)]
    grid: Expr = Const((loop.steps,))
    if block.stop is not None:
        # The blocks before `stop`, at least one and at most all of them: a traced trip count.
        # A stop past the last block's start is first brought down to one past it, which
        # walks them all too, so that rounding up to whole blocks cannot overflow int32.
        stop_steps = Name(f"{name}_steps")
        stop = call("lax.min", block.stop, Const((loop.steps - 1) * loop.block + 1))
        blocks = call(
            "lax.div", BinOp(Operator.ADD, stop, Const(loop.block - 1)), Const(loop.block)
        )
        bounded = call("lax.max", call("lax.min", blocks, Const(loop.steps)), Const(1))
        lines.append(
            Assign((stop_steps,), bounded, comment="blocks wholly past the stop are skipped")
        )
        grid = Tuple((stop_steps,))
    keywords = [
        Keyword("grid", grid),
        Keyword("in_specs", List(tuple(Name(n) for n in spec_names))),
        Keyword("max_concurrent_steps", Const(loop.stages)),
    ]
    if registers:
        init_names = [f"{name}_init{i}" for i in range(len(registers))]
        for n, c in zip(init_names, registers, strict=True):
            assert c.init is not None
            lines.append(Assign((Name(n),), c.init))
        keywords.append(Keyword("init_carry", _names(init_names)))
    emit = Call(
        Name("plgpu.emit_pipeline"), (Name(f"{name}_step"),), tuple(keywords), one_per_line=True
    )
    pipeline = Call(emit, tuple(views))
    if block.mode == LoopMode.MAP:
        return [*lines, ExprStmt(pipeline), ExprStmt(call("plgpu.wait_smem_to_gmem", Const(0)))]
    finals = _names(list(block.finals))
    if not accumulators:
        return [*lines, Assign((finals,), pipeline)]
    carry = Name(f"{name}_carry")
    scope = [*lines, Assign((carry,), pipeline) if registers else ExprStmt(pipeline)]
    if overlap:
        scope.append(ExprStmt(call("plgpu.wgmma_wait", Const(0)), comment="the last step's WGMMA"))
    position = {c.var: i for i, c in enumerate(registers)}
    outs: list[Expr] = [
        Subscript(Name(accumulator_ref(c.var)), (EllipsisIndex(),))
        if c.accumulator
        else Subscript(carry, (Const(position[c.var]),))
        for c in block.carries
    ]
    scope.append(Return(Tuple(tuple(outs))))
    shape = (plan.dim(plan.rows).extent, plan.dim(plan.cols).extent if plan.cols else 0)
    kinds = {d.carry: d.accumulator for d in block.dots}
    accs = [
        call("plgpu.ACC", Const(shape), DType(kinds.get(c.var, "float32"))) for c in accumulators
    ]
    acc_params = tuple(accumulator_ref(c.var) for c in accumulators)
    return [
        FunctionDef(name, acc_params, tuple(scope)),
        Assign((finals,), call("pl.run_scoped", Name(name), *accs)),
    ]


def _block_spec(plan: LaunchPlan, op: OperandPlan, axis: str, delay_release: int = 0) -> Expr:
    shape = tuple(plan.dim(d).extent for d in op.dims)
    index = tuple(Name("step") if d == axis else Const(0) for d in op.dims)
    keywords: dict[str, Expr] = {}
    if op.swizzle:
        keywords["transforms"] = wgmma_transforms(op.dtype)
    if delay_release:
        keywords["delay_release"] = Const(delay_release)
    return call("plgpu.BlockSpec", Const(shape), Lambda(("step",), Tuple(index)), **keywords)


def _block_slice(dim: DimPlan) -> Expr:
    """This grid step's block along a tiled dim."""
    start = BinOp(Operator.MUL, Name(block_index(dim.name)), Const(dim.block))
    return call("pl.ds", start, Const(dim.block))


def _gmem_view(plan: LaunchPlan, op: OperandPlan, axis: str) -> Expr:
    """The operand's part for this block: tiled dims sliced at the block, the loop dim whole."""
    slices: list[Expr] = []
    for d in op.dims:
        dim = plan.dim(d)
        slices.append(_block_slice(dim) if d != axis and dim.tiled_by else Slice())
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
            slices.append(_block_slice(dim))
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
    return edge_mask_statements(needed, rows, cols, mask_axis(plan.dim(axis)) if outside else None)


def _names(names: list[str]) -> Tuple:
    return Tuple(tuple(Name(n) for n in names))
