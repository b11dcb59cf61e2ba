"""Each operand's and result's array in a launch: its block, the array the kernel addresses
(padded on the host where TMA or a bulk copy cannot address it as it is), its fill, and the
notes those fallbacks add to the plan."""

import math
from typing import Any

from ...._errors import DtypeError, ShiftError
from ....language.context import Halo
from ...ir.nodes import Kind
from .. import hardware as hw
from ..layout.blocks import BlockLayout, columns_viewed_in_steps
from ..layout.joined import part_span
from .inputs import PlanInputs
from .operands import OperandPlan, PageCopies, Role
from .pipelining import dot_gmem_shape, dot_operands, dot_swizzle, swizzle_elements

__all__ = ["plan_arrays"]


def plan_arrays(
    inputs: PlanInputs,
) -> tuple[tuple[OperandPlan, ...], tuple[OperandPlan, ...], list[str]]:
    """The operands' plans, the results' plans, and the notes of their fallbacks."""
    notes: list[str] = []
    spec = inputs.spec
    dot_roles = dot_operands(inputs.loops)
    dims = {o.name: o.block_dims for o in spec.operands + spec.results}
    swizzle = dot_swizzle(inputs.loops, dims, inputs.layout, inputs.dtypes)
    operands = tuple(
        _plan_array(inputs, op, Role.INPUT, swizzle if op.name in dot_roles else 0, notes)
        for op in spec.operands
    )
    results = tuple(
        _plan_array(inputs, op, Role.OUTPUT, swizzle if op.name in dot_roles else 0, notes)
        for op in spec.results
    )
    _check_updates(inputs, results)
    return operands, results, notes


def _check_updates(inputs: PlanInputs, results: tuple[OperandPlan, ...]) -> None:
    """A result written into an operand's array in place has that operand's dtype, and its
    operand, like an operand whose rows are gathered, is read only at its own block's rows
    (never shifted)."""
    spec = inputs.spec
    for name in [o.name for o in spec.operands if o.indexed is not None] + [spec.update]:
        halo = inputs.halos.get(name) if name is not None else None
        if halo is None or not halo.rows:
            continue
        gathered = name != spec.update
        raise inputs.ctx.error(
            ShiftError,
            f"the body loads `{name}` shifted, whose "
            + (
                "rows are gathered by an index: a row above a gathered row is no row of it"
                if gathered
                else "array the result updates in place: the rows around a block are other "
                "blocks', which those blocks overwrite in an order not defined"
            ),
            operand=name,
            expected=f"sk.load({name}) at its own block's rows",
            actual=f"sk.load({name}, offset=...)",
            fix="gather the shifted rows with an index of their own (ids shifted outside the "
            "kernel)"
            if gathered
            else "write the result into a new array (drop update=)",
        )
    for result in results:
        if result.updates is None:
            continue
        want = inputs.dtypes[result.updates]
        if result.dtype != want:
            raise inputs.ctx.error(
                DtypeError,
                f"the result is {result.dtype}, but it updates `{result.updates}` ({want}) "
                "in place",
                operand=result.updates,
                expected=want,
                actual=result.dtype,
                fix=f"cast the value the body returns: .astype({result.updates}.dtype)",
            )


def _plan_array(
    inputs: PlanInputs, op: Any, role: Role, swizzle_bytes: int, notes: list[str]
) -> OperandPlan:
    """`op`'s plan; `swizzle_bytes` is the swizzle in bytes of the operands sk.dot reads, or 0
    where `op` is not one."""
    spec, layout, sizes = inputs.spec, inputs.layout, inputs.layout.sizes
    # A paged operand's array holds pages: a page's rows, not the sequence's.
    full_shape = tuple(layout.dim(d).page_rows or sizes[d] for d in op.dims)
    lead = full_shape[: len(op.batch) + len(op.groups)]
    shape = full_shape[len(op.batch) + len(op.groups) :]
    dims_seen = op.block_dims
    dtype = inputs.dtypes[op.name]
    swizzle = swizzle_elements(dtype, swizzle_bytes) if swizzle_bytes else 0
    # The row form holds a loop's columns whole: no loop copies a block.
    loop_dim = spec.operand_loop(op) if inputs.form.pipelines_loops else None
    steps = _column_steps(inputs, op, dtype, shape)
    flat = False
    parts: tuple[tuple[int, int], ...] = ()
    if steps:
        block = layout.dim(dims_seen[-1]).block
        gmem = (*shape[:-1], steps * block)
        if gmem != shape:
            notes.append(
                f"fallback: `{op.name}` ({dtype}) is padded on the host to {list(gmem)}, whole "
                f"steps of {block} columns, and copied a step at a time from column 0 of a "
                f"({shape[0]}, {steps}, {block}) view (one extra copy)"
            )
    elif parts := _held_parts(inputs, op, role):
        gmem = _parts_gmem(inputs, op, lead, shape, parts, notes)
    elif flat := _addressed_flat(inputs, op, role, lead, shape, swizzle):
        gmem = shape
        notes.append(_flat_note(op.name, role, shape, dtype))
    else:
        gmem = _gmem_shape(inputs, op, role, lead, shape, swizzle, notes)
    gmem_lead = _pool_of_two(inputs, op, lead, notes)
    loaded = role is Role.OUTPUT or op.name in inputs.fills
    aliases = inputs.form.aliases or {}
    kind = layout.kind(dims_seen)
    return OperandPlan(
        name=op.name,
        role=role,
        dims=dims_seen,
        shape=lead + shape,
        dtype=dtype,
        kind=kind,
        block_shape=tuple(layout.dim(d).extent for d in dims_seen),
        gmem_shape=gmem_lead + gmem,
        batch=op.batch,
        groups=op.groups,
        fill=_fill(inputs, op.name) if role is Role.INPUT and dims_seen else None,
        loaded=loaded,
        loop_dim=loop_dim if role is Role.INPUT and loaded else None,
        swizzle=swizzle,
        shares_smem_with=aliases.get(op.name) if role is Role.OUTPUT else None,
        in_place=(
            role is Role.INPUT
            and (
                kind is Kind.SCALAR
                or (kind is Kind.PARAMS and len(dims_seen) == 1)  # a stack of vectors is copied
                or op.name in inputs.form.reads_in_place
            )
        )
        or _stored_in_place(inputs, role, kind),
        halo=inputs.halos.get(op.name, Halo()) if role is Role.INPUT else Halo(),
        column_steps=steps,
        index=op.indexed.index if op.indexed is not None else None,
        updates=spec.update if role is Role.OUTPUT else None,
        pages=_page_copies(inputs, op, gmem_lead),
        last_block_rows=_last_block_rows(inputs, op, role, shape, gmem),
        flat=flat,
        parts=parts,
    )


def _held_parts(inputs: PlanInputs, op: Any, role: Role) -> tuple[tuple[int, int], ...]:
    """A result's joined columns as a block holds them part by part (`DimLayout.parts`);
    empty where they lie side by side."""
    if role is not Role.OUTPUT or not op.block_dims:
        return ()
    return inputs.layout.dim(op.block_dims[-1]).parts


def _parts_gmem(
    inputs: PlanInputs,
    op: Any,
    lead: tuple[int, ...],
    shape: tuple[int, ...],
    parts: tuple[tuple[int, int], ...],
    notes: list[str],
) -> tuple[int, ...]:
    """The array a result of joined columns held part by part is written as: its rows, and
    the parts' columns as a block holds them, in whole 16-byte rows (and whole blocks of rows
    where a batch entry's last block would reach into the next)."""
    dtype = inputs.dtypes[op.name]
    columns = hw.round_up(part_span(parts), hw.per_bytes(hw.TMA_ALIGN_BYTES, dtype))
    gmem = (shape[0], columns)
    if op.batch:
        gmem = _whole_rows_gmem(inputs, op, lead, gmem, notes)
    names = op.block_dims[-1].split("+")
    first = next(i for i, (_, size) in enumerate(parts[:-1]) if size % hw.WGMMA_COLS)
    later = ", ".join(
        f"{n} from column {start}" for n, (start, _) in zip(names, parts, strict=True) if start
    )
    notes.append(
        f"fallback: `{op.name}` joins {', '.join(names)}, and {names[first]} "
        f"({parts[first][1]} columns) is not a multiple of {hw.WGMMA_COLS}: a block holds each "
        f"part from a register tile of its own ({later}), the kernel writes the result so, as "
        f"{list(lead + gmem)}, and the parts are joined into {list(lead + shape)} after the "
        "launch (one extra copy)"
    )
    return gmem


# A result's row stored from registers ends with a piece of one element for each of the
# warpgroup's threads, which overlaps the piece before it: the row holds one piece at least.
FLAT_ROW_MIN = 128


def _addressed_flat(
    inputs: PlanInputs,
    op: Any,
    role: Role,
    lead: tuple[int, ...],
    shape: tuple[int, ...],
    swizzle: int,
) -> bool:
    """Whether the kernel addresses `op` flattened (`OperandPlan.flat`): a 2-D array of whole
    rows whose bytes TMA cannot take as a row stride, in a form that copies a row at a time,
    with no batch dims, gathered rows, halo, pages or in-place update, whose elements int32
    offsets count (a flat offset is `row * columns + column`); or such a form's per-column
    vector whose bytes a bulk copy cannot end at."""
    dtype = inputs.dtypes[op.name]
    if not inputs.form.addresses_rows_flat or swizzle or lead:
        return False
    if len(shape) == 1:  # a per-column vector, copied whole by 1-D boxes
        return (
            role is Role.INPUT
            and hw.nbytes(shape[0], dtype) % hw.TMA_ALIGN_BYTES != 0
            and inputs.layout.kind(op.block_dims) is Kind.COL
            and op.name not in inputs.form.reads_in_place
            and inputs.layout.dim(op.block_dims[0]).extent >= shape[0]
        )
    if len(shape) != 2:
        return False
    if hw.nbytes(shape[1], dtype) % hw.TMA_ALIGN_BYTES == 0:
        return False  # TMA addresses it as it is
    spec, layout = inputs.spec, inputs.layout
    halo = inputs.halos.get(op.name)
    if (
        layout.kind(op.block_dims) is not Kind.TILE
        or layout.dim(op.block_dims[1]).extent < shape[1]
        or op.indexed is not None
        or spec.page_table(op) is not None
        or (halo is not None and halo.rows)
        or op.name == spec.update
        or math.prod(shape) + layout.dim(op.block_dims[1]).extent >= 2**31
    ):
        return False
    return role is Role.INPUT or (spec.update is None and shape[1] >= FLAT_ROW_MIN)


def _flat_note(name: str, role: Role, shape: tuple[int, ...], dtype: str) -> str:
    if len(shape) == 1:
        return (
            f"`{name}` is {hw.nbytes(shape[0], dtype)} B, not a multiple of 16 B: it is copied "
            "by 1-D TMA boxes, the last one filled with zeros past its end (no host padding)"
        )
    how = (
        "each row loaded by 1-D TMA boxes from its first element"
        if role is Role.INPUT
        else "each row stored from registers, an element a thread"
    )
    return (
        f"`{name}` rows are {hw.nbytes(shape[1], dtype)} B, not a multiple of 16 B: the "
        f"kernel addresses it flattened to {[math.prod(shape)]} (no host padding), {how}"
    )


def _stored_in_place(inputs: PlanInputs, role: Role, kind: Kind) -> bool:
    """Whether a result is written to global memory where the body computes it: a per-row
    result of the row form, whose body computes one scalar a row, and a 0-d result (one
    value a batch entry, `-> "B"`), a scalar in every form, which no TMA box holds."""
    if role is not Role.OUTPUT:
        return False
    return kind is Kind.SCALAR or (kind is Kind.ROW and inputs.form.copies_vectors_in_bulk)


def _page_copies(inputs: PlanInputs, op: Any, lead: tuple[int, ...]) -> PageCopies | None:
    """For a paged operand, the copies each step of its loop makes; `lead`, its array's batch
    and page dims as the kernel addresses them."""
    table = inputs.spec.page_table(op)
    if table is None:
        return None
    walked = inputs.layout.dim(inputs.spec.group_map[op.groups[0]])
    copy_rows = min(walked.page_rows, walked.block)
    return PageCopies(
        table=table,
        page_rows=walked.page_rows,
        copy_rows=copy_rows,
        copies=walked.block // copy_rows,
        pool=inputs.layout.sizes[op.groups[0]],
        # Past every page of every batch entry: Mosaic GPU may merge the leading dims of a
        # copy into one, where page `pool` of one entry is page 0 of the next.
        outside=math.prod(lead),
    )


def _pool_of_two(
    inputs: PlanInputs, op: Any, lead: tuple[int, ...], notes: list[str]
) -> tuple[int, ...]:
    """A paged operand's batch and page dims as the kernel addresses them: a pool of one page
    is padded to two on the host, since Mosaic GPU drops a dim of 1 from a copy, and with it
    the page index that sends a page outside the pool to zeros."""
    if inputs.spec.page_table(op) is None or lead[-1] != 1:
        return lead
    notes.append(
        f"fallback: `{op.name}` has a pool of one page, padded on the host with a page of "
        "zeros (one extra copy): a copy drops a dim of 1, and a page outside the pool would "
        "read the pool's one page"
    )
    return (*lead[:-1], 2)


def _column_steps(inputs: PlanInputs, op: Any, dtype: str, shape: tuple[int, ...]) -> int:
    """The steps of a 4-bit operand's columns when its loop walks them (see
    `OperandPlan.column_steps`); else 0."""
    if dtype not in hw.SUB_BYTE_DTYPES or not columns_viewed_in_steps(inputs.layout, op):
        return 0
    return hw.cdiv(shape[-1], inputs.layout.dim(op.block_dims[-1]).block)


def _gmem_shape(
    inputs: PlanInputs,
    op: Any,
    role: Role,
    lead: tuple[int, ...],
    shape: tuple[int, ...],
    swizzle: int,
    notes: list[str],
) -> tuple[int, ...]:
    """The array one grid step of `op` addresses, after its batch dims: its shape, or a
    padded one where TMA or a bulk copy cannot address it as it is (with the note saying so)."""
    spec, layout = inputs.spec, inputs.layout
    dtype = inputs.dtypes[op.name]
    dims_seen = op.block_dims
    if swizzle:
        gmem = dot_gmem_shape(shape, swizzle)
        # A whole dim's block is padded to the swizzle: the array holds the whole block.
        gmem = tuple(
            g if d in spec.block_map else max(g, layout.dim(d).extent)
            for d, g in zip(dims_seen, gmem, strict=True)
        )
        if gmem != shape:
            read = hw.nbytes(math.prod(lead + shape), dtype)
            written = hw.nbytes(math.prod(lead + gmem), dtype)
            notes.append(
                f"fallback: `{op.name}` {list(shape)} is padded with zeros to {list(gmem)}, "
                f"so that TMA can copy it into WGMMA's tiled shared memory (rows a multiple "
                f"of 8, columns of {swizzle} x {dtype}): a jnp.pad in the kernel's jit, "
                f"{read:,} B read and {written:,} B written unless XLA fuses it into "
                f"`{op.name}`'s producer"
            )
        return gmem
    if len(shape) == 2 and hw.nbytes(shape[1], dtype) % hw.TMA_ALIGN_BYTES:
        padded = hw.round_up(shape[1], hw.per_bytes(hw.TMA_ALIGN_BYTES, dtype))
        row_bytes = hw.nbytes(shape[1], dtype)
        notes.append(
            f"fallback: `{op.name}` rows are {row_bytes} B, not a multiple of 16 B, so TMA "
            f"cannot address it; it is padded on the host to {list((shape[0], padded))}"
            + (" and the result sliced back" if role is Role.OUTPUT else "")
            + " (one extra copy)"
        )
        if role is Role.OUTPUT and op.batch:  # its padded rows are whole rows all the same
            return _whole_rows_gmem(inputs, op, lead, (shape[0], padded), notes)
        return (shape[0], padded)
    if role is Role.INPUT and op.name in inputs.form.reads_in_place:
        return shape  # read an element at a time, from the array as it is
    if role is Role.INPUT and op.name in spec.page_tables.values():
        return shape  # read an element at a time by the copies of the pages it lists
    if role is Role.INPUT and len(shape) == 1 and set(dims_seen) & set(spec.param_dims):
        return shape  # a parameter vector, read by index
    if inputs.form.copies_vectors_in_bulk and len(shape) == 1:
        summed = role is Role.OUTPUT and op.dims == (spec.cols,)
        return _row_form_gmem(op.name, role, shape, dtype, layout, notes, summed)
    if len(shape) == 1 and not lead and layout.dim(dims_seen[0]).bulk:
        return _bulk_vector_gmem(op.name, role, shape, dtype, notes)
    if role is Role.OUTPUT and len(shape) == 1 and op.batch and layout.dim(dims_seen[0]).ragged:
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
        return gmem
    if len(shape) == 1 and lead and hw.nbytes(shape[0], dtype) % hw.TMA_ALIGN_BYTES:
        entries = "rows" if op.groups else "batch entries"
        return _batched_vector_gmem(op.name, role, lead, shape, dtype, notes, entries)
    if role is Role.OUTPUT and len(shape) == 2 and op.batch:
        return _whole_rows_gmem(inputs, op, lead, shape, notes)
    return shape


def _whole_rows_at_risk(inputs: PlanInputs, op: Any, shape: tuple[int, ...]) -> bool:
    """Whether a batch entry's 2-D result has blocks of its whole rows past its edge: such a
    block is contiguous in memory, and Mosaic GPU stores it by a plain bulk copy, clipped only
    at the end of the whole array, so its rows past this entry's edge would write into the
    next entry's first rows (attention's output at Sq = 4095)."""
    rows, cols = (inputs.layout.dim(d) for d in op.block_dims)
    # No row past the edge, or a block narrower than a row (clipped per dim); an in-place
    # result is its operand's array, stored by row.
    return rows.ragged and cols.extent >= shape[1] and inputs.spec.update is None


def _stores_last_rows(inputs: PlanInputs, op: Any) -> bool:
    """Whether the block's store can copy the last block's rows alone: a block of a dim the
    grid tiles, in one box, stored once by the block form (not the row form's stores, nor a
    loop step's)."""
    rows = inputs.layout.dim(op.block_dims[0])
    return (
        inputs.form.stores_blocks_after_the_body and rows.tiled_by is not None and rows.boxes == 1
    )


def _last_block_rows(
    inputs: PlanInputs,
    op: Any,
    role: Role,
    shape: tuple[int, ...],
    gmem: tuple[int, ...],
) -> int:
    """`OperandPlan.last_block_rows`: the rows of the last block inside a batch entry whose
    whole-row blocks its store copies part of; else 0."""
    if role is not Role.OUTPUT or not op.batch or len(shape) != 2 or gmem[0] != shape[0]:
        return 0  # not a batch entry's 2-D result, or its rows padded to whole blocks
    if not _whole_rows_at_risk(inputs, op, gmem):
        return 0
    if not _stores_last_rows(inputs, op):
        return 0
    block = inputs.layout.dim(op.block_dims[0]).block
    return shape[0] - (hw.cdiv(shape[0], block) - 1) * block


def _whole_rows_gmem(
    inputs: PlanInputs, op: Any, lead: tuple[int, ...], shape: tuple[int, ...], notes: list[str]
) -> tuple[int, ...]:
    """A batch entry's 2-D result of whole-row blocks past its edge (`_whole_rows_at_risk`),
    whose store cannot copy its last block's rows alone: its rows are padded to whole blocks
    on the host, and the result sliced back."""
    if not _whole_rows_at_risk(inputs, op, shape) or _stores_last_rows(inputs, op):
        return shape
    rows = inputs.layout.dim(op.block_dims[0])
    gmem = (hw.round_up(shape[0], rows.extent), shape[1])
    notes.append(
        f"fallback: `{op.name}` is written as {list(lead + gmem)} and sliced back to "
        f"{list(lead + shape)}: a block of whole rows is stored by a bulk copy, which past "
        "this batch entry's edge would reach into the next"
    )
    return gmem


def _bulk_vector_gmem(
    name: str, role: Role, shape: tuple[int, ...], dtype: str, notes: list[str]
) -> tuple[int, ...]:
    """The array of a kernel of vectors, copied by bulk copies: a copy clamped at the array's
    end must still move a multiple of 16 bytes (else its barrier never completes: measured to
    hang on an H200), so an array of another byte length is padded to one."""
    if hw.nbytes(shape[0], dtype) % hw.TMA_ALIGN_BYTES == 0:
        return shape
    padded = (hw.round_up(shape[0], hw.per_bytes(hw.TMA_ALIGN_BYTES, dtype)),)
    notes.append(
        f"fallback: `{name}` is {hw.nbytes(shape[0], dtype)} B, not a multiple of 16 B, which "
        f"a bulk copy clamped at its end must move; it is padded on the host to {list(padded)}"
        + (" and the result sliced back" if role is Role.OUTPUT else "")
        + " (one extra copy)"
    )
    return padded


def _batched_vector_gmem(
    name: str,
    role: Role,
    lead: tuple[int, ...],
    shape: tuple[int, ...],
    dtype: str,
    notes: list[str],
    entries: str = "batch entries",
) -> tuple[int, ...]:
    """The array of a 1-D operand or result after its batch (or group) dims whose entries are
    not 16-byte multiples: TMA addresses the whole array, and needs every stride but the last
    to be a multiple of 16 bytes, so each entry is padded to the next."""
    padded = (hw.round_up(shape[0], hw.per_bytes(hw.TMA_ALIGN_BYTES, dtype)),)
    true_bytes = hw.nbytes(math.prod(lead + shape), dtype)
    padded_bytes = hw.nbytes(math.prod(lead + padded), dtype)
    entry = f"`{name}`'s {entries} are {hw.nbytes(shape[0], dtype)} B, not a multiple of 16 B"
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
    notes: list[str],
    summed: bool = False,
) -> tuple[int, ...]:
    """The array a 1-D operand or result of the row form is copied to or from in bulk: a
    per-column operand padded to 16-byte multiples, and so a result summed over the rows
    (whose partials the wrapper slices); a per-row result is the array as it is, written an
    element a row from registers."""
    unit = hw.per_bytes(hw.TMA_ALIGN_BYTES, dtype)
    if summed:
        return (hw.round_up(shape[0], unit),)
    if role is Role.OUTPUT:
        notes.append(f"`{name}` is written a row at a time, its element from registers")
        return shape
    if shape[0] % unit == 0:
        return shape
    padded = (hw.round_up(shape[0], unit),)
    notes.append(
        f"fallback: `{name}` is {hw.nbytes(shape[0], dtype)} B, not a multiple of 16 B, so "
        f"a bulk copy cannot end at its last element; it is padded on the host to "
        f"{list(padded)} (one extra copy)"
    )
    return padded


def _fill(inputs: PlanInputs, name: str) -> float | int | bool | None:
    """What the operand's block reads past the edge: its loads' fill. Where the form walks the
    loops over the block it holds (the row form), the loops' loads fill on their own (each
    loop's fill, `LoopBlock.fills`): only a load outside them reads this one."""
    if inputs.form.pipelines_loops:
        return inputs.fills.get(name)
    return next((r.fill for r in inputs.loads if r.operand == name and r.loop is None), None)
