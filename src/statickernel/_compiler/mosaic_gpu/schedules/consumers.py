"""A loop shared by two consumer warpgroups (`plan/consumers.py` decides and configures it):
a producer warpgroup copies the loop's blocks once for two blocks of rows, each consumer
computes one. Taken where the pair fits in shared memory beside the pipeline; else the
pipelined launch of one warpgroup a CTA is asked next."""

import dataclasses
import math

from .. import hardware as hw
from ..layout.smem import dims_of, epilogue_bytes, smem_bytes
from ..plan.consumers import CONSUMERS, pair
from ..plan.inputs import PlanInputs
from ..plan.loops import MAX_STAGES, plan_loops
from ..plan.operands import OperandPlan
from ..plan.schedule import WARPGROUP_THREADS, ScheduleKind, schedule_figures
from .base import ScheduleChoice, ScheduleInputs, once_bytes

__all__ = ["ConsumerPairLoop"]


class ConsumerPairLoop:
    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
        plan = inputs.plan
        spec, layout, dtypes = plan.spec, plan.layout, plan.dtypes
        stages = plan.declared_stages or MAX_STAGES
        # Its consumers multiply with WGMMA, Hopper's.
        consumers = pair(plan, stages) if plan.target.has_wgmma else None
        if consumers is None:
            return None
        (loop,) = plan_loops(plan, stages)
        once = {n for n in plan.fills if not any(d == loop.axis for d in dims_of(spec, n))}
        # Each consumer holds its own blocks loaded once and its results' blocks; the loop's
        # stages are shared.
        own = smem_bytes(spec, layout, dtypes, once, results=set()) - hw.SMEM_RESERVED_BYTES
        own += epilogue_bytes(spec, layout, dtypes, set())
        # The pipeline's barriers: one produced and one consumed a stage.
        pipeline = loop.smem_bytes + hw.BARRIER_BYTES * loop.stages
        smem = CONSUMERS * own + pipeline + hw.SMEM_RESERVED_BYTES
        if smem > hw.SMEM_BYTES:
            return None
        consumers = dataclasses.replace(consumers, stages=loop.stages)
        grid = dict(zip(plan.layout.grid_names, plan.layout.grid, strict=True))
        grid[consumers.rows] = consumers.pairs
        ctas = math.prod(grid.values())
        in_flight = once_bytes(inputs.operands) * CONSUMERS + loop.smem_bytes
        schedule = schedule_figures(
            ScheduleKind.CONSUMER_PAIR,
            ctas,
            loop.stages,
            in_flight,
            smem,
            threads=WARPGROUP_THREADS * (CONSUMERS + 1),
        )
        results = tuple(_swizzled(plan, r) for r in inputs.results)
        return ScheduleChoice(
            schedule, smem, inputs.operands, (loop,), results=results, variant=consumers
        )


def _swizzled(plan: PlanInputs, result: OperandPlan) -> OperandPlan:
    """A result block stored through tiled, swizzled shared memory where TMA can copy it
    whole: a consumer writes its rows with `stmatrix` free of bank conflicts (an untiled row of
    128 bytes or more puts the rows of an 8 x 8 tile in one bank), as FlashAttention-3's
    epilogue does. A block of the frame, one TMA box wide, of whole 128-byte swizzle rows, in
    an array of whole 8-row tiles, copied whole (no batch entry's last rows alone)."""
    spec, layout = plan.spec, plan.layout
    if result.dims != (spec.rows, spec.cols) or spec.cols is None or result.last_block_rows:
        return result
    swizzle = hw.per_bytes(hw.SWIZZLE_BYTES, result.dtype)
    rows, cols = result.gmem_shape[-2:]
    whole = rows % 8 == 0 and cols % swizzle == 0 and result.block_shape[-1] % swizzle == 0
    if not whole or layout.dim(spec.cols).boxes != 1:
        return result
    return dataclasses.replace(result, swizzle=swizzle)
