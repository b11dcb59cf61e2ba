"""Making the plan: the launch of one specialization from what planning reads, once."""

import dataclasses

from ...unit import ConstantRequest
from ..launch_limits import check_grid, check_offsets
from ..layout.blocks import DimLayout, quantum
from ..pallas import RowFrame
from ..schedules.base import ScheduleInputs
from ..schedules.choose import choose_schedule
from .arrays import plan_arrays
from .cost import plan_cost
from .crossblock import partial_plans
from .forms import planned_form
from .inputs import PlanInputs
from .numerics import plan_approx_math, plan_numerics
from .operands import OperandPlan
from .pipelining import LoopPlan
from .plan import LaunchPlan, step_block
from .products import check_products
from .variants import ScheduleVariant

__all__ = ["make_plan"]


def make_plan(inputs: PlanInputs) -> "LaunchPlan | ConstantRequest":
    """The launch of one specialization: the layout's grid and blocks, each operand's array,
    block and fill, and the launch schedule (the first of `schedules.choose` that proposes
    itself), with the loops' pipelines and the shared memory it takes. Every fill comes from
    the body's load records. At a call, a product the target's tensor cores take only at
    another value of a defaulted constant asks for it instead (`products.check_products`)."""
    spec, layout = inputs.spec, inputs.layout
    _check_grid(inputs)
    operands, results, notes = plan_arrays(inputs)
    for mask, dim_name in (("row_ok", spec.rows), ("col_ok", spec.cols)):
        if mask in inputs.masked_reductions and dim_name is not None:
            notes.append(
                f"reductions over {dim_name} are masked: elements past "
                f"{layout.sizes[dim_name]} take the reduction's identity, whatever the fill"
            )
    if inputs.scratch_bytes:
        staged = any(not p.b or not p.a for loop in inputs.loops for p in loop.products)
        what = "products' computed operands are staged" if staged else "scans run"
        notes.append(
            f"the body's {what} in {inputs.scratch_bytes:,} B of shared memory of their own"
        )
    form = inputs.form
    notes += form.notes
    choice = choose_schedule(ScheduleInputs(inputs, operands, results))
    request = check_products(inputs, choice.loops)
    if request is not None:
        return request
    results, cross_notes = _with_partials(inputs, choice.results or results)
    launch = _Launch(
        operands=choice.operands,
        results=results,
        dims=layout.dims,
        loops=choice.loops,
        rows=spec.rows,
        cols=spec.cols,
        schedule_variant=choice.variant,
        row_frame=form.row_frame,
    )
    call = inputs.call
    plan = LaunchPlan(
        kernel=spec.name,
        location=spec.location,
        backend=inputs.backend,
        grid=layout.grid,
        grid_names=layout.grid_names,
        dims=layout.dims,
        operands=choice.operands,
        results=results,
        constants=tuple(inputs.consts.items()),
        rows=spec.rows,
        cols=spec.cols,
        smem_bytes=choice.smem_bytes,
        notes=(*notes, *choice.notes, *cross_notes, *(call.notes if call else ())),
        tuple_result=spec.result_is_tuple,
        loops=choice.loops,
        planned_form=planned_form(form.row_frame, form.flat_frame),
        schedule=choice.schedule,
        cost=None if call is None else plan_cost(launch, call.trace),
        numerics=None if call is None else plan_numerics(call.trace, layout.sizes),
        approx_math=None if call is None else plan_approx_math(call.trace, spec.approx_math),
        profile=None if call is None else call.profile,
        narrowing=None if call is None else call.narrowing,
        cross_blocks=inputs.crosses,
        schedule_variant=choice.variant,
        target=inputs.target.name,
    )
    plan.check_invariants()
    return plan


def _with_partials(
    inputs: PlanInputs, results: tuple[OperandPlan, ...]
) -> tuple[tuple[OperandPlan, ...], tuple[str, ...]]:
    """The results, those reduced across blocks written as their blocks' partials (or with
    persistent CTAs, each CTA's), and the notes that say how they combine."""
    if not inputs.crosses:
        return results, ()
    layout = inputs.layout
    counts = dict(zip(layout.grid_names, layout.grid, strict=True))
    persistent = inputs.form.persistent
    if persistent is not None:  # each persistent CTA adds up the rows of its blocks
        counts[inputs.spec.rows] = persistent.ctas
    return partial_plans(results, inputs.crosses, counts, persistent is not None)


@dataclasses.dataclass(frozen=True)
class _Launch:
    """What the cost reads of the launch (`cost._Planned`), before the plan that holds the
    cost is made."""

    operands: tuple[OperandPlan, ...]
    results: tuple[OperandPlan, ...]
    dims: tuple[DimLayout, ...]
    loops: tuple[LoopPlan, ...]
    rows: str
    cols: str | None
    schedule_variant: ScheduleVariant | None
    row_frame: RowFrame | None

    def step_block(self, axis: str) -> int:
        return step_block(self.row_frame, self.dims, axis)


def _check_grid(inputs: PlanInputs) -> None:
    """The grid's axes and the blocks' offsets within the hardware's limits."""
    spec, layout = inputs.spec, inputs.layout
    blocks = {n: layout.dim(n).block for n in spec.block_map}
    options = {name: (dtype,) for name, dtype in inputs.dtypes.items()}
    units = {d.name: quantum(spec, d.name, options)[0] for d in layout.dims if d.tiled_by}
    sizes = layout.sizes
    check_grid(layout.grid, layout.grid_names, sizes, blocks, spec.block_map, units, inputs.ctx)
    check_offsets(sizes, blocks, spec.block_map, inputs.ctx)
