"""The loops' pipelines of a specialization: their blocks, their stages (declared, or fitted
to shared memory when the stage constant is None) and the shared memory they take, and the
fix proposed when they do not fit."""

from collections.abc import Mapping
from typing import Any

from . import _hardware as hw
from ._layout import BlockLayout
from ._pipeline import LoopPlan, PlannedDot, pipeline_bytes
from ._smem import block_bytes, dims_of, epilogue_bytes, smem_bytes
from ._spec import KernelSpec
from ._trace_context import LoadRecord
from ._translation import LoopBlock

__all__ = ["MAX_STAGES", "plan_fitted_loops", "plan_loops", "stages_fix"]

# Stages fitted to shared memory stop here: more do not shorten a step's wait further.
MAX_STAGES = 4


def plan_loops(
    spec: KernelSpec,
    loops: tuple[LoopBlock, ...],
    layout: BlockLayout,
    dtypes: Mapping[str, str],
    consts: Mapping[str, Any],
    loads: tuple[LoadRecord, ...],
    stages: int | None = None,
) -> tuple[LoopPlan, ...]:
    declared = stages if stages is not None else spec.stage_count(consts) or MAX_STAGES
    out = []
    for block in loops:
        size, step = layout.dim(block.axis).size, layout.dim(block.axis).block
        steps = hw.cdiv(size, step)
        eff = min(declared, steps)
        loaded = tuple(
            (r.operand, r.fill) for r in loads if r.loop == block.index and r.operand in block.loads
        )
        out.append(
            LoopPlan(
                axis=block.axis,
                constant=spec.loop_map[block.axis],
                block=step,
                size=size,
                steps=steps,
                stages=eff,
                mode=block.mode,
                operands=block.operands,
                dots=tuple(PlannedDot(d.a, d.b, d.transpose_b) for d in block.dots),
                products=tuple(PlannedDot(d.a, d.b, d.transpose_b) for d in block.products),
                stops_early=block.stop is not None,
                # sk.dot reads its operands as TMA fills them: zeros past the edge.
                fills=loaded
                + tuple(
                    dict.fromkeys(
                        (n, 0)
                        for d in (*block.dots, *block.products)
                        for n in (d.a, d.b)
                        if n in block.operands and n not in dict(loaded)
                    )
                ),
                smem_bytes=pipeline_bytes(
                    [block_bytes(spec, n, layout, dtypes) for n in block.operands], eff
                ),
            )
        )
    return tuple(out)


def plan_fitted_loops(
    spec: KernelSpec,
    loops: tuple[LoopBlock, ...],
    layout: BlockLayout,
    dtypes: Mapping[str, str],
    consts: Mapping[str, Any],
    loads: tuple[LoadRecord, ...],
) -> tuple[LoopPlan, ...]:
    """For a stage constant left None: the loops with the most stages, up to `MAX_STAGES`,
    whose pipelines fit beside the blocks copied once (one stage when none does: the
    shared-memory error then says what to lower)."""
    looped = spec.loop_map
    streamed = {r.name for r in spec.results if any(d in looped for d in r.dims)}
    once = {o.name for o in spec.operands if not any(d in looped for d in dims_of(spec, o.name))}
    base = smem_bytes(spec, layout, dtypes, once, results=streamed)
    epilogue = epilogue_bytes(spec, layout, dtypes, streamed)
    for stages in range(MAX_STAGES, 1, -1):
        plans = plan_loops(spec, loops, layout, dtypes, consts, loads, stages)
        if base + max(epilogue, *(lp.smem_bytes for lp in plans)) <= hw.SMEM_BYTES:
            return plans
    return plan_loops(spec, loops, layout, dtypes, consts, loads, 1)


def stages_fix(
    spec: KernelSpec,
    consts: Mapping[str, Any],
    fixed_bytes: int,
    epilogue: int,
    loops: tuple[LoopBlock, ...],
    layout: BlockLayout,
    dtypes: Mapping[str, str],
    loads: tuple[LoadRecord, ...],
) -> str:
    """Proposes the largest stage count whose pipelines fit, else smaller loop blocks."""
    declared = spec.stage_count(consts) or MAX_STAGES
    for stages in range(declared - 1, 0, -1):
        plans = plan_loops(spec, loops, layout, dtypes, consts, loads, stages)
        if fixed_bytes + max(epilogue, *(lp.smem_bytes for lp in plans)) <= hw.SMEM_BYTES:
            name = spec.stages if isinstance(spec.stages, str) else "stages="
            sep = "=" if isinstance(spec.stages, str) else ""
            return f"set {name}{sep}{stages} (the largest stage count that fits)"
    consts_text = ", ".join(f"{c}" for c in spec.block_map.values())
    return f"even one stage does not fit: lower the block constants ({consts_text})"
