"""A block stored piece by piece through a few epilogue slots, as the warp-specialized
matmuls (WGMMA's and tcgen05's) store theirs: each piece waits until the store that last read
its slot has done so, is written into the slot and committed, and is then copied out by TMA
(the caller's copy, which knows where the piece goes)."""

import dataclasses

from ...ir.nodes import (
    Assign,
    Const,
    EllipsisIndex,
    Expr,
    ExprStmt,
    Name,
    Slice,
    Stmt,
    Subscript,
    call,
)

__all__ = ["EpiloguePiece", "block_pieces", "write_slot"]


@dataclasses.dataclass(frozen=True)
class EpiloguePiece:
    """One piece of a block: where it starts, its slot, its value, and the stores that may
    still be in flight when its slot is refilled."""

    row: int
    col: int
    slot: int
    value: Expr
    pending: int
    first: bool


def block_pieces(
    value: Name,
    block: tuple[int, int],
    piece: tuple[int, int],
    slots: int,
    wait_all: bool = False,
) -> list[EpiloguePiece]:
    """The pieces of `value` (a block of `block`), row-major, taking the `slots` slots in
    turn: a slot is refilled once the store `slots` pieces back has read it. With an odd
    number of pieces a block's first piece takes the slot of the last block's last piece,
    whose store may still be reading it, so it waits for every store; `wait_all` waits for
    every store before each piece."""
    (bm, bn), (er, ec) = block, piece
    count = (bm // er) * (bn // ec)
    pieces = []
    for r in range(0, bm, er):
        for c in range(0, bn, ec):
            i = len(pieces)
            part = Subscript(
                value, (Slice(Const(r), Const(r + er)), Slice(Const(c), Const(c + ec)))
            )
            pending = 0 if (i == 0 and count % 2) or wait_all else slots - 1
            pieces.append(EpiloguePiece(r, c, i % slots, part, pending, i == 0))
    return pieces


def write_slot(slot: Expr, piece: EpiloguePiece, swizzled: bool, new_store_api: bool) -> list[Stmt]:
    """The wait for the slot's last store, the piece written into it, and the commit that
    makes it visible to TMA."""
    wait = ExprStmt(
        call("plgpu.wait_smem_to_gmem", Const(piece.pending), wait_read_only=Const(True)),
        comment="the slot's last store has read it" if piece.first else None,
    )
    if new_store_api:
        write: Stmt = ExprStmt(call("plgpu.store", slot, piece.value, optimized=Const(swizzled)))
    else:
        write = Assign((Subscript(slot, (EllipsisIndex(),)),), piece.value)
    return [wait, write, ExprStmt(call("plgpu.commit_smem"))]
