"""The block layout: how every dim of a specialization is cut into blocks.

Built once, from the spec, the dims' sizes, the constants and the dtypes, before the body is
traced; every later stage (the trace's block shapes, translation's register geometry, the
plan, the generated code) reads it and nothing else for a block size. It is the only place a
tiling or loop constant (`BM`, `BK`) is read as a block.

At the declaration the sizes are probes, and the layout says so: its edges are all treated as
ragged, so that every mask the body could need is translated, and checked, at import.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...._errors import BlockAlignmentError, ErrorContext, Phase, TmaBoxError
from ...declare.blocks import logical_blocks, split_blocks
from ...declare.operand import OperandSpec
from ...declare.spec import KernelSpec
from ...ir.nodes import Kind
from .. import hardware as hw
from .joined import PartColumns, part_columns, part_span

__all__ = [
    "BlockLayout",
    "DimLayout",
    "Phase",
    "box_count",
    "call_layout",
    "check_blocks",
    "columns_viewed_in_steps",
    "declaration_layout",
    "is_ragged",
    "logical_blocks",
    "quantum",
    "split_blocks",
    "whole_extent",
]


def is_ragged(size: int, block: int, extent: int, split: bool) -> bool:
    """Whether some block holds elements past the array's edge: a split dim when its size is
    not a multiple of its block, a whole dim when it is padded."""
    return size % block != 0 if split else extent != size


@dataclasses.dataclass(frozen=True)
class DimLayout:
    """How one dim is split: tiled across the grid, looped inside each block, one index per
    grid step (batch), or whole inside every block."""

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
    by_constant: bool = False
    """True for a result dim that the constant of its name sizes (top-k's K); whole."""
    parameters: bool = False
    """True for the dim of parameter vectors (`"3"`, a stack's `"4 C"`), taken by index."""
    bulk: bool = False
    """True for the dim of a kernel of vectors alone: its blocks are copied whole by bulk
    copies, which take no TMA box (so a block may exceed 256 elements)."""
    grouped: str | None = None
    """For a group dim: the name of the loop dim whose steps it numbers, one index a step
    (dropped from the blocks); else None."""
    indexed_by: str | None = None
    """For a dim addressed by an index operand's values (`index={"V": "ids"}`): that
    operand's name; no block runs along the dim. Else None."""
    sized_by: str | None = None
    """For the group dim of ragged rows (`ragged={"M": "group_sizes"}`): the operand of the
    groups' sizes; each row block reads its group's index (dropped from the blocks). Else
    None."""
    joins: str | None = None
    """For a part of a joined dim (`"M N1+N2"`): the joined dim, whose columns its operands'
    blocks are, each copied and held at its own width. Else None."""
    parts: PartColumns = ()
    """For a joined dim whose parts a block holds apart (`layout.joined`: a part but the last
    is not a multiple of 8 columns, so the next starts on the register tile after it): each
    part's first column in the block and its size; the result's array holds them so, and the
    wrapper joins them. Empty where they lie side by side."""
    page_rows: int = 0
    """For a loop dim walked page by page (`pages={"P": "block_tables"}`): the rows of one
    page, while `size` is the whole sequence's (the table's length times a page). Else 0."""

    @property
    def split(self) -> bool:
        """Cut into blocks of a constant: across the grid or along a loop."""
        return self.tiled_by is not None or self.looped_by is not None

    @property
    def boxes(self) -> int:
        """TMA boxes per block along this dim: a whole dim over 256 elements takes several."""
        if self.bulk:
            return 1
        return box_count(self.extent)

    @property
    def selects(self) -> bool:
        """True for a dim no block runs along, one index of it selected per block or step:
        batch, group, indexed and ragged-group dims."""
        return bool(self.batched or self.grouped or self.indexed_by or self.sized_by)

    @property
    def ragged(self) -> bool:
        """True when some block holds elements past the array's edge."""
        if self.selects:
            return False
        return is_ragged(self.size, self.block, self.extent, self.split)

    @property
    def padded(self) -> bool:
        """True when the block's extent is past the dim's size: a whole dim padded, or any
        dim seen whole (a loop dim outside its loop) whose block is not its size."""
        return self.extent != self.size

    @property
    def status(self) -> str:
        """The dim's edge in words, e.g. `ragged (777 % 128 = 9)` or `whole, padded 100 -> 104`."""
        if self.batched:
            return "one index per grid step"
        if self.grouped and self.indexed_by:
            return f"the pages {self.indexed_by} lists, read by the loop over {self.grouped}"
        if self.grouped:
            return f"one index per step of the loop over {self.grouped}"
        if self.sized_by:
            return f"each row block's group, from the sizes in {self.sized_by}"
        if self.indexed_by:
            return f"each row at the index {self.indexed_by} gives"
        if self.page_rows:
            copied = (
                f"{self.block // self.page_rows} page(s) of {self.page_rows} a step"
                if self.block >= self.page_rows
                else f"a part of a page of {self.page_rows} a step"
            )
            return f"paged: {copied}, {self.size // self.page_rows} a sequence" + (
                f", the last block past its end ({self.size} % {self.block})" if self.ragged else ""
            )
        if self.split:
            if not self.ragged:
                return f"divisible ({self.size} % {self.block} = 0)"
            return f"ragged ({self.size} % {self.block} = {self.size % self.block})"
        boxes = (
            f", copied in {self.boxes} boxes of {self.extent // self.boxes}"
            if self.boxes > 1
            else ""
        )
        joined = f", joined into {self.joins}" if self.joins else ""
        if self.parts:
            starts = ", ".join(str(start) for start, _ in self.parts)
            joined = f", its parts held from columns {starts}"
        if not self.ragged:
            return "whole" + boxes + joined
        return f"whole, padded {self.size} -> {self.extent}{boxes}{joined}"

    def check_invariants(self) -> None:
        """Asserts what the generated code relies on for this dim."""
        assert self.size <= hw.INT32_MAX
        if self.batched:
            assert self.block == self.extent == 1 and self.grid_axis is not None
            return
        if self.grouped or self.sized_by:
            assert self.block == self.extent == 1 and self.grid_axis is None
            return
        if self.indexed_by:
            assert not self.split and self.grid_axis is None
            return
        assert self.extent >= (self.block if self.split else self.size)
        assert self.extent % self.boxes == 0
        assert self.extent // self.boxes <= hw.TMA_BOX_MAX or self.bulk
        assert self.boxes == 1 or not self.split
        assert (self.grid_axis is not None) == (self.tiled_by is not None)
        assert self.joins is None or not self.split
        assert not self.parts or (self.extent >= part_span(self.parts) and not self.split)


@dataclasses.dataclass(frozen=True)
class BlockLayout:
    """Every dim's blocks, the grid that walks them, and the (rows, cols) register frame."""

    dims: tuple[DimLayout, ...]
    """One layout per dim, in the order of the annotations."""
    rows: str
    """The dim along the rows of 2-D blocks."""
    cols: str | None
    """The dim along the columns of 2-D blocks; None when every operand is 1-D."""
    phase: Phase
    """At the declaration the sizes are probes, and every edge counts as ragged."""
    params: tuple[str, ...] = ()
    """The dims of parameter vectors, whose elements are read by index."""

    def dim(self, name: str) -> DimLayout:
        return next(d for d in self.dims if d.name == name)

    def kind(self, dims: tuple[str, ...]) -> Kind:
        """The register form of a block over `dims` (the dims the body sees): a 2-D block is
        a tile; a 1-D one is a per-row or per-column vector; a scalar operand a scalar; an
        operand of parameters (a vector, or a stack of vectors) has none."""
        if not dims:
            return Kind.SCALAR
        if set(dims) & set(self.params):
            return Kind.PARAMS
        if len(dims) == 2:
            return Kind.TILE
        return Kind.ROW if dims[0] == self.rows else Kind.COL

    @property
    def sizes(self) -> dict[str, int]:
        return {d.name: d.size for d in self.dims}

    @property
    def grid_dims(self) -> tuple[DimLayout, ...]:
        """The dims the grid walks, in grid-axis order: batch dims, then tiled dims."""
        return tuple(sorted((d for d in self.dims if d.grid_axis is not None), key=_grid_axis))

    @property
    def grid(self) -> tuple[int, ...]:
        """Blocks along each grid axis; `(1,)` when nothing is tiled or batched."""
        return tuple(d.size if d.batched else hw.cdiv(d.size, d.block) for d in self.grid_dims) or (
            1,
        )

    @property
    def grid_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.grid_dims) or ("_",)

    def edge_masked(self, name: str | None) -> bool:
        """Whether the body's values along `name` need edge masks: the dim is ragged or
        padded there, or the sizes are probes. (A loop dim, seen whole outside its loop, counts
        as padded; inside its steps, `ragged` decides.)"""
        if name is None:
            return False
        if self.phase is Phase.DECLARATION:
            return True
        d = self.dim(name)
        return d.ragged if d.tiled_by else d.padded

    def step_masked(self, name: str) -> bool:
        """Whether the last step of the loop over `name` holds elements past the edge."""
        return self.phase is Phase.DECLARATION or self.dim(name).ragged

    def with_block(self, name: str, block: int) -> "BlockLayout":
        """This layout with the split dim `name` cut in blocks of `block` (to try a fix)."""
        dims = tuple(
            dataclasses.replace(d, block=block, extent=block) if d.name == name else d
            for d in self.dims
        )
        return dataclasses.replace(self, dims=dims)

    def with_extent(self, name: str, extent: int) -> "BlockLayout":
        """This layout with the whole dim `name` padded to `extent` in registers and shared
        memory (the row form pads a row to whole warpgroups of vectors)."""
        dims = tuple(
            dataclasses.replace(d, extent=extent) if d.name == name else d for d in self.dims
        )
        return dataclasses.replace(self, dims=dims)

    def with_whole(self, name: str, extent: int) -> "BlockLayout":
        """This layout with the dim `name` whole in every block (a loop dim too: the row form
        walks its loops over rows held whole), padded to `extent`."""
        dims = tuple(
            dataclasses.replace(d, looped_by=None, block=d.size, extent=extent)
            if d.name == name
            else d
            for d in self.dims
        )
        return dataclasses.replace(self, dims=dims)

    def check_invariants(self) -> None:
        """Asserts what every later stage relies on, once the blocks have passed
        `check_blocks`; raises AssertionError if one breaks."""
        names = [d.name for d in self.dims]
        assert len(set(names)) == len(names) and self.rows in names
        assert self.cols is None or self.cols in names
        for d in self.dims:
            d.check_invariants()
        axes = [d.grid_axis for d in self.grid_dims]
        assert axes == list(range(len(axes)))
        assert all(d.batched for d in self.grid_dims[: sum(d.batched for d in self.dims)])


def _grid_axis(d: DimLayout) -> int:
    return d.grid_axis if d.grid_axis is not None else -1


def _axis(spec: KernelSpec, dim: str) -> str:
    return "rows" if dim == spec.rows else "cols"


def quantum(
    spec: KernelSpec, dim: str, dtypes: Mapping[str, tuple[str, ...]]
) -> tuple[int, str, str]:
    """The unit `dim`'s block extent must be a multiple of, and the operand and dtype needing it.

    A whole dim of an operand laid out off the blocks' (rows, cols), which only `sk.dot` reads
    (a matmul's b "K N", attention's k "Skv D"), is padded to WGMMA's 128-byte swizzle: the
    zeros past its edge add nothing to a product, so any size is exact.

    The parts of a joined dim share the largest of their units: the registers of a block of
    its own width are found by its columns (`Geometry.own_width`), so parts of one size must
    be padded alike."""
    parts = spec.joined_parts()
    if dim in parts:
        return max((_dim_quantum(spec, p, dtypes) for p in parts), key=lambda q: q[0])
    return _dim_quantum(spec, dim, dtypes)


def _dim_quantum(
    spec: KernelSpec, dim: str, dtypes: Mapping[str, tuple[str, ...]]
) -> tuple[int, str, str]:
    best = (1, "", "")
    whole = dim not in spec.block_map
    tables = set(spec.page_tables.values())
    for op in spec.operands + spec.results:
        if dim not in op.layout_dims or op.name in tables:
            continue
        off_frame = len(op.block_dims) == 2 and op.block_dims != (spec.rows, spec.cols)
        for dtype in dtypes[op.name]:
            # The block the body sees, after batch dims (a batch entry's vector is one copy a
            # block, of 128-byte multiples) and group dims (a step's vector of a group).
            rank = len(op.block_dims)
            unit = hw.block_quantum(_axis(spec, dim), rank, dtype)
            if whole and off_frame and spec.loop:
                unit = max(unit, hw.per_bytes(hw.SWIZZLE_BYTES, dtype))
            if unit > best[0]:
                best = (unit, op.name, dtype)
    return best


def whole_extent(size: int, unit: int) -> int:
    """The padded extent of a whole dim: one TMA box, or equal boxes of at most 256 elements."""
    chunks = hw.cdiv(hw.round_up(size, unit), hw.TMA_BOX_MAX)
    return chunks * hw.round_up(hw.cdiv(size, chunks), unit)


def box_count(extent: int) -> int:
    """How many equal TMA boxes a block extent is copied in."""
    return hw.cdiv(extent, hw.TMA_BOX_MAX)


def _layout(
    spec: KernelSpec,
    sizes: Mapping[str, int],
    blocks: Mapping[str, tuple[int, int]],
    phase: Phase,
    parts: Mapping[str, PartColumns] | None = None,
) -> BlockLayout:
    tile, looped = spec.tile_map, spec.loop_map
    # A paged loop walks whole sequences: the table's length times a page's rows.
    pages = spec.paged_loops
    page_rows = {walked: sizes[walked] for walked in pages}
    sizes = {**sizes, **{w: sizes[w] * sizes[steps] for w, steps in pages.items()}}
    grid_names = list(spec.batch) + [n for n in spec.layout_dims() if n in tile]
    layout = BlockLayout(
        dims=tuple(
            DimLayout(
                name=n,
                size=sizes[n],
                tiled_by=tile.get(n),
                block=blocks[n][0],
                extent=blocks[n][1],
                grid_axis=grid_names.index(n) if n in grid_names else None,
                looped_by=looped.get(n),
                batched=n in spec.batch,
                by_constant=n in spec.const_dims,
                parameters=n in spec.param_dims,
                grouped=spec.group_map.get(n),
                sized_by=dict(spec.ragged).get(spec.ragged_groups.get(n, "")),
                indexed_by=dict(spec.index).get(n),
                page_rows=page_rows.get(n, 0),
                joins=next((j for j, joined in spec.joined if n in joined), None),
                parts=(parts or {}).get(n, ()),
                bulk=spec.cols is None and not spec.loop,
            )
            for n in spec.layout_dims()
        ),
        rows=spec.rows,
        cols=spec.cols,
        phase=phase,
        params=spec.param_dims,
    )
    return layout


def call_layout(
    spec: KernelSpec, sizes: Mapping[str, int], consts: Mapping[str, Any], dtypes: Mapping[str, str]
) -> BlockLayout:
    """The layout of a call: split dims take their constant's block, whole dims their size,
    padded to what the bound dtypes need."""
    split = split_blocks(spec, consts)
    sizes = {**sizes, **spec.known_sizes(consts)}
    options = {name: (dtype,) for name, dtype in dtypes.items()}
    blocks: dict[str, tuple[int, int]] = {}
    joined = {name: part_columns([sizes[p] for p in ps]) for name, ps in spec.joined}
    for name in spec.layout_dims():
        size = sizes[name]
        if name in spec.batch or name in spec.group_map or name in spec.ragged_groups:
            blocks[name] = (1, 1)
        elif name in split:
            blocks[name] = (split[name], split[name])
        else:
            # The parts held apart span more columns than they hold.
            held = part_span(joined[name]) if joined.get(name) else size
            blocks[name] = (size, whole_extent(held, quantum(spec, name, options)[0]))
    return _layout(spec, sizes, blocks, Phase.CALL, joined)


def declaration_layout(
    spec: KernelSpec,
    consts: Mapping[str, Any],
    options: Mapping[str, tuple[str, ...]],
    whole_blocks: int = 1,
) -> BlockLayout:
    """The layout checked at the declaration, on probe sizes. A whole dim takes its smallest
    block (its real size is known only at the call), `whole_blocks` times; a tiled dim gets
    two blocks and one element, a loop dim enough steps that every declared stage is in use
    plus a ragged one."""
    split = split_blocks(spec, consts)
    known = spec.known_sizes(consts)
    blocks: dict[str, tuple[int, int]] = {}
    sizes: dict[str, int] = {}
    for name in spec.layout_dims():
        if name in spec.batch or name in spec.group_map or name in spec.ragged_groups:
            blocks[name], sizes[name] = (1, 1), 2
            continue
        if name in dict(spec.joined):  # a result's joined columns: its parts' probes together
            known = {**known, name: spec.joined_sizes(sizes)[name]}
        if name in known:  # its size is known at the declaration
            sizes[name] = known[name]
            blocks[name] = (sizes[name], whole_extent(sizes[name], quantum(spec, name, options)[0]))
            continue
        block = split[name] if name in split else _probe_block(spec, name, consts, options)
        if name not in split:
            block *= whole_blocks
        blocks[name] = (block, block)
        if name in spec.loop_map:
            sizes[name] = block * max(2, spec.stage_count(consts) or 2) + 1
        elif name in spec.tile_map:
            sizes[name] = 2 * block + 1
        else:
            sizes[name] = block
    for group, walked in spec.groups:  # one index per step of its loop
        sizes[group] = hw.cdiv(sizes[walked], split[walked])
    for walked, steps in spec.paged_loops.items():  # a page a step, and enough steps
        sizes[steps] = max(2, spec.stage_count(consts) or 2)
        blocks[steps] = (sizes[steps], sizes[steps])
        sizes[walked] = split[walked]
    return _layout(spec, sizes, blocks, Phase.DECLARATION)


def _probe_block(
    spec: KernelSpec, name: str, consts: Mapping[str, Any], options: Mapping[str, tuple[str, ...]]
) -> int:
    """A whole dim's probe: its smallest block, and no fewer elements than a dim a constant
    sizes (the K of a top-k over it cannot exceed it)."""
    unit = quantum(spec, name, options)[0]
    most = max((int(consts[d]) for d in spec.const_dims), default=unit)
    return hw.round_up(max(unit, most), unit)


def columns_viewed_in_steps(layout: BlockLayout, op: OperandSpec) -> bool:
    """Whether a 2-D operand without batch or group dims has its columns walked by its loop,
    or split across the grid while its rows are (a "K N" weight): a 4-bit one is then copied
    from column 0 of a (rows, steps, block) view of it (`OperandPlan.column_steps`), the one
    way its blocks past column 0 are copied."""
    dims = op.block_dims
    if len(dims) != 2 or op.batch or op.groups:
        return False
    rows, cols = (layout.dim(d) for d in dims)
    return cols.looped_by is not None or (cols.tiled_by is not None and rows.looped_by is not None)


def _check_packed_columns(
    spec: KernelSpec,
    layout: BlockLayout,
    dtype_options: Mapping[str, tuple[str, ...]],
    ctx: ErrorContext,
) -> None:
    """A 4-bit operand's blocks start at column 0: Mosaic GPU addresses a 4-bit array's column
    coordinate twice too far on the device (jax 0.11.2, measured on an H200), so its columns
    are either walked by its loop (copied from a (rows, steps, block) view, see
    `OperandPlan.column_steps`) or whole in one TMA box."""
    for op in spec.operands:
        packed = [d for d in dtype_options[op.name] if d in hw.SUB_BYTE_DTYPES]
        if not packed or len(op.block_dims) != 2:
            continue
        cols = layout.dim(op.block_dims[-1])
        if columns_viewed_in_steps(layout, op) or (not cols.split and cols.boxes == 1):
            continue
        raise ctx.error(
            TmaBoxError,
            f"{packed[0]} operand `{op.name}` is copied in blocks along its columns "
            f"{cols.name}, which start past column 0",
            operand=op.name,
            dim=cols.name,
            expected=f"{cols.name} walked by a loop (loop={{'{cols.name}': ...}}) or whole in "
            f"one TMA box (at most {hw.TMA_BOX_MAX} elements)",
            actual=f"{cols.name}={cols.size} "
            + (
                f"tiled by {cols.tiled_by}={cols.block}"
                if cols.tiled_by
                else (
                    f"looped by {cols.looped_by}={cols.block}, with batch dims"
                    if cols.looped_by
                    else f"in {cols.boxes} boxes"
                )
            ),
            fix=(
                f"fold the batch dims into the rows outside the kernel, or annotate `{op.name}` "
                "Int8 and pass it as int8"
                if cols.looped_by
                else f"loop over {cols.name} (a 4-bit block is then copied from column 0 of a "
                f"view of its steps), or annotate `{op.name}` Int8 and pass it as int8"
            ),
        )


def check_blocks(
    spec: KernelSpec,
    layout: BlockLayout,
    dtype_options: Mapping[str, tuple[str, ...]],
    ctx: ErrorContext,
) -> None:
    """The TMA and register-layout rules for every block; `dtype_options` lists the dtypes each
    operand may take (all the annotation allows at import, the bound one at the call)."""
    _check_packed_columns(spec, layout, dtype_options, ctx)
    for d in layout.dims:
        if d.selects:
            continue
        name, extent = d.name, d.extent
        const = d.tiled_by or d.looped_by
        fix_const = f"set {const} to" if const else f"tile {name} with a constant of"
        if const and extent > hw.TMA_BOX_MAX and not d.bulk:
            raise ctx.error(
                TmaBoxError,
                f"the block along {name} has {extent} elements, over the TMA box limit",
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
            raise ctx.error(
                BlockAlignmentError,
                f"the {'row' if axis == 'rows' else 'column'} block along {name} is {extent} "
                f"elements, not a multiple of {unit}",
                operand=operand,
                dim=name,
                expected=f"a multiple of {unit} ({why})",
                actual=f"{extent} ({hw.nbytes(extent, dtype)} B of {dtype})",
                fix=f"{fix_const} {hw.round_up(extent, unit)}",
            )
