"""Shared-memory accounting: the bytes a layout's blocks take, and what to change when they
do not fit.

Pipelines' buffers are counted in `plan/pipelining.py`; this module counts the kernel-wide blocks
(operands copied once per block, results) with their barriers and Mosaic GPU's reserve.
"""

import dataclasses
from collections.abc import Iterable, Mapping

from ....language.context import Halo, LoadRecord, operand_halos
from ...declare.spec import KernelSpec
from .. import hardware as hw
from .blocks import BlockLayout

__all__ = ["block_bytes", "buffer_halos", "dims_of", "epilogue_bytes", "smem_bytes", "smem_fix"]


def dims_of(spec: KernelSpec, name: str) -> tuple[str, ...]:
    return next(o.layout_dims for o in spec.operands + spec.results if o.name == name)


def block_bytes(
    spec: KernelSpec,
    name: str,
    layout: BlockLayout,
    dtypes: Mapping[str, str],
    halo_rows: int = 0,
) -> int:
    """The bytes one block of the operand or result `name` takes, with `halo_rows` more rows
    (those its shifted loads read around the block)."""
    dims = dims_of(spec, name)
    # The halo's rows are the block's own first dim's, after any batch and group dims.
    first = next(
        (len(dims) - len(o.block_dims) for o in spec.operands + spec.results if o.name == name), 0
    )
    count = 1
    for i, d in enumerate(dims):
        count *= layout.dim(d).extent + (halo_rows if i == first else 0)
    return hw.nbytes(count, dtypes[name])


def _buffer_row_bytes(columns: int | None, boxes: int, dtype: str) -> int:
    """The bytes of one row of a block's buffer: of a 2-D block's `columns` (a box's, where
    each box of columns has a buffer), or of one element of a 1-D block (`columns` None)."""
    return hw.nbytes(columns // boxes if columns else 1, dtype)


def buffer_halos(
    spec: KernelSpec, layout: BlockLayout, dtypes: Mapping[str, str], loads: Iterable[LoadRecord]
) -> dict[str, Halo]:
    """The rows around its block that each operand read at an offset is copied with, as its
    buffer holds them (`Halo.aligned`), its column windows below them, each of the block's
    rows: what the plan counts and the shifted loads read."""
    halos = {}
    for name, halo in operand_halos(loads).items():
        dims = next(o.block_dims for o in spec.operands if o.name == name)
        columns = dims[1:]
        if halo.column_shifts:
            halo = dataclasses.replace(halo, window_rows=layout.dim(dims[0]).extent)
        extent = layout.dim(columns[0]).extent if columns else None
        boxes = layout.dim(columns[0]).boxes if columns else 1
        row_bytes = _buffer_row_bytes(extent, boxes, dtypes[name])
        halos[name] = halo.aligned(row_bytes, hw.TMA_SMEM_ALIGN_BYTES, boxes)
    return halos


def smem_bytes(
    spec: KernelSpec,
    layout: BlockLayout,
    dtypes: Mapping[str, str],
    loaded: set[str],
    results: set[str] | None = None,
    halo_rows: Mapping[str, int] | None = None,
) -> int:
    """Shared memory of the kernel-wide buffers: the loaded operands' blocks (with the rows
    `halo_rows` gives around them) and the results' (`results` names the results held there;
    all of them by default), their barriers, and Mosaic GPU's reserve."""
    total = 0
    # A scalar operand (of the kernel, or of each batch entry) is read from global memory:
    # no buffer, no barrier.
    # So is a parameter vector, by index.
    blocks = {o.name: o.block_dims for o in spec.operands}
    params = {n for n, dims in spec.parameter_operands().items() if len(dims) == 1}
    loaded = {n for n in loaded if blocks.get(n, dims_of(spec, n)) and n not in params}
    for op in spec.operands + spec.results:
        if op in spec.operands and op.name not in loaded:
            continue
        if op in spec.results and results is not None and op.name not in results:
            continue
        halo = (halo_rows or {}).get(op.name, 0)
        total += hw.round_up(block_bytes(spec, op.name, layout, dtypes, halo), hw.SMEM_BUFFER_ALIGN)
    return total + hw.BARRIER_BYTES * len(loaded) + hw.SMEM_RESERVED_BYTES


def epilogue_bytes(
    spec: KernelSpec, layout: BlockLayout, dtypes: Mapping[str, str], streamed: set[str]
) -> int:
    """Shared memory of the results stored after the loops (all but those `streamed` out
    block by block by sk.map_blocks)."""
    return sum(
        hw.round_up(block_bytes(spec, r.name, layout, dtypes), hw.SMEM_BUFFER_ALIGN)
        for r in spec.results
        if r.name not in streamed
    )


def smem_fix(
    spec: KernelSpec,
    layout: BlockLayout,
    dtypes: Mapping[str, str],
    loaded: set[str],
    loads: Iterable[LoadRecord] = (),
) -> str:
    """Proposes the largest smaller tiled block that fits (with the rows and windows its
    shifted loads, `loads`, copy around it), or a loop over the widest whole dim."""
    loads = tuple(loads)
    tile = spec.tile_map
    for dim, const in tile.items():
        block = layout.dim(dim).block
        unit = hw.WGMMA_ROWS if dim == spec.rows else hw.WGMMA_COLS
        candidate = block - unit
        while candidate >= unit:
            trial = layout.with_block(dim, candidate)
            halos = {n: h.rows for n, h in buffer_halos(spec, trial, dtypes, loads).items()}
            fits = smem_bytes(spec, trial, dtypes, loaded, halo_rows=halos) <= hw.SMEM_BYTES
            if fits and candidate % unit == 0:
                return f"set {const}={candidate} (the largest {const} whose blocks fit)"
            candidate -= unit
    whole = [d for d in layout.dims if d.name not in tile and not d.selects]
    if not whole:
        return "use smaller block constants or fewer operands"
    wide = max(whole, key=lambda d: d.extent).name
    gathered = [o.name for o in spec.operands if o.indexed is not None and wide in o.dims]
    if gathered:
        return (
            f"`{gathered[0]}`'s gathered rows are whole along {wide} and too wide for shared "
            f'memory: tile it, tile={{"{wide}": "B{wide}"}}; gathered rows are not streamed by '
            f"a loop, so a body that reduces whole rows gathers them in one kernel and "
            "reduces them in the next"
        )
    shifted = _shifted_along(spec, loads, wide)
    if shifted is not None:
        return (
            f"dim {wide} is whole in each block and too wide for shared memory, and "
            f"`{shifted}`, read at an offset, cannot be walked by a loop's steps: tile it, "
            f'tile={{"{wide}": "B{wide}"}} with `B{wide}: sk.Const[int] = 64`'
        )
    joined = layout.dim(wide).joins or (wide if wide in dict(spec.joined) else None)
    if joined is not None:  # a joined result's parts are held whole, beside no loop
        return (
            f"the columns of {joined} are whole in each block and too wide for shared memory "
            "(its parts are joined in registers, which a loop's steps do not hold): return "
            "the parts as results of their own and join them with jnp.concatenate outside "
            "the kernel"
        )
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


def _shifted_along(spec: KernelSpec, loads: tuple[LoadRecord, ...], dim: str) -> str | None:
    """An operand with `dim` that the body reads shifted, if any: its loads cannot be a
    loop's (shifted loads run outside loops)."""
    for record in loads:
        dims = next((o.block_dims for o in spec.operands if o.name == record.operand), ())
        if (record.shifts or record.column_shifts) and dim in dims:
            return record.operand
    return None
