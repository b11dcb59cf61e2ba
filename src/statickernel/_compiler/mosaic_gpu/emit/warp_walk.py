"""What the code of the two warp-specialized matmuls shares (`emit.warpspec` for WGMMA,
`emit.mma_warp` for tcgen05): the product's operands and blocks and where in global memory
each array of a tile is read (`WalkGeometry`), the walk over the tiles (`walk`,
`tile_header`), and the epilogue: the vectors copied in and read, the body after the loop,
the block stored slot by slot by TMA, and the slots' and vectors' buffers."""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from ...ir.names import (
    WARP_SPECIALIZED,
    barrier_ref,
    batch_entry,
    block_index,
    gmem_ref,
    smem_ref,
)
from ...ir.nodes import (
    Assign,
    BinOp,
    Const,
    DType,
    Expr,
    ExprStmt,
    FunctionDef,
    Keyword,
    Name,
    Operator,
    Stmt,
    Tuple,
    call,
)
from ..lower.dots import wgmma_transforms
from ..lower.translation import DotUpdate, LoopBlock, Translation
from ..pallas import attribute, load, ref_at
from ..plan.cluster import CLUSTER_AXIS
from ..plan.plan import LaunchPlan, OperandPlan
from ..plan.warp_walk import RaggedRows, WarpWalk, epilogue_operands
from .epilogue_pieces import block_pieces, write_slot
from .launches import ScheduleEmitter
from .ragged import piece_store

__all__ = [
    "CTA_AXIS",
    "Epilogues",
    "WalkGeometry",
    "WarpWalkLaunch",
    "add",
    "epilogue_body",
    "mul",
    "slots_buffer",
    "tile_header",
    "vector_buffers",
    "vector_copies",
    "vector_reads",
    "walk",
    "walk_geometry",
]

CTA_AXIS = "cta"
_WS = WARP_SPECIALIZED
C = TypeVar("C", bound=WarpWalk)


def mul(x: Expr, n: int) -> Expr:
    return x if n == 1 else BinOp(Operator.MUL, x, Const(n))


def add(x: Expr, y: Expr | int) -> Expr:
    if isinstance(y, int):
        return x if y == 0 else BinOp(Operator.ADD, x, Const(y))
    return BinOp(Operator.ADD, x, y)


@dataclasses.dataclass(frozen=True)
class Epilogues:
    """A CTA's epilogues where it has several (WGMMA's consumers), each with its own
    epilogue slots and vector buffers: their count, and this one's index."""

    count: int
    index: Name


@dataclasses.dataclass(frozen=True)
class WalkGeometry(Generic[C]):
    """What the parts of the block function share: the product's operands and blocks, the
    epilogue's operands, and where in global memory each array of a tile is read."""

    plan: LaunchPlan
    config: C
    steps: int  # K blocks
    dot: DotUpdate
    a: OperandPlan
    b: OperandPlan
    result: OperandPlan
    rows: str
    cols: str
    bm: int
    bn: int
    bk: int
    vectors: tuple[OperandPlan, ...]  # the per-row or per-column operands of the epilogue
    scalars: tuple[OperandPlan, ...]  # the other loaded operands, read whole
    batch: tuple[str, ...]
    gmem: Mapping[str, Name]  # a's, b's, the result's and the vectors' array or batch entry
    epilogues: Epilogues | None  # None where one epilogue stores a tile
    pair: tuple[int, int]  # blocks of an epilogue's CTA tile holds along (rows, cols)
    ragged: RaggedRows | None = None  # the groups the rows are split into (`ragged=`)

    @property
    def entries(self) -> tuple[OperandPlan, ...]:
        """The arrays read at the walk's batch entry (a per-batch scale too)."""
        arrays = (self.a, self.b, self.result, *self.vectors, *self.scalars)
        return tuple(op for op in arrays if op.batch)

    @property
    def b_cols(self) -> int:
        """The columns of b's block a CTA tile copies: both epilogues' where they pair them."""
        return self.bn * self.pair[1]

    def own(self, ref: Expr) -> Expr:
        """This epilogue's part of a buffer of every epilogue's."""
        return ref if self.epilogues is None else ref_at(ref, self.epilogues.index)


def walk_geometry(
    plan: LaunchPlan,
    translation: Translation,
    config: C,
    epilogues: Epilogues | None = None,
    paired: str | None = None,
    ragged: RaggedRows | None = None,
) -> WalkGeometry[C]:
    (loop,) = plan.loops
    (block,) = translation.loops
    (dot,) = block.dots
    rows, cols = plan.rows, plan.cols
    assert cols is not None
    a, b = plan.operand(dot.a), plan.operand(dot.b)
    (result,) = plan.results
    vectors, scalars = epilogue_operands(plan.operands, block)
    arrays = (a, b, result, *vectors, *scalars)
    gmem = {op.name: Name(batch_entry(op.name) if op.batch else gmem_ref(op.name)) for op in arrays}
    return WalkGeometry(
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
        epilogues=epilogues,
        pair=(2 if paired == rows else 1, 2 if paired == cols else 1),
        ragged=ragged,
    )


def walk(g: WalkGeometry[C], name: str, body: list[Stmt]) -> FunctionDef:
    """`name(tile_info)`: `body` on each of the CTA's tiles, in the walk's order."""
    walked = g.config.walked_grid
    grid = (*(g.plan.dim(d).size for d in g.batch), walked[0] * walked[1])
    loop = call("plgpu.nd_loop", Const(grid), collective_axes=Const(CTA_AXIS))
    return FunctionDef(name, (_WS.tile_info,), tuple(body), decorators=(loop,))


def tile_header(g: WalkGeometry[C], snaked: list[Expr], placed: list[Stmt]) -> list[Stmt]:
    """Where a tile is: its batch entry and the indices `snaked` (a snake over the walked
    tiles), what `placed` derives from them, and the arrays at the batch entry."""
    batch_indices = [Name(block_index(d)) for d in g.batch]
    tile_index = Name(_WS.tile_index)
    config = g.config
    snake = call(
        "plgpu.planar_snake",
        tile_index,
        Const(config.walked_grid),
        Const(config.minor),
        Const(config.band),
    )
    header: list[Stmt] = [
        Assign((Tuple((*batch_indices, tile_index)),), attribute(Name(_WS.tile_info), "index")),
        Assign((Tuple(tuple(snaked)),), snake),
        *placed,
    ]
    for op in g.entries:  # at its entry of the batch dims it has (all, or some)
        entry = ref_at(Name(gmem_ref(op.name)), *(Name(block_index(d)) for d in op.batch))
        header.append(Assign((g.gmem[op.name],), entry))
    return header


def vector_copies(g: WalkGeometry[C], comment: str) -> list[Stmt]:
    """Each vector's part of this epilogue's block, into the epilogue's own buffer: copied
    while the main loop runs, waited for after it (`vector_reads`)."""
    copies: list[Stmt] = []
    for op in g.vectors:
        (dim,) = op.dims
        extent = op.block_shape[0]
        part = call("pl.ds", mul(Name(block_index(dim)), extent), Const(extent))
        copy = call(
            "plgpu.copy_gmem_to_smem",
            ref_at(g.gmem[op.name], part),
            g.own(Name(smem_ref(op.name))),
            g.own(Name(barrier_ref(op.name))),
        )
        copies.append(ExprStmt(copy, comment=comment))
    return copies


def vector_reads(g: WalkGeometry[C]) -> list[Stmt]:
    """The vectors the epilogue reads, once their copies have arrived."""
    lines: list[Stmt] = []
    for op in g.vectors:
        lines.append(ExprStmt(call("plgpu.barrier_wait", g.own(Name(barrier_ref(op.name))))))
        lines.append(Assign((Name(op.name),), load(g.own(Name(smem_ref(op.name))), op.kind)))
    return lines


def epilogue_body(
    g: WalkGeometry[C],
    translation: Translation,
    new_store_api: bool,
    accumulated: Callable[[LoopBlock], list[Stmt]],
) -> list[Stmt]:
    """The body around its loop, which `accumulated` replaces with the accumulator read,
    then the block stored."""
    body: list[Stmt] = []
    for line in translation.lines:
        body += accumulated(line) if isinstance(line, LoopBlock) else [line]
    (value,) = translation.outputs
    assert value is not None
    out = Name(g.result.name)
    body.append(Assign((out,), value))
    return body + _epilogue_store(g, out, new_store_api)


def _epilogue_store(g: WalkGeometry[C], value: Name, new_store_api: bool) -> list[Stmt]:
    """The block into the epilogue slots in turn, each stored by TMA: a slot is refilled once
    the store two slots back has read it, so stores overlap what follows."""
    config = g.config
    bm, bn = g.bm, g.bn
    er, ec = config.epilogue
    own = () if g.epilogues is None else (g.epilogues.index,)
    gmem = g.gmem[g.result.name]
    lines: list[Stmt] = []
    # A ragged piece commits one group of any number of stores, which the interpreter counts
    # one a store: wait for every store before refilling a slot.
    pieces = block_pieces(value, (bm, bn), (er, ec), config.slots, wait_all=g.ragged is not None)
    for piece in pieces:
        slot = ref_at(Name(smem_ref(g.result.name)), *own, Const(piece.slot))
        lines += write_slot(slot, piece, config.swizzled, new_store_api)
        r, c = piece.row, piece.col
        target = ref_at(
            gmem,
            call("pl.ds", add(mul(Name(block_index(g.rows)), bm), r), Const(er)),
            call("pl.ds", add(mul(Name(block_index(g.cols)), bn), c), Const(ec)),
        )
        if g.ragged is not None:  # only the item's rows among the piece's
            lines.append(piece_store(slot, target, r, _piece_inside(g, c)))
        else:
            lines.append(ExprStmt(call("plgpu.copy_smem_to_gmem", slot, target)))
    return lines


def _piece_inside(g: WalkGeometry[C], col: int) -> Expr | None:
    """Whether the piece at column `col` of this epilogue's block is inside the result's
    columns; None where every piece of every tile is."""
    cols = g.result.gmem_shape[-1]
    if g.config.tile_grid[1] * g.b_cols <= cols:
        return None
    start = add(mul(Name(block_index(g.cols)), g.bn), col)
    return BinOp(Operator.LT, start, Const(cols))


def slots_buffer(g: WalkGeometry[C]) -> Expr:
    """The epilogue slots: every epilogue's, tiled and swizzled where the result allows."""
    config = g.config
    count = () if g.epilogues is None else (g.epilogues.count,)
    return call(
        "plgpu.SMEM",
        Const((*count, config.slots, *config.epilogue)),
        DType(g.result.dtype),
        **({"transforms": wgmma_transforms(g.result.dtype)} if config.swizzled else {}),
    )


def vector_buffers(g: WalkGeometry[C]) -> list[Keyword]:
    """Each vector's buffer and barrier: every epilogue's."""
    count = () if g.epilogues is None else (g.epilogues.count,)
    barriers = {} if g.epilogues is None else {"num_barriers": Const(g.epilogues.count)}
    return [
        keyword
        for op in g.vectors
        for keyword in (
            Keyword(
                smem_ref(op.name),
                call("plgpu.SMEM", Const((*count, *op.block_shape)), DType(op.dtype)),
            ),
            Keyword(barrier_ref(op.name), call("plgpu.Barrier", **barriers)),
        )
    ]


def _walk(plan: LaunchPlan) -> WarpWalk:
    config = plan.schedule_variant
    assert isinstance(config, WarpWalk)
    return config


@dataclasses.dataclass(frozen=True)
class WarpWalkLaunch(ScheduleEmitter):
    """The warp-specialized matmul's launch, WGMMA's and tcgen05's: persistent CTAs, or
    clusters of them, whose warpgroups hold their own buffers."""

    def copies_blocks_once(self) -> bool:
        return False

    def launch_grid(self, plan: LaunchPlan) -> tuple[int, ...]:
        return (_walk(plan).launched,)  # persistent CTAs, or clusters of them

    def grid_text(self, plan: LaunchPlan, launched: tuple[int, ...], blocks: str) -> str:
        cluster = _walk(plan).cluster
        if cluster is None:
            return super().grid_text(plan, launched, blocks)
        return f"{launched} clusters of {cluster.size} persistent CTAs, for the blocks {blocks}"

    def cluster_keywords(self, plan: LaunchPlan) -> tuple[Keyword, ...]:
        cluster = _walk(plan).cluster
        if cluster is None:
            return ()
        return (
            Keyword("cluster", Const((cluster.size,))),
            Keyword("cluster_names", Tuple((Const(CLUSTER_AXIS),))),
        )
