"""The epilogue warpgroup of the tcgen05 warp-specialized matmul (`emit.mma_warp`): each
tile's vectors copied in, its accumulator loaded from tensor memory once the MMAs are done
and handed back to the MMA warp, the body after the loop applied, and the block stored
through two slots by TMA while the next tile accumulates."""

from ...ir.names import (
    MMA_WARP,
    barrier_ref,
    block_index,
    smem_ref,
)
from ...ir.nodes import (
    Assign,
    Comment,
    Const,
    ExprStmt,
    Name,
    Stmt,
    call,
)
from ..lower.translation import LoopBlock, Translation
from ..pallas import load, read_scalar, ref_at
from .epilogue_pieces import block_pieces, write_slot
from .mma_tiles import (
    TileGeometry,
    accumulator_slot,
    accumulator_view,
    add,
    mul,
    tile_header,
    walk,
)

__all__ = ["epilogue_role"]

_L = MMA_WARP


def epilogue_role(g: TileGeometry, translation: Translation, new_store_api: bool) -> list[Stmt]:
    """The epilogue warpgroup: each tile's vectors copied in, its accumulator loaded once the
    products are done and handed back, the body after the loop, the block stored."""
    tile: list[Stmt] = [*tile_header(g), accumulator_slot()]
    for op in g.vectors:
        (dim,) = op.dims
        extent = op.block_shape[0]
        part = call("pl.ds", mul(Name(block_index(dim)), extent), Const(extent))
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
        walk(g, _L.epilogue_tile, tile),
        Comment("the last tile's stores have read their slots"),
        ExprStmt(call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True))),
    ]


def _accumulator_read(g: TileGeometry, line: LoopBlock) -> list[Stmt]:
    (final,) = line.finals
    acc = Name(_L.accumulator)
    accumulator = accumulator_view(g)
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


def _epilogue_store(g: TileGeometry, value: Name, new_store_api: bool) -> list[Stmt]:
    """The block into the epilogue slots in turn, each stored by TMA: a slot is refilled once
    the store two slots back has read it, so stores overlap what follows."""
    config = g.config
    er, ec = config.epilogue
    slots = Name(smem_ref(g.result.name))
    lines: list[Stmt] = []
    for piece in block_pieces(value, (g.bm, g.bn), (er, ec), config.slots):
        slot = ref_at(slots, Const(piece.slot))
        lines += write_slot(slot, piece, config.swizzled, new_store_api)
        target = ref_at(
            g.gmem[g.result.name],
            call("pl.ds", add(mul(Name(block_index(g.rows)), g.bm), piece.row), Const(er)),
            call("pl.ds", add(mul(Name(block_index(g.cols)), g.bn), piece.col), Const(ec)),
        )
        lines.append(ExprStmt(call("plgpu.copy_smem_to_gmem", slot, target)))
    return lines
