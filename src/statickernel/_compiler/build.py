"""The one compile path: a spec, sizes, dtypes and constants become a plan and its source.

The decorator runs it on probe sizes (`Phase.DECLARATION`), so that the hardware rules and the
body are checked at import; every call runs it on the bound arguments (`Phase.CALL`). Either
way it starts from a `CompileUnit`, and `_compile` runs the stages, in order, each a function
that reads the unit and what the stage before produced. The front's stages are here; the
target's back-end (`backends.py`, `mosaic_gpu/` today) runs the rest:

  (declare)  at the declaration only, before the unit: the blocks of every dim on probe sizes,
             checked by the back-end's rules (`Backend.probe`, `Backend.check_probe`)
  trace      the body on abstract blocks (`trace/body.py`), its results checked, and the
             results that lack a tiled dim rewritten as their blocks' partials, whose kinds
             the back-end learns (`Backend.learn_partials`) -> `Traced`
  back-end   the body laid out, translated, in its register form and launch schedule, planned
             and, at a call, emitted (`Backend.lower_to_source`) -> `Compiled`
  constants  at a call, where the back-end asks for another value of a constant the call
             left at its default (`Compiled.request`: tcgen05's 128 rows), the path once more
             with it, by name; then the back-end's choice among narrower constants
             (`Backend.specialize`)
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from .. import _dtypes
from .._errors import BodyError, ErrorContext, Phase, StaticKernelError
from .._targets import DEFAULT_TARGET, TARGETS, GpuTarget
from .backends import backend_for
from .declare.binding import Binding
from .declare.blocks import logical_blocks
from .declare.spec import KernelSpec
from .trace.body import trace_body
from .trace.crossblock_rewrite import cross_block_results
from .trace.results import check_outputs
from .unit import Compiled, CompileUnit, Traced

__all__ = ["CompileUnit", "Compiled", "Traced", "compile_call", "compile_declaration"]


def compile_call(
    spec: KernelSpec,
    binding: Binding,
    backend: str,
    where: str | None,
    profile: object = None,
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
    compiled = _compile(unit)
    request = compiled.request
    if request is not None:  # the constants stage: once, with the constant the back-end names
        unit = dataclasses.replace(
            unit,
            consts={**unit.consts, request.name: request.value},
            narrowable=unit.narrowable - {request.name},
            notes=(*unit.notes, request.note),
        )
        compiled = _compile(unit)
        assert compiled.request is None, compiled.request
    return backend_for(unit.target).specialize(unit, compiled, _compile)


def compile_declaration(
    spec: KernelSpec, consts: Mapping[str, Any], where: str | None = None
) -> Compiled:
    """Checks a declaration with `consts`: its blocks for every dtype the annotations allow,
    and its body, traced once on probe sizes with no data. `where` is the line the errors
    point at: the decorator's by default, the call's for `kernel.bind`."""
    options = {o.name: o.dtypes for o in spec.operands + spec.results}
    # At the declaration the sizes are probes, not the user's: they stay out of the messages.
    ctx = ErrorContext(spec.name, where or spec.location, Phase.DECLARATION)
    target_backend = backend_for(TARGETS[DEFAULT_TARGET])
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
    smallest = target_backend.probe(spec, consts, options, 1).sizes
    if target_backend.probe(spec, consts, options, 2).sizes == smallest:
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
    target_backend = backend_for(TARGETS[DEFAULT_TARGET])
    declared = target_backend.probe(spec, consts, options, whole_blocks)
    target_backend.check_probe(spec, declared, consts, options, ctx)
    sizes = dict(declared.sizes)
    shapes = {o.name: tuple(sizes[d] for d in o.block_dims) for o in spec.operands}
    unit = CompileUnit(
        spec, Phase.DECLARATION, ctx, sizes, consts, options, shapes, "interpret", declared
    )
    return _compile(unit)


def _compile(unit: CompileUnit) -> Compiled:
    """The stages, in order: each reads the unit and what the one before produced."""
    target_backend = backend_for(unit.target)
    traced = _trace(unit)
    if traced.crosses:
        traced = target_backend.learn_partials(unit, traced)
    return target_backend.lower_to_source(unit, traced)


def _trace(unit: CompileUnit) -> Traced:
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
        limits=unit.target.limits,
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
        dtypes = {name: _dtypes.widest(dtypes) for name, dtypes in unit.options.items()}
    dtypes.update({r.name: dt for r, dt in zip(spec.results, result_dtypes, strict=True)})
    return Traced(spec, trace, crosses, dtypes)
