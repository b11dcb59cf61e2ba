"""A loop split across CTAs (`plan/split.py`): for a body that sums its one loop from zero
into its results, over a grid of too few blocks to keep the SMs busy. Each CTA pipelines its
part of the loop as `PipelinedLoops` does, and stores its partial sums; the wrapper adds them.
"""

import dataclasses

from .. import hardware as hw
from ..plan import schedule as figures
from ..plan.schedule import ScheduleKind, schedule_figures
from ..plan.split import MIN_PART_STEPS, LoopSplit, split_parts
from ..plan.warp_walk import ragged_rows
from .base import ScheduleChoice, ScheduleInputs
from .pipelined import PipelinedLoops

__all__ = ["SplitLoop"]


class SplitLoop:
    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
        plan = inputs.plan
        sums = plan.splittable
        if (
            sums is None
            or not plan.form.splits_loops
            or len(plan.loops) != 1
            or plan.spec.copies_by_data
            or plan.buffers_read_by_body
        ):
            return None
        dim = plan.layout.dim(sums.axis)
        # Rows split into ragged groups are walked by the warp-specialized launch alone, and
        # a paged loop by a pipeline of its own.
        if ragged_rows(plan.layout, plan.spec.rows) is not None or dim.page_rows:
            return None
        steps = hw.cdiv(dim.size, dim.block)
        sms = figures.sm_count()
        # A declared stage count is kept: each part walks as many steps at least.
        parts = split_parts(plan.blocks, steps, sms, plan.declared_stages or MIN_PART_STEPS)
        if parts is None:
            return None
        count, part_steps = parts
        results = plan.spec.results
        partial_dtypes = sums.partial_dtypes
        dtypes = {
            **plan.dtypes,
            **{r.name: d for r, d in zip(results, partial_dtypes, strict=True)},
        }
        split_inputs = dataclasses.replace(plan, dtypes=dtypes, part_steps=part_steps)
        partials = tuple(
            op.with_partials((sums.axis,), (count,), dtype)
            for op, dtype in zip(inputs.results, partial_dtypes, strict=True)
        )
        base = PipelinedLoops().propose(ScheduleInputs(split_inputs, inputs.operands, partials))
        assert base is not None, "a body with a loop is pipelined"
        split = LoopSplit(
            axis=sums.axis,
            steps=steps,
            parts=count,
            part_steps=part_steps,
            blocks=plan.blocks,
            sms=sms,
            partials=sums.partials,
            partial_dtypes=partial_dtypes,
            casts=sums.casts,
            cast_vars=sums.cast_vars,
        )
        split.check_invariants()
        schedule = schedule_figures(
            ScheduleKind.SPLIT_LOOP,
            split.ctas,
            base.schedule.stages,
            base.schedule.load_bytes_per_cta,
            base.smem_bytes,
        )
        return dataclasses.replace(base, schedule=schedule, results=partials, variant=split)
