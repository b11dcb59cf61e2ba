"""The warp-specialized, persistent launch of a matmul-shaped body (`plan/warpspec.py`
configures it): a producer warpgroup issues the TMA copies, two consumers issue WGMMA and
run the epilogue, and each CTA walks many CTA tiles."""

import dataclasses

from ..._errors import RaggedGroupsError
from ..plan import schedule as figures
from ..plan.loops import plan_loops
from ..plan.schedule import ScheduleKind, schedule_figures
from ..plan.warpspec import hold_paired_blocks, plan_warp_specialized, ragged_rows
from .base import ScheduleChoice, ScheduleInputs

__all__ = ["WarpSpecializedLoop"]


class WarpSpecializedLoop:
    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
        choice = self._propose(inputs)
        plan = inputs.plan
        ragged = ragged_rows(plan.layout, plan.spec.rows)
        if ragged is not None and choice is None:  # no other schedule walks ragged rows
            raise plan.ctx.error(
                RaggedGroupsError,
                f"the rows of {ragged.split} are split into groups (ragged=), which the "
                "warp-specialized matmul computes, and it does not compute this body",
                operand=ragged.sizes,
                dim=ragged.split,
                expected="one sk.loop folding acc + sk.dot(x, w) over a dim of x's columns "
                "and w's rows, an elementwise epilogue, one result along the blocks, no "
                "index=, update= or pages=",
                actual=_refusal(inputs),
                fix="write the body as examples/grouped_matmul.py does; for any other body, "
                "call the kernel once a group on its rows (x[start:end], w[g])",
            )
        return choice

    def _propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
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


def _refusal(inputs: ScheduleInputs) -> str:
    """Why the warp-specialized matmul does not take this body, in words."""
    plan = inputs.plan
    if not plan.loops:
        return "a body without a loop"
    if plan.spec.copies_by_data:
        return "copies addressed by data (index= or update=)"
    if plan.buffers_read_by_body:
        return "a body that reads a buffer itself (a shifted load, a stack of vectors)"
    if not plan.form.specializes_warps:
        return "a body whose values live in another register form (a row or strided form)"
    return "a loop that is not one fold of acc + sk.dot, or blocks whose stages do not fit"
