"""The one compile path: a spec, sizes, dtypes and constants become a plan and its source.

The decorator runs it on probe sizes (`Phase.DECLARATION`), so that the hardware rules and the
body are checked at import; every call runs it on the bound arguments (`Phase.CALL`). Either
way it starts from a `CompileUnit`, and `_compile` runs the stages, in order, each a function
that reads the unit and what the stage before produced:

  (declare)  at the declaration only, before the unit: the blocks of every dim on probe sizes
             (`layout/blocks.py`), checked against TMA, the register layout and shared memory
  trace      the body on abstract blocks (`trace/body.py`), its results checked, and the
             results that lack a tiled dim rewritten as their blocks' partials, whose kinds a
             translation learns -> `_Traced`
  lower      at a call, the layout of the bound dtypes (a whole dim's padding depends on the
             results' dtypes, which the trace gives), checked; the body translated in the block
             form (the partials' translation, where its geometry is the same), and the rules
             of pipelined operands and of sk.dot checked -> `_Lowered`
  form       at a call, the register form (`forms/choose.py`): the first of the row form, the
             strided block and the block form that proposes itself -> `FormChoice`
  plan       the frozen `LaunchPlan` (`plan/plan.py`), with its launch schedule
             (`schedules/choose.py`) and, at a call, its cost; at the declaration only for
             loop kernels, whose pipelines' shared memory depends on the body
  emit       the module's source (`emit/module.py`), at a call only
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from .._errors import (
    BodyError,
    ErrorContext,
    LoopOperandError,
    Phase,
    ResultMismatchError,
    SharedMemoryError,
    SliceError,
    StaticKernelError,
    TensorCoreTargetError,
)
from .._targets import DEFAULT_TARGET, TARGETS, GpuTarget, TensorCores
from .declare.binding import Binding
from .declare.spec import KernelSpec
from .mosaic_gpu import hardware as hw
from .mosaic_gpu.emit.module import generate_source
from .mosaic_gpu.forms.base import FormChoice, FormInputs
from .mosaic_gpu.forms.choose import choose_form
from .mosaic_gpu.layout.blocks import (
    BlockLayout,
    call_layout,
    check_blocks,
    declaration_layout,
    logical_blocks,
)
from .mosaic_gpu.layout.smem import smem_bytes, smem_fix
from .mosaic_gpu.lower.geometry import block_geometry
from .mosaic_gpu.lower.translate import Translation, translate
from .mosaic_gpu.lower.translation import Geometry, shared_step_prelude
from .mosaic_gpu.plan import schedule
from .mosaic_gpu.plan.cost import plan_cost
from .mosaic_gpu.plan.narrowing import Narrowing, narrowing_candidates, score
from .mosaic_gpu.plan.numerics import plan_approx_math, plan_numerics
from .mosaic_gpu.plan.pipelining import check_dots
from .mosaic_gpu.plan.plan import LaunchPlan, PlanInputs, make_plan
from .mosaic_gpu.plan.products import TCGEN05_ROWS
from .mosaic_gpu.plan.profile import Profile
from .trace.body import BodyTrace, misplaced_load_error, trace_body
from .trace.crossblock import CrossBlock, partial_plans, partial_specs
from .trace.crossblock_rewrite import cross_block_results
from .trace.results import check_outputs
from .trace.splits import splittable_loop

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


def compile_call(
    spec: KernelSpec,
    binding: Binding,
    backend: str,
    where: str | None,
    profile: Profile | None = None,
    target: GpuTarget = TARGETS[DEFAULT_TARGET],
) -> Compiled:
    """Compiles the specialization `binding` calls for, to run on `backend` (profiled by
    Mosaic GPU's profiler when `profile` is given), planned for the GPU `target`."""
    sizes = binding.size_map
    unit = CompileUnit(
        spec,
        Phase.CALL,
        ErrorContext(spec.name, where or spec.location, Phase.CALL).bound(sizes),
        sizes,
        dict(binding.consts),
        {name: (dtype,) for name, dtype in dict(binding.dtypes).items()},
        dict(binding.shapes),
        backend,
        profile=profile,
        narrowable=binding.defaulted & frozenset(spec.tile_map.values()),
        target=target,
    )
    unit, compiled = _for_tensor_cores(unit)
    return _narrowed(unit, compiled)


def _for_tensor_cores(unit: "CompileUnit") -> tuple["CompileUnit", Compiled]:
    """The unit compiled, with the rows' tile constant taken as 128 where the target's
    tensor cores refuse its default: a kernel written with blocks of 64 rows for Hopper
    compiles unchanged for Blackwell, whose single-CTA MMA fills 128 lanes (`plan.products`).
    A constant the call passed is kept, and its error raised."""
    try:
        return unit, _compile(unit)
    except TensorCoreTargetError as exc:
        spec = unit.spec
        const = spec.tile_map.get(spec.rows)
        if exc.dim != spec.rows or const is None or const not in unit.narrowable:
            raise
        declared = unit.consts[const]
        consts = {**unit.consts, const: TCGEN05_ROWS}
        widened = dataclasses.replace(unit, consts=consts, narrowable=unit.narrowable - {const})
        compiled = _compile(widened)
    assert compiled.plan is not None
    note = (
        f"{const}={declared} (its default) is {TCGEN05_ROWS} on {unit.target.name}: a "
        f"single-CTA tcgen05 MMA fills the {TCGEN05_ROWS} lanes of tensor memory"
    )
    plan = dataclasses.replace(compiled.plan, notes=(*compiled.plan.notes, note))
    return widened, dataclasses.replace(compiled, plan=plan)


def compile_declaration(
    spec: KernelSpec, consts: Mapping[str, Any], where: str | None = None
) -> Compiled:
    """Checks a declaration with `consts`: its blocks for every dtype the annotations allow,
    and its body, traced once on probe sizes with no data. `where` is the line the errors
    point at: the decorator's by default, the call's for `kernel.bind`."""
    options = {o.name: o.dtypes for o in spec.operands + spec.results}
    # At the declaration the sizes are probes, not the user's: they stay out of the messages.
    ctx = ErrorContext(spec.name, where or spec.location, Phase.DECLARATION)
    try:
        return _compile_declared(spec, consts, options, ctx, 1)
    except BodyError as exc:
        if type(exc) is not BodyError:  # a rule of the language, whatever the widths
            raise
        refused = exc
    # The body failed to trace with each whole dim its smallest block: where that is the
    # probe's doing (a 3-way jnp.split of 8 columns), the body traces at another width that
    # a call may take, and the declaration is checked there. A call at a width the body
    # cannot take gets the body's error with its sizes.
    smallest = declaration_layout(spec, consts, options).sizes
    if declaration_layout(spec, consts, options, 2).sizes == smallest:
        raise refused  # no whole dim: the call's blocks are the probe's
    for blocks in _WIDER_PROBES:
        try:
            return _compile_declared(spec, consts, options, ctx, blocks)
        except StaticKernelError:
            continue
    raise refused


# How many of its smallest blocks a whole dim takes in the probes tried after the smallest:
# every split into 2 to 8 equal parts of whole blocks.
_WIDER_PROBES = (2, 3, 4, 5, 6, 7, 8)


def _compile_declared(
    spec: KernelSpec,
    consts: Mapping[str, Any],
    options: Mapping[str, tuple[str, ...]],
    ctx: ErrorContext,
    whole_blocks: int,
) -> Compiled:
    """The declaration checked with each whole dim `whole_blocks` of its smallest blocks."""
    declared = declaration_layout(spec, consts, options, whole_blocks)
    check_blocks(spec, declared, options, ctx)
    declared.check_invariants()
    _check_declared_smem(spec, declared, consts, options, ctx)
    sizes = declared.sizes
    shapes = {o.name: tuple(sizes[d] for d in o.block_dims) for o in spec.operands}
    unit = CompileUnit(
        spec, Phase.DECLARATION, ctx, sizes, consts, options, shapes, "interpret", declared
    )
    return _compile(unit)


@dataclasses.dataclass(frozen=True)
class CompileUnit:
    """One specialization as the compile path takes it: the spec, the phase and where its
    errors point, the sizes (the call's, or the declaration's probes), the constants, the
    dtypes each array may take, the operands' shapes and the backend."""

    spec: KernelSpec
    phase: Phase
    ctx: ErrorContext
    sizes: Mapping[str, int]
    consts: Mapping[str, Any]
    options: Mapping[str, tuple[str, ...]]
    """Each array's dtypes: the one bound at a call, every one allowed at the declaration."""
    shapes: Mapping[str, tuple[int, ...]]
    backend: str
    declared: BlockLayout | None = None
    """At the declaration, the layout checked before the trace on the probe sizes."""
    profile: Profile | None = None
    """At a call, Mosaic GPU's profiler options for the launch (`sk.profile`)."""
    narrowable: frozenset[str] = frozenset()
    """At a call, the tile constants left at their defaults, which the plan may narrow."""
    target: GpuTarget = TARGETS[DEFAULT_TARGET]
    """The GPU the launch is planned and generated for."""

    @property
    def interpreted(self) -> bool:
        """Whether the body runs in the interpreter (the declaration checks it as Mosaic
        GPU would take it)."""
        return self.phase is Phase.CALL and self.backend == "interpret"


@dataclasses.dataclass(frozen=True)
class _Traced:
    """The body traced, its results reduced across blocks, and every array's dtype."""

    spec: KernelSpec
    """The spec, with the results reduced across blocks as their partials."""
    trace: BodyTrace
    crosses: tuple[CrossBlock, ...]
    dtypes: Mapping[str, str]
    partials_learned: "_Translated | None" = None
    """With results reduced across blocks: the translation that learned their partials'
    kinds, which the block form takes as it is where its geometry is the same."""


@dataclasses.dataclass(frozen=True)
class _Translated:
    """A translation in the block form and the geometry it was made for."""

    geometry: Geometry
    translation: Translation


@dataclasses.dataclass(frozen=True)
class _Lowered:
    """The traced body laid out and translated in the block form."""

    traced: _Traced
    layout: BlockLayout
    translation: Translation


def _compile(unit: CompileUnit) -> Compiled:
    """The stages, in order: each reads the unit and what the one before produced."""
    traced = _trace(unit)
    try:
        lowered = _lower(unit, traced)
    except SliceError as exc:
        # A slice's alignment is a fact of the call's sizes: the message shows them.
        raise SliceError(
            exc.what,
            kernel=exc.kernel,
            where=exc.where,
            dim=exc.dim,
            expected=exc.expected,
            actual=exc.actual,
            bindings=dict(unit.ctx.bindings),
            phase=unit.phase,
            fix=exc.fix,
        ) from None
    choice = _choose_form(unit, lowered)
    plan = _plan(unit, traced, choice)
    source = _emit(unit, choice, plan)
    return Compiled(choice.layout, traced.trace, choice.translation, plan, source)


def _narrowed(unit: CompileUnit, declared: Compiled) -> Compiled:
    """`declared`, or the specialization of narrower tile constants where the declared
    blocks split a loop over too few blocks to fill the SMs (`plan/narrowing.py`)."""
    plan = declared.plan
    if plan is None or plan.split is None or not unit.narrowable:
        return declared
    sms = schedule.sm_count()
    compiled = [declared]
    for consts in narrowing_candidates(plan.dims, unit.consts, unit.narrowable, sms):
        try:
            compiled.append(_compile(dataclasses.replace(unit, consts={**unit.consts, **consts})))
        except StaticKernelError:  # a block the rules refuse is no candidate
            continue

    def key(item: tuple[int, Compiled]) -> tuple[float, int, int, int]:
        i, c = item
        p = c.plan
        assert p is not None and p.cost is not None and p.schedule is not None
        return (
            score(p.cost.floor_seconds, p.schedule.ctas, sms),
            p.cost.hbm_bytes,
            p.smem_bytes,
            i,
        )

    _, best = min(enumerate(compiled), key=key)
    chosen = best.plan
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
        declared_split=plan.split.parts,
        declared_smem_bytes=plan.smem_bytes,
        ctas=chosen.schedule.ctas,
        hbm_bytes=chosen.cost.hbm_bytes,
        smem_bytes=chosen.smem_bytes,
        sms=sms,
    )
    narrowing.check_invariants()
    return dataclasses.replace(best, plan=dataclasses.replace(chosen, narrowing=narrowing))


def _trace(unit: CompileUnit) -> _Traced:
    """The body on abstract blocks, its results checked, and the results that lack a tiled
    dim rewritten as their blocks' partials."""
    spec, sizes, consts = unit.spec, unit.sizes, unit.consts
    logical = logical_blocks(spec, sizes, consts)
    # The body is traced with each operand's first allowed dtype at the declaration.
    trace = trace_body(
        spec,
        {o.name: tuple(logical[d] for d in o.block_dims) for o in spec.operands},
        {name: dtypes[0] for name, dtypes in unit.options.items()},
        unit.shapes,
        consts,
        sizes,
        dims_are_bound=unit.phase is Phase.CALL,
    )
    loops = spec.loop_map
    result_blocks = [
        tuple(sizes[d] if d in loops else logical[d] for d in r.block_dims) for r in spec.results
    ]
    bound_sizes = sizes if unit.phase is Phase.CALL else {}
    result_dtypes = check_outputs(spec, trace, result_blocks, spec.location, bound_sizes)
    trace, crosses = cross_block_results(spec, trace, sizes)
    if unit.declared is None:
        dtypes = {name: dtypes[0] for name, dtypes in unit.options.items()}
    else:  # at the declaration, shared memory is counted with the widest dtypes allowed
        dtypes = {name: _widest(dtypes) for name, dtypes in unit.options.items()}
    dtypes.update({r.name: dt for r, dt in zip(spec.results, result_dtypes, strict=True)})
    if not crosses:
        return _Traced(spec, trace, crosses, dtypes)
    # The partials' layout is the vector the body keeps: the translation learns it.
    first = unit.declared or call_layout(spec, sizes, consts, dtypes)
    geometry = block_geometry(
        spec, trace, first, unit.interpreted, _block_tensor_cores(unit, trace)
    )
    learned = _translate(spec, trace, first, geometry, open_results=crosses)
    spec, crosses = partial_specs(spec, crosses, dict(enumerate(learned.result_kinds)))
    dtypes.update({c.name: c.partial_dtype for c in crosses})
    return _Traced(spec, trace, crosses, dtypes, _Translated(geometry, learned))


def _lower(unit: CompileUnit, traced: _Traced) -> _Lowered:
    """The layout of the bound dtypes (at a call: a whole dim's padding depends on the
    results' dtypes), checked, and the body translated in the block form."""
    spec, options = traced.spec, unit.options
    layout = unit.declared
    if layout is None:
        layout = call_layout(spec, unit.sizes, unit.consts, traced.dtypes)
        options = {name: (dtype,) for name, dtype in traced.dtypes.items()}
        check_blocks(spec, layout, options, unit.ctx)
        layout.check_invariants()
    tensor_cores = _block_tensor_cores(unit, traced.trace)
    geometry = block_geometry(spec, traced.trace, layout, unit.interpreted, tensor_cores)
    learned = traced.partials_learned
    if learned is not None and learned.geometry == geometry:
        # The partials now have the kinds the body computes them in: the same translation.
        translation = learned.translation
    else:  # no partials, or a partial's dtype changed a whole dim's padding
        translation = _translate(spec, traced.trace, layout, geometry)
    _check_loops(spec, translation, layout, options, unit.ctx)
    return _Lowered(traced, layout, translation)


def _block_tensor_cores(unit: CompileUnit, trace: BodyTrace) -> TensorCores:
    """The tensor cores whose accumulator's layout the body's blocks take: the target's where
    the body multiplies, else WGMMA's (a register layout every target has)."""
    return unit.target.tensor_cores if trace.multiplies else TensorCores.WGMMA


def _choose_form(unit: CompileUnit, lowered: _Lowered) -> FormChoice:
    """At a call, the first register form that proposes itself; the declaration checks the
    block form."""
    if unit.phase is not Phase.CALL:
        return FormChoice.block(lowered.layout, lowered.translation)
    traced = lowered.traced
    return choose_form(
        FormInputs(
            traced.spec,
            traced.trace,
            lowered.layout,
            traced.dtypes,
            unit.consts,
            traced.crosses,
            lowered.translation,
            unit.interpreted,
            unit.ctx,
        )
    )


def _plan(unit: CompileUnit, traced: _Traced, choice: FormChoice) -> LaunchPlan | None:
    """The launch plan; at the declaration only for loop kernels, whose pipelines' shared
    memory depends on the body."""
    spec, layout, translation = traced.spec, choice.layout, choice.translation
    if unit.phase is not Phase.CALL and not spec.loop:
        return None
    plan = make_plan(
        PlanInputs(
            spec,
            layout,
            traced.dtypes,
            unit.consts,
            unit.backend,
            traced.trace.loads,
            unit.ctx,
            translation.masks,
            translation.loops if choice.facts.pipelines_loops else (),
            choice.facts,
            translation.scratch_bytes,
            # Results combined across blocks already write partials of their own.
            None
            if traced.crosses or not choice.facts.pipelines_loops
            else splittable_loop(traced.trace),
            steps_self_contained=shared_step_prelude(
                translation, tuple(op.name for op in spec.operands)
            )
            is not None,
            target=unit.target,
        )
    )
    crosses = traced.crosses
    if crosses:
        counts = dict(zip(layout.grid_names, layout.grid, strict=True))
        persistent = choice.facts.persistent
        if persistent is not None:  # each persistent CTA adds up the rows of its blocks
            counts[spec.rows] = persistent.ctas
        results, notes = partial_plans(plan.results, crosses, counts, persistent is not None)
        plan = dataclasses.replace(
            plan, results=results, notes=plan.notes + notes, cross_blocks=crosses
        )
        plan.check_invariants()
    if unit.phase is Phase.CALL:
        sizes = {d.name: d.size for d in plan.dims}
        plan = dataclasses.replace(
            plan,
            cost=plan_cost(plan, traced.trace),
            numerics=plan_numerics(traced.trace, sizes),
            approx_math=plan_approx_math(traced.trace, spec.approx_math),
            profile=unit.profile,
        )
    return plan


def _emit(unit: CompileUnit, choice: FormChoice, plan: LaunchPlan | None) -> str | None:
    """At a call, the module's source."""
    if unit.phase is not Phase.CALL:
        return None
    assert plan is not None
    return generate_source(plan, choice.translation)


def _widest(dtypes: tuple[str, ...]) -> str:
    return max(dtypes, key=hw.bits)


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
    geometry: Geometry,
    open_results: tuple[CrossBlock, ...] = (),
) -> Translation:
    """The body in the block form. The results in `open_results` take the kind the body
    computes them in, instead of their declared one."""
    open_indices = {c.index for c in open_results}
    try:
        translation = translate(
            trace,
            geometry,
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
