"""Code generation for one loop of a body: a `plgpu.emit_pipeline` and its step function.

The pipeline copies one block of every operand the step reads per step, `stages` blocks
ahead, with TMA filling zeros past the array's edge. The step loads what it computes on,
masks the last block with each load's fill, and either folds into the carry (WGMMA into an
accumulator ref, or register values threaded through the pipeline) or writes its output block.
"""

from ._masks import MaskAxis, edge_mask_lines, fill_masks
from ._pallas import LAYOUTS, select_source, store_source
from ._plan import DimPlan, LaunchPlan, OperandPlan
from ._printer import literal_source
from ._translation import LoopBlock

__all__ = ["loop_lines"]


def loop_lines(
    plan: LaunchPlan,
    block: LoopBlock,
    streamed: tuple[tuple[int, int, int], ...],
    new_store_api: bool,
) -> list[str]:
    """The loop's statements in the block function; `streamed` says which results a map
    writes, as (result, loop, block)."""
    loop = plan.loops[block.index]
    name = f"loop{block.index}"
    index = f"{name}_index"
    ops = [plan.operand(n) for n in block.operands]
    # With two or more stages, one WGMMA stays in flight across steps: each step waits only for
    # the previous one, and the pipeline releases a step's blocks one step later to match.
    overlap = bool(block.dots) and loop.stages >= 2
    specs = [_block_spec(plan, op, block.axis, delay_release=int(overlap)) for op in ops]
    views = [_gmem_view(plan, op, block.axis) for op in ops]
    registers = [c for c in block.carries if not c.accumulator]
    accumulators = [c for c in block.carries if c.accumulator]

    step: list[str] = []
    masks = set(block.masks)
    fills = dict(block.fills)
    for op_name in block.loads:
        masks |= fill_masks(plan, plan.operand(op_name), fills.get(op_name))
    writes = [
        (plan.results[r], block.blocks[b])
        for r, loop_index, b in streamed
        if loop_index == block.index
    ]
    if masks or writes:
        step.append(f"({index},) = {name}_indices")
    if registers:
        step.append(f"{_tuple([c.var for c in registers])} = {name}_carry")
    for op_name in block.loads:
        op = plan.operand(op_name)
        step.append(
            f"{op_name} = plgpu.load({op_name}_smem, layout={LAYOUTS[op.kind]}, optimized=False)"
        )
    step += _mask_lines(plan, masks, block.axis, index)
    for op_name in block.loads:
        op = plan.operand(op_name)
        fill_value = fills.get(op_name)
        op_masks = sorted(fill_masks(plan, op, fill_value), key=lambda m: not m.startswith("row"))
        if op_masks:
            fill = literal_source(fill_value, op.dtype, weak_type=False)
            select = select_source(" & ".join(op_masks), op_name, fill, op.dtype)
            step.append(f"{op_name} = {select}  # past the edge reads the fill")
    step += list(block.lines)
    for dot in block.dots:
        b_ref = f"{dot.b}_smem.T" if dot.transpose_b else f"{dot.b}_smem"
        step.append(f"plgpu.wgmma({dot.carry}_acc, {dot.a}_smem, {b_ref})")
    if block.dots and overlap:
        step.append("plgpu.wgmma_wait(1)  # the previous step's WGMMA is done; its blocks can go")
    elif block.dots:
        # The pipeline refills this step's slots as soon as the step returns.
        step.append("plgpu.wgmma_wait(0)")
    for result, value in writes:
        step.append("plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last block is read")
        step.append(store_source(f"{result.name}_smem", value, new_store_api))
        step.append("plgpu.commit_smem()")
        step.append(
            f"plgpu.copy_smem_to_gmem({result.name}_smem, "
            f"{_output_view(plan, result, block.axis, index, loop.block)})"
        )
    if registers:
        step.append(f"return {_tuple([c.update for c in registers])}")
    if not step:
        step.append("pass")

    params = [f"{name}_indices", *[f"{n}_smem" for n in block.operands]]
    if registers:
        params.append(f"{name}_carry")
    lines = [f"def {name}_step({', '.join(params)}):"] + ["    " + s for s in step]
    spec_names = [f"{name}_{n}_spec" for n in block.operands]
    lines += [f"{n} = {s}" for n, s in zip(spec_names, specs, strict=True)]
    call = [
        "plgpu.emit_pipeline(",
        f"    {name}_step,",
        f"    grid=({loop.steps},),",
        f"    in_specs=[{', '.join(spec_names)}],",
        f"    max_concurrent_steps={loop.stages},",
    ]
    if registers:
        init_names = [f"{name}_init{i}" for i in range(len(registers))]
        lines += [f"{n} = {c.init}" for n, c in zip(init_names, registers, strict=True)]
        call.append(f"    init_carry={_tuple(init_names)},")
    call.append(f")({', '.join(views)})")
    if block.mode == "map":
        return [*lines, *call, "plgpu.wait_smem_to_gmem(0)"]
    finals = _tuple(list(block.finals))
    if not accumulators:
        return [*lines, f"{finals} = {call[0]}", *call[1:]]
    acc_params = ", ".join(f"{c.var}_acc" for c in accumulators)
    scope = [f"def {name}({acc_params}):"] + ["    " + line for line in lines]
    carry_target = f"{name}_carry = " if registers else ""
    scope += ["    " + carry_target + call[0]] + ["    " + c for c in call[1:]]
    if overlap:
        scope.append("    plgpu.wgmma_wait(0)  # the last step's WGMMA")
    position = {c.var: i for i, c in enumerate(registers)}
    outs = [
        f"{c.var}_acc[...]" if c.accumulator else f"{name}_carry[{position[c.var]}]"
        for c in block.carries
    ]
    scope.append(f"    return {_tuple(outs)}")
    shape = (plan.dim(plan.rows).extent, plan.dim(plan.cols).extent if plan.cols else 0)
    accs = ", ".join(f"plgpu.ACC({shape}, jnp.float32)" for _ in accumulators)
    return [*scope, f"{finals} = pl.run_scoped({name}, {accs})"]


def _block_spec(plan: LaunchPlan, op: OperandPlan, axis: str, delay_release: int = 0) -> str:
    shape, index = [], []
    for d in op.dims:
        dim = plan.dim(d)
        shape.append(dim.extent)
        index.append("step" if d == axis else "0")
    transforms = ""
    if op.swizzle:
        transforms = (
            f", transforms=(plgpu.TilingTransform((8, {op.swizzle})), plgpu.SwizzleTransform(128))"
        )
    if delay_release:
        transforms += f", delay_release={delay_release}"
    block_shape = f"({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''})"
    block_index = f"({', '.join(index)}{',' if len(index) == 1 else ''})"
    return f"plgpu.BlockSpec({block_shape}, lambda step: {block_index}{transforms})"


def _gmem_view(plan: LaunchPlan, op: OperandPlan, axis: str) -> str:
    """The operand's part for this block: tiled dims sliced at the block, the loop dim whole."""
    slices = []
    for d in op.dims:
        dim = plan.dim(d)
        if d != axis and dim.tiled_by:
            slices.append(f"pl.ds(block_{d} * {dim.block}, {dim.block})")
        else:
            slices.append(":")
    if all(s == ":" for s in slices):
        return f"{op.name}_gmem"
    return f"{op.name}_gmem.at[{', '.join(slices)}]"


def _output_view(plan: LaunchPlan, op: OperandPlan, axis: str, index: str, step: int) -> str:
    slices = []
    for d in op.dims:
        dim = plan.dim(d)
        if d == axis:
            slices.append(f"pl.ds({index} * {step}, {step})")
        elif dim.tiled_by:
            slices.append(f"pl.ds(block_{d} * {dim.block}, {dim.block})")
        else:
            slices.append(":")
    return f"{op.name}_gmem.at[{', '.join(slices)}]"


def _mask_lines(plan: LaunchPlan, needed: set[str], axis: str, index: str) -> list[str]:
    """Edge masks for one step: the loop dim's positions start at the step's block."""
    if not needed:
        return []

    def mask_axis(dim: DimPlan | None) -> MaskAxis | None:
        if dim is None:
            return None
        if dim.name == axis:
            start = f"{index} * {dim.block}"
        elif dim.tiled_by:
            start = f"block_{dim.name} * {dim.block}"
        else:
            start = ""
        return MaskAxis(dim.extent, dim.size, start)

    rows = mask_axis(plan.dim(plan.rows))
    assert rows is not None
    return edge_mask_lines(needed, rows, mask_axis(plan.dim(plan.cols) if plan.cols else None))


def _tuple(items: list[str]) -> str:
    """A tuple display as a formatter writes it: no trailing comma unless it has one item."""
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
