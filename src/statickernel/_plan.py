"""Planning: bound dims and constants become a frozen `LaunchPlan`.

The plan fixes everything the generated launch needs as Python ints: the grid, each operand's
block and where it starts, which edges are ragged and what they read, the shared memory the
blocks take, and any fallback taken because TMA cannot address an array.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from . import _hardware as hw
from ._errors import PlanError, StaticKernelError
from ._limits import check_grid, check_offsets
from ._pipeline import LoopPlan, dot_gmem_shape, dot_operands, pipeline_bytes, swizzle_elements
from ._spec import KernelSpec
from ._translate import COL, ROW, TILE, LoopBlock

__all__ = [
    "DimPlan",
    "LaunchPlan",
    "OperandPlan",
    "block_extents",
    "box_count",
    "check_blocks",
    "is_ragged",
    "make_plan",
    "quantum",
    "smem_bytes",
    "smem_fix",
]


def is_ragged(size: int, block: int, extent: int, tiled: bool) -> bool:
    return size % block != 0 if tiled else extent != size


@dataclasses.dataclass(frozen=True)
class DimPlan:
    """How one dim is split: tiled across the grid by `block`, or whole inside every block."""

    name: str
    """The dim's name, as in the annotations."""
    size: int
    """The size the dim is bound to in this specialization."""
    tiled_by: str | None
    """The constant that tiles the dim; None when the dim is whole in every block."""
    block: int
    """The logical block: the tiling constant's value, or `size` when whole."""
    extent: int
    """The physical block extent in registers and shared memory: `block`, or a whole dim
    padded to what the hardware needs."""
    grid_axis: int | None
    """The grid axis that walks the dim's blocks; None when whole."""
    looped_by: str | None = None
    """The constant a loop dim is walked in blocks of; None for tiled and whole dims."""
    batched: bool = False
    """True for a batch dim: one index per grid step, dropped from the blocks."""

    @property
    def boxes(self) -> int:
        """TMA boxes per block along this dim: a whole dim over 256 elements takes several."""
        return box_count(self.extent)

    @property
    def ragged(self) -> bool:
        """True when some block holds elements past the array's edge."""
        if self.batched:
            return False
        split = self.tiled_by is not None or self.looped_by is not None
        return is_ragged(self.size, self.block, self.extent, split)

    @property
    def status(self) -> str:
        """The dim's edge in words, e.g. `ragged (777 % 128 = 9)` or `whole, padded 100 -> 104`."""
        if self.batched:
            return "one index per grid step"
        if self.tiled_by or self.looped_by:
            if not self.ragged:
                return f"divisible ({self.size} % {self.block} = 0)"
            return f"ragged ({self.size} % {self.block} = {self.size % self.block})"
        boxes = (
            f", copied in {self.boxes} boxes of {self.extent // self.boxes}"
            if self.boxes > 1
            else ""
        )
        if not self.ragged:
            return "whole" + boxes
        return f"whole, padded {self.size} -> {self.extent}{boxes}"


@dataclasses.dataclass(frozen=True)
class OperandPlan:
    """One operand or result of a specialization: its array, its block and its edge fill."""

    name: str
    """The parameter's name; results are named `result`, or `result0`, `result1`, ..."""
    role: str
    """"input" for an operand, "output" for a result."""
    dims: tuple[str, ...]
    """The names of its dims, as in the annotation."""
    shape: tuple[int, ...]
    """The array's shape in this specialization."""
    dtype: str
    """The array's dtype name, e.g. "float32"."""
    kind: str
    """Its register form: "tile" for 2-D blocks, "row" or "col" for 1-D blocks along the rows
    or the columns."""
    block_shape: tuple[int, ...]
    """The physical block held in shared memory and registers."""
    gmem_shape: tuple[int, ...]
    """The shape of the array the kernel addresses: `shape`, or larger when the array is padded
    on the host because TMA cannot address its rows."""
    fill: Any
    """What loads past the array's edge read; None for results and operands never loaded."""
    loaded: bool
    """Whether the body loads it (results are always stored, and count as loaded)."""
    loop_dim: str | None = None
    """The loop dim whose pipeline copies its blocks; None when copied once per block."""
    swizzle: int = 0
    """For an operand of `sk.dot`: elements per 128-byte swizzle row of its tiled SMEM; else 0."""
    batch: tuple[str, ...] = ()
    """Its leading batch dims, which `shape` and `gmem_shape` include and `dims` does not."""

    @property
    def block_gmem_shape(self) -> tuple[int, ...]:
        """`gmem_shape` without the batch dims: the array one grid step addresses."""
        return self.gmem_shape[len(self.batch) :]

    @property
    def host_padded(self) -> bool:
        """True when the array is padded on the host before the launch (one extra copy)."""
        return self.gmem_shape != self.shape

    @property
    def smem_bytes(self) -> int:
        """The bytes its block takes in shared memory, before alignment; 0 if never loaded."""
        count = 1
        for extent in self.block_shape:
            count *= extent
        return count * hw.itemsize(self.dtype) if self.loaded or self.role == "output" else 0


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
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
    dims: tuple[DimPlan, ...]
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

    def dim(self, name: str) -> DimPlan:
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
        assert all(d.size <= hw.INT32_MAX for d in self.dims)
        assert self.smem_bytes <= hw.SMEM_BYTES
        for d in self.dims:
            if d.batched:
                assert d.block == d.extent == 1 and d.grid_axis is not None
                continue
            assert d.extent >= (d.block if d.tiled_by or d.looped_by else d.size)
            assert d.extent % d.boxes == 0 and d.extent // d.boxes <= hw.TMA_BOX_MAX
            assert d.boxes == 1 or not (d.tiled_by or d.looped_by)
        for loop in self.loops:
            assert loop.steps == hw.cdiv(loop.size, loop.block)
            assert 1 <= loop.stages <= loop.steps
        for op in self.operands + self.results:
            assert op.block_shape == tuple(self.dim(n).extent for n in op.dims)
            if op.swizzle:
                tiles = (8, op.swizzle)
                assert all(
                    r <= t or r % t == 0 for r, t in zip(op.block_gmem_shape, tiles, strict=False)
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
            edge = self._edge(d)
            lines.append(f"    {f'{d.name}={d.size}':<{width}}  {split:<16} {d.status}{edge}")
        for title, group in (("operands", self.operands), ("results", self.results)):
            lines.append(f"  {title}:")
            for op in group:
                text = f"    {op.name}: {op.dtype}{list(op.shape)}  block {list(op.block_shape)}"
                if op.role == "input" and not op.loaded:
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
            reads = ", ".join(
                f"{n} (fill {dict(loop.fills)[n]!r})" if n in dict(loop.fills) else n
                for n in loop.operands
            )
            lines.append(
                f"  loop {i}: {loop.axis} in {loop.steps} step(s) of {loop.block}, "
                f"{loop.stages} stage(s), {what}; pipelines {reads or '-'}"
                f"{dots}; {loop.smem_bytes:,} B while it runs"
            )
        lines.append(f"  smem: {self.smem_bytes:,} B of {hw.SMEM_BYTES:,} B")
        if self.notes:
            lines.append("  notes:")
            lines.extend(f"    - {note}" for note in self.notes)
        return "\n".join(lines)

    def _edge(self, d: DimPlan) -> str:
        if d.batched:
            return ""
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


def _axis(spec: KernelSpec, dim: str) -> str:
    return "rows" if dim == spec.rows else "cols"


def quantum(
    spec: KernelSpec, dim: str, dtypes: Mapping[str, tuple[str, ...]]
) -> tuple[int, str, str]:
    """The unit `dim`'s block extent must be a multiple of, and the operand and dtype needing it."""
    best = (1, "", "")
    for op in spec.operands + spec.results:
        if dim not in op.dims:
            continue
        for dtype in dtypes[op.name]:
            unit = hw.block_quantum(_axis(spec, dim), op.rank, dtype)
            if unit > best[0]:
                best = (unit, op.name, dtype)
    return best


def block_extents(
    spec: KernelSpec, sizes: Mapping[str, int], consts: Mapping[str, Any], dtypes: Mapping[str, str]
) -> dict[str, tuple[int, int]]:
    """(logical block, physical extent) of every dim."""
    tile = spec.block_map
    options = {name: (dtype,) for name, dtype in dtypes.items()}
    out: dict[str, tuple[int, int]] = {}
    for name, size in sizes.items():
        if name in spec.batch:
            out[name] = (1, 1)
        elif name in tile:
            block = int(consts[tile[name]])
            out[name] = (block, block)
        else:
            out[name] = (size, whole_extent(size, quantum(spec, name, options)[0]))
    return out


def whole_extent(size: int, unit: int) -> int:
    """The padded extent of a whole dim: one TMA box, or equal boxes of at most 256 elements."""
    chunks = hw.cdiv(hw.round_up(size, unit), hw.TMA_BOX_MAX)
    return chunks * hw.round_up(hw.cdiv(size, chunks), unit)


def box_count(extent: int) -> int:
    """How many equal TMA boxes a block extent is copied in."""
    return hw.cdiv(extent, hw.TMA_BOX_MAX)


def check_blocks(
    spec: KernelSpec,
    extents: Mapping[str, tuple[int, int]],
    dtype_options: Mapping[str, tuple[str, ...]],
    error: type[StaticKernelError],
    err: Mapping[str, Any],
) -> None:
    """The TMA and register-layout rules for every block; `dtype_options` lists the dtypes each
    operand may take (all the annotation allows at import, the bound one at the call)."""
    tile = spec.block_map
    for name, (_, extent) in extents.items():
        if name in spec.batch:
            continue
        const = tile.get(name)
        fix_const = f"set {const} to" if const else f"tile {name} with a constant of"
        if const and extent > hw.TMA_BOX_MAX:
            raise error(
                f"the block along {name} has {extent} elements, over the TMA box limit",
                **err,
                dim=name,
                expected=f"<= {hw.TMA_BOX_MAX} elements per block dim",
                actual=f"{extent}",
                fix=f"{fix_const} at most {hw.TMA_BOX_MAX}",
            )
        unit, operand, dtype = quantum(spec, name, dtype_options)
        if extent % unit:
            axis = _axis(spec, name)
            why = (
                f"{hw.WGMMA_ROWS} rows for the WGMMA register layout"
                if axis == "rows" and unit == hw.WGMMA_ROWS
                else f"{unit} x {dtype}: 8 elements for the register layout, 16-byte TMA rows, "
                f"and 128-byte copies for 1-D blocks"
            )
            raise error(
                f"the {'row' if axis == 'rows' else 'column'} block along {name} is {extent} "
                f"elements, not a multiple of {unit}",
                **err,
                operand=operand,
                dim=name,
                expected=f"a multiple of {unit} ({why})",
                actual=f"{extent} ({extent * hw.itemsize(dtype)} B of {dtype})",
                fix=f"{fix_const} {hw.round_up(extent, unit)}",
            )


def smem_bytes(
    spec: KernelSpec,
    extents: Mapping[str, tuple[int, int]],
    dtypes: Mapping[str, str],
    loaded: set[str],
    results: set[str] | None = None,
) -> int:
    """Shared memory of the kernel-wide buffers: the loaded operands' blocks and the results'
    (`results` names the results held there; all of them by default), their barriers, and
    Mosaic GPU's reserve."""
    total = 0
    for op in spec.operands + spec.results:
        if op in spec.operands and op.name not in loaded:
            continue
        if op in spec.results and results is not None and op.name not in results:
            continue
        total += hw.round_up(_block_bytes(spec, op.name, extents, dtypes), hw.SMEM_BUFFER_ALIGN)
    return total + hw.BARRIER_BYTES * len(loaded) + hw.SMEM_RESERVED_BYTES


def smem_fix(
    spec: KernelSpec,
    extents: Mapping[str, tuple[int, int]],
    dtypes: Mapping[str, str],
    loaded: set[str],
) -> str:
    """Proposes the largest smaller tiled block that fits, or a loop over the widest whole dim."""
    tile = spec.tile_map
    for dim, const in tile.items():
        block, _ = extents[dim]
        unit = hw.WGMMA_ROWS if dim == spec.rows else hw.WGMMA_COLS
        candidate = block - unit
        while candidate >= unit:
            trial = {**extents, dim: (candidate, candidate)}
            if smem_bytes(spec, trial, dtypes, loaded) <= hw.SMEM_BYTES and candidate % unit == 0:
                return f"set {const}={candidate} (the largest {const} whose blocks fit)"
            candidate -= unit
    whole = [d for d in extents if d not in tile and d not in spec.batch]
    if not whole:
        return "use smaller block constants or fewer operands"
    wide = max(whole, key=lambda d: extents[d][1])
    if wide == spec.rows:
        return (
            f"dim {wide} is whole in each block and too long for shared memory: tile it, e.g. "
            f'tile={{"{wide}": "B{wide}"}} with `B{wide}: sk.Const[int] = 64`'
        )
    return (
        f"dim {wide} is whole in each block and too wide for shared memory: walk it in blocks "
        f'instead, with loop={{"{wide}": "B{wide}"}} and `B{wide}: sk.Const[int] = 256` in the '
        f'decorator; in the body, sk.loop("{wide}", step, init) folds its blocks into per-row '
        f'values and sk.map_blocks("{wide}", fn) writes each result block (see '
        "examples/softmax_online.py)"
    )


def make_plan(
    spec: KernelSpec,
    sizes: Mapping[str, int],
    dtypes: Mapping[str, str],
    consts: Mapping[str, Any],
    backend: str,
    extents: Mapping[str, tuple[int, int]],
    fills: Mapping[str, Any],
    masked_reductions: frozenset[str] = frozenset(),
    where: str | None = None,
    loops: tuple[LoopBlock, ...] = (),
    error: type[StaticKernelError] = PlanError,
    dims_are_bound: bool = True,
) -> LaunchPlan:
    tile = spec.tile_map
    looped = spec.loop_map
    # At declaration the sizes are probes, not the user's: they stay out of the messages.
    bindings = dict(sizes) if dims_are_bound else {}
    err: dict[str, Any] = dict(kernel=spec.name, where=where or spec.location, bindings=bindings)
    tiled = [name for name in spec.dim_names() if name in tile]
    batch = list(spec.batch)
    grid = tuple(sizes[n] for n in batch) + tuple(
        hw.cdiv(sizes[n], extents[n][0]) for n in tiled
    ) or (1,)
    grid_names = tuple(batch + tiled) or ("_",)
    blocks = {n: extents[n][0] for n in spec.block_map}
    options = {name: (dtype,) for name, dtype in dtypes.items()}
    units = {n: quantum(spec, n, options)[0] for n in tiled}
    check_grid(grid, grid_names, sizes, blocks, spec.block_map, units, error, err)
    check_offsets(sizes, blocks, spec.block_map, error, err)
    dims = tuple(
        DimPlan(
            name=n,
            size=sizes[n],
            tiled_by=tile.get(n),
            block=extents[n][0],
            extent=extents[n][1],
            grid_axis=grid_names.index(n) if n in tile or n in batch else None,
            looped_by=looped.get(n),
            batched=n in batch,
        )
        for n in spec.dim_names()
    )
    notes: list[str] = []
    dot_roles = dot_operands(loops)

    def operand_plan(op: Any, role: str) -> OperandPlan:
        full_shape = tuple(sizes[d] for d in op.dims)
        lead = full_shape[: len(op.batch)]
        shape = full_shape[len(op.batch) :]
        dims_seen = op.block_dims
        dtype = dtypes[op.name]
        kind = TILE if len(dims_seen) == 2 else (ROW if dims_seen[0] == spec.rows else COL)
        gmem = shape
        swizzle = swizzle_elements(dtype) if op.name in dot_roles else 0
        loop_dim = next((d for d in dims_seen if d in looped), None)
        if swizzle:
            gmem = dot_gmem_shape(shape, dtype)
            if gmem != shape:
                notes.append(
                    f"fallback: `{op.name}` {list(shape)} is padded with zeros on the host to "
                    f"{list(gmem)}, so that TMA can copy it into WGMMA's tiled shared memory "
                    f"(rows a multiple of 8, columns of {swizzle} x {dtype}; one extra copy)"
                )
        elif len(shape) == 2 and shape[1] * hw.itemsize(dtype) % hw.TMA_ALIGN_BYTES:
            padded = hw.round_up(shape[1], hw.TMA_ALIGN_BYTES // hw.itemsize(dtype))
            gmem = (shape[0], padded)
            row_bytes = shape[1] * hw.itemsize(dtype)
            notes.append(
                f"fallback: `{op.name}` rows are {row_bytes} B, not a multiple of 16 B, so TMA "
                f"cannot address it; it is padded on the host to {list(gmem)}"
                + (" and the result sliced back" if role == "output" else "")
                + " (one extra copy)"
            )
        loaded = role == "output" or op.name in fills
        return OperandPlan(
            name=op.name,
            role=role,
            dims=dims_seen,
            shape=lead + shape,
            dtype=dtype,
            kind=kind,
            block_shape=tuple(extents[d][1] for d in dims_seen),
            gmem_shape=lead + gmem,
            batch=op.batch,
            fill=fills.get(op.name) if role == "input" else None,
            loaded=loaded,
            loop_dim=loop_dim if role == "input" and loaded else None,
            swizzle=swizzle,
        )

    operands = tuple(operand_plan(op, "input") for op in spec.operands)
    results = tuple(operand_plan(op, "output") for op in spec.results)
    for mask, dim_name in (("row_ok", spec.rows), ("col_ok", spec.cols)):
        if mask in masked_reductions and dim_name is not None:
            notes.append(
                f"reductions over {dim_name} are masked: elements past {sizes[dim_name]} take "
                "the reduction's identity, whatever the fill"
            )
    loop_plans = _loop_plans(spec, loops, sizes, extents, dtypes, consts)
    if loop_plans:
        # Results written after the loops take scoped shared memory that reuses the pipelines'.
        streamed = {r.name for r in spec.results if any(d in looped for d in r.dims)}
        once = {n for n in fills if not any(d in looped for d in _dims_of(spec, n))}
        base = smem_bytes(spec, extents, dtypes, once, results=streamed)
        epilogue = _epilogue_bytes(spec, extents, dtypes, streamed)
        smem = base + max(epilogue, *(lp.smem_bytes for lp in loop_plans))
    else:
        base = epilogue = 0
        smem = smem_bytes(spec, extents, dtypes, set(fills))
    if smem > hw.SMEM_BYTES and loop_plans:
        raise error(
            f"the blocks and pipeline stages need {smem:,} B of shared memory, over the "
            f"{hw.SMEM_BYTES:,} B a block has",
            **err,
            expected=f"<= {hw.SMEM_BYTES:,} B",
            actual=f"{smem:,} B ("
            + "; ".join(
                f"loop over {lp.axis}: {lp.stages} stage(s) x {lp.smem_bytes // lp.stages:,} B"
                for lp in loop_plans
            )
            + (f"; results after the loops: {epilogue:,} B" if epilogue else "")
            + ")",
            fix=_stages_fix(spec, consts, base, epilogue, loops, extents, dtypes, sizes),
        )
    if smem > hw.SMEM_BYTES:
        raise error(
            f"the blocks need {smem:,} B of shared memory, over the {hw.SMEM_BYTES:,} B a block has",
            **err,
            expected=f"<= {hw.SMEM_BYTES:,} B",
            actual=f"{smem:,} B",
            fix=smem_fix(spec, extents, dtypes, set(fills)),
        )
    plan = LaunchPlan(
        kernel=spec.name,
        location=spec.location,
        backend=backend,
        grid=grid,
        grid_names=grid_names,
        dims=dims,
        operands=operands,
        results=results,
        constants=tuple(consts.items()),
        rows=spec.rows,
        cols=spec.cols,
        smem_bytes=smem,
        notes=tuple(notes),
        tuple_result=spec.result_is_tuple,
        loops=loop_plans,
    )
    plan.check_invariants()
    return plan


def _dims_of(spec: KernelSpec, name: str) -> tuple[str, ...]:
    return next(o.dims for o in spec.operands + spec.results if o.name == name)


def _block_bytes(
    spec: KernelSpec, name: str, extents: Mapping[str, tuple[int, int]], dtypes: Mapping[str, str]
) -> int:
    count = 1
    for d in _dims_of(spec, name):
        count *= extents[d][1]
    return count * hw.itemsize(dtypes[name])


def _loop_plans(
    spec: KernelSpec,
    loops: tuple[LoopBlock, ...],
    sizes: Mapping[str, int],
    extents: Mapping[str, tuple[int, int]],
    dtypes: Mapping[str, str],
    consts: Mapping[str, Any],
    stages: int | None = None,
) -> tuple[LoopPlan, ...]:
    declared = stages if stages is not None else spec.stage_count(consts)
    out = []
    for block in loops:
        size, step = sizes[block.axis], extents[block.axis][0]
        steps = hw.cdiv(size, step)
        eff = min(declared, steps)
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
                dots=tuple((d.a, d.b, d.transpose_b) for d in block.dots),
                # sk.dot reads its operands as TMA fills them: zeros past the edge.
                fills=block.fills
                + tuple(
                    (n, 0) for d in block.dots for n in (d.a, d.b) if n not in dict(block.fills)
                ),
                smem_bytes=pipeline_bytes(
                    [_block_bytes(spec, n, extents, dtypes) for n in block.operands], eff
                ),
            )
        )
    return tuple(out)


def _epilogue_bytes(
    spec: KernelSpec,
    extents: Mapping[str, tuple[int, int]],
    dtypes: Mapping[str, str],
    streamed: set[str],
) -> int:
    return sum(
        hw.round_up(_block_bytes(spec, r.name, extents, dtypes), hw.SMEM_BUFFER_ALIGN)
        for r in spec.results
        if r.name not in streamed
    )


def _stages_fix(
    spec: KernelSpec,
    consts: Mapping[str, Any],
    fixed_bytes: int,
    epilogue: int,
    loops: tuple[LoopBlock, ...],
    extents: Mapping[str, tuple[int, int]],
    dtypes: Mapping[str, str],
    sizes: Mapping[str, int],
) -> str:
    """Proposes the largest stage count whose pipelines fit, else smaller loop blocks."""
    declared = spec.stage_count(consts)
    for stages in range(declared - 1, 0, -1):
        plans = _loop_plans(spec, loops, sizes, extents, dtypes, consts, stages)
        if fixed_bytes + max(epilogue, *(lp.smem_bytes for lp in plans)) <= hw.SMEM_BYTES:
            name = spec.stages if isinstance(spec.stages, str) else "stages="
            sep = "=" if isinstance(spec.stages, str) else ""
            return f"set {name}{sep}{stages} (the largest stage count that fits)"
    consts_text = ", ".join(f"{c}" for c in spec.block_map.values())
    return f"even one stage does not fit: lower the block constants ({consts_text})"
