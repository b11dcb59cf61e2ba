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
"""

import dataclasses
from collections.abc import Mapping

from ..ir.names import (
    CLUSTER,
    MMA_WARP,
    WARP_SPECIALIZED,
    barrier_ref,
    batch_entry,
    block_function,
    block_index,
    cta_tile_index,
    gmem_ref,
    smem_ref,
)
from ..ir.nodes import (
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
    Kind,
    Name,
    Operator,
    Slice,
    Stmt,
    Subscript,
    Tuple,
    call,
)
from ..ir.pallas import attribute, load, read_scalar, ref_at, tensor_core_barrier
from ..lower.dots import wgmma_transforms
from ..lower.translation import DotUpdate, LoopBlock, Translation
from ..plan.cluster import CLUSTER_AXIS, CLUSTER_SIZE, CtaCluster
from ..plan.mma_warp import MmaWarpSpecialized
from ..plan.plan import LaunchPlan, OperandPlan
from ..plan.warpspec import epilogue_vectors
from .warpspec import WG_AXIS

__all__ = ["mma_warp_function"]

CTA_AXIS = "cta"
_L = MMA_WARP
_WS = WARP_SPECIALIZED
_TMA_WARP, _MMA_WARP = 0, 1
_MMA_WARPGROUP, _EPILOGUE_WARPGROUP = 0, 1


def _mul(x: Expr, n: int) -> Expr:
    return x if n == 1 else BinOp(Operator.MUL, x, Const(n))


def _add(x: Expr, y: Expr | int) -> Expr:
    if isinstance(y, int):
        return x if y == 0 else BinOp(Operator.ADD, x, Const(y))
    return BinOp(Operator.ADD, x, y)


def _rem(x: Expr, n: int) -> Expr:
    return call("lax.rem", x, Const(n))


def _when(test: Expr, name: str, body: list[Stmt]) -> FunctionDef:
    return FunctionDef(name, (), tuple(body), decorators=(call("pl.when", test),))


def _loop(start: Expr, stop: Expr, name: str, index: str, body: list[Stmt]) -> FunctionDef:
    return FunctionDef(name, (index,), tuple(body), decorators=(call("pl.loop", start, stop),))


@dataclasses.dataclass(frozen=True)
class _Geometry:
    """What the roles share: the product's operands and blocks, the epilogue's operands and
    where in global memory each array of a tile is read."""

    plan: LaunchPlan
    config: MmaWarpSpecialized
    steps: int
    dot: DotUpdate
    a: OperandPlan
    b: OperandPlan
    result: OperandPlan
    rows: str
    cols: str
    bm: int
    bn: int
    bk: int
    vectors: tuple[OperandPlan, ...]
    scalars: tuple[OperandPlan, ...]
    batch: tuple[str, ...]
    gmem: Mapping[str, Name]
    cluster: CtaCluster | None

    @property
    def grid(self) -> tuple[int, ...]:
        tiles = self.config.tile_grid[0] * self.config.tile_grid[1]
        return (*(self.plan.dim(d).size for d in self.batch), tiles)

    @property
    def tiles(self) -> int:
        return self.config.tiles


def _geometry(plan: LaunchPlan, translation: Translation) -> _Geometry:
    config = plan.warp_specialized
    assert isinstance(config, MmaWarpSpecialized)
    (loop,) = plan.loops
    (block,) = translation.loops
    (dot,) = block.dots
    rows, cols = plan.rows, plan.cols
    assert cols is not None
    a, b = plan.operand(dot.a), plan.operand(dot.b)
    (result,) = plan.results
    vectors = tuple(epilogue_vectors(plan.operands, block))
    scalars = tuple(
        op
        for op in plan.operands
        if op.loaded
        and op.name not in (dot.a, dot.b)
        and op not in vectors
        and op.kind != Kind.PARAMS
    )
    arrays = (a, b, result, *vectors, *scalars)
    gmem = {op.name: Name(batch_entry(op.name) if op.batch else gmem_ref(op.name)) for op in arrays}
    return _Geometry(
        plan=plan,
        config=config,
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
        vectors=vectors,
        scalars=scalars,
        batch=result.batch,
        gmem=gmem,
        cluster=config.cluster,
    )


def mma_warp_function(
    plan: LaunchPlan, translation: Translation, new_store_api: bool
) -> FunctionDef:
    g = _geometry(plan, translation)
    config = g.config
    body: list[Stmt] = [
        Comment(
            "Warp-specialized: in warpgroup 0, warp 0 copies a's and b's K blocks and warp 1 "
            "issues the tcgen05 MMAs; warpgroup 1 loads, finishes and stores each tile."
        ),
        Comment(
            f"Persistent: {config.ctas} CTAs walk the {config.tiles} tiles; one accumulator "
            "is stored while the next tile accumulates into the other."
            if g.cluster is None
            else f"Persistent: {config.launched} pairs of CTAs walk the {config.tiles} pair "
            "tiles; the first CTA's MMA warp issues 2-CTA MMAs over both CTAs' blocks."
        ),
        Assign((Name(_WS.warpgroup),), call("lax.axis_index", Const(WG_AXIS))),
        *(
            ()
            if g.cluster is None
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
            _add(
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


def _walk(g: _Geometry, name: str, body: list[Stmt]) -> FunctionDef:
    walk = call("plgpu.nd_loop", Const(g.grid), collective_axes=Const(CTA_AXIS))
    return FunctionDef(name, (_WS.tile_info,), tuple(body), decorators=(walk,))


def _accumulator_slot() -> Stmt:
    local = attribute(Name(_WS.tile_info), "local_index")
    return Assign((Name(_L.accumulator),), _rem(local, 2), comment="this tile's accumulator")


def _tile_header(g: _Geometry) -> list[Stmt]:
    """Where a tile is: its batch entry and tile (a snake over the tiles), and the arrays at
    the batch entry."""
    batch_indices = [Name(block_index(d)) for d in g.batch]
    tile_index = Name(_WS.tile_index)
    snake = call(
        "plgpu.planar_snake",
        tile_index,
        Const(g.config.tile_grid),
        Const(g.config.minor),
        Const(g.config.band),
    )
    header: list[Stmt] = [
        Assign((Tuple((*batch_indices, tile_index)),), attribute(Name(_WS.tile_info), "index")),
        Assign((Tuple((_walked_rows(g), Name(block_index(g.cols)))),), snake),
    ]
    if g.cluster is not None:  # the pair's tile, and this CTA's block of rows of it
        pair = _add(_mul(_walked_rows(g), CLUSTER_SIZE), Name(CLUSTER.cta))
        header.append(Assign((Name(block_index(g.rows)),), pair))
    for op in (g.a, g.b, g.result, *g.vectors, *g.scalars):
        if op.batch:
            entry = ref_at(Name(gmem_ref(op.name)), *(Name(block_index(d)) for d in op.batch))
            header.append(Assign((g.gmem[op.name],), entry))
    return header


def _tiles(g: _Geometry, translation: Translation, new_store_api: bool) -> FunctionDef:
    """`tiles(...)`, run in the scope of the kernel's buffers: the two warpgroups' roles."""
    per_warp = FunctionDef(
        _L.per_warp,
        (_L.warp,),
        (
            _when(BinOp(Operator.EQ, Name(_L.warp), Const(_TMA_WARP)), _L.copy_blocks, _copies(g)),
            _when(_issues_mmas(g), _L.multiply, _products(g)),
        ),
        decorators=(Name("plgpu.warp_map"),),
    )
    wg = Name(_WS.warpgroup)
    roles: list[Stmt] = [
        _when(BinOp(Operator.EQ, wg, Const(_MMA_WARPGROUP)), _L.tma_and_mma, [per_warp]),
        _when(
            BinOp(Operator.EQ, wg, Const(_EPILOGUE_WARPGROUP)),
            _L.epilogue,
            _epilogue(g, translation, new_store_api),
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


def _walked_rows(g: _Geometry) -> Name:
    """The rows index the walk hands out: a block's, or a pair's tile's."""
    return Name(block_index(g.rows) if g.cluster is None else cta_tile_index(g.rows))


def _collective(g: _Geometry, keyword: str) -> dict[str, Expr]:
    return {} if g.cluster is None else {keyword: Const(CLUSTER_AXIS)}


def _partitioned(g: _Geometry, axis: int) -> dict[str, Expr]:
    """A pair's copy: each CTA copies its part along `axis`, tracked by the first CTA."""
    if g.cluster is None:
        return {}
    partition = call("plgpu.CopyPartition.PARTITIONED", Const(axis))
    return {"collective_axes": Const(CLUSTER_AXIS), "leader_tracked": partition}


def _issues_mmas(g: _Geometry) -> Expr:
    """The MMA warp: of every CTA, or of a pair's first CTA, which issues the 2-CTA MMAs."""
    mma_warp = BinOp(Operator.EQ, Name(_L.warp), Const(_MMA_WARP))
    if g.cluster is None:
        return mma_warp
    first = BinOp(Operator.EQ, Name(CLUSTER.cta), Const(0))
    return call("jnp.logical_and", mma_warp, first)


def _accumulator_free_barrier(g: _Geometry) -> Expr:
    """Where the epilogue hands an accumulator back: with pairs, both CTAs' epilogues arrive
    on the first CTA's barrier, as both read what its MMA wrote."""
    if g.cluster is None:
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
    ring_step = _add(_mul(local, g.steps), Name(_L.k_step))
    return [
        Assign((Name(_L.ring_step),), ring_step),
        Assign((Name(_L.ring_slot),), _rem(Name(_L.ring_step), g.config.stages)),
    ]


def _k_block(k: Expr, bk: int) -> Expr:
    return call("pl.ds", _mul(k, bk), Const(bk))


def _copies(g: _Geometry) -> list[Stmt]:
    """The TMA warp: each tile's K blocks of a and b into the ring, a stage refilled once the
    product that read it is done; then the waits for the last stages' products."""
    stages = g.config.stages
    slot, k = Name(_L.ring_slot), Name(_L.k_step)
    # A pair copies its tile's rows of a and b's block, each CTA its part (`PARTITIONED`);
    # the copies arrive on the first CTA's barrier, whose MMA reads both CTAs' parts.
    a_rows = g.bm * (1 if g.cluster is None else CLUSTER_SIZE)
    rows = call("pl.ds", _mul(_walked_rows(g), a_rows), Const(a_rows))
    cols = call("pl.ds", _mul(Name(block_index(g.cols)), g.bn), Const(g.bn))
    a_block = ref_at(g.gmem[g.a.name], rows, _k_block(k, g.bk))
    b_index = (cols, _k_block(k, g.bk)) if g.dot.transpose_b else (_k_block(k, g.bk), cols)
    b_block = ref_at(g.gmem[g.b.name], *b_index)
    b_axis = 0 if g.dot.transpose_b else 1
    freed = _when(
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
    tile = [*_tile_header(g), _loop(Const(0), Const(g.steps), _L.copy_step, _L.k_step, step)]
    total = _mul(Name(_L.walked), g.steps)
    drain_from = call("lax.max", BinOp(Operator.SUB, total, Const(stages)), Const(0))
    drained = ExprStmt(
        call("plgpu.barrier_wait", ref_at(Name(_L.consumed), _rem(Name(_L.ring_step), stages)))
    )
    return [
        _walk(g, _L.copy_tile, tile),
        Comment("the last stages' products, which no copy waited for"),
        _loop(drain_from, total, _L.drain, _L.ring_step, [drained]),
    ]


def _products(g: _Geometry) -> list[Stmt]:
    """The MMA warp: each tile's K steps into the tile's accumulator, each product handing its
    stage back; the tile's last product signals the epilogue."""
    slot, acc = Name(_L.ring_slot), Name(_L.accumulator)
    accumulator = ref_at(
        Name(_L.accumulators), Slice(), call("pl.ds", _mul(acc, g.bn), Const(g.bn))
    )
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
    freed = _when(
        BinOp(Operator.GE, local, Const(2)),
        _L.accumulator_free,
        [ExprStmt(call("plgpu.barrier_wait", ref_at(Name(_L.acc_free), acc)))],
    )
    tile: list[Stmt] = [
        _accumulator_slot(),
        Comment("the epilogue has loaded what this accumulator held two tiles ago"),
        freed,
        _loop(Const(0), Const(g.steps), _L.mma_step, _L.k_step, step),
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
        call("plgpu.barrier_wait", ref_at(Name(_L.acc_free), _rem(Name(_L.accumulator), 2)))
    )
    drain_from = call("lax.max", BinOp(Operator.SUB, walked, Const(2)), Const(0))
    return [
        _walk(g, _L.multiply_tile, tile),
        Comment("the epilogue's last two loads, which no tile waited for"),
        _loop(drain_from, walked, _L.drain, _L.accumulator, [drained]),
    ]


def _epilogue(g: _Geometry, translation: Translation, new_store_api: bool) -> list[Stmt]:
    """The epilogue warpgroup: each tile's vectors copied in, its accumulator loaded once the
    products are done and handed back, the body after the loop, the block stored."""
    tile: list[Stmt] = [*_tile_header(g), _accumulator_slot()]
    for op in g.vectors:
        (dim,) = op.dims
        extent = op.block_shape[0]
        part = call("pl.ds", _mul(Name(block_index(dim)), extent), Const(extent))
        copy = call(
            "plgpu.copy_gmem_to_smem",
            ref_at(g.gmem[op.name], part),
            Name(smem_ref(op.name)),
            Name(barrier_ref(op.name)),
        )
        tile.append(ExprStmt(copy, comment="this tile's part, while its products run"))
    tile += [read_scalar(op.name, g.gmem[op.name]) for op in g.scalars]
    for line in translation.lines:
        tile += _accumulator_read(g, line) if isinstance(line, LoopBlock) else [line]
    (value,) = translation.outputs
    assert value is not None
    out = Name(g.result.name)
    tile.append(Assign((out,), value))
    tile += _epilogue_store(g, out, new_store_api)
    return [
        _walk(g, _L.epilogue_tile, tile),
        Comment("the last tile's stores have read their slots"),
        ExprStmt(call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True))),
    ]


def _accumulator_read(g: _Geometry, line: LoopBlock) -> list[Stmt]:
    (final,) = line.finals
    acc = Name(_L.accumulator)
    accumulator = ref_at(
        Name(_L.accumulators), Slice(), call("pl.ds", _mul(acc, g.bn), Const(g.bn))
    )
    lines: list[Stmt] = [
        ExprStmt(call("plgpu.barrier_wait", ref_at(Name(_L.mma_done), acc))),
        Assign((Name(final),), call("plgpu.async_load_tmem", accumulator)),
        ExprStmt(call("plgpu.wait_load_tmem")),
        Comment("the MMA warp may accumulate into it again"),
        ExprStmt(call("plgpu.barrier_arrive", ref_at(Name(_L.acc_free), acc))),
    ]
    for op in g.vectors:
        arrived = call("plgpu.barrier_wait", Name(barrier_ref(op.name)))
        lines.append(ExprStmt(arrived))
        lines.append(Assign((Name(op.name),), load(Name(smem_ref(op.name)), op.kind)))
    return lines


def _epilogue_store(g: _Geometry, value: Name, new_store_api: bool) -> list[Stmt]:
    """The block into the epilogue slots in turn, each stored by TMA: a slot is refilled once
    the store two slots back has read it, so stores overlap what follows."""
    config = g.config
    er, ec = config.epilogue
    slots = Name(smem_ref(g.result.name))
    lines: list[Stmt] = []
    pieces = (g.bm // er) * (g.bn // ec)
    count = 0
    for r in range(0, g.bm, er):
        for c in range(0, g.bn, ec):
            slot = ref_at(slots, Const(count % config.slots))
            piece = Subscript(
                value, (Slice(Const(r), Const(r + er)), Slice(Const(c), Const(c + ec)))
            )
            # With an odd number of pieces, a tile's first piece takes the slot of the last
            # tile's last piece, whose store may still be reading it: wait for every store.
            pending = 0 if count == 0 and pieces % 2 else config.slots - 1
            lines.append(
                ExprStmt(
                    call("plgpu.wait_smem_to_gmem", Const(pending), wait_read_only=Const(True)),
                    comment="the slot's last store has read it" if count == 0 else None,
                )
            )
            if new_store_api:
                store = call("plgpu.store", slot, piece, optimized=Const(config.swizzled))
                lines.append(ExprStmt(store))
            else:
                lines.append(Assign((Subscript(slot, (EllipsisIndex(),)),), piece))
            lines.append(ExprStmt(call("plgpu.commit_smem")))
            target = ref_at(
                g.gmem[g.result.name],
                call("pl.ds", _add(_mul(Name(block_index(g.rows)), g.bm), r), Const(er)),
                call("pl.ds", _add(_mul(Name(block_index(g.cols)), g.bn), c), Const(ec)),
            )
            lines.append(ExprStmt(call("plgpu.copy_smem_to_gmem", slot, target)))
            count += 1
    return lines


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
    slots = call(
        "plgpu.SMEM",
        Const((config.slots, *config.epilogue)),
        DType(g.result.dtype),
        **({"transforms": wgmma_transforms(g.result.dtype)} if config.swizzled else {}),
    )
    vector_buffers = [
        keyword
        for op in g.vectors
        for keyword in (
            Keyword(smem_ref(op.name), call("plgpu.SMEM", Const(op.block_shape), DType(op.dtype))),
            Keyword(barrier_ref(op.name), call("plgpu.Barrier")),
        )
    ]
    allocations = (
        *rings,
        Keyword(
            _L.accumulators,
            call(
                "plgpu.TMEM",
                Const((g.bm, config.tmem_columns)),
                DType(g.dot.accumulator),
                **({} if g.cluster is None else {"collective": Const(True)}),
            ),
        ),
        Keyword(smem_ref(g.result.name), slots),
        Keyword(
            _L.loaded, call("plgpu.Barrier", num_arrivals=Const(2), num_barriers=Const(stages))
        ),
        Keyword(_L.consumed, tensor_core_barrier(stages)),
        Keyword(_L.mma_done, tensor_core_barrier(2)),
        Keyword(_L.acc_free, _accumulator_free_barrier(g)),
        *vector_buffers,
        Keyword("collective_axes", Const(WG_AXIS)),
    )
    scoped = Call(Name("pl.run_scoped"), (Name(_WS.tiles),), allocations, one_per_line=True)
    return ExprStmt(scoped)
