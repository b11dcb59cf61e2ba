"""Planning: bound dims and constants become a frozen `LaunchPlan`.

The plan fixes everything the generated launch needs as Python ints: the grid, each operand's
block and where it starts, which edges are ragged and what they read, the shared memory the
blocks take, and any fallback taken because TMA cannot address an array.
"""

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, override

from ... import _hardware as hw
from ..._display import TextDisplay
from ..._errors import ErrorContext, SharedMemoryError
from ...language.context import LoadRecord, operand_fills
from ..declare.limits import check_grid, check_offsets
from ..declare.spec import KernelSpec
from ..ir.nodes import Form
from ..ir.pallas import FlatFrame, RowFrame
from ..layout.blocks import BlockLayout, DimLayout, quantum
from ..layout.smem import block_bytes, dims_of, epilogue_bytes, smem_bytes, smem_fix
from ..lower.translate import COL, ROW, SCALAR, TILE, LoopBlock
from ..trace.crossblock import CrossBlock
from . import schedule as _schedule
from .cost import Cost
from .loops import plan_fitted_loops, plan_loops, stages_fix
from .operands import OperandPlan, Role
from .pipelining import (
    LoopPlan,
    dot_gmem_shape,
    dot_operands,
    swizzle_elements,
)
from .rows import per_row_slots, row_form_notes
from .schedule import Persistent, Schedule, persistent_blocks, plan_schedule
from .warpspec import WarpSpecialized, hold_paired_blocks, plan_warp_specialized

__all__ = ["DimPlan", "LaunchPlan", "OperandPlan", "Role", "make_plan"]

# The plan's name for a dim's layout: a plan holds its layout's dims as they are.
DimPlan = DimLayout


@dataclasses.dataclass(frozen=True)
class LaunchPlan(TextDisplay):
    """Everything a specialization launches with, as plain ints and strings.

    `str(plan)` renders it for people; `statickernel plan` prints the same text.
    """

    kernel: str
    """The kernel's name."""
    location: str
    """Where the kernel was declared, as `path:line`."""
    backend: str
    """The backend this specialization runs on: "mosaic_gpu" or "interpret"."""
    grid: tuple[int, ...]
    """Blocks along each grid axis, `cdiv(size, block)` for each tiled dim; `(1,)` when no dim
    is tiled."""
    grid_names: tuple[str, ...]
    """The tiled dim each grid axis walks; `("_",)` for the one-block grid."""
    dims: tuple[DimLayout, ...]
    """One plan per dim, in the order of the annotations."""
    operands: tuple[OperandPlan, ...]
    """One plan per operand, in parameter order."""
    results: tuple[OperandPlan, ...]
    """One plan per result."""
    constants: tuple[tuple[str, Any], ...]
    """The constants' values, defaults and overrides, as `(name, value)` pairs."""
    rows: str
    """The dim that runs along the rows of 2-D blocks."""
    cols: str | None
    """The dim that runs along the columns of 2-D blocks; None when every operand is 1-D."""
    smem_bytes: int
    """The shared memory one block uses: buffers, barriers and Mosaic GPU's reserve."""
    notes: tuple[str, ...]
    """What you should know about this launch: host-padding fallbacks and masked reductions."""
    tuple_result: bool = False
    """Whether the kernel returns a tuple of results."""
    loops: tuple[LoopPlan, ...] = ()
    """The body's loops, in order: one software pipeline each."""
    row_frame: RowFrame | None = None
    """For the row form, the register vector one row is computed in; None for the block form."""
    flat_frame: FlatFrame | None = None
    """For an elementwise body, the strided layout its whole block is computed in; None for
    the WGMMA layout and for the row form."""
    schedule: Schedule | None = None
    """How the launch keeps loads in flight: its kind, CTAs, stages, CTAs per SM and bytes of
    loads in flight per SM (set by `make_plan`)."""
    cost: Cost | None = None
    """The call's HBM bytes, arithmetic and roofline floor on an H200; None until the compile
    path sets it, at the call."""
    cross_blocks: tuple[CrossBlock, ...] = ()
    """The results reduced across blocks: each block writes a partial, and the wrapper
    combines them after the launch (see `trace.crossblock`)."""
    warp_specialized: WarpSpecialized | None = None
    """For a matmul-shaped body, its warp-specialized, persistent launch; else None."""

    @property
    def form(self) -> Form:
        """`Form.ROWS` ("rows") when each block's rows are computed one at a time, as vectors;
        `Form.BLOCK` ("block") when the whole block is in registers at once."""
        if self.row_frame is not None:
            return Form.ROWS
        return Form.BLOCK if self.flat_frame is None else Form.STRIDED

    def dim(self, name: str) -> DimLayout:
        """The plan of the dim called `name`."""
        return next(d for d in self.dims if d.name == name)

    def operand(self, name: str) -> OperandPlan:
        """The plan of the operand or result called `name`."""
        return next(op for op in self.operands + self.results if op.name == name)

    @property
    def bindings(self) -> dict[str, int]:
        """The dims' sizes by name, e.g. `{"M": 1000, "N": 777}`."""
        return {d.name: d.size for d in self.dims}

    def check_invariants(self) -> None:
        """Asserts the facts the generated code relies on; raises AssertionError if one breaks."""
        tiled = [d for d in self.dims if d.tiled_by]
        batched = tuple(d.size for d in self.dims if d.batched)
        assert self.grid == (batched + tuple(hw.cdiv(d.size, d.block) for d in tiled) or (1,))
        assert all(isinstance(g, int) and g > 0 for g in self.grid)
        assert len(self.grid) == len(self.grid_names)
        x, y, z = hw.cuda_grid(self.grid)
        assert x <= hw.CUDA_GRID_X_MAX and max(y, z) <= hw.CUDA_GRID_YZ_MAX
        assert self.smem_bytes <= hw.SMEM_BYTES
        for d in self.dims:
            d.check_invariants()
        if self.warp_specialized is not None:
            self.warp_specialized.check_invariants()
            assert len(self.loops) == 1 and self.loops[0].stages == self.warp_specialized.stages
        for loop in self.loops:
            assert loop.steps == hw.cdiv(loop.size, loop.block)
            assert 1 <= loop.stages <= loop.steps
        for cross in self.cross_blocks:
            cross.check_invariants()
            op = self.results[cross.index]
            assert op.per_block == cross.per_block and op.dims == (cross.kept,)
            assert op.gmem_shape[-1] * hw.itemsize(op.dtype) % hw.TMA_ALIGN_BYTES == 0 or not (
                op.batch or op.per_block
            )
        for op in self.operands + self.results:
            assert op.block_shape == tuple(self.dim(n).extent for n in op.dims)
            if op.kind == SCALAR:  # read from global memory: no block, no copy
                continue
            if op.swizzle:
                tiles = (8, op.swizzle)
                assert all(
                    r <= t or r % t == 0 for r, t in zip(op.block_gmem_shape, tiles, strict=False)
                )
                continue
            if self.row_frame is not None:
                # Bulk copies: 16-byte aligned ends, whole rows, every block of rows inside.
                assert op.gmem_shape[-1] * hw.itemsize(op.dtype) % hw.TMA_ALIGN_BYTES == 0
                if op.kind == COL or op.kind == TILE:
                    assert op.block_shape[-1] == self.row_frame.width
                if op.kind == ROW:
                    slots = per_row_slots(op.dtype)
                    assert op.gmem_shape == (self.grid[0] * op.block_shape[0], slots)
                if op.shares_smem_with is not None:
                    shared = self.operand(op.shares_smem_with)
                    assert shared.loaded and (shared.block_shape, shared.dtype) == (
                        op.block_shape,
                        op.dtype,
                    )
                continue
            last_bytes = op.block_shape[-1] * hw.itemsize(op.dtype)
            assert last_bytes % hw.TMA_ALIGN_BYTES == 0
            if len(op.block_gmem_shape) == 2:
                assert op.gmem_shape[-1] * hw.itemsize(op.dtype) % hw.TMA_ALIGN_BYTES == 0
            if op.kind == TILE or op.kind == ROW:
                assert op.block_shape[0] % hw.WGMMA_ROWS == 0
            if op.kind == TILE or op.kind == COL:
                assert op.block_shape[-1] % hw.WGMMA_COLS == 0

    @override  # TextDisplay shows what this returns
    def __str__(self) -> str:
        lines = [f"LaunchPlan for `{self.kernel}` ({self.location}), backend {self.backend}"]
        consts = ", ".join(f"{k}={v!r}" for k, v in self.constants)
        if consts:
            lines.append(f"  constants: {consts}")
        names = ", ".join(self.grid_names)
        lines.append(
            f"  grid: {self.grid} over ({names})"
            + ("" if self.grid_names[0] != "_" else " (one block)")
        )
        lines.append("  dims:")
        width = max(len(f"{d.name}={d.size}") for d in self.dims)
        for d in self.dims:
            split = (
                f"tiled by {d.tiled_by}={d.block}"
                if d.tiled_by
                else (f"looped by {d.looped_by}={d.block}" if d.looped_by else "whole")
            )
            split = "batch" if d.batched else split
            status = d.status
            if self.row_frame is not None and d.name == self.rows:
                split = f"{d.block} row(s) a block"
            elif self.row_frame is not None:
                padded = f", padded {d.size} -> {d.extent} in registers" if d.padded else ""
                status = f"whole{padded}, copied in bulk"
            edge = self._edge(d)
            lines.append(f"    {f'{d.name}={d.size}':<{width}}  {split:<16} {status}{edge}")
        for title, group in (("operands", self.operands), ("results", self.results)):
            lines.append(f"  {title}:")
            for op in group:
                text = f"    {op.name}: {op.dtype}{list(op.shape)}  block {list(op.block_shape)}"
                if op.role is Role.INPUT and not op.loaded:
                    text += "  (not loaded)"
                elif op.loop_dim is not None:
                    text += "  fill per loop (below)"
                elif op.fill is not None:
                    text += f"  fill {op.fill!r}"
                if op.host_padded:
                    text += f"  host-padded to {list(op.gmem_shape)}"
                lines.append(text)
        for i, loop in enumerate(self.loops):
            what = "fold into a carry" if loop.mode == "fold" else "write a block per step"
            dots = "".join(f", WGMMA sk.dot({a}, {b}{'.T' if t else ''})" for a, b, t in loop.dots)
            dots += "".join(
                f", WGMMA sk.dot({a or 'a in registers'}, {b}{'.T' if t else ''}) a step"
                for a, b, t in loop.products
            )
            reads = ", ".join(
                f"{n} (fill {dict(loop.fills)[n]!r})" if n in dict(loop.fills) else n
                for n in loop.operands
            )
            steps = f"at most {loop.steps}" if loop.stops_early else f"{loop.steps}"
            lines.append(
                f"  loop {i}: {loop.axis} in {steps} step(s) of {loop.block}, "
                f"{loop.stages} stage(s), {what}; pipelines {reads or '-'}"
                f"{dots}; {loop.smem_bytes:,} B while it runs"
            )
        if self.row_frame is not None:
            rows = self.dim(self.rows).block
            lines.append(
                f"  form: rows: each block's {rows} row(s) computed one at a time, a row a "
                f"({self.row_frame.width},) vector of {self.row_frame.vector} elements a thread"
            )
        if self.warp_specialized is not None:
            lines.append(f"  form: {self.warp_specialized}")
        if self.flat_frame is not None:
            lines.append(
                f"  form: strided: the block's elementwise body on {self.flat_frame.vector} "
                "contiguous elements a thread; 16-byte shared-memory transfers"
            )
        lines.append(f"  smem: {self.smem_bytes:,} B of {hw.SMEM_BYTES:,} B")
        if self.schedule is not None:
            lines.append(f"  schedule: {self.schedule}")
        if self.cost is not None:
            lines.append(f"  cost: {self.cost}")
        if self.notes:
            lines.append("  notes:")
            lines.extend(f"    - {note}" for note in self.notes)
        return "\n".join(lines)

    def _edge(self, d: DimLayout) -> str:
        if d.batched:
            return ""
        if self.row_frame is not None and d.name == self.rows and d.ragged:
            return ": the last block's rows past the edge read the last row, and are not stored"
        if not d.ragged:
            return ": no mask, in bounds"
        fills = {
            repr(op.fill)
            for op in self.operands
            if d.name in op.dims and op.loaded and op.loop_dim is None
        }
        for loop in self.loops:
            fills |= {repr(fill) for name, fill in loop.fills if d.name in self.operand(name).dims}
        fills = sorted(fills)
        fill_text = f", fill {' / '.join(fills)}" if fills else ""
        if d.looped_by:
            return f": the last step is masked{fill_text}"
        return f": masked{fill_text}; stores past the edge dropped"


def make_plan(
    spec: KernelSpec,
    layout: BlockLayout,
    dtypes: Mapping[str, str],
    consts: Mapping[str, Any],
    backend: str,
    loads: tuple[LoadRecord, ...],
    ctx: ErrorContext,
    masked_reductions: frozenset[str] = frozenset(),
    loops: tuple[LoopBlock, ...] = (),
    row_frame: RowFrame | None = None,
    flat_frame: FlatFrame | None = None,
    aliases: Mapping[str, str] | None = None,
    block_form_smem: int = 0,
    persistent: Persistent | None = None,
) -> LaunchPlan:
    """The launch of one specialization: the layout's grid and blocks, each operand's array,
    block and fill, its loops' pipelines with theirs, and the shared memory all of that takes.
    Every fill comes from the body's load records, `loads`. `ctx` says where the errors point;
    at the declaration its bindings are empty, since the sizes are probes."""
    looped = spec.loop_map
    sizes = layout.sizes
    fills = operand_fills(loads)
    grid, grid_names = layout.grid, layout.grid_names
    blocks = {n: layout.dim(n).block for n in spec.block_map}
    options = {name: (dtype,) for name, dtype in dtypes.items()}
    units = {d.name: quantum(spec, d.name, options)[0] for d in layout.dims if d.tiled_by}
    check_grid(grid, grid_names, sizes, blocks, spec.block_map, units, ctx)
    check_offsets(sizes, blocks, spec.block_map, ctx)
    notes: list[str] = []
    dot_roles = dot_operands(loops)

    def operand_plan(op: Any, role: Role) -> OperandPlan:
        full_shape = tuple(sizes[d] for d in op.dims)
        lead = full_shape[: len(op.batch)]
        shape = full_shape[len(op.batch) :]
        dims_seen = op.block_dims
        dtype = dtypes[op.name]
        gmem = shape
        swizzle = swizzle_elements(dtype) if op.name in dot_roles else 0
        loop_dim = next((d for d in dims_seen if d in looped), None)
        if swizzle:
            gmem = dot_gmem_shape(shape, dtype)
            # A whole dim's block is padded to the swizzle: the array holds the whole block.
            gmem = tuple(
                g if d in spec.block_map else max(g, layout.dim(d).extent)
                for d, g in zip(dims_seen, gmem, strict=True)
            )
            if gmem != shape:
                read = math.prod(lead + shape) * hw.itemsize(dtype)
                written = math.prod(lead + gmem) * hw.itemsize(dtype)
                notes.append(
                    f"fallback: `{op.name}` {list(shape)} is padded with zeros to {list(gmem)}, "
                    f"so that TMA can copy it into WGMMA's tiled shared memory (rows a multiple "
                    f"of 8, columns of {swizzle} x {dtype}): a jnp.pad in the kernel's jit, "
                    f"{read:,} B read and {written:,} B written unless XLA fuses it into "
                    f"`{op.name}`'s producer"
                )
        elif len(shape) == 2 and shape[1] * hw.itemsize(dtype) % hw.TMA_ALIGN_BYTES:
            padded = hw.round_up(shape[1], hw.TMA_ALIGN_BYTES // hw.itemsize(dtype))
            gmem = (shape[0], padded)
            row_bytes = shape[1] * hw.itemsize(dtype)
            notes.append(
                f"fallback: `{op.name}` rows are {row_bytes} B, not a multiple of 16 B, so TMA "
                f"cannot address it; it is padded on the host to {list(gmem)}"
                + (" and the result sliced back" if role is Role.OUTPUT else "")
                + " (one extra copy)"
            )
        elif row_frame is not None and len(shape) == 1:
            summed = role is Role.OUTPUT and op.dims == (spec.cols,)
            gmem = _row_form_gmem(op.name, role, shape, dtype, layout, grid, notes, summed)
        elif (
            role is Role.OUTPUT and len(shape) == 1 and op.batch and layout.dim(dims_seen[0]).ragged
        ):
            # A 1-D block is stored by a bulk copy, which clips only at the end of the whole
            # array: past this entry's edge it would write into the next batch entry's. The
            # block is its extent: a whole dim's is padded past its size.
            block = layout.dim(dims_seen[0]).extent
            gmem = (hw.round_up(shape[0], block),)
            notes.append(
                f"fallback: `{op.name}` is written as {list(lead + gmem)} and sliced back to "
                f"{list(lead + shape)}: a vector's store past the edge of one batch entry would "
                "reach into the next"
            )
        elif len(shape) == 1 and op.batch and shape[0] * hw.itemsize(dtype) % hw.TMA_ALIGN_BYTES:
            gmem = _batched_vector_gmem(op.name, role, lead, shape, dtype, notes)
        loaded = role is Role.OUTPUT or op.name in fills
        return OperandPlan(
            name=op.name,
            role=role,
            dims=dims_seen,
            shape=lead + shape,
            dtype=dtype,
            kind=layout.kind(dims_seen),
            block_shape=tuple(layout.dim(d).extent for d in dims_seen),
            gmem_shape=lead + gmem,
            batch=op.batch,
            fill=fills.get(op.name) if role is Role.INPUT and dims_seen else None,
            loaded=loaded,
            loop_dim=loop_dim if role is Role.INPUT and loaded else None,
            swizzle=swizzle,
            shares_smem_with=(aliases or {}).get(op.name) if role is Role.OUTPUT else None,
        )

    operands = tuple(operand_plan(op, Role.INPUT) for op in spec.operands)
    results = tuple(operand_plan(op, Role.OUTPUT) for op in spec.results)
    for mask, dim_name in (("row_ok", spec.rows), ("col_ok", spec.cols)):
        if mask in masked_reductions and dim_name is not None:
            notes.append(
                f"reductions over {dim_name} are masked: elements past {sizes[dim_name]} take "
                "the reduction's identity, whatever the fill"
            )
    if row_frame is not None:
        notes += row_form_notes(spec, layout, consts, block_form_smem, persistent, results)
    loop_plans = plan_loops(spec, loops, layout, dtypes, consts, loads)
    base = epilogue = 0
    if loop_plans:
        # Results written after the loops take scoped shared memory that reuses the pipelines'.
        streamed = {r.name for r in spec.results if any(d in looped for d in r.dims)}
        once = {n for n in fills if not any(d in looped for d in dims_of(spec, n))}
        base = smem_bytes(spec, layout, dtypes, once, results=streamed)
        epilogue = epilogue_bytes(spec, layout, dtypes, streamed)
    warp_specialized = None
    if loop_plans and row_frame is None and flat_frame is None and persistent is None:
        warp_specialized = plan_warp_specialized(
            loops,
            operands,
            results,
            layout,
            spec.rows,
            spec.cols,
            bool(masked_reductions),
            spec.stage_count(consts),
            spec.stages if isinstance(spec.stages, str) else "stages",
            _schedule.SMS,
            ctx,
        )
    if warp_specialized is not None:
        blocks_of = {d.name: d.block for d in layout.dims}
        operands, held = hold_paired_blocks(warp_specialized, operands, loops[0], blocks_of)
        notes += held
        (paired,) = plan_loops(spec, loops, layout, dtypes, consts, loads, warp_specialized.stages)
        loop_plans = (dataclasses.replace(paired, smem_bytes=warp_specialized.pipeline_bytes),)
    elif loop_plans and spec.stage_count(consts) is None:
        loop_plans = plan_fitted_loops(spec, loops, layout, dtypes, consts, loads, base, epilogue)
    if loop_plans:
        smem = base + max(epilogue, *(lp.smem_bytes for lp in loop_plans))
    else:
        held = {r.name for r in spec.results} - set(aliases or {})
        smem = smem_bytes(spec, layout, dtypes, set(fills), results=held)
    # A persistent launch gives each staged operand's block a buffer (and a barrier) a stage:
    # the row form's row-wise operands, or every operand of a block form that copies its
    # blocks in one box each.
    staged = [op for op in operands if op.loaded and (op.kind == TILE or row_frame is None)]
    stage_bytes = [hw.round_up(op.smem_bytes, hw.SMEM_BUFFER_ALIGN) for op in staged]
    if (
        persistent is None
        and flat_frame is not None  # elementwise: one CTA an SM computes it at ease
        and not loop_plans
        and _one_box_each(layout, operands, results)
    ):
        persistent = persistent_blocks(grid, smem, stage_bytes)
    if persistent is not None:
        smem += (persistent.stages - 1) * (sum(stage_bytes) + hw.BARRIER_BYTES * len(staged))
    if warp_specialized is not None:
        smem = warp_specialized.smem_bytes
    if smem > hw.SMEM_BYTES and loop_plans:
        raise ctx.error(
            SharedMemoryError,
            f"the blocks and pipeline stages need {smem:,} B of shared memory, over the "
            f"{hw.SMEM_BYTES:,} B a block has",
            expected=f"<= {hw.SMEM_BYTES:,} B",
            actual=f"{smem:,} B ("
            + "; ".join(
                f"loop over {lp.axis}: {lp.stages} stage(s) x {lp.smem_bytes // lp.stages:,} B"
                for lp in loop_plans
            )
            + (f"; results after the loops: {epilogue:,} B" if epilogue else "")
            + ")",
            fix=stages_fix(spec, consts, base, epilogue, loops, layout, dtypes, loads),
        )
    if smem > hw.SMEM_BYTES:
        raise ctx.error(
            SharedMemoryError,
            f"the blocks need {smem:,} B of shared memory, over the {hw.SMEM_BYTES:,} B a block has",
            expected=f"<= {hw.SMEM_BYTES:,} B",
            actual=f"{smem:,} B",
            fix=smem_fix(spec, layout, dtypes, set(fills)),
        )
    plan = LaunchPlan(
        kernel=spec.name,
        location=spec.location,
        backend=backend,
        grid=grid,
        grid_names=grid_names,
        dims=layout.dims,
        operands=operands,
        results=results,
        constants=tuple(consts.items()),
        rows=spec.rows,
        cols=spec.cols,
        smem_bytes=smem,
        notes=tuple(notes),
        tuple_result=spec.result_is_tuple,
        loops=loop_plans,
        row_frame=row_frame,
        flat_frame=flat_frame,
        schedule=plan_schedule(
            grid,
            smem,
            sum(op.smem_bytes for op in operands if op.loaded and op.loop_dim is None),
            tuple(
                (lp.stages, sum(block_bytes(spec, n, layout, dtypes) for n in lp.operands))
                for lp in loop_plans
            ),
            persistent,
            sum(op.smem_bytes for op in staged),
            None
            if warp_specialized is None
            else (
                warp_specialized.ctas,
                warp_specialized.threads,
                warp_specialized.stages,
                warp_specialized.stage_bytes,
            ),
        ),
        warp_specialized=warp_specialized,
    )
    plan.check_invariants()
    return plan


def _batched_vector_gmem(
    name: str,
    role: Role,
    lead: tuple[int, ...],
    shape: tuple[int, ...],
    dtype: str,
    notes: list[str],
) -> tuple[int, ...]:
    """The array of a 1-D operand or result after its batch dims whose batch entries are not
    16-byte multiples: TMA addresses the whole array, and needs every stride but the last to
    be one, so each entry is padded to the next."""
    padded = (hw.round_up(shape[0], hw.TMA_ALIGN_BYTES // hw.itemsize(dtype)),)
    true_bytes = math.prod(lead + shape) * hw.itemsize(dtype)
    padded_bytes = math.prod(lead + padded) * hw.itemsize(dtype)
    entry = (
        f"`{name}`'s batch entries are {shape[0] * hw.itemsize(dtype)} B, not a multiple of 16 B"
    )
    if role is Role.OUTPUT:
        notes.append(
            f"fallback: {entry}, so TMA cannot address them; it is written as "
            f"{list(lead + padded)} and sliced back to {list(lead + shape)} in the kernel's jit, "
            f"{padded_bytes:,} B read and {true_bytes:,} B written"
        )
    else:
        notes.append(
            f"fallback: {entry}, so TMA cannot address them; it is padded with zeros to "
            f"{list(lead + padded)}: a jnp.pad in the kernel's jit, {true_bytes:,} B read and "
            f"{padded_bytes:,} B written unless XLA fuses it into `{name}`'s producer"
        )
    return padded


def _row_form_gmem(
    name: str,
    role: Role,
    shape: tuple[int, ...],
    dtype: str,
    layout: BlockLayout,
    grid: tuple[int, ...],
    notes: list[str],
    summed: bool = False,
) -> tuple[int, ...]:
    """The array a 1-D operand or result of the row form is copied to or from in bulk: a
    per-row result padded to whole blocks (each block's values go out in one copy), a
    per-column operand to 16-byte multiples, and so a result summed over the rows (whose
    partials the wrapper slices)."""
    unit = hw.TMA_ALIGN_BYTES // hw.itemsize(dtype)
    if summed:
        return (hw.round_up(shape[0], unit),)
    if role is Role.OUTPUT:
        rows = layout.dim(layout.rows).block
        slots = per_row_slots(dtype)
        notes.append(
            f"`{name}` is written a 16-byte slot a row, a block of {rows} row(s) in one copy, "
            f"to a {grid[0] * rows} x {slots} array whose first column is the result"
        )
        return (grid[0] * rows, slots)
    if shape[0] % unit == 0:
        return shape
    padded = (hw.round_up(shape[0], unit),)
    notes.append(
        f"fallback: `{name}` is {shape[0] * hw.itemsize(dtype)} B, not a multiple of 16 B, so "
        f"a bulk copy cannot end at its last element; it is padded on the host to "
        f"{list(padded)} (one extra copy)"
    )
    return padded


def _one_box_each(
    layout: BlockLayout, operands: tuple[OperandPlan, ...], results: tuple[OperandPlan, ...]
) -> bool:
    """Every block copied in one TMA box that starts inside its array: no batch dims, and no
    whole dim split in boxes or padded past the array."""
    for op in (*operands, *results):
        if op.batch or (op.role is Role.INPUT and not op.loaded):
            continue
        for name, gmem in zip(op.dims, op.block_gmem_shape, strict=True):
            d = layout.dim(name)
            if d.batched or (not d.tiled_by and (d.boxes != 1 or d.extent != gmem)):
                return False
    return not any(d.batched for d in layout.dims)
