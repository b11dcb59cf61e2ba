"""Code generation for the warp-specialized, persistent matmul (see `plan.warpspec`).

The block function runs on three warpgroups (two with one consumer): a scoped region holds
the pipeline's buffers and the epilogue slots for the whole kernel; `plgpu.nd_loop` hands
each CTA its tiles; for each tile `plgpu.emit_pipeline_warp_specialized` has the producer
copy a's and b's K blocks while each consumer folds WGMMA into its accumulator, then runs
the body's epilogue and stores its block slot by slot.
"""

import dataclasses
from collections.abc import Mapping

from ...ir.names import (
    CLUSTER,
    INDEX_MAP_STEP,
    RAGGED,
    WARP_SPECIALIZED,
    accumulator_ref,
    barrier_ref,
    batch_entry,
    block_function,
    block_index,
    cluster_tile_index,
    cta_tile_index,
    gmem_ref,
    loop_function,
    ragged_item,
    smem_ref,
)
from ...ir.nodes import (
    Assign,
    BinOp,
    Call,
    Comment,
    Const,
    DType,
    EllipsisIndex,
    Expr,
    ExprStmt,
    FunctionDef,
    Keyword,
    Lambda,
    List,
    Name,
    Operator,
    Return,
    Slice,
    Stmt,
    Subscript,
    Tuple,
    call,
)
from ..lower.dots import wgmma_transforms
from ..lower.translation import DotUpdate, LoopBlock, Translation
from ..pallas import attribute, load, read_scalar, ref_at
from ..plan.cluster import CLUSTER_AXIS, CtaCluster
from ..plan.plan import LaunchPlan, OperandPlan
from ..plan.warpspec import MEMORY_REGISTERS, RaggedRows, WarpSpecialized, epilogue_operands
from .epilogue_pieces import block_pieces, write_slot
from .ragged import (
    group_rows_function,
    item_header,
    piece_store,
    selected_group,
    store_rows,
    with_rows,
)

__all__ = ["WG_AXIS", "warp_specialized_function"]

WG_AXIS = "wg"
CTA_AXIS = "cta"
_LOCAL = WARP_SPECIALIZED
_WG = Name(_LOCAL.warpgroup)


def _mul(x: Expr, n: int) -> Expr:
    return x if n == 1 else BinOp(Operator.MUL, x, Const(n))


def _add(x: Expr, y: Expr | int) -> Expr:
    if isinstance(y, int):
        return x if y == 0 else BinOp(Operator.ADD, x, Const(y))
    return BinOp(Operator.ADD, x, y)


@dataclasses.dataclass(frozen=True)
class _Geometry:
    """What the parts of the block function share: the product's operands and blocks, how a
    CTA's consumers pair their blocks, the epilogue's operands, and where in global memory
    each array of a tile is read."""

    plan: LaunchPlan
    ws: WarpSpecialized
    steps: int  # K blocks: the pipeline's grid
    dot: DotUpdate
    a: OperandPlan
    b: OperandPlan
    result: OperandPlan
    rows: str
    cols: str
    bm: int
    bn: int
    bk: int
    pair_rows: int  # 2 where a CTA's consumers take consecutive blocks of rows, else 1
    pair_cols: int
    vectors: tuple[OperandPlan, ...]  # the per-row or per-column operands of the epilogue
    scalars: tuple[OperandPlan, ...]  # the other loaded operands, read whole by a consumer
    batch: tuple[str, ...]
    entries: tuple[OperandPlan, ...]  # the arrays read at the walk's batch entry
    gmem: Mapping[str, Name]  # a's, b's, the result's and the vectors' array or batch entry
    ragged: RaggedRows | None  # the groups the rows are split into (`ragged=`)
    cluster: CtaCluster | None  # the clusters of two CTAs sharing a block by multicast

    @property
    def a_rows(self) -> int:
        """The rows of a's block a CTA tile copies: both consumers' where they pair rows."""
        return self.bm * self.pair_rows

    @property
    def b_cols(self) -> int:
        """The columns of b's block a CTA tile copies: both consumers' where they pair them."""
        return self.bn * self.pair_cols

    @property
    def tile_rows(self) -> Name:
        return Name(cta_tile_index(self.rows))

    @property
    def tile_cols(self) -> Name:
        return Name(cta_tile_index(self.cols))


def _geometry(plan: LaunchPlan, translation: Translation) -> _Geometry:
    ws = plan.warp_specialized
    assert isinstance(ws, WarpSpecialized)
    (loop,) = plan.loops
    (block,) = translation.loops
    (dot,) = block.dots
    rows, cols = plan.rows, plan.cols
    assert cols is not None
    a, b = plan.operand(dot.a), plan.operand(dot.b)
    (result,) = plan.results
    vectors, scalars = epilogue_operands(plan.operands, block)
    batch = result.batch
    # A batched vector or scalar (a per-batch scale) is read at the walk's batch entry too.
    batched = tuple(op for op in (*vectors, *scalars) if op.batch)
    entries = tuple(op for op in (a, b, result, *batched) if op.batch)
    at_entry = {op.name for op in entries}
    gmem = {
        op.name: Name(batch_entry(op.name) if op.name in at_entry else gmem_ref(op.name))
        for op in (a, b, result, *vectors, *scalars)
    }
    return _Geometry(
        plan=plan,
        ws=ws,
        steps=loop.steps,
        dot=dot,
        a=a,
        b=b,
        result=result,
        rows=rows,
        cols=cols,
        bm=plan.dim(rows).block,
        bn=plan.dim(cols).block,
        bk=loop.block,
        pair_rows=2 if ws.paired == rows else 1,
        pair_cols=2 if ws.paired == cols else 1,
        vectors=vectors,
        scalars=scalars,
        batch=batch,
        entries=entries,
        gmem=gmem,
        ragged=ws.ragged,
        cluster=ws.cluster,
    )


def warp_specialized_function(
    plan: LaunchPlan, translation: Translation, new_store_api: bool
) -> FunctionDef:
    g = _geometry(plan, translation)
    ws = g.ws
    body: list[Stmt] = [
        Comment(
            f"Warp-specialized: warpgroup {ws.consumers} copies a's and b's K blocks; "
            f"warpgroup(s) 0-{ws.consumers - 1} multiply and store."
        ),
        Comment(
            f"Persistent: {ws.ctas} CTAs walk the {ws.tiles} CTA tiles; a tile's stores drain "
            "while the next runs."
            if ws.cluster is None
            else f"Persistent: {ws.launched} clusters of {ws.cluster.size} CTAs walk the "
            f"{ws.walked_tiles} cluster tiles; a tile's stores drain while the next runs."
        ),
        Assign((_WG,), call("lax.axis_index", Const(WG_AXIS))),
        *(_cluster_header(g.cluster) if g.cluster is not None else ()),
        *(
            (group_rows_function(g.ragged), store_rows(ws.epilogue[0]))
            if g.ragged is not None
            else ()
        ),
        _pipeline(g),
        _tiles(g, translation, new_store_api),
        _scoped_tiles(g),
        ExprStmt(
            call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True)),
            comment="the last tile's stores have read their slots",
        ),
    ]
    passed = plan.index_operands  # ragged groups' sizes, read by the walk
    params = [gmem_ref(op.name) for op in plan.operands if op.loaded or op.name in passed]
    params += [gmem_ref(op.name) for op in plan.results]
    return FunctionDef(block_function(plan.kernel), tuple(params), tuple(body))


def _pipeline(g: _Geometry) -> FunctionDef:
    """`pipeline(step, consumer)`: the producer copies a's and b's blocks of one K step, a CTA
    tile wide, and the consumers run `step` on them inside `consumer`."""
    k = Name(INDEX_MAP_STEP)
    along_k = Lambda((INDEX_MAP_STEP,), Tuple((Const(0), k)))
    shared = g.cluster.shared if g.cluster is not None else None
    a_spec = _spec((g.a_rows, g.bk), along_k, g.a, multicast=shared == g.a.name)
    b_multicast = shared == g.b.name
    if g.dot.transpose_b:
        b_spec = _spec((g.b_cols, g.bk), along_k, g.b, b_multicast)
    else:
        down_k = Lambda((INDEX_MAP_STEP,), Tuple((k, Const(0))))
        b_spec = _spec((g.bk, g.b_cols), down_k, g.b, b_multicast)
    emit = Call(
        Name("plgpu.emit_pipeline_warp_specialized"),
        (Name(_LOCAL.step),),
        (
            Keyword("grid", Const((g.steps,))),
            Keyword("memory_registers", Const(MEMORY_REGISTERS)),
            Keyword("in_specs", List((a_spec, b_spec), one_per_line=True)),
            Keyword("wg_axis", Const(WG_AXIS)),
            Keyword("num_compute_wgs", Const(g.ws.consumers)),
            Keyword("max_concurrent_steps", Const(g.ws.stages)),
            Keyword("compute_context", Name(_LOCAL.consumer)),
        ),
        one_per_line=True,
    )
    return FunctionDef(_LOCAL.pipeline, (_LOCAL.step, _LOCAL.consumer), (Return(emit),))


def _tiles(g: _Geometry, translation: Translation, new_store_api: bool) -> FunctionDef:
    """`tiles(...)`, run in the scope of the kernel's buffers: each CTA walks its tiles, and
    on each runs the pipeline with the consumers' step and epilogue."""
    walked = g.ws.walked_grid
    grid = (*(g.plan.dim(d).size for d in g.batch), walked[0] * walked[1])
    walk = call("plgpu.nd_loop", Const(grid), collective_axes=Const(CTA_AXIS))
    tile: list[Stmt] = [
        *_tile_header(g),
        _consumer(g, translation, new_store_api),
        _step(g),
        _pipeline_run(g) if g.ragged is None else with_rows(_pipeline_run(g)),
    ]
    vector_refs = [ref(op.name) for op in g.vectors for ref in (smem_ref, barrier_ref)]
    params = (_LOCAL.pipeline_allocations, smem_ref(g.result.name), *vector_refs)
    walked = FunctionDef(_LOCAL.tile, (_LOCAL.tile_info,), tuple(tile), decorators=(walk,))
    return FunctionDef(_LOCAL.tiles, params, (walked,))


def _tile_header(g: _Geometry) -> list[Stmt]:
    """Where a tile is: its batch entry and CTA tile (a snake over the tiles), this consumer's
    block of it, and the arrays at the batch entry."""
    batch_indices = [Name(block_index(d)) for d in g.batch]
    tile_index = Name(_LOCAL.tile_index)
    snake = call(
        "plgpu.planar_snake",
        tile_index,
        Const(g.ws.walked_grid),
        Const(g.ws.minor),
        Const(g.ws.band),
    )
    block_rows = _add(_mul(g.tile_rows, 2), _WG) if g.pair_rows == 2 else g.tile_rows
    block_cols = _add(_mul(g.tile_cols, 2), _WG) if g.pair_cols == 2 else g.tile_cols
    # Ragged rows walk items: each is placed (its group, row block and rows) by the walk.
    walked_rows = g.tile_rows if g.ragged is None else Name(ragged_item(g.ragged.split))
    walked = [walked_rows, g.tile_cols]
    if g.cluster is not None:  # the walk places clusters; the CTA takes its tile of one
        walked[g.cluster.axis] = Name(cluster_tile_index(g.cluster.along))
    header: list[Stmt] = [
        Assign((Tuple((*batch_indices, tile_index)),), attribute(Name(_LOCAL.tile_info), "index")),
        Assign((Tuple(tuple(walked)),), snake),
        *((item_header(g.ragged, g.tile_rows),) if g.ragged is not None else ()),
        *(_cta_tile_of_cluster(g, g.cluster) if g.cluster is not None else ()),
        Assign((Name(block_index(g.rows)),), block_rows, comment="this consumer's block"),
        Assign((Name(block_index(g.cols)),), block_cols),
    ]
    for op in g.entries:  # at its entry of the batch dims it has (all, or some)
        if op.batch:
            entry = ref_at(Name(gmem_ref(op.name)), *(Name(block_index(d)) for d in op.batch))
            header.append(Assign((g.gmem[op.name],), entry))
    return header


def _consumer(g: _Geometry, translation: Translation, new_store_api: bool) -> FunctionDef:
    """`consumer(run_pipeline)`: a consumer's tile: the body before the loop, the
    accumulation, the epilogue and the store."""
    body: list[Stmt] = []
    body += [read_scalar(op.name, g.gmem[op.name]) for op in g.scalars]
    body += _vector_copies(g)
    for line in translation.lines:
        if isinstance(line, LoopBlock):
            body += _accumulation(g, line)
        else:
            body.append(line)
    (value,) = translation.outputs
    assert value is not None
    out = Name(g.result.name)
    body.append(Assign((out,), value))
    body += _epilogue_store(g, out, new_store_api)
    return FunctionDef(_LOCAL.consumer, (_LOCAL.run_pipeline,), tuple(body))


def _vector_copies(g: _Geometry) -> list[Stmt]:
    """Each vector's part of this consumer's block, into the consumer's own buffer: copied
    while the main loop runs, waited for after it (`_accumulation`)."""
    copies: list[Stmt] = []
    for op in g.vectors:
        (dim,) = op.dims
        extent = op.block_shape[0]
        part = call("pl.ds", _mul(Name(block_index(dim)), extent), Const(extent))
        copy = call(
            "plgpu.copy_gmem_to_smem",
            ref_at(g.gmem[op.name], part),
            ref_at(Name(smem_ref(op.name)), _WG),
            ref_at(Name(barrier_ref(op.name)), _WG),
        )
        copies.append(ExprStmt(copy, comment="this block's part, while the main loop runs"))
    return copies


def _accumulation(g: _Geometry, line: LoopBlock) -> list[Stmt]:
    """The loop: the pipeline run with the consumer's accumulator in scope, then the vectors
    the epilogue reads, once their copies have arrived."""
    acc = accumulator_ref(g.dot.carry)
    carried = tuple(
        Subscript(Name(accumulator_ref(c.var)), (EllipsisIndex(),)) for c in line.carries
    )
    accumulate = FunctionDef(
        loop_function(line.index),
        (acc,),
        (ExprStmt(call(_LOCAL.run_pipeline, Name(acc))), Return(Tuple(carried))),
    )
    accumulator = call("plgpu.ACC", Const((g.bm, g.bn)), DType(g.dot.accumulator))
    finals = Tuple(tuple(Name(f) for f in line.finals))
    lines: list[Stmt] = [
        accumulate,
        Assign((finals,), call("pl.run_scoped", Name(accumulate.name), accumulator)),
    ]
    if g.ragged is not None:  # rows in no group multiply no weights: their sums are zeros
        in_group = BinOp(Operator.LT, Name(RAGGED.group), Const(g.ragged.groups))
        for final in line.finals:
            zeros = call("jnp.where", in_group, Name(final), Const(0))
            lines.append(Assign((Name(final),), zeros))
        lines[-1] = dataclasses.replace(lines[-1], comment="the rows past the sizes' sum")
    for op in g.vectors:
        arrived = call("plgpu.barrier_wait", ref_at(Name(barrier_ref(op.name)), _WG))
        lines.append(ExprStmt(arrived))
        lines.append(Assign((Name(op.name),), load(ref_at(Name(smem_ref(op.name)), _WG), op.kind)))
    return lines


def _step(g: _Geometry) -> FunctionDef:
    """`step(indices, a_smem, b_smem, acc)`: one K step's WGMMA on the consumer's share of the
    tile's blocks."""
    acc = accumulator_ref(g.dot.carry)
    a_smem, b_smem = Name(smem_ref(g.a.name)), Name(smem_ref(g.b.name))
    wgmma = call(
        "plgpu.wgmma",
        Name(acc),
        _consumer_slice(a_smem, g.pair_rows, g.bm, rows_first=True),
        _b_operand(b_smem, g.pair_cols, g.bn, g.dot.transpose_b),
    )
    return FunctionDef(
        _LOCAL.step,
        (_LOCAL.indices, a_smem.text, b_smem.text, acc),
        (
            ExprStmt(wgmma),
            ExprStmt(call("plgpu.wgmma_wait", Const(0)), comment="the step's slots go back"),
            Return(Name(acc)),
        ),
    )


def _pipeline_run(g: _Geometry) -> Stmt:
    """The pipeline over this CTA tile's rows of a and columns of b, in the scope's buffers."""
    a_view = ref_at(
        g.gmem[g.a.name], call("pl.ds", _mul(g.tile_rows, g.a_rows), Const(g.a_rows)), Slice()
    )
    b_slice = call("pl.ds", _mul(g.tile_cols, g.b_cols), Const(g.b_cols))
    b_index = (b_slice, Slice()) if g.dot.transpose_b else (Slice(), b_slice)
    if g.b.groups:  # ragged rows: the item's group's block
        assert g.ragged is not None
        b_index = (selected_group(g.ragged), *b_index)
    b_view = ref_at(g.gmem[g.b.name], *b_index)
    return ExprStmt(
        Call(
            call(_LOCAL.pipeline, Name(_LOCAL.step), Name(_LOCAL.consumer)),
            (a_view, b_view),
            (Keyword("allocations", Name(_LOCAL.pipeline_allocations)),),
            one_per_line=True,
        )
    )


def _scoped_tiles(g: _Geometry) -> Stmt:
    """`tiles` in a scope that all warpgroups allocate once for the whole kernel: the
    pipeline's buffers, each consumer's epilogue slots, and its buffer and barrier of each
    vector."""
    ws = g.ws
    slots = call(
        "plgpu.SMEM",
        Const((ws.consumers, ws.slots, *ws.epilogue)),
        DType(g.result.dtype),
        **({"transforms": wgmma_transforms(g.result.dtype)} if ws.swizzled else {}),
    )
    # The pipeline's buffers are sized by the arrays of one batch entry.
    sized_by = [
        ref_at(Name(gmem_ref(op.name)), *(Const(0) for _ in (*op.batch, *op.groups)))
        if op.batch or op.groups
        else Name(gmem_ref(op.name))
        for op in (g.a, g.b)
    ]
    unscheduled = call(_LOCAL.pipeline, Const(None), Const(None))
    allocations = call(attribute(unscheduled, "get_allocations"), *sized_by)
    vector_buffers = [
        keyword
        for op in g.vectors
        for keyword in (
            Keyword(
                smem_ref(op.name),
                call("plgpu.SMEM", Const((ws.consumers, op.block_shape[0])), DType(op.dtype)),
            ),
            Keyword(barrier_ref(op.name), call("plgpu.Barrier", num_barriers=Const(ws.consumers))),
        )
    ]
    return ExprStmt(
        Call(
            Name("pl.run_scoped"),
            (Name(_LOCAL.tiles),),
            (
                Keyword(_LOCAL.pipeline_allocations, allocations),
                Keyword(smem_ref(g.result.name), slots),
                *vector_buffers,
                Keyword("collective_axes", Const(WG_AXIS)),
            ),
            one_per_line=True,
        )
    )


def _spec(shape: tuple[int, int], index: Lambda, op: OperandPlan, multicast: bool = False) -> Expr:
    # A block the cluster's CTAs share: each copies its part, multicast to both.
    shared = {"collective_axes": Const((CLUSTER_AXIS,))} if multicast else {}
    transforms = wgmma_transforms(op.dtype, op.swizzle)
    return call("plgpu.BlockSpec", Const(shape), index, transforms=transforms, **shared)


def _cluster_header(cluster: CtaCluster) -> list[Stmt]:
    return [
        Comment(
            f"Clusters of {cluster.size} CTAs take consecutive CTA tiles along "
            f"{cluster.along}; each copies part of `{cluster.shared}`'s block, multicast to both."
        ),
        Assign(
            (Name(CLUSTER.cta),),
            call("lax.axis_index", Const(CLUSTER_AXIS)),
            comment="this CTA's place in its cluster",
        ),
    ]


def _cta_tile_of_cluster(g: _Geometry, cluster: CtaCluster) -> list[Stmt]:
    tile = g.tile_rows if cluster.axis == 0 else g.tile_cols
    first = _mul(Name(cluster_tile_index(cluster.along)), cluster.size)
    return [Assign((tile,), _add(first, Name(CLUSTER.cta)))]


def _consumer_slice(ref: Name, pair: int, extent: int, rows_first: bool) -> Expr:
    """A consumer's share of a paired block: its rows (or columns) of the CTA tile."""
    if pair == 1:
        return ref
    piece = call("pl.ds", _mul(_WG, extent), Const(extent))
    index = (piece,) if rows_first else (Slice(), piece)
    return ref_at(ref, *index)


def _b_operand(ref: Name, pair: int, extent: int, transposed: bool) -> Expr:
    if transposed:  # b is stored (N, K): WGMMA reads it transposed
        piece = _consumer_slice(ref, pair, extent, rows_first=True)
        return attribute(piece, "T")
    return _consumer_slice(ref, pair, extent, rows_first=False)


def _epilogue_store(g: _Geometry, value: Name, new_store_api: bool) -> list[Stmt]:
    """The block into the consumer's epilogue slots in turn, each stored by TMA: a slot is
    refilled once the store two slots back has read it, so stores overlap what follows."""
    ws = g.ws
    bm, bn = g.bm, g.bn
    er, ec = ws.epilogue
    slots = Name(smem_ref(g.result.name))
    gmem = g.gmem[g.result.name]
    lines: list[Stmt] = []
    # A ragged piece commits one group of any number of stores, which the interpreter counts
    # one a store: wait for every store before refilling a slot.
    pieces = block_pieces(value, (bm, bn), (er, ec), ws.slots, wait_all=g.ragged is not None)
    for piece in pieces:
        slot = ref_at(slots, _WG, Const(piece.slot))
        lines += write_slot(slot, piece, ws.swizzled, new_store_api)
        r, c = piece.row, piece.col
        target = ref_at(
            gmem,
            call("pl.ds", _add(_mul(Name(block_index(g.rows)), bm), r), Const(er)),
            call("pl.ds", _add(_mul(Name(block_index(g.cols)), bn), c), Const(ec)),
        )
        if g.ragged is not None:  # only the item's rows among the piece's
            lines.append(piece_store(slot, target, r, _piece_inside(g, c)))
        else:
            lines.append(ExprStmt(call("plgpu.copy_smem_to_gmem", slot, target)))
    return lines


def _piece_inside(g: _Geometry, col: int) -> Expr | None:
    """Whether the piece at column `col` of this consumer's block is inside the result's
    columns; None where every piece of every tile is."""
    cols = g.result.gmem_shape[-1]
    if g.ws.tile_grid[1] * g.b_cols <= cols:
        return None
    start = _add(_mul(Name(block_index(g.cols)), g.bn), col)
    return BinOp(Operator.LT, start, Const(cols))
