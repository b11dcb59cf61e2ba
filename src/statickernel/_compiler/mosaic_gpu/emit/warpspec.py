"""Code generation for the warp-specialized, persistent matmul (see `plan.warpspec`).

The block function runs on three warpgroups (two with one consumer): a scoped region holds
the pipeline's buffers and the epilogue slots for the whole kernel; `plgpu.nd_loop` hands
each CTA its tiles; for each tile `plgpu.emit_pipeline_warp_specialized` has the producer
copy a's and b's K blocks while each consumer folds WGMMA into its accumulator, then runs
the body's epilogue and stores its block slot by slot.
"""

import dataclasses

from ...ir.names import (
    CLUSTER,
    INDEX_MAP_STEP,
    RAGGED,
    WARP_SPECIALIZED,
    accumulator_ref,
    barrier_ref,
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
from ..lower.translation import LoopBlock, Translation
from ..pallas import attribute, read_scalar, ref_at
from ..plan.cluster import CLUSTER_AXIS, CtaCluster
from ..plan.plan import LaunchPlan, OperandPlan
from ..plan.warpspec import MEMORY_REGISTERS, WarpSpecialized
from .launches import ModuleGenerator
from .ragged import group_rows_function, item_header, selected_group, store_rows, with_rows
from .warp_walk import (
    Epilogues,
    WalkGeometry,
    WarpWalkLaunch,
    add,
    epilogue_body,
    mul,
    slots_buffer,
    tile_header,
    vector_buffers,
    vector_copies,
    vector_reads,
    walk,
    walk_geometry,
)

__all__ = ["WARP_SPECIALIZED_LOOP", "WG_AXIS", "warp_specialized_function"]

WG_AXIS = "wg"
_LOCAL = WARP_SPECIALIZED
_WG = Name(_LOCAL.warpgroup)
_Geometry = WalkGeometry[WarpSpecialized]


def _geometry(plan: LaunchPlan, translation: Translation) -> _Geometry:
    ws = plan.schedule_variant
    assert isinstance(ws, WarpSpecialized)
    epilogues = Epilogues(ws.consumers, _WG)
    return walk_geometry(plan, translation, ws, epilogues, ws.paired, ws.ragged)


def _a_rows(g: _Geometry) -> int:
    """The rows of a's block a CTA tile copies: both consumers' where they pair rows."""
    return g.bm * g.pair[0]


def _tile(dim: str) -> Name:
    return Name(cta_tile_index(dim))


def warp_specialized_function(
    plan: LaunchPlan, translation: Translation, new_store_api: bool
) -> FunctionDef:
    g = _geometry(plan, translation)
    ws = g.config
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
        *(_cluster_header(ws.cluster) if ws.cluster is not None else ()),
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
    cluster = g.config.cluster
    shared = cluster.shared if cluster is not None else None
    a_spec = _spec((_a_rows(g), g.bk), along_k, g.a, multicast=shared == g.a.name)
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
            Keyword("num_compute_wgs", Const(g.config.consumers)),
            Keyword("max_concurrent_steps", Const(g.config.stages)),
            Keyword("compute_context", Name(_LOCAL.consumer)),
        ),
        one_per_line=True,
    )
    return FunctionDef(_LOCAL.pipeline, (_LOCAL.step, _LOCAL.consumer), (Return(emit),))


def _tiles(g: _Geometry, translation: Translation, new_store_api: bool) -> FunctionDef:
    """`tiles(...)`, run in the scope of the kernel's buffers: each CTA walks its tiles, and
    on each runs the pipeline with the consumers' step and epilogue."""
    tile: list[Stmt] = [
        *_tile_header(g),
        _consumer(g, translation, new_store_api),
        _step(g),
        _pipeline_run(g) if g.ragged is None else with_rows(_pipeline_run(g)),
    ]
    vector_refs = [ref(op.name) for op in g.vectors for ref in (smem_ref, barrier_ref)]
    params = (_LOCAL.pipeline_allocations, smem_ref(g.result.name), *vector_refs)
    return FunctionDef(_LOCAL.tiles, params, (walk(g, _LOCAL.tile, tile),))


def _tile_header(g: _Geometry) -> list[Stmt]:
    """Where a tile is: its batch entry and CTA tile (a snake over the tiles), this consumer's
    block of it, and the arrays at the batch entry."""
    tile_rows, tile_cols, cluster = _tile(g.rows), _tile(g.cols), g.config.cluster
    block_rows = add(mul(tile_rows, 2), _WG) if g.pair[0] == 2 else tile_rows
    block_cols = add(mul(tile_cols, 2), _WG) if g.pair[1] == 2 else tile_cols
    # Ragged rows walk items: each is placed (its group, row block and rows) by the walk.
    walked_rows = tile_rows if g.ragged is None else Name(ragged_item(g.ragged.split))
    walked: list[Expr] = [walked_rows, tile_cols]
    if cluster is not None:  # the walk places clusters; the CTA takes its tile of one
        walked[cluster.axis] = Name(cluster_tile_index(cluster.along))
    placed: list[Stmt] = [
        *((item_header(g.ragged, tile_rows),) if g.ragged is not None else ()),
        *(_cta_tile_of_cluster(g, cluster) if cluster is not None else ()),
        Assign((Name(block_index(g.rows)),), block_rows, comment="this consumer's block"),
        Assign((Name(block_index(g.cols)),), block_cols),
    ]
    return tile_header(g, walked, placed)


def _consumer(g: _Geometry, translation: Translation, new_store_api: bool) -> FunctionDef:
    """`consumer(run_pipeline)`: a consumer's tile: the body before the loop, the
    accumulation, the epilogue and the store."""
    body: list[Stmt] = [read_scalar(op.name, g.gmem[op.name]) for op in g.scalars]
    body += vector_copies(g, "this block's part, while the main loop runs")
    body += epilogue_body(g, translation, new_store_api, lambda line: _accumulation(g, line))
    return FunctionDef(_LOCAL.consumer, (_LOCAL.run_pipeline,), tuple(body))


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
    return lines + vector_reads(g)


def _step(g: _Geometry) -> FunctionDef:
    """`step(indices, a_smem, b_smem, acc)`: one K step's WGMMA on the consumer's share of the
    tile's blocks."""
    acc = accumulator_ref(g.dot.carry)
    a_smem, b_smem = Name(smem_ref(g.a.name)), Name(smem_ref(g.b.name))
    wgmma = call(
        "plgpu.wgmma",
        Name(acc),
        _consumer_slice(a_smem, g.pair[0], g.bm, rows_first=True),
        _b_operand(b_smem, g.pair[1], g.bn, g.dot.transpose_b),
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
    a_rows = _a_rows(g)
    a_view = ref_at(
        g.gmem[g.a.name], call("pl.ds", mul(_tile(g.rows), a_rows), Const(a_rows)), Slice()
    )
    b_slice = call("pl.ds", mul(_tile(g.cols), g.b_cols), Const(g.b_cols))
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
    # The pipeline's buffers are sized by the arrays of one batch entry.
    sized_by = [
        ref_at(Name(gmem_ref(op.name)), *(Const(0) for _ in (*op.batch, *op.groups)))
        if op.batch or op.groups
        else Name(gmem_ref(op.name))
        for op in (g.a, g.b)
    ]
    unscheduled = call(_LOCAL.pipeline, Const(None), Const(None))
    allocations = call(attribute(unscheduled, "get_allocations"), *sized_by)
    return ExprStmt(
        Call(
            Name("pl.run_scoped"),
            (Name(_LOCAL.tiles),),
            (
                Keyword(_LOCAL.pipeline_allocations, allocations),
                Keyword(smem_ref(g.result.name), slots_buffer(g)),
                *vector_buffers(g),
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
    tile = _tile(g.rows) if cluster.axis == 0 else _tile(g.cols)
    first = mul(Name(cluster_tile_index(cluster.along)), cluster.size)
    return [Assign((tile,), add(first, Name(CLUSTER.cta)))]


def _consumer_slice(ref: Name, pair: int, extent: int, rows_first: bool) -> Expr:
    """A consumer's share of a paired block: its rows (or columns) of the CTA tile."""
    if pair == 1:
        return ref
    piece = call("pl.ds", mul(_WG, extent), Const(extent))
    index = (piece,) if rows_first else (Slice(), piece)
    return ref_at(ref, *index)


def _b_operand(ref: Name, pair: int, extent: int, transposed: bool) -> Expr:
    if transposed:  # b is stored (N, K): WGMMA reads it transposed
        piece = _consumer_slice(ref, pair, extent, rows_first=True)
        return attribute(piece, "T")
    return _consumer_slice(ref, pair, extent, rows_first=False)


@dataclasses.dataclass(frozen=True)
class _WgmmaWarps(WarpWalkLaunch):
    """WGMMA's warp-specialized matmul: consumer warpgroups and a producer."""

    def block_function(self, gen: ModuleGenerator) -> FunctionDef:
        return warp_specialized_function(gen.plan, gen.t, gen.new_store_api)


WARP_SPECIALIZED_LOOP = _WgmmaWarps()
