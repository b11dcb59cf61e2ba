"""The one compile path: a spec, sizes, dtypes and constants become a plan and its source.

The decorator runs it on probe sizes (`Phase.DECLARATION`), so that the hardware rules and the
body are checked at import; every call runs it on the bound arguments (`Phase.CALL`). The
stages, in order:

  layout     the blocks of every dim (`layout/blocks.py`); checked against TMA and the register
             layout. At the call the layout waits for the trace, since a whole dim's padding
             depends on the results' dtypes, which the trace gives.
  trace      the body on abstract blocks (`trace/body.py`), and its results checked
  translate  the body's equations as Pallas statements on the layout's registers
  check      the rules of pipelined operands and of sk.dot
  form       at the call, the register form the body takes (`forms/choose.py`): the first of
             the row form, the strided block and the block form that proposes itself
  plan       the frozen `LaunchPlan` (`plan/plan.py`); at the declaration only for loop kernels,
             whose pipelines' shared memory depends on the body
  emit       the module's source (`emit/module.py`), at the call only
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from .. import _hardware as hw
from .._errors import (
    ErrorContext,
    LoopOperandError,
    Phase,
    ResultMismatchError,
    SharedMemoryError,
    StaticKernelError,
)
from .declare.binding import Binding
from .declare.spec import KernelSpec
from .emit.module import generate_source
from .forms.base import FormChoice, FormInputs
from .forms.choose import choose_form
from .layout.blocks import (
    BlockLayout,
    call_layout,
    check_blocks,
    declaration_layout,
    logical_blocks,
)
from .layout.smem import smem_bytes, smem_fix
from .lower.geometry import block_geometry
from .lower.translate import Translation, translate
from .plan.cost import plan_cost
from .plan.pipelining import check_dots
from .plan.plan import LaunchPlan, make_plan
from .trace.body import BodyTrace, check_outputs, misplaced_load_error, trace_body
from .trace.crossblock import CrossBlock, partial_plans, partial_specs
from .trace.crossblock_rewrite import cross_block_results

__all__ = ["Compiled", "compile_call", "compile_declaration"]


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What the compile path produced: every stage's result, for the stages that ran."""

    layout: BlockLayout
    trace: BodyTrace
    translation: Translation
    plan: LaunchPlan | None
    """None at a declaration without loops: nothing there depends on a plan."""
    source: str | None
    """The generated module; only at a call."""


def compile_call(spec: KernelSpec, binding: Binding, backend: str, where: str | None) -> Compiled:
    """Compiles the specialization `binding` calls for, to run on `backend`."""
    dtypes = dict(binding.dtypes)
    return _compile(
        spec,
        Phase.CALL,
        binding.size_map,
        dict(binding.consts),
        {name: (dtype,) for name, dtype in dtypes.items()},
        dict(binding.shapes),
        backend,
        where,
    )


def compile_declaration(
    spec: KernelSpec, consts: Mapping[str, Any], where: str | None = None
) -> Compiled:
    """Checks a declaration with `consts`: its blocks for every dtype the annotations allow,
    and its body, traced once on probe sizes with no data. `where` is the line the errors
    point at: the decorator's by default, the call's for `kernel.bind`."""
    options = {o.name: o.dtypes for o in spec.operands + spec.results}
    return _compile(spec, Phase.DECLARATION, None, consts, options, None, "interpret", where)


def _compile(
    spec: KernelSpec,
    phase: Phase,
    sizes: Mapping[str, int] | None,
    consts: Mapping[str, Any],
    options: Mapping[str, tuple[str, ...]],
    shapes: Mapping[str, tuple[int, ...]] | None,
    backend: str,
    where: str | None,
) -> Compiled:
    # At the declaration the sizes are probes, not the user's: they stay out of the messages.
    ctx = ErrorContext(spec.name, where or spec.location, phase)
    if sizes is not None:
        ctx = ctx.bound(sizes)
    declared: BlockLayout | None = None
    if phase is Phase.DECLARATION:
        declared = declaration_layout(spec, consts, options)
        check_blocks(spec, declared, options, ctx)
        declared.check_invariants()
        _check_declared_smem(spec, declared, consts, options, ctx)
        sizes = declared.sizes
        shapes = {o.name: tuple(sizes[d] for d in o.block_dims) for o in spec.operands}
    assert sizes is not None and shapes is not None
    logical = logical_blocks(spec, sizes, consts)
    # The body is traced with each operand's first allowed dtype at the declaration.
    trace = trace_body(
        spec,
        {o.name: tuple(logical[d] for d in o.block_dims) for o in spec.operands},
        {name: dtypes[0] for name, dtypes in options.items()},
        shapes,
        consts,
        sizes,
        dims_are_bound=phase is Phase.CALL,
    )
    loops = spec.loop_map
    result_blocks = [
        tuple(sizes[d] if d in loops else logical[d] for d in r.block_dims) for r in spec.results
    ]
    result_dtypes = check_outputs(
        spec, trace, result_blocks, spec.location, sizes if phase is Phase.CALL else {}
    )
    trace, crosses = cross_block_results(spec, trace, sizes)
    if declared is None:
        bound = {name: dtypes[0] for name, dtypes in options.items()}
    else:  # at the declaration, shared memory is counted with the widest dtypes allowed
        bound = {name: _widest(dtypes) for name, dtypes in options.items()}
    bound.update({r.name: dt for r, dt in zip(spec.results, result_dtypes, strict=True)})
    if crosses:
        # The partials' layout is the vector the body keeps: translate once to learn it.
        first = declared or call_layout(spec, sizes, consts, bound)
        kinds = _translate(spec, trace, first, False, open_results=crosses).result_kinds
        spec, crosses = partial_specs(spec, crosses, dict(enumerate(kinds)))
        bound.update({c.name: c.partial_dtype for c in crosses})
    if declared is None:
        layout = call_layout(spec, sizes, consts, bound)
        options = {name: (dtype,) for name, dtype in bound.items()}
        check_blocks(spec, layout, options, ctx)
        layout.check_invariants()
    else:
        layout = declared
    # The declaration checks the body as Mosaic GPU would take it.
    interpreted = phase is Phase.CALL and backend == "interpret"
    translation = _translate(spec, trace, layout, interpreted)
    _check_loops(spec, translation, layout, options, ctx)
    choice = FormChoice.block(layout, translation)
    if phase is Phase.CALL:
        choice = choose_form(
            FormInputs(spec, trace, layout, bound, crosses, translation, interpreted, ctx)
        )
    layout, translation = choice.layout, choice.translation
    plan = source = None
    if phase is Phase.CALL or spec.loop:
        plan = make_plan(
            spec,
            layout,
            bound,
            consts,
            backend,
            trace.loads,
            ctx,
            translation.masks,
            loops=translation.loops,
            **choice.plan_options(),
        )
        if crosses:
            counts = dict(zip(layout.grid_names, layout.grid, strict=True))
            persistent = choice.persistent
            if persistent is not None:  # each persistent CTA adds up the rows of its blocks
                counts[spec.rows] = persistent.ctas
            results, notes = partial_plans(plan.results, crosses, counts, persistent is not None)
            plan = dataclasses.replace(
                plan, results=results, notes=plan.notes + notes, cross_blocks=crosses
            )
            plan.check_invariants()
    if phase is Phase.CALL:
        assert plan is not None
        plan = dataclasses.replace(plan, cost=plan_cost(plan, trace))
        source = generate_source(plan, translation)
    return Compiled(layout, trace, translation, plan, source)


def _widest(dtypes: tuple[str, ...]) -> str:
    return max(dtypes, key=hw.itemsize)


def _check_declared_smem(
    spec: KernelSpec,
    layout: BlockLayout,
    consts: Mapping[str, Any],
    options: Mapping[str, tuple[str, ...]],
    ctx: ErrorContext,
) -> None:
    """The blocks of a kernel without loops fit in shared memory with the widest dtypes the
    annotations allow. (A loop kernel's pipelines are counted by its plan, after the trace.)"""
    if spec.loop:
        return
    widest = {n: _widest(opts) for n, opts in options.items()}
    loaded = {o.name for o in spec.operands}
    smem = smem_bytes(spec, layout, widest, loaded)
    if smem <= hw.SMEM_BYTES:
        return
    raise ctx.error(
        SharedMemoryError,
        f"the blocks need {smem:,} B of shared memory with the widest dtypes allowed, over "
        f"the {hw.SMEM_BYTES:,} B a block has",
        expected=f"<= {hw.SMEM_BYTES:,} B",
        actual=f"{smem:,} B ("
        + ", ".join(f"{n}: {widest[n]}" for n in widest)
        + ", "
        + ", ".join(f"{k}={consts[k]}" for k in spec.tile_map.values())
        + ")",
        fix=smem_fix(spec, layout, widest, loaded),
    )


def _check_loops(
    spec: KernelSpec,
    translation: Translation,
    layout: BlockLayout,
    dtypes: Mapping[str, tuple[str, ...]],
    ctx: ErrorContext,
) -> None:
    """The rules of pipelined operands and of sk.dot, for these constants."""
    if not spec.loop:
        return
    dims = {o.name: o.block_dims for o in spec.operands + spec.results}
    for block in translation.loops:
        dot_read = {d.b for d in block.products} | {d.a for d in block.products}
        for name in block.operands:
            # sk.dot reads a whole dim of its operands' blocks straight from shared memory.
            if name in dot_read and name not in block.loads:
                continue
            for d in dims[name]:
                if d != block.axis and d not in spec.tile_map:
                    raise ctx.error(
                        LoopOperandError,
                        f"`{name}` is read block by block in the loop over {block.axis}, but its "
                        f"dim {d} is neither tiled nor that loop dim",
                        operand=name,
                        dim=d,
                        expected=f"every dim of `{name}` in tile= or the loop dim {block.axis}",
                        actual=f"'{' '.join(dims[name])}' with {d} whole",
                        fix=f'tile {d}, e.g. tile={{..., "{d}": "B{d}"}}',
                    )
    for i, result in enumerate(spec.results):
        looped = [d for d in result.dims if d in spec.loop_map]
        if looped and i not in {r for r, _, _ in translation.streamed}:
            raise ctx.error(
                ResultMismatchError,
                f"{result.name} has the loop dim {looped[0]}, but the body does not return it "
                "from sk.map_blocks",
                operand=result.name,
                dim=looped[0],
                expected=f"the value of sk.map_blocks({looped[0]!r}, ...)",
                actual="a value computed outside a loop",
                fix=f"write the result block by block: return sk.map_blocks({looped[0]!r}, fn), "
                "with fn computing one block",
            )
    check_dots(translation.loops, dims, layout, dtypes, spec.block_map, ctx)


def _translate(
    spec: KernelSpec,
    trace: BodyTrace,
    layout: BlockLayout,
    interpreted: bool,
    open_results: tuple[CrossBlock, ...] = (),
) -> Translation:
    """The body in the block form. The results in `open_results` take the kind the body
    computes them in, instead of their declared one."""
    open_indices = {c.index for c in open_results}
    try:
        translation = translate(
            trace,
            block_geometry(spec, trace, layout, interpreted),
            tuple(
                None if i in open_indices else layout.kind(r.block_dims)
                for i, r in enumerate(spec.results)
            ),
            spec.name,
            spec.location,
        )
    except StaticKernelError:
        raise
    except Exception:
        if trace.misplaced:  # the misplaced load is the cause; say so
            raise misplaced_load_error(spec, trace) from None
        raise
    if trace.misplaced:
        raise misplaced_load_error(spec, trace)
    return translation
