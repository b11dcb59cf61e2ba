"""The warp-specialized, persistent launch of a matmul-shaped body on tcgen05 tensor cores
(`plan/mma_warp.py` configures it): a TMA warp copies, an MMA warp accumulates into tensor
memory, an epilogue warpgroup stores one tile while the next accumulates."""

import dataclasses

from ...._targets import TensorCores
from ..plan.loops import plan_loops
from ..plan.mma_warp import plan_mma_warp
from ..plan.schedule import ScheduleKind, schedule_figures
from ..plan.warp_walk import WalkInputs, ragged_rows
from ..plan.warpspec_padding import hold_result_pieces
from .base import ScheduleChoice, ScheduleInputs

__all__ = ["MmaWarpLoop"]


class MmaWarpLoop:
    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
        plan = inputs.plan
        # Ragged groups and clusters of CTAs are the WGMMA form's (which says so on sm_100a).
        if (
            plan.target.tensor_cores is not TensorCores.TCGEN05
            or not plan.loops
            or not plan.form.specializes_warps
            or plan.buffers_read_by_body
            or plan.spec.copies_by_data
            or ragged_rows(plan.layout, plan.spec.rows) is not None
        ):
            return None
        config = plan_mma_warp(WalkInputs(plan, inputs.operands, inputs.results))
        if config is None:
            return None
        (result,) = inputs.results
        result, padded = hold_result_pieces(config.epilogue[1], None, result)
        (loop,) = plan_loops(plan, config.stages)
        loops = (dataclasses.replace(loop, smem_bytes=config.pipeline_bytes),)
        schedule = schedule_figures(
            ScheduleKind.MMA_WARP,
            config.ctas,
            config.stages,
            config.stages * config.stage_bytes,
            config.smem_bytes,
            target=plan.target,
            threads=config.threads,
        )
        return ScheduleChoice(
            schedule,
            config.smem_bytes,
            inputs.operands,
            loops,
            tuple(padded),
            config,
            (result,),
        )
