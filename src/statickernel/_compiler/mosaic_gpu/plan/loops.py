"""The loops' pipelines of a specialization: their blocks, their stages (declared, or fitted
to shared memory when the stage constant is None) and the shared memory they take, and the
fix proposed when they do not fit."""

from ...._errors import BodyError
from ...ir.nodes import LoopMode
from .. import hardware as hw
from .inputs import PlanInputs
from .pipelining import LoopPlan, PlannedDot, pipeline_bytes

__all__ = ["MAX_STAGES", "plan_fitted_loops", "plan_loops", "stages_fix"]

# Stages fitted to shared memory stop here: more do not shorten a step's wait further.
MAX_STAGES = 4


def plan_loops(inputs: PlanInputs, stages: int | None = None) -> tuple[LoopPlan, ...]:
    """The loops' pipelines with `stages` stages, by default the declared count (at most
    each loop's steps)."""
    spec, layout = inputs.spec, inputs.layout
    declared = stages if stages is not None else inputs.declared_stages or MAX_STAGES
    out = []
    for block in inputs.loops:
        size, step = layout.dim(block.axis).size, layout.dim(block.axis).block
        if layout.dim(block.axis).page_rows:
            _check_paged_loop(inputs, block.axis, block.mode, block.reverse, block.start)
        steps = hw.cdiv(size, step)
        # A loop split across CTAs pipelines each CTA's part of its steps.
        eff = min(declared, inputs.part_steps or steps)
        loaded = tuple(
            (r.operand, r.fill)
            for r in inputs.loads
            if r.loop == block.index and r.operand in block.loads
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
                stops_early=block.stop is not None or block.start is not None,
                carries=len(block.carries) if block.mode == "map" else 0,
                reverse=block.reverse,
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
                smem_bytes=pipeline_bytes([inputs.block_bytes[n] for n in block.operands], eff),
            )
        )
    return tuple(out)


def _largest_fitting(
    inputs: PlanInputs, fixed_bytes: int, epilogue: int, most: int
) -> tuple[int, tuple[LoopPlan, ...]] | None:
    """The largest stage count up to `most`, and the loops with it, whose pipelines fit beside
    `fixed_bytes` of blocks copied once (the results after the loops, `epilogue`, reuse the
    pipelines' memory); None when even one stage does not."""
    for stages in range(most, 0, -1):
        plans = plan_loops(inputs, stages)
        if fixed_bytes + max(epilogue, *(lp.smem_bytes for lp in plans)) <= hw.SMEM_BYTES:
            return stages, plans
    return None


def plan_fitted_loops(inputs: PlanInputs, fixed_bytes: int, epilogue: int) -> tuple[LoopPlan, ...]:
    """For a stage constant left None: the loops with the most stages, up to `MAX_STAGES`,
    that fit (one stage when none does: the shared-memory error then says what to lower)."""
    fitted = _largest_fitting(inputs, fixed_bytes, epilogue, MAX_STAGES)
    return fitted[1] if fitted else plan_loops(inputs, 1)


def stages_fix(inputs: PlanInputs, fixed_bytes: int, epilogue: int) -> str:
    """Proposes the largest stage count whose pipelines fit, else smaller loop blocks."""
    spec = inputs.spec
    declared = inputs.declared_stages or MAX_STAGES
    fitted = _largest_fitting(inputs, fixed_bytes, epilogue, declared - 1)
    if fitted is not None:
        name = spec.stages if isinstance(spec.stages, str) else "stages="
        sep = "=" if isinstance(spec.stages, str) else ""
        return f"set {name}{sep}{fitted[0]} (the largest stage count that fits)"
    consts_text = ", ".join(f"{c}" for c in spec.block_map.values())
    return f"even one stage does not fit: lower the block constants ({consts_text})"


def _check_paged_loop(
    inputs: PlanInputs, axis: str, mode: LoopMode, reverse: bool, start: object
) -> None:
    """A loop over pages walks each sequence forward from its first page, folding it into
    carries (`sk.loop`): its pipeline copies the pages ahead of the step that reads them, and
    no array but the pages runs along the sequence for a map to write."""
    if mode == LoopMode.FOLD and not reverse and start is None:
        return
    if mode == LoopMode.MAP:
        what = f"sk.map_blocks({axis!r}, ...)"
    else:
        what = f"sk.loop({axis!r}, ..., {'reverse=True' if reverse else 'start=...'})"
    raise inputs.ctx.error(
        BodyError,
        f"{what} walks {axis}, which is stored in pages: a paged loop walks each sequence "
        "from its first page, folding it into carries",
        dim=axis,
        expected=f"sk.loop({axis!r}, step, init=...) walking forward",
        actual=what,
        fix=f"fold the pages with sk.loop({axis!r}, ...) (stop= ends it at a sequence's length)",
    )
