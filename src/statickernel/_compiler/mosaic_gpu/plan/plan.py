"""Planning: bound dims and constants become a frozen `LaunchPlan`.

The plan fixes everything the generated launch needs as Python ints: the grid, each operand's
block and where it starts, which edges are ragged and what they read, the shared memory the
blocks take, and any fallback taken because TMA cannot address an array.
"""

import dataclasses
from typing import Any, ClassVar

from typing_extensions import override

from ...._display import TextDisplay
from ...._targets import DEFAULT_TARGET, TARGETS, GpuTarget, TensorCores
from ...ir.nodes import Form, Kind
from ...trace.crossblock import CrossBlock
from .. import hardware as hw
from ..layout.blocks import DimLayout
from ..pallas import FlatFrame, RowFrame
from .consumers import ConsumerPair
from .cost import Cost
from .forms import BlockFormPlan, PlannedForm, RowFormPlan, StridedFormPlan
from .inputs import FormFacts, PlanInputs
from .mma_warp import MmaWarpSpecialized
from .narrowing import Narrowing
from .numerics import ApproxMath, Numerics
from .operands import OperandPlan, PageCopies, Role
from .pipelining import MODE_TEXT, LoopPlan
from .products import products_text
from .profile import Profile
from .schedule import Schedule
from .split import LoopSplit
from .variants import ScheduleVariant
from .warpspec import WarpSpecialized

__all__ = ["DimPlan", "FormFacts", "LaunchPlan", "OperandPlan", "PlanInputs", "Role"]

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
    planned_form: PlannedForm = dataclasses.field(default_factory=BlockFormPlan)
    """The form slot: the register form the plan took, with its own config (the row form's
    `RowFrame`, the strided block's `FlatFrame`), as the plan shows and checks it."""
    schedule: Schedule | None = None
    """How the launch keeps loads in flight: its kind, CTAs, stages, CTAs per SM and bytes of
    loads in flight per SM (set by `make_plan`)."""
    schedule_variant: ScheduleVariant | None = None
    """The schedule slot: the config of the schedule that took the launch, where it has one
    (`plan.variants`); None where `schedule` says it all."""
    cost: Cost | None = None
    """The call's HBM bytes, arithmetic and roofline floor on an H200; None until the compile
    path sets it, at the call."""
    numerics: Numerics | None = None
    """At a call, what its arithmetic rounds (the testing helpers' default tolerance)."""
    cross_blocks: tuple[CrossBlock, ...] = ()
    """The results reduced across blocks: each block writes a partial, and the wrapper
    combines them after the launch (see `trace.crossblock`)."""
    approx_math: ApproxMath | None = None
    """At a call of a kernel that asks for approximate math, what its body gets; else None."""
    profile: Profile | None = None
    """Mosaic GPU's profiler options the launch carries (`sk.profile`); None unprofiled."""
    narrowing: Narrowing | None = None
    """The tile constants the plan narrowed from the kernel's defaults, and why (see
    `plan.narrowing`); else None."""
    target: str = DEFAULT_TARGET
    """The GPU architecture the launch is generated for ("sm_90a", "sm_100a"): its tensor
    cores are the instruction `sk.dot` takes (`gpu_target`)."""

    # The plan's facts as `statickernel plan --json` names them, in this order: its fields,
    # each slot as the fields it holds the configs of (`json_keys` adds any field not listed).
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "kernel",
        "location",
        "backend",
        "grid",
        "grid_names",
        "dims",
        "operands",
        "results",
        "constants",
        "rows",
        "cols",
        "smem_bytes",
        "notes",
        "tuple_result",
        "loops",
        "row_frame",
        "flat_frame",
        "schedule",
        "cost",
        "numerics",
        "cross_blocks",
        "warp_specialized",
        "consumer_pair",
        "approx_math",
        "profile",
        "split",
        "narrowing",
        "target",
    )
    _SLOTS: ClassVar[frozenset[str]] = frozenset({"planned_form", "schedule_variant"})

    @classmethod
    def json_keys(cls) -> tuple[str, ...]:
        """The names `plan --json` shows the plan's facts under, in order: `JSON_KEYS`, then
        any field added since (the slots are shown by the names of their configs)."""
        listed = set(cls.JSON_KEYS) | cls._SLOTS
        added = tuple(f.name for f in dataclasses.fields(cls) if f.name not in listed)
        return cls.JSON_KEYS + added

    @property
    def row_frame(self) -> RowFrame | None:
        """For the row form, the register vector one row is computed in; None for the block
        form."""
        form = self.planned_form
        return form.frame if isinstance(form, RowFormPlan) else None

    @property
    def flat_frame(self) -> FlatFrame | None:
        """For an elementwise body, the strided layout its whole block is computed in; None
        for the WGMMA layout and for the row form."""
        form = self.planned_form
        return form.frame if isinstance(form, StridedFormPlan) else None

    @property
    def warp_specialized(self) -> WarpSpecialized | MmaWarpSpecialized | None:
        """For a matmul-shaped body, its warp-specialized, persistent launch; else None."""
        variant = self.schedule_variant
        return variant if isinstance(variant, WarpSpecialized | MmaWarpSpecialized) else None

    @property
    def consumer_pair(self) -> ConsumerPair | None:
        """For a loop two consumer warpgroups share (attention's forward), their launch; else
        None."""
        variant = self.schedule_variant
        return variant if isinstance(variant, ConsumerPair) else None

    @property
    def split(self) -> LoopSplit | None:
        """The loop split across CTAs, a grid axis after the blocks' numbering its parts, each
        result an array of partial sums the wrapper adds (see `plan.split`); else None."""
        variant = self.schedule_variant
        return variant if isinstance(variant, LoopSplit) else None

    @property
    def gpu_target(self) -> GpuTarget:
        """The GPU the launch is generated for, with its limits and tensor cores."""
        return TARGETS[self.target]

    @property
    def tensor_cores(self) -> TensorCores:
        """The instruction the launch's products take: WGMMA on Hopper, tcgen05 on Blackwell."""
        return self.gpu_target.tensor_cores

    @property
    def block_tensor_cores(self) -> TensorCores:
        """The tensor cores whose accumulator's register layout the block's values take: the
        target's where the launch multiplies, else WGMMA's (a layout every target has)."""
        multiplies = any(loop.dots or loop.products for loop in self.loops)
        return self.tensor_cores if multiplies else TensorCores.WGMMA

    @property
    def form(self) -> Form:
        """`Form.ROWS` ("rows") when each block's rows are computed one at a time, as vectors;
        `Form.BLOCK` ("block") when the whole block is in registers at once."""
        return self.planned_form.form

    def step_block(self, axis: str) -> int:
        """The elements of `axis` a step of a loop over it takes: its pipeline's block, or a
        step of the row form's walk over the row it holds whole."""
        return step_block(self.row_frame, self.dims, axis)

    def dim(self, name: str) -> DimLayout:
        """The plan of the dim called `name`."""
        return next(d for d in self.dims if d.name == name)

    @property
    def index_operands(self) -> tuple[str, ...]:
        """The operands whose values pick another operand's rows or pages: read from global
        memory wherever the body does not load them."""
        tables = (op.pages.table for op in self.operands if op.pages is not None)
        picks = (op.index for op in self.operands if op.index is not None)
        return tuple(dict.fromkeys((*picks, *tables, *self.group_sizes)))

    @property
    def group_sizes(self) -> tuple[str, ...]:
        """The operands of ragged groups' sizes (`ragged=`): read by the walk of the tiles."""
        return tuple(d.sized_by for d in self.dims if d.sized_by)

    @property
    def page_tables(self) -> tuple[str, ...]:
        """The tables that list the pages of paged operands: read by their copies."""
        return tuple(dict.fromkeys(op.pages.table for op in self.operands if op.pages))

    @property
    def updated_operands(self) -> tuple[str, ...]:
        """The operands a result updates in place: written by the kernel."""
        return tuple(op.updates for op in self.results if op.updates is not None)

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
        # The batch dims lead the grid in the order of batch=, whatever order the operands
        # name them in.
        batch_dims = sorted((d for d in self.dims if d.batched), key=lambda d: d.grid_axis or 0)
        batched = tuple(d.size for d in batch_dims)
        assert self.grid == (batched + tuple(hw.cdiv(d.size, d.block) for d in tiled) or (1,))
        assert all(isinstance(g, int) and g > 0 for g in self.grid)
        if self.approx_math is not None:
            self.approx_math.check_invariants()
        assert len(self.grid) == len(self.grid_names)
        x, y, z = hw.cuda_grid(self.grid)
        assert x <= hw.CUDA_GRID_X_MAX and max(y, z) <= hw.CUDA_GRID_YZ_MAX
        assert self.smem_bytes <= hw.SMEM_BYTES
        for d in self.dims:
            d.check_invariants()
        if self.warp_specialized is not None:
            self.warp_specialized.check_invariants()
            assert len(self.loops) == 1 and self.loops[0].stages == self.warp_specialized.stages
        if self.consumer_pair is not None:
            self.consumer_pair.check_invariants()
            assert len(self.loops) == 1 and self.loops[0].stages == self.consumer_pair.stages
        for loop in self.loops:
            assert loop.steps == hw.cdiv(loop.size, loop.block)
            assert 1 <= loop.stages <= loop.steps
        if self.split is not None:
            self.split.check_invariants()
            (loop,) = self.loops
            assert loop.axis == self.split.axis and loop.steps == self.split.steps
            assert loop.stages <= self.split.part_steps and not self.cross_blocks
            assert all(op.per_block == (loop.axis,) for op in self.results)
        for cross in self.cross_blocks:
            cross.check_invariants()
            op = self.results[cross.index]
            assert op.per_block == cross.per_block and op.dims == (cross.kept,)
            assert hw.nbytes(op.gmem_shape[-1], op.dtype) % hw.TMA_ALIGN_BYTES == 0 or not (
                op.batch or op.per_block
            )
        form = self.planned_form
        for op in self.operands + self.results:
            assert op.block_shape == tuple(self.dim(n).extent for n in op.dims)
            if op.pages is not None:
                op.pages.check_invariants()
            if op.in_place or not op.loaded:  # read from global memory, or not at all
                continue
            if op.swizzle:
                tiles = (8, op.swizzle)
                assert all(
                    r <= t or r % t == 0 for r, t in zip(op.block_gmem_shape, tiles, strict=False)
                )
                continue
            form.check_copies(self, op)

    @override  # TextDisplay shows what this returns
    def __str__(self) -> str:
        lines = [f"LaunchPlan for `{self.kernel}` ({self.location}), backend {self.backend}"]
        consts = ", ".join(f"{k}={v!r}" for k, v in self.constants)
        if consts:
            lines.append(f"  constants: {consts}")
        if self.narrowing is not None:
            lines.append(f"  {self.narrowing}")
        names = ", ".join(self.grid_names)
        lines.append(
            f"  grid: {self.grid} over ({names})"
            + ("" if self.grid_names[0] != "_" else " (one block)")
        )
        form = self.planned_form
        lines.append("  dims:")
        width = max(len(f"{d.name}={d.size}") for d in self.dims)
        for d in self.dims:
            split = (
                f"tiled by {d.tiled_by}={d.block}"
                if d.tiled_by
                else (f"looped by {d.looped_by}={d.block}" if d.looped_by else "whole")
            )
            split = "batch" if d.batched else split
            split = f"groups of {d.grouped}" if d.grouped else split
            split = "ragged groups" if d.sized_by else split
            split = f"indexed by {d.indexed_by}" if d.indexed_by else split
            split = f"pages of {d.grouped}" if d.grouped and d.indexed_by else split
            split = f"the constant {d.name}" if d.by_constant else split
            split, status = form.dim_text(self, d, split, d.status)
            if d.parameters:
                split, status = "parameters", "each taken by index"
            edge = self._edge(d)
            lines.append(f"    {f'{d.name}={d.size}':<{width}}  {split:<16} {status}{edge}")
        for title, group in (("operands", self.operands), ("results", self.results)):
            lines.append(f"  {title}:")
            lines.extend(self._array_line(op) for op in group)
        for i, loop in enumerate(self.loops):
            what = MODE_TEXT[loop.mode]
            if loop.carries:
                what += f", carrying {loop.carries} value(s) to the next (a scan)"
            mma = self.tensor_cores.value
            dots = "".join(f", {mma} sk.dot({a}, {b}{'.T' if t else ''})" for a, b, t in loop.dots)
            dots += "".join(
                f", {mma} sk.dot({a or 'a in registers'}, "
                f"{b or 'b computed in registers, staged in shared memory'}{'.T' if t else ''})"
                " a step"
                for a, b, t in loop.products
            )
            reads = ", ".join(
                f"{n} (fill {dict(loop.fills)[n]!r})" if n in dict(loop.fills) else n
                for n in loop.operands
            )
            steps = f"at most {loop.steps}" if loop.stops_early else f"{loop.steps}"
            if loop.reverse:
                what = f"from the last block to the first, {what}"
            pipelines = "pipelines"
            if self.dim(loop.axis).page_rows:
                pipelines = "copies page by page (a pipeline of its own)"
            lines.append(
                f"  loop {i}: {loop.axis} in {steps} step(s) of {loop.block}, "
                f"{loop.stages} stage(s), {what}; {pipelines} {reads or '-'}"
                f"{dots}; {loop.smem_bytes:,} B while it runs"
            )
        form_line = form.form_line(self)
        if form_line is not None:
            lines.append(form_line)
        if self.warp_specialized is not None:  # a launch of the block form
            lines.append(f"  form: {self.warp_specialized}")
        if self.consumer_pair is not None:
            lines.append(f"  form: {self.consumer_pair}")
        # The MMA warp's form says how its products are issued in its own form line.
        if (
            self.tensor_cores is TensorCores.TCGEN05
            and any(loop.dots or loop.products for loop in self.loops)
            and not isinstance(self.warp_specialized, MmaWarpSpecialized)
        ):
            lines.append(f"  form: {products_text(self.gpu_target, self.loops)}")
        if self.split is not None:
            lines.append(f"  {self.split}")
        lines.append(f"  smem: {self.smem_bytes:,} B of {hw.SMEM_BYTES:,} B")
        if self.schedule is not None:
            lines.append(f"  schedule: {self.schedule}")
        if self.cost is not None:
            lines.append(f"  cost: {self.cost}")
        if self.approx_math is not None:
            lines.append(f"  math: {self.approx_math.describe()}")
        if self.profile is not None:
            lines.append(f"  profile: {self.profile}")
        if self.notes:
            lines.append("  notes:")
            lines.extend(f"    - {note}" for note in self.notes)
        return "\n".join(lines)

    def _array_line(self, op: OperandPlan) -> str:
        """The plan's line of one operand or result: its array, its block, how it is read."""
        text = f"    {op.name}: {op.dtype}{list(op.shape)}  block {list(op.block_shape)}"
        if op.kind == Kind.PARAMS and len(op.dims) == 2:
            text += "  a stack of parameter vectors, each loaded where the body takes it"
        elif op.kind == Kind.PARAMS:
            text = f"    {op.name}: {op.dtype}{list(op.shape)}  parameters, each read "
            text += "by index from global memory"
        elif op.role is Role.INPUT and not op.loaded and op.name in self.group_sizes:
            text += "  the groups' sizes, read from global memory as each CTA tile starts"
        elif op.role is Role.INPUT and not op.loaded and op.name in self.page_tables:
            text += "  read from global memory by the copies of the pages it lists"
        elif op.role is Role.INPUT and not op.loaded and op.name in self.index_operands:
            text += "  read from global memory by the copies of the rows it picks"
        elif op.role is Role.INPUT and not op.loaded and op.name in self.updated_operands:
            text += "  updated in place by the result (not loaded)"
        elif op.role is Role.INPUT and not op.loaded:
            text += "  (not loaded)"
        elif op.in_place and op.block_shape:
            text += "  each row's element read from global memory, not copied"
        elif op.in_place and op.role is Role.OUTPUT:
            text += "  its element written from registers, one a grid step"
        elif op.loop_dim is not None:
            text += "  fill per loop (below)"
        elif op.fill is not None:
            text += f"  fill {op.fill!r}"
        if op.index is not None and op.role is Role.OUTPUT:
            text += f"  rows scattered by {op.index}, one copy a row (an index outside "
            text += f"[0, {op.shape[0]}) is skipped)"
        elif op.index is not None and op.loaded:
            text += f"  rows gathered by {op.index}, one copy a row (an index outside "
            text += f"[0, {op.shape[0]}) reads zeros)"
        if op.pages is not None:
            text += f"  pages listed by {op.pages.table}, {_page_copy_text(op.pages)}"
        if op.updates is not None:
            text += f"  written into `{op.updates}`, in place"
        if op.halo.rows:
            text += f"  {_halo_text(self, op)}"
        if self.split is not None and op.role is Role.OUTPUT:
            text += f"  partial sums, one a part of {self.split.axis} (added after the launch)"
        if op.host_padded:
            text += f"  host-padded to {list(op.gmem_shape)}"
        if op.flat and op.kind is Kind.TILE:
            text += f"  addressed flat as [{op.launched_shape[0]}]"
        elif op.flat:
            text += "  copied by 1-D TMA boxes"
        return text

    def _edge(self, d: DimLayout) -> str:
        if d.selects or d.parameters:
            return ""
        own = self.planned_form.edge(self, d)
        if own is not None:
            return own
        if not d.ragged:
            return ": no mask, in bounds"
        fills = {
            repr(op.fill)
            for op in self.operands
            if d.name in op.dims and op.loaded and op.loop_dim is None and op.fill is not None
        }
        for loop in self.loops:
            fills |= {repr(fill) for name, fill in loop.fills if d.name in self.operand(name).dims}
        fills = sorted(fills)
        fill_text = f", fill {' / '.join(fills)}" if fills else ""
        if d.looped_by:
            return f": the last step is masked{fill_text}"
        return f": masked{fill_text}; stores past the edge dropped"


def _halo_text(plan: LaunchPlan, op: OperandPlan) -> str:
    """What an operand's copy holds around its block for the body's shifted loads."""
    row = op.dims[0]
    if op.halo.column_shifts:
        offsets = ", ".join(f"{k:+d}" for k in op.halo.column_shifts)
        return (
            f"+ a window at column offset(s) {offsets} along {op.dims[1]} for shifted loads "
            "(a TMA copy each, outside the array read as the fill)"
        )
    parts = [
        f"{n} row(s) {where}"
        for n, where in ((op.halo.before, "above"), (op.halo.after, "below"))
        if n
    ]
    how = "copied with it" if plan.dim(row).tiled_by else "past the whole dim, read as the fill"
    return f"+ {' and '.join(parts)} along {row} for shifted loads ({how})"


def step_block(row_frame: RowFrame | None, dims: tuple[DimLayout, ...], axis: str) -> int:
    """The elements of `axis` a step of a loop over it takes: its pipeline's block, or a step
    of the row form's walk over the row it holds whole."""
    if row_frame is not None and row_frame.step_block:
        return row_frame.step_block
    return next(d for d in dims if d.name == axis).block


def _page_copy_text(pages: PageCopies) -> str:
    """How a step copies a paged operand's block, in words."""
    what = "a page" if pages.copy_rows == pages.page_rows else f"{pages.copy_rows} rows of a page"
    return f"{pages.copies} cop{'y' if pages.copies == 1 else 'ies'} of {what} a step"
