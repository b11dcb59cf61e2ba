"""Pipelined loops: each loop of the body a software pipeline (`emit_pipeline`), `stages`
steps' loads in flight. Results written after the loops reuse the pipelines' shared memory."""

from ...._errors import SharedMemoryError
from .. import hardware as hw
from ..layout.smem import dims_of, epilogue_bytes, smem_bytes
from ..plan.loops import plan_fitted_loops, plan_loops, stages_fix
from ..plan.schedule import ScheduleKind, schedule_figures
from .base import ScheduleChoice, ScheduleInputs, once_bytes

__all__ = ["PipelinedLoops"]


class PipelinedLoops:
    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
        plan = inputs.plan
        if not plan.loops:
            return None
        spec, layout, dtypes = plan.spec, plan.layout, plan.dtypes
        looped = spec.loop_map
        # Results written after the loops take scoped shared memory that reuses the pipelines'.
        streamed = {r.name for r in spec.results if any(d in looped for d in r.dims)}
        once = {n for n in plan.fills if not any(d in looped for d in dims_of(spec, n))}
        base = smem_bytes(spec, layout, dtypes, once, results=streamed, halo_rows=plan.halo_rows)
        # A scan in a step scopes its buffer there, beside the pipeline's.
        base += hw.round_up(plan.scratch_bytes, hw.SMEM_BUFFER_ALIGN)
        epilogue = epilogue_bytes(spec, layout, dtypes, streamed)
        if plan.declared_stages is None:
            loops = plan_fitted_loops(plan, base, epilogue)
        else:
            loops = plan_loops(plan)
        smem = base + max(epilogue, *(lp.smem_bytes for lp in loops))
        if smem > hw.SMEM_BYTES:
            raise plan.ctx.error(
                SharedMemoryError,
                f"the blocks and pipeline stages need {smem:,} B of shared memory, over the "
                f"{hw.SMEM_BYTES:,} B a block has",
                expected=f"<= {hw.SMEM_BYTES:,} B",
                actual=f"{smem:,} B ("
                + "; ".join(
                    f"loop over {lp.axis}: {lp.stages} stage(s) x {lp.smem_bytes // lp.stages:,} B"
                    for lp in loops
                )
                + (f"; results after the loops: {epilogue:,} B" if epilogue else "")
                + ")",
                fix=stages_fix(plan, base, epilogue),
            )
        stages = max(lp.stages for lp in loops)
        in_flight = once_bytes(inputs.operands) + max(
            lp.stages * sum(plan.block_bytes[n] for n in lp.operands) for lp in loops
        )
        kind = ScheduleKind.PIPELINED_LOOPS
        schedule = schedule_figures(kind, plan.blocks, stages, in_flight, smem)
        return ScheduleChoice(schedule, smem, inputs.operands, loops)
