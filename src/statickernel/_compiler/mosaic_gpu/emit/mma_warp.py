"""Code generation for the warp-specialized, persistent matmul on tcgen05 tensor cores (see
`plan.mma_warp`).

The block function runs on two warpgroups, with every buffer, barrier and the tensor memory
allocated once for the whole kernel in a scope they share. Each role walks the CTA's tiles
with `plgpu.nd_loop`, in the same order:

- in warpgroup 0, `plgpu.warp_map` gives warp 0 the copies (a's and b's K blocks into a ring
  of stages, each stage refilled once the product that read it has finished) and warp 1 the
  products (`tcgen05_mma` into one of two accumulators in tensor memory, the first K step
  overwriting it; each product hands its stage back through the stage's barrier, and the
  tile's last one signals the epilogue);
- warpgroup 1 waits for a tile's accumulator, loads it into registers, hands it back to the
  MMA warp, applies the body's epilogue and stores the block through two slots by TMA.

A step is counted over all of a CTA's tiles (`ring_step`), so the ring turns on across tiles
and the next tile's copies start while the last one's products run. Before the scope ends
each role waits for the barriers it did not wait for in the walk, so that no barrier is freed
with a phase its waiter never saw.

With pairs of CTAs (`config.config.cluster`), each TMA warp copies its CTA's part of the pair's
blocks (`CopyPartition.PARTITIONED`: its rows of a, half of b's block), arriving on the first
CTA's barrier; only the first CTA's MMA warp issues the 2-CTA MMAs (`collective_axis=`),
whose completion is signalled to both CTAs; both epilogues hand an accumulator back on a
cluster barrier. The walk and the epilogue's stores are the WGMMA form's too
(`emit.warp_walk`).
"""

import dataclasses

from ...ir.names import (
    CLUSTER,
    MMA_WARP,
    WARP_SPECIALIZED,
    barrier_ref,
    block_function,
    block_index,
    cta_tile_index,
    gmem_ref,
    smem_ref,
)
from ...ir.nodes import (
    Assign,
    BinOp,
    Call,
    Comment,
    Const,
    DType,
    Expr,
    ExprStmt,
    FunctionDef,
    Keyword,
    Name,
    Operator,
    Slice,
    Stmt,
    Tuple,
    call,
)
from ..lower.dots import wgmma_transforms
from ..lower.translation import LoopBlock, Translation
from ..pallas import attribute, read_scalar, ref_at, tensor_core_barrier
from ..plan.cluster import CLUSTER_AXIS, CLUSTER_SIZE
from ..plan.mma_warp import MmaWarpSpecialized
from ..plan.plan import LaunchPlan
from .launches import ModuleGenerator
from .warp_walk import (
    CTA_AXIS,
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
from .warpspec import WG_AXIS

__all__ = ["MMA_WARP_LOOP", "mma_warp_function"]

_L = MMA_WARP
_WS = WARP_SPECIALIZED
_TMA_WARP, _MMA_WARP = 0, 1
_MMA_WARPGROUP, _EPILOGUE_WARPGROUP = 0, 1
_Geometry = WalkGeometry[MmaWarpSpecialized]


def rem(x: Expr, n: int) -> Expr:
    return call("lax.rem", x, Const(n))


def when(test: Expr, name: str, body: list[Stmt]) -> FunctionDef:
    return FunctionDef(name, (), tuple(body), decorators=(call("pl.when", test),))


def loop(start: Expr, stop: Expr, name: str, index: str, body: list[Stmt]) -> FunctionDef:
    return FunctionDef(name, (index,), tuple(body), decorators=(call("pl.loop", start, stop),))


def mma_warp_function(
    plan: LaunchPlan, translation: Translation, new_store_api: bool
) -> FunctionDef:
    config = plan.schedule_variant
    assert isinstance(config, MmaWarpSpecialized)
    g = walk_geometry(plan, translation, config)
    body: list[Stmt] = [
        Comment(
            "Warp-specialized: in warpgroup 0, warp 0 copies a's and b's K blocks and warp 1 "
            "issues the tcgen05 MMAs; warpgroup 1 loads, finishes and stores each tile."
        ),
        Comment(
            f"Persistent: {config.ctas} CTAs walk the {config.tiles} tiles; one accumulator "
            "is stored while the next tile accumulates into the other."
            if g.config.cluster is None
            else f"Persistent: {config.launched} pairs of CTAs walk the {config.tiles} pair "
            "tiles; the first CTA's MMA warp issues 2-CTA MMAs over both CTAs' blocks."
        ),
        Assign((Name(_WS.warpgroup),), call("lax.axis_index", Const(WG_AXIS))),
        *(
            ()
            if g.config.cluster is None
            else (
                Assign(
                    (Name(CLUSTER.cta),),
                    call("lax.axis_index", Const(CLUSTER_AXIS)),
                    comment="this CTA's place in its pair",
                ),
            )
        ),
        Assign(
            (Name(_L.walked),),
            add(
                call(
                    "lax.div",
                    BinOp(
                        Operator.SUB,
                        Const(config.tiles - 1),
                        call("lax.axis_index", Const(CTA_AXIS)),
                    ),
                    Const(config.launched),
                ),
                1,
            ),
            comment="the tiles this CTA walks",
        ),
        _tiles(g, translation, new_store_api),
        _scoped_tiles(g),
    ]
    params = [gmem_ref(op.name) for op in plan.operands if op.loaded]
    params += [gmem_ref(op.name) for op in plan.results]
    return FunctionDef(block_function(plan.kernel), tuple(params), tuple(body))


def _tiles(g: _Geometry, translation: Translation, new_store_api: bool) -> FunctionDef:
    """`tiles(...)`, run in the scope of the kernel's buffers: the two warpgroups' roles."""
    per_warp = FunctionDef(
        _L.per_warp,
        (_L.warp,),
        (
            when(BinOp(Operator.EQ, Name(_L.warp), Const(_TMA_WARP)), _L.copy_blocks, _copies(g)),
            when(_issues_mmas(g), _L.multiply, _products(g)),
        ),
        decorators=(Name("plgpu.warp_map"),),
    )
    wg = Name(_WS.warpgroup)
    roles: list[Stmt] = [
        when(BinOp(Operator.EQ, wg, Const(_MMA_WARPGROUP)), _L.tma_and_mma, [per_warp]),
        when(
            BinOp(Operator.EQ, wg, Const(_EPILOGUE_WARPGROUP)),
            _L.epilogue,
            _epilogue_role(g, translation, new_store_api),
        ),
    ]
    vector_refs = [ref(op.name) for op in g.vectors for ref in (smem_ref, barrier_ref)]
    params = (
        smem_ref(g.a.name),
        smem_ref(g.b.name),
        _L.accumulators,
        smem_ref(g.result.name),
        _L.loaded,
        _L.consumed,
        _L.mma_done,
        _L.acc_free,
        *vector_refs,
    )
    return FunctionDef(_WS.tiles, params, tuple(roles))


def _collective(g: _Geometry, keyword: str) -> dict[str, Expr]:
    return {} if g.config.cluster is None else {keyword: Const(CLUSTER_AXIS)}


def _partitioned(g: _Geometry, axis: int) -> dict[str, Expr]:
    """A pair's copy: each CTA copies its part along `axis`, tracked by the first CTA."""
    if g.config.cluster is None:
        return {}
    partition = call("plgpu.CopyPartition.PARTITIONED", Const(axis))
    return {"collective_axes": Const(CLUSTER_AXIS), "leader_tracked": partition}


def _issues_mmas(g: _Geometry) -> Expr:
    """The MMA warp: of every CTA, or of a pair's first CTA, which issues the 2-CTA MMAs."""
    mma_warp = BinOp(Operator.EQ, Name(_L.warp), Const(_MMA_WARP))
    if g.config.cluster is None:
        return mma_warp
    first = BinOp(Operator.EQ, Name(CLUSTER.cta), Const(0))
    return call("jnp.logical_and", mma_warp, first)


def _accumulator_free_barrier(g: _Geometry) -> Expr:
    """Where the epilogue hands an accumulator back: with pairs, both CTAs' epilogues arrive
    on the first CTA's barrier, as both read what its MMA wrote."""
    if g.config.cluster is None:
        return tensor_core_barrier(2)
    return call(
        "plgpu.ClusterBarrier",
        collective_axes=Tuple((Const(CLUSTER_AXIS),)),
        num_arrivals=Const(1),
        num_barriers=Const(2),
        orders_tensor_core=Const(True),
    )


def _ring(g: _Geometry) -> list[Stmt]:
    """The K step counted over the CTA's tiles, and the stage it takes."""
    local = attribute(Name(_WS.tile_info), "local_index")
    ring_step = add(mul(local, g.steps), Name(_L.k_step))
    return [
        Assign((Name(_L.ring_step),), ring_step),
        Assign((Name(_L.ring_slot),), rem(Name(_L.ring_step), g.config.stages)),
    ]


def _k_block(k: Expr, bk: int) -> Expr:
    return call("pl.ds", mul(k, bk), Const(bk))


def _copies(g: _Geometry) -> list[Stmt]:
    """The TMA warp: each tile's K blocks of a and b into the ring, a stage refilled once the
    product that read it is done; then the waits for the last stages' products."""
    stages = g.config.stages
    slot, k = Name(_L.ring_slot), Name(_L.k_step)
    # A pair copies its tile's rows of a and b's block, each CTA its part (`PARTITIONED`);
    # the copies arrive on the first CTA's barrier, whose MMA reads both CTAs' parts.
    a_rows = g.bm * (1 if g.config.cluster is None else CLUSTER_SIZE)
    rows = call("pl.ds", mul(_walked_rows(g), a_rows), Const(a_rows))
    cols = call("pl.ds", mul(Name(block_index(g.cols)), g.bn), Const(g.bn))
    a_block = ref_at(g.gmem[g.a.name], rows, _k_block(k, g.bk))
    b_index = (cols, _k_block(k, g.bk)) if g.dot.transpose_b else (_k_block(k, g.bk), cols)
    b_block = ref_at(g.gmem[g.b.name], *b_index)
    b_axis = 0 if g.dot.transpose_b else 1
    freed = when(
        BinOp(Operator.GE, Name(_L.ring_step), Const(stages)),
        _L.stage_free,
        [ExprStmt(call("plgpu.barrier_wait", ref_at(Name(_L.consumed), slot)))],
    )
    step: list[Stmt] = [
        *_ring(g),
        Comment("the stage's last product has read it"),
        freed,
        *(
            ExprStmt(
                call(
                    "plgpu.copy_gmem_to_smem",
                    block,
                    ref_at(Name(smem_ref(op.name)), slot),
                    ref_at(Name(_L.loaded), slot),
                    **_partitioned(g, axis),
                )
            )
            for op, block, axis in ((g.a, a_block, 0), (g.b, b_block, b_axis))
        ),
    ]
    tile = [*_tile_header(g), loop(Const(0), Const(g.steps), _L.copy_step, _L.k_step, step)]
    total = mul(Name(_L.walked), g.steps)
    drain_from = call("lax.max", BinOp(Operator.SUB, total, Const(stages)), Const(0))
    drained = ExprStmt(
        call("plgpu.barrier_wait", ref_at(Name(_L.consumed), rem(Name(_L.ring_step), stages)))
    )
    return [
        walk(g, _L.copy_tile, tile),
        Comment("the last stages' products, which no copy waited for"),
        loop(drain_from, total, _L.drain, _L.ring_step, [drained]),
    ]


def _products(g: _Geometry) -> list[Stmt]:
    """The MMA warp: each tile's K steps into the tile's accumulator, each product handing its
    stage back; the tile's last product signals the epilogue."""
    slot, acc = Name(_L.ring_slot), Name(_L.accumulator)
    accumulator = _accumulator_view(g)
    b_smem = ref_at(Name(smem_ref(g.b.name)), slot)
    mma = call(
        "plgpu.tcgen05_mma",
        accumulator,
        ref_at(Name(smem_ref(g.a.name)), slot),
        attribute(b_smem, "T") if g.dot.transpose_b else b_smem,
        ref_at(Name(_L.consumed), slot),
        accumulate=BinOp(Operator.GT, Name(_L.k_step), Const(0)),
        **_collective(g, "collective_axis"),
    )
    step: list[Stmt] = [
        *_ring(g),
        ExprStmt(call("plgpu.barrier_wait", ref_at(Name(_L.loaded), slot))),
        Comment("the first K step overwrites the accumulator"),
        ExprStmt(mma),
    ]
    local = attribute(Name(_WS.tile_info), "local_index")
    freed = when(
        BinOp(Operator.GE, local, Const(2)),
        _L.accumulator_free,
        [ExprStmt(call("plgpu.barrier_wait", ref_at(Name(_L.acc_free), acc)))],
    )
    tile: list[Stmt] = [
        _accumulator_slot(),
        Comment("the epilogue has loaded what this accumulator held two tiles ago"),
        freed,
        loop(Const(0), Const(g.steps), _L.mma_step, _L.k_step, step),
        Comment("signalled once the tile's products are done"),
        ExprStmt(
            call(
                "plgpu.tcgen05_commit_arrive",
                ref_at(Name(_L.mma_done), acc),
                **_collective(g, "collective_axis"),
            )
        ),
    ]
    walked = Name(_L.walked)
    drained = ExprStmt(
        call("plgpu.barrier_wait", ref_at(Name(_L.acc_free), rem(Name(_L.accumulator), 2)))
    )
    drain_from = call("lax.max", BinOp(Operator.SUB, walked, Const(2)), Const(0))
    return [
        walk(g, _L.multiply_tile, tile),
        Comment("the epilogue's last two loads, which no tile waited for"),
        loop(drain_from, walked, _L.drain, _L.accumulator, [drained]),
    ]


def _scoped_tiles(g: _Geometry) -> Stmt:
    """`tiles` in a scope both warpgroups allocate once for the whole kernel: the ring of
    stages, the accumulators, the epilogue slots, the barriers and each vector's buffer."""
    config = g.config
    stages = config.stages
    b_cols = config.b_columns
    b_block = (b_cols, g.bk) if g.dot.transpose_b else (g.bk, b_cols)
    rings = [
        Keyword(
            smem_ref(op.name),
            call(
                "plgpu.SMEM",
                Const((stages, *block)),
                DType(op.dtype),
                transforms=wgmma_transforms(op.dtype, op.swizzle),
            ),
        )
        for op, block in ((g.a, (g.bm, g.bk)), (g.b, b_block))
    ]
    allocations = (
        *rings,
        Keyword(
            _L.accumulators,
            call(
                "plgpu.TMEM",
                Const((g.bm, config.tmem_columns)),
                DType(g.dot.accumulator),
                **({} if g.config.cluster is None else {"collective": Const(True)}),
            ),
        ),
        Keyword(smem_ref(g.result.name), slots_buffer(g)),
        Keyword(
            _L.loaded, call("plgpu.Barrier", num_arrivals=Const(2), num_barriers=Const(stages))
        ),
        Keyword(_L.consumed, tensor_core_barrier(stages)),
        Keyword(_L.mma_done, tensor_core_barrier(2)),
        Keyword(_L.acc_free, _accumulator_free_barrier(g)),
        *vector_buffers(g),
        Keyword("collective_axes", Const(WG_AXIS)),
    )
    scoped = Call(Name("pl.run_scoped"), (Name(_WS.tiles),), allocations, one_per_line=True)
    return ExprStmt(scoped)


def _accumulator_slot() -> Stmt:
    local = attribute(Name(_WS.tile_info), "local_index")
    return Assign((Name(_L.accumulator),), rem(local, 2), comment="this tile's accumulator")


def _tile_header(g: _Geometry) -> list[Stmt]:
    """Where a tile is: its batch entry and tile (a snake over the tiles), and the arrays at
    the batch entry."""
    placed: list[Stmt] = []
    if g.config.cluster is not None:  # the pair's tile, and this CTA's block of rows of it
        pair = add(mul(_walked_rows(g), CLUSTER_SIZE), Name(CLUSTER.cta))
        placed.append(Assign((Name(block_index(g.rows)),), pair))
    return tile_header(g, [_walked_rows(g), Name(block_index(g.cols))], placed)


def _walked_rows(g: _Geometry) -> Name:
    """The rows index the walk hands out: a block's, or a pair's tile's."""
    return Name(block_index(g.rows) if g.config.cluster is None else cta_tile_index(g.rows))


def _accumulator_view(g: _Geometry) -> Expr:
    """The tile's accumulator: its columns of the tensor memory."""
    acc = Name(_L.accumulator)
    return ref_at(Name(_L.accumulators), Slice(), call("pl.ds", mul(acc, g.bn), Const(g.bn)))


def _epilogue_role(g: _Geometry, translation: Translation, new_store_api: bool) -> list[Stmt]:
    """The epilogue warpgroup: each tile's vectors copied in, its accumulator loaded once the
    products are done and handed back, the body after the loop, the block stored."""
    tile: list[Stmt] = [*_tile_header(g), _accumulator_slot()]
    tile += vector_copies(g, "this tile's part, while its products run")
    tile += [read_scalar(op.name, g.gmem[op.name]) for op in g.scalars]
    tile += epilogue_body(g, translation, new_store_api, lambda line: _accumulator_read(g, line))
    return [
        walk(g, _L.epilogue_tile, tile),
        Comment("the last tile's stores have read their slots"),
        ExprStmt(call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True))),
    ]


def _accumulator_read(g: _Geometry, line: LoopBlock) -> list[Stmt]:
    (final,) = line.finals
    acc = Name(_L.accumulator)
    return [
        ExprStmt(call("plgpu.barrier_wait", ref_at(Name(_L.mma_done), acc))),
        Assign((Name(final),), call("plgpu.async_load_tmem", _accumulator_view(g))),
        ExprStmt(call("plgpu.wait_load_tmem")),
        Comment("the MMA warp may accumulate into it again"),
        ExprStmt(call("plgpu.barrier_arrive", ref_at(Name(_L.acc_free), acc))),
        *vector_reads(g),
    ]


@dataclasses.dataclass(frozen=True)
class _MmaWarps(WarpWalkLaunch):
    """tcgen05's warp-specialized matmul: a TMA warp, an MMA warp, an epilogue warpgroup."""

    def block_function(self, gen: ModuleGenerator) -> FunctionDef:
        return mma_warp_function(gen.plan, gen.t, gen.new_store_api)


MMA_WARP_LOOP = _MmaWarps()
