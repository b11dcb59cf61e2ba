"""The warp-specialized, persistent launch of a matmul-shaped body (`plan/warpspec.py`
configures it): a producer warpgroup issues the TMA copies, two consumers issue WGMMA and
run the epilogue, and each CTA walks many CTA tiles."""

import dataclasses
import math

from ...._errors import RaggedGroupsError, TensorCoreTargetError
from ...ir.nodes import LoopMode
from ..plan.loops import plan_loops
from ..plan.schedule import ScheduleKind, schedule_figures
from ..plan.warp_walk import WalkInputs, ragged_rows
from ..plan.warpspec import plan_warp_specialized
from ..plan.warpspec_padding import hold_paired_blocks, hold_result_pieces
from .base import ScheduleChoice, ScheduleInputs

__all__ = ["WarpSpecializedLoop"]


class WarpSpecializedLoop:
    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
        plan = inputs.plan
        ragged = ragged_rows(plan.layout, plan.spec.rows)
        if not plan.target.has_wgmma:
            # Its producer and consumers issue WGMMA: Hopper's. Blackwell's warp-specialized
            # form (a TMA warp, an MMA warp, epilogue warpgroups) is not generated yet.
            if ragged is not None:
                raise plan.ctx.error(
                    TensorCoreTargetError,
                    f"the rows of {ragged.split} are split into groups (ragged=), which only "
                    f"the warp-specialized WGMMA matmul computes so far (target "
                    f"{plan.target.name}, {plan.target.gpus})",
                    operand=ragged.sizes,
                    dim=ragged.split,
                    expected="a target with WGMMA: sm_90a",
                    actual=plan.target.name,
                    fix="compile this kernel for sm_90a, or call it once a group on its rows",
                )
            return None
        choice = self._propose(inputs)
        if ragged is not None and choice is None:  # no other schedule walks ragged rows
            actual = _refusal(inputs)
            body_fix = (
                "fold the products as they are, acc + sk.dot(x, w), and apply anything "
                "else to the accumulator after the loop; for another body, call the kernel "
                "once a group on its rows (x[start:end] and w[g])"
            )
            raise plan.ctx.error(
                RaggedGroupsError,
                f"the rows of {ragged.split} are split into groups (ragged=), which the "
                "warp-specialized matmul computes, and it does not compute this body",
                operand=ragged.sizes,
                dim=ragged.split,
                expected="one sk.loop folding acc + sk.dot(x, w) over a dim of x's columns "
                "and w's rows, an elementwise epilogue, one result along the blocks, no "
                "index=, update= or pages=",
                actual=actual,
                fix="set BM and BN to at most 128" if "accumulator of" in actual else body_fix,
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
        ws = plan_warp_specialized(WalkInputs(plan, inputs.operands, inputs.results))
        if ws is None:
            return None
        blocks_of = {d.name: d.block for d in plan.layout.dims}
        operands, held = hold_paired_blocks(ws, inputs.operands, plan.loops[0], blocks_of)
        (result,) = inputs.results
        result, padded = hold_result_pieces(ws.epilogue[1], ws.ragged, result)
        (paired,) = plan_loops(plan, ws.stages)
        loops = (dataclasses.replace(paired, smem_bytes=ws.pipeline_bytes),)
        kind = ScheduleKind.WARP_SPECIALIZED
        schedule = schedule_figures(
            kind, ws.ctas, ws.stages, ws.stages * ws.stage_bytes, ws.smem_bytes, threads=ws.threads
        )
        notes = (*held, *padded)
        return ScheduleChoice(schedule, ws.smem_bytes, operands, loops, notes, ws, (result,))


def _refusal(inputs: ScheduleInputs) -> str:
    """Why the warp-specialized matmul does not take this body, in words."""
    plan = inputs.plan
    if plan.spec.copies_by_data:
        return "copies addressed by data (index= or update=)"
    if not plan.loops:
        return "a body without a loop"
    if len(plan.loops) != 1:
        return f"a body of {len(plan.loops)} loops"
    (loop,) = plan.loops
    if loop.mode is not LoopMode.FOLD:
        return "a loop of sk.map_blocks"
    if len(loop.dots) != 1 or loop.products or loop.loads or loop.masks:
        return (
            "a step that does more than add sk.dot(x, w) to the carry (a product scaled, "
            "masked or combined with a load)"
        )
    if loop.stop is not None or loop.start is not None or loop.reverse:
        return "a loop with start=, stop= or reverse=True"
    if plan.buffers_read_by_body:
        return "a body that reads a buffer itself (a shifted load, a stack of vectors)"
    tiled = [d for d in plan.layout.dims if d.tiled_by]
    elements = math.prod(d.block for d in tiled)
    if len(tiled) == 2 and elements > 128 * 128:
        blocks = " x ".join(f"{d.tiled_by}={d.block}" for d in tiled)
        return (
            f"an accumulator of {blocks} = {elements:,} elements a consumer, over the "
            "128 x 128 a consumer's registers hold"
        )
    return (
        "an epilogue that reads an operand other than a vector along the rows or the "
        "columns, a result not along the blocks, or stages that do not fit beside it"
    )
