"""Narrower tile constants than a call's defaults, where the declared blocks split a loop
over too few blocks to fill the SMs: each candidate compiled, the best by the plan's cost.
(The rows' tile constant tcgen05 needs on Blackwell is asked for by the plan itself,
`plan/products.py`, and the compile path's constants stage compiles with it; the
candidates keep it, and its note.)"""

import dataclasses
from collections.abc import Callable

from ..._errors import BodyError, HardwareRuleError, StaticKernelError
from ..unit import Compiled, CompileUnit
from .plan import schedule
from .plan.narrowing import Narrowing, narrowing_candidates, score
from .plan.plan import LaunchPlan

__all__ = ["NARROWER_BLOCK_ERRORS", "launch_plan", "narrowed"]


# The rules a block's size enters, and so the errors a narrower candidate can raise where the
# declared blocks compiled: the hardware's (a TMA box, an alignment, shared memory, the grid,
# a product's shapes and the tensor cores') and the body's (a slice, a shift or a split that
# a narrower block cannot take). A candidate that breaks one is no candidate; any other error
# (a call's operands, a declaration's, a compile's) is not the narrower block's and surfaces.
NARROWER_BLOCK_ERRORS: tuple[type[StaticKernelError], ...] = (HardwareRuleError, BodyError)


def launch_plan(compiled: Compiled) -> LaunchPlan | None:
    """The Mosaic GPU plan a compile made, as its type."""
    assert compiled.plan is None or isinstance(compiled.plan, LaunchPlan)
    return compiled.plan


def narrowed(
    unit: CompileUnit, declared: Compiled, compile_unit: Callable[[CompileUnit], Compiled]
) -> Compiled:
    """`declared`, or the specialization of narrower tile constants where the declared
    blocks split a loop over too few blocks to fill the SMs (`plan/narrowing.py`)."""
    plan = launch_plan(declared)
    variant = None if plan is None else plan.schedule_variant
    parts = None if variant is None else variant.loop_parts()  # a split launch's
    if plan is None or parts is None or not unit.narrowable:
        return declared
    sms = schedule.sm_count()
    compiled = [(unit, declared)]
    for consts in narrowing_candidates(plan.dims, unit.consts, unit.narrowable, sms):
        narrower = dataclasses.replace(unit, consts={**unit.consts, **consts})
        try:
            candidate = compile_unit(narrower)
        except NARROWER_BLOCK_ERRORS:  # a block the rules refuse is no candidate
            continue
        if candidate.request is None:  # nor is one whose products ask for other constants
            compiled.append((narrower, candidate))

    def key(item: tuple[int, tuple[CompileUnit, Compiled]]) -> tuple[float, int, int, int]:
        i, (_, c) = item
        p = launch_plan(c)
        assert p is not None and p.cost is not None and p.schedule is not None
        return (
            score(p.cost.floor_seconds, p.schedule.ctas, sms),
            p.cost.hbm_bytes,
            p.smem_bytes,
            i,
        )

    _, (best_unit, best) = min(enumerate(compiled), key=key)
    chosen = launch_plan(best)
    if best is declared or chosen is None:
        return declared
    assert plan.cost is not None and plan.schedule is not None and chosen.cost is not None
    assert chosen.schedule is not None
    before, after = dict(plan.constants), dict(chosen.constants)
    names = [n for n in before if before[n] != after[n]]
    narrowing = Narrowing(
        declared=tuple((n, before[n]) for n in names),
        chosen=tuple((n, after[n]) for n in names),
        declared_ctas=plan.schedule.ctas,
        declared_hbm_bytes=plan.cost.hbm_bytes,
        declared_split=parts,
        declared_smem_bytes=plan.smem_bytes,
        ctas=chosen.schedule.ctas,
        hbm_bytes=chosen.cost.hbm_bytes,
        smem_bytes=chosen.smem_bytes,
        sms=sms,
    )
    narrowing.check_invariants()
    # The chosen constants compiled once more, the plan made with its narrowing: a plan is
    # never patched after it is made.
    return compile_unit(dataclasses.replace(best_unit, narrowing=narrowing))
