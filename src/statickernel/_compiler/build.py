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
from ..language.context import operand_fills
from .declare.binding import Binding
from .declare.spec import KernelSpec
from .emit.masks import reads_zero
from .emit.module import generate_source
from .ir.pallas import FlatFrame, RowFrame
from .layout.blocks import (
    BlockLayout,
    call_layout,
    check_blocks,
    declaration_layout,
    logical_blocks,
)
from .layout.smem import smem_bytes, smem_fix
from .lower.translate import Geometry, NotInForm, Translation, translate
from .plan.cost import plan_cost
from .plan.pipelining import check_dots
from .plan.plan import LaunchPlan, make_plan
from .plan.rows import RowChoice, TooWide, choose_rows, too_wide_error
from .trace.body import BodyTrace, check_outputs, misplaced_load_error, trace_body
from .trace.crossblock import CrossBlock, accumulated_rows, partial_plans, partial_specs
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
    row_frame, aliases, block_form_smem, persistent = None, None, 0, None
    # The row form writes per-row partials as per-row results, and adds up the rows of each
    # partial along the columns in its CTA.
    accumulation = accumulated_rows(spec, trace, crosses)
    if phase is Phase.CALL and accumulation is not None:
        row_trace, accumulated = accumulation
        rows = choose_rows(spec, layout, bound, set(operand_fills(trace.loads)), accumulated)
        if rows is not None:
            row_layout = rows.layout if isinstance(rows, RowChoice) else layout
            in_rows = _translate_rows(
                spec, row_trace, row_layout, rows.frame, interpreted, accumulated
            )
            if in_rows is not None and isinstance(rows, TooWide):
                raise too_wide_error(spec, layout, rows, ctx)
            if in_rows is not None and isinstance(rows, RowChoice):
                layout, translation, row_frame = rows.layout, in_rows, rows.frame
                aliases, block_form_smem = rows.aliases, rows.block_form_smem
                persistent = rows.persistent
    flat_frame = None
    if phase is Phase.CALL and row_frame is None and not crosses:
        flat = _flat_frame(spec, layout, bound, trace, translation)
        if flat is not None:
            in_flat = _translate_in(spec, trace, layout, interpreted, flat_frame=flat)
            if in_flat is not None:
                translation, flat_frame = in_flat, flat
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
            row_frame=row_frame,
            flat_frame=flat_frame,
            aliases=aliases,
            block_form_smem=block_form_smem,
            persistent=persistent,
        )
        if crosses:
            counts = dict(zip(layout.grid_names, layout.grid, strict=True))
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
            _geometry(spec, trace, layout, interpreted),
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


def _flat_frame(
    spec: KernelSpec,
    layout: BlockLayout,
    dtypes: Mapping[str, str],
    trace: BodyTrace,
    translation: Translation,
) -> FlatFrame | None:
    """The strided frame for a body that is elementwise on whole blocks, or None: no loops or
    vectors, every operand and result a 2-D block copied in one box, no edge masks (no
    reduction needs one, and every fill is what TMA reads past the edge)."""
    if spec.loop or spec.cols is None or translation.masks:
        return None
    full = (spec.rows, spec.cols)
    if any(o.block_dims != full for o in spec.operands + spec.results):
        return None
    rows, cols = layout.dim(spec.rows), layout.dim(spec.cols)
    if cols.boxes != 1:
        return None
    ragged = rows.ragged or cols.ragged
    if ragged and any(not reads_zero(f) for f in operand_fills(trace.loads).values()):
        return None
    vector = hw.TMA_ALIGN_BYTES // min(hw.itemsize(d) for d in dtypes.values())
    frame = FlatFrame((rows.extent, cols.extent), vector)
    return frame if frame.fits() else None


def _translate_rows(
    spec: KernelSpec,
    trace: BodyTrace,
    layout: BlockLayout,
    frame: RowFrame,
    interpreted: bool,
    accumulated: frozenset[str] = frozenset(),
) -> Translation | None:
    """The body in the row form, or None when it mixes rows (the block form keeps it)."""
    geometry = dataclasses.replace(
        _geometry(spec, trace, layout, interpreted),
        rows=layout.dim(spec.rows).block,
        ragged_rows=False,  # rows never meet: those past the edge are never stored
        ragged_cols=frame.width != layout.dim(spec.cols).size if spec.cols else False,
        row_frame=frame,
    )
    return _translate_geometry(spec, trace, layout, geometry, accumulated)


def _translate_in(
    spec: KernelSpec,
    trace: BodyTrace,
    layout: BlockLayout,
    interpreted: bool,
    flat_frame: FlatFrame,
) -> Translation | None:
    """The body on the block in the strided layout, or None when it has a vector."""
    geometry = dataclasses.replace(
        _geometry(spec, trace, layout, interpreted), flat_frame=flat_frame
    )
    return _translate_geometry(spec, trace, layout, geometry)


def _translate_geometry(
    spec: KernelSpec,
    trace: BodyTrace,
    layout: BlockLayout,
    geometry: Geometry,
    open_names: frozenset[str] = frozenset(),
) -> Translation | None:
    """The body in `geometry`, or None when it does not fit it; the results in `open_names`
    take the kind the body computes them in (a row the row form adds up)."""
    try:
        return translate(
            trace,
            geometry,
            tuple(
                None if r.name in open_names else layout.kind(r.block_dims) for r in spec.results
            ),
            spec.name,
            spec.location,
        )
    except (NotInForm, StaticKernelError):
        return None


def _geometry(
    spec: KernelSpec, trace: BodyTrace, layout: BlockLayout, interpreted: bool
) -> Geometry:
    """The registers the body's values live in, and which of their edges are masked."""
    geometry = Geometry(
        interpreted=interpreted,
        rows=layout.dim(spec.rows).extent,
        cols=layout.dim(spec.cols).extent if spec.cols else hw.WGMMA_COLS,
        ragged_rows=layout.edge_masked(spec.rows),
        ragged_cols=layout.edge_masked(spec.cols),
        input_kinds=tuple((o.name, layout.kind(o.block_dims)) for o in spec.operands),
        input_fills=tuple(operand_fills(trace.loads).items()),
        row_dim=spec.rows,
        col_dim=spec.cols,
        row_tiled=spec.rows in spec.tile_map,
        col_tiled=spec.cols in spec.tile_map,
    )
    loops = spec.loop_map
    if not loops:
        return geometry
    # Inside a loop's steps, the loop dim has its block, and only the last step can be ragged.
    steps = tuple(
        (
            axis,
            dataclasses.replace(
                geometry,
                rows=layout.dim(axis).extent if axis == spec.rows else geometry.rows,
                ragged_rows=layout.step_masked(axis) if axis == spec.rows else geometry.ragged_rows,
                cols=layout.dim(axis).extent if axis == spec.cols else geometry.cols,
                ragged_cols=layout.step_masked(axis) if axis == spec.cols else geometry.ragged_cols,
                loop_dim=axis if axis not in (spec.rows, spec.cols) else None,
                loop_cols=layout.dim(axis).extent if axis not in (spec.rows, spec.cols) else 0,
                ragged_loop=axis not in (spec.rows, spec.cols) and layout.step_masked(axis),
            ),
        )
        for axis in loops
    )
    return dataclasses.replace(
        geometry,
        steps=steps,
        looped_operands=tuple(
            (o.name, next(d for d in o.dims if d in loops))
            for o in spec.operands
            if any(d in loops for d in o.dims)
        ),
    )
