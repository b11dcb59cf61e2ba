"""What the roles of the tcgen05 warp-specialized matmul share (`emit.mma_warp`): the
product's operands and blocks, where each array of a tile is read, and the walk over the
tiles that each role makes in the same order."""

import dataclasses
from collections.abc import Mapping

from ...ir.names import (
    CLUSTER,
    MMA_WARP,
    WARP_SPECIALIZED,
    batch_entry,
    block_index,
    cta_tile_index,
    gmem_ref,
)
from ...ir.nodes import (
    Assign,
    BinOp,
    Const,
    Expr,
    FunctionDef,
    Name,
    Operator,
    Slice,
    Stmt,
    Tuple,
    call,
)
from ..lower.translation import DotUpdate, Translation
from ..pallas import attribute, ref_at
from ..plan.cluster import CLUSTER_SIZE, CtaCluster
from ..plan.mma_warp import MmaWarpSpecialized
from ..plan.plan import LaunchPlan, OperandPlan
from ..plan.warpspec import epilogue_operands

__all__ = [
    "CTA_AXIS",
    "TileGeometry",
    "accumulator_slot",
    "accumulator_view",
    "add",
    "loop",
    "mul",
    "rem",
    "tile_geometry",
    "tile_header",
    "walk",
    "walked_rows",
    "when",
]

CTA_AXIS = "cta"
_L = MMA_WARP
_WS = WARP_SPECIALIZED


def mul(x: Expr, n: int) -> Expr:
    return x if n == 1 else BinOp(Operator.MUL, x, Const(n))


def add(x: Expr, y: Expr | int) -> Expr:
    if isinstance(y, int):
        return x if y == 0 else BinOp(Operator.ADD, x, Const(y))
    return BinOp(Operator.ADD, x, y)


def rem(x: Expr, n: int) -> Expr:
    return call("lax.rem", x, Const(n))


def when(test: Expr, name: str, body: list[Stmt]) -> FunctionDef:
    return FunctionDef(name, (), tuple(body), decorators=(call("pl.when", test),))


def loop(start: Expr, stop: Expr, name: str, index: str, body: list[Stmt]) -> FunctionDef:
    return FunctionDef(name, (index,), tuple(body), decorators=(call("pl.loop", start, stop),))


@dataclasses.dataclass(frozen=True)
class TileGeometry:
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


def tile_geometry(plan: LaunchPlan, translation: Translation) -> TileGeometry:
    config = plan.warp_specialized
    assert isinstance(config, MmaWarpSpecialized)
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
    return TileGeometry(
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


def walk(g: TileGeometry, name: str, body: list[Stmt]) -> FunctionDef:
    walk = call("plgpu.nd_loop", Const(g.grid), collective_axes=Const(CTA_AXIS))
    return FunctionDef(name, (_WS.tile_info,), tuple(body), decorators=(walk,))


def accumulator_slot() -> Stmt:
    local = attribute(Name(_WS.tile_info), "local_index")
    return Assign((Name(_L.accumulator),), rem(local, 2), comment="this tile's accumulator")


def tile_header(g: TileGeometry) -> list[Stmt]:
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
        Assign((Tuple((walked_rows(g), Name(block_index(g.cols)))),), snake),
    ]
    if g.cluster is not None:  # the pair's tile, and this CTA's block of rows of it
        pair = add(mul(walked_rows(g), CLUSTER_SIZE), Name(CLUSTER.cta))
        header.append(Assign((Name(block_index(g.rows)),), pair))
    for op in (g.a, g.b, g.result, *g.vectors, *g.scalars):
        if op.batch:
            entry = ref_at(Name(gmem_ref(op.name)), *(Name(block_index(d)) for d in op.batch))
            header.append(Assign((g.gmem[op.name],), entry))
    return header


def walked_rows(g: TileGeometry) -> Name:
    """The rows index the walk hands out: a block's, or a pair's tile's."""
    return Name(block_index(g.rows) if g.cluster is None else cta_tile_index(g.rows))


def accumulator_view(g: TileGeometry) -> Expr:
    """The tile's accumulator: its columns of the tensor memory."""
    acc = Name(_L.accumulator)
    return ref_at(Name(_L.accumulators), Slice(), call("pl.ds", mul(acc, g.bn), Const(g.bn)))
