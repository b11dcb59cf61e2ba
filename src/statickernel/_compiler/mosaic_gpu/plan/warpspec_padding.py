"""The arrays of a warp-specialized matmul padded where its copies need more than the array
holds: the paired operand under two blocks long, and a result whose epilogue pieces would be
copied as plain bytes. Each padding is a fallback the plan's notes name, with its bytes."""

import dataclasses
import math
from collections.abc import Mapping

from .. import hardware as hw
from ..lower.translation import LoopBlock
from .operands import OperandPlan
from .warp_walk import RaggedRows
from .warpspec import WarpSpecialized

__all__ = ["hold_paired_blocks", "hold_result_pieces"]


def hold_paired_blocks(
    config: WarpSpecialized,
    operands: tuple[OperandPlan, ...],
    loop: LoopBlock,
    blocks: Mapping[str, int],
) -> tuple[tuple[OperandPlan, ...], list[str]]:
    """The operands with the array of the paired one padded to hold one paired block (two
    blocks) where it is smaller: a copy must not address a block past the whole array. Only an
    array under two blocks long is padded, so the cost is small; the notes say what."""
    dot = loop.dots[0]
    name = (
        dot.b if config.paired != next(op for op in operands if op.name == dot.a).dims[0] else dot.a
    )
    out, notes = [], []
    for op in operands:
        if op.name != name:
            out.append(op)
            continue
        axis = len(op.batch) + len(op.groups) + op.dims.index(config.paired)
        need = 2 * blocks[config.paired]
        if op.gmem_shape[axis] >= need:
            out.append(op)
            continue
        gmem = (*op.gmem_shape[:axis], need, *op.gmem_shape[axis + 1 :])
        further = "further, " if op.host_padded else ""
        written = hw.nbytes(math.prod(gmem), op.dtype)
        notes.append(
            f"fallback: `{op.name}` {list(op.shape)} is padded with zeros {further}to "
            f"{list(gmem)}, so that its array holds the two {config.paired} blocks a CTA's "
            f"consumers share: one jnp.pad in the kernel's jit, {written:,} B written"
        )
        out.append(dataclasses.replace(op, gmem_shape=gmem))
    return tuple(out), notes


def hold_result_pieces(
    piece: int, ragged: RaggedRows | None, result: OperandPlan
) -> tuple[OperandPlan, list[str]]:
    """The result with its array's columns padded where a store of an epilogue piece would be
    a contiguous range of bytes: Mosaic GPU copies a contiguous slice with a plain bulk copy,
    which is clamped only at the end of the whole array, so a piece crossing (or past) the
    last column would write into the next row. A ragged item stores single rows, always
    contiguous: its columns are padded to whole pieces (and pieces past them store no rows).
    A result as narrow as one piece is padded to two, so that its pieces are strided."""
    cols = result.gmem_shape[-1]
    if ragged is not None:
        need = -(-cols // piece) * piece
        why = "a ragged item stores single rows, which are copied as plain bytes"
    else:
        need = 2 * piece if cols == piece else cols
        why = "a piece as wide as the array's rows is copied as plain bytes"
    if need == cols:
        return result, []
    gmem = (*result.gmem_shape[:-1], need)
    written = hw.nbytes(math.prod(gmem), result.dtype)
    note = (
        f"fallback: `{result.name}` {list(result.shape)} is written as {list(gmem)} and sliced "
        f"back: {why}, clamped only at the array's end, so each {piece}-column piece of the "
        f"epilogue must lie inside the array's columns ({written:,} B written)"
    )
    return dataclasses.replace(result, gmem_shape=gmem), [note]
