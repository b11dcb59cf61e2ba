"""The Mosaic GPU back-end's stages, as the compile path asks for them (`backends.Backend`):
the blocks laid out and checked against TMA, the register layout and shared memory, the body
translated into register geometries, the register form and launch schedule chosen, the
`LaunchPlan` made and the `plgpu.kernel` module emitted."""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..._errors import ErrorContext, Phase, SliceError, StaticKernelError
from ..._targets import TensorCores
from ..backends import Backend
from ..declare.spec import KernelSpec
from ..trace.body import BodyTrace, misplaced_load_error
from ..trace.crossblock import CrossBlock, partial_specs
from ..trace.splits import splittable_loop
from ..unit import Compiled, CompileUnit, ConstantRequest, Traced
from . import constants
from .checks import check_declared_smem, check_loops
from .emit.module import generate_source
from .forms.base import FormChoice, FormInputs
from .forms.choose import choose_form
from .layout.blocks import BlockLayout, call_layout, check_blocks, declaration_layout
from .lower.geometry import block_geometry
from .lower.translate import Translation, translate
from .lower.translation import Geometry, shared_step_prelude
from .plan.inputs import CallFacts
from .plan.make import make_plan
from .plan.narrowing import Narrowing
from .plan.plan import LaunchPlan, PlanInputs
from .plan.profile import Profile

__all__ = ["BACKEND", "MosaicGpu"]


class MosaicGpu(Backend):
    """Hopper and Blackwell, through Pallas' Mosaic GPU."""

    def probe(
        self,
        spec: KernelSpec,
        consts: Mapping[str, Any],
        options: Mapping[str, tuple[str, ...]],
        whole_blocks: int,
    ) -> BlockLayout:
        return declaration_layout(spec, consts, options, whole_blocks)

    def check_probe(
        self,
        spec: KernelSpec,
        probe: object,
        consts: Mapping[str, Any],
        options: Mapping[str, tuple[str, ...]],
        ctx: ErrorContext,
    ) -> None:
        assert isinstance(probe, BlockLayout)
        check_blocks(spec, probe, options, ctx)
        probe.check_invariants()
        check_declared_smem(spec, probe, consts, options, ctx)

    def learn_partials(self, unit: CompileUnit, traced: Traced) -> Traced:
        # The partials' layout is the vector the body keeps: the translation learns it.
        spec, trace, dtypes = traced.spec, traced.trace, dict(traced.dtypes)
        first = unit.declared
        assert first is None or isinstance(first, BlockLayout)
        if first is None:
            first = call_layout(spec, unit.sizes, unit.consts, dtypes)
        geometry = block_geometry(
            spec, trace, first, unit.interpreted, _block_tensor_cores(unit, trace)
        )
        learned = _translate(spec, trace, first, geometry, open_results=traced.crosses)
        spec, crosses = partial_specs(spec, traced.crosses, dict(enumerate(learned.result_kinds)))
        dtypes.update({c.name: c.partial_dtype for c in crosses})
        return Traced(spec, trace, crosses, dtypes, _Translated(geometry, learned))

    def lower_to_source(self, unit: CompileUnit, traced: Traced) -> Compiled:
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
        if isinstance(plan, ConstantRequest):
            return Compiled(traced.trace, None, None, request=plan)
        return Compiled(traced.trace, plan, _emit(unit, choice, plan))

    def specialize(
        self,
        unit: CompileUnit,
        compiled: Compiled,
        compile_unit: Callable[[CompileUnit], Compiled],
    ) -> Compiled:
        return constants.narrowed(unit, compiled, compile_unit)


BACKEND = MosaicGpu()


@dataclasses.dataclass(frozen=True)
class _Translated:
    """A translation in the block form and the geometry it was made for."""

    geometry: Geometry
    translation: Translation


@dataclasses.dataclass(frozen=True)
class _Lowered:
    """The traced body laid out and translated in the block form."""

    traced: Traced
    layout: BlockLayout
    translation: Translation


def _lower(unit: CompileUnit, traced: Traced) -> _Lowered:
    """The layout of the bound dtypes (at a call: a whole dim's padding depends on the
    results' dtypes), checked, and the body translated in the block form."""
    spec, options = traced.spec, unit.options
    layout = unit.declared
    assert layout is None or isinstance(layout, BlockLayout)
    if layout is None:
        layout = call_layout(spec, unit.sizes, unit.consts, traced.dtypes)
        options = {name: (dtype,) for name, dtype in traced.dtypes.items()}
        check_blocks(spec, layout, options, unit.ctx)
        layout.check_invariants()
    tensor_cores = _block_tensor_cores(unit, traced.trace)
    geometry = block_geometry(spec, traced.trace, layout, unit.interpreted, tensor_cores)
    learned = traced.learned
    if isinstance(learned, _Translated) and learned.geometry == geometry:
        # The partials now have the kinds the body computes them in: the same translation.
        translation = learned.translation
    else:  # no partials, or a partial's dtype changed a whole dim's padding
        translation = _translate(spec, traced.trace, layout, geometry)
    check_loops(spec, translation, layout, options, unit.ctx)
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


def _plan(
    unit: CompileUnit, traced: Traced, choice: FormChoice
) -> LaunchPlan | ConstantRequest | None:
    """The launch plan; at the declaration only for loop kernels, whose pipelines' shared
    memory depends on the body."""
    spec, layout, translation = traced.spec, choice.layout, choice.translation
    if unit.phase is not Phase.CALL and not spec.loop:
        return None
    call = None
    if unit.phase is Phase.CALL:
        assert unit.profile is None or isinstance(unit.profile, Profile)
        assert unit.narrowing is None or isinstance(unit.narrowing, Narrowing)
        call = CallFacts(traced.trace, unit.profile, unit.notes, unit.narrowable, unit.narrowing)
    return make_plan(
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
            crosses=traced.crosses,
            call=call,
        )
    )


def _emit(unit: CompileUnit, choice: FormChoice, plan: LaunchPlan | None) -> str | None:
    """At a call, the module's source."""
    if unit.phase is not Phase.CALL:
        return None
    assert plan is not None
    return generate_source(plan, choice.translation)


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
