"""The warp-specialized, persistent launch of a matmul-shaped body (`plan/warpspec.py`
configures it): a producer warpgroup issues the TMA copies, two consumers issue WGMMA and
run the epilogue, and each CTA walks many CTA tiles."""

import dataclasses

from ..plan import schedule as figures
from ..plan.loops import plan_loops
from ..plan.schedule import ScheduleKind, schedule_figures
from ..plan.warpspec import hold_paired_blocks, plan_warp_specialized
from .base import ScheduleChoice, ScheduleInputs

__all__ = ["WarpSpecializedLoop"]


class WarpSpecializedLoop:
    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
        plan = inputs.plan
        # A buffer the body reads itself (a shifted load's rows, a stack of vectors) takes
        # the pipelined launch, which copies it once, whole.
        # Copies addressed by data are made by the launch of one block a CTA too.
        if (
            not plan.loops
            or not plan.form.specializes_warps
            or plan.buffers_read_by_body
            or plan.spec.copies_by_data
        ):
            return None
        spec, layout = plan.spec, plan.layout
        ws = plan_warp_specialized(
            plan.loops,
            inputs.operands,
            inputs.results,
            layout,
            spec.rows,
            spec.cols,
            bool(plan.masked_reductions),
            plan.declared_stages,
            spec.stages if isinstance(spec.stages, str) else "stages",
            figures.SMS,
            plan.ctx,
        )
        if ws is None:
            return None
        blocks_of = {d.name: d.block for d in layout.dims}
        operands, held = hold_paired_blocks(ws, inputs.operands, plan.loops[0], blocks_of)
        (paired,) = plan_loops(plan, ws.stages)
        loops = (dataclasses.replace(paired, smem_bytes=ws.pipeline_bytes),)
        kind = ScheduleKind.WARP_SPECIALIZED
        schedule = schedule_figures(
            kind, ws.ctas, ws.stages, ws.stages * ws.stage_bytes, ws.smem_bytes, threads=ws.threads
        )
        return ScheduleChoice(schedule, ws.smem_bytes, operands, loops, tuple(held), ws)
