"""The padding a `SliceError` proposes for slices and joins off the register tiles, written so
that doing what it says gives the kernel's numbers.

Padding a dim at its end to a multiple of 16 does not: a body that cuts its block in halves
(RoPE's rotate-half, at `D // 2`) would cut the padded dim in other halves, pairing column `i`
with one that is not `i + D / 2`. What keeps every value in its place is padding each piece
the body cuts the dim into, each to a multiple of the tile's columns with zeros at its end,
and taking the pieces back out of the results. The fix gives the jnp that does it, for the
sizes of the call: `x = ...` for each operand along the dim, `out = ...` for each result.
"""

import itertools
from collections.abc import Sequence

from .. import hardware as hw

__all__ = ["join_fix", "part_slice_fix", "slice_fix"]

TILE_COLS = hw.WGMMA_COLS  # the WGMMA layout's register tile is 64 rows by 8 columns
Piece = tuple[int, int]  # [start, stop) of a dim's columns


def slice_fix(dim: str, width: int | None, bounds: Sequence[int], join: bool = False) -> str:
    """The fix for a slice (or, `join`, a join) of `dim`'s `width` columns cut at `bounds`.
    `width` is None where the value cut is not the whole dim, and a join's pieces of unequal
    widths may come from anywhere in the operands: the fix then says what to do in words."""
    pieces = _pieces(width, bounds) if width is not None else ()
    if not pieces or (join and not _equal(pieces)):
        return (
            f"pad each piece the body cuts {dim} into to a multiple of {TILE_COLS} columns, with "
            f"zeros at the piece's end, in every operand along {dim}, outside the kernel, and "
            f"take the pieces back out of the results along {dim}; padding {dim} at its end "
            "instead moves the pieces' bounds and changes the numbers"
        )
    padded, total = _padded(pieces)
    return _pieces_fix(dim, dim, pieces, total, padded)


def part_slice_fix(
    joined: str, parts: Sequence[tuple[str, int]], width: int, bounds: Sequence[int]
) -> str:
    """The fix for a slice of one part of the joined dim `joined` (`parts`: each part and its
    size, in order), `width` columns cut at `bounds`."""
    named = [i for i, (_, size) in enumerate(parts) if size == width]
    if len(named) != 1:
        return slice_fix(f"the part of {joined} it slices", None, bounds)
    index = named[0]
    pieces = _pieces(width, bounds)
    padded, total = _padded(pieces)
    first = sum(size for _, size in parts[:index])
    end = sum(size for _, size in parts)
    kept = [(0, first)] if first else []
    kept += [(first + a, first + b) for a, b in padded]
    if first + width < end:
        kept.append((first + total, end - width + total))
    return _pieces_fix(parts[index][0], joined, pieces, total, kept)


def _pieces_fix(
    dim: str, result_dim: str, pieces: Sequence[Piece], total: int, kept: Sequence[Piece]
) -> str:
    """Pad each of `dim`'s `pieces` in the operands (`total` columns then), and keep the
    result's columns `kept`."""
    order = (
        ""
        if _equal(pieces)
        else " (its pieces in the operand's order; in another order, each piece's columns "
        "start where the body's join puts its padded piece)"
    )
    halves = f" ({dim} // 2 does)" if len(pieces) == 2 and _equal(pieces) else ""
    return (
        f"pad each piece the body cuts {dim} into here ({_spans(pieces)}) to a multiple of "
        f"{TILE_COLS} columns, with zeros at its end, outside the kernel: "
        f"x = {_pad_each(pieces)} for every operand x along {dim} ({dim} becomes {total}), "
        f"and out = {_take(kept)} for every result out along {result_dim}{order}; the body's "
        f"bounds must then fall where the pieces start{halves}. Padding {dim} at its end "
        "instead moves the pieces' bounds and changes the numbers"
    )


def join_fix(joined: str) -> str:
    """The fix for a join of pieces of the joined dim `joined` other than all its parts at
    once: parts of any widths join there, each held apart in register tiles of its own
    (layout.joined), so no padding is needed."""
    return (
        f"join all the parts of {joined} at once, in order, into the result's columns (parts "
        "of any widths join there), or return the parts as results of their own and join them "
        "with jnp.concatenate outside the kernel"
    )


def _pieces(width: int, bounds: Sequence[int]) -> tuple[Piece, ...]:
    cuts = sorted({0, width, *(b for b in bounds if 0 < b < width)})
    return tuple(itertools.pairwise(cuts))


def _padded(pieces: Sequence[Piece]) -> tuple[tuple[Piece, ...], int]:
    """Where each piece's columns lie once every piece is padded, and the padded width."""
    spans, start = [], 0
    for a, b in pieces:
        spans.append((start, start + b - a))
        start += hw.round_up(b - a, TILE_COLS)
    return tuple(spans), start


def _equal(pieces: Sequence[Piece]) -> bool:
    return len({b - a for a, b in pieces}) == 1


def _spans(pieces: Sequence[Piece]) -> str:
    return " and ".join(f"[{a}:{b}]" for a, b in pieces)


def _pad_each(pieces: Sequence[Piece]) -> str:
    parts = []
    for a, b in pieces:
        pad = hw.round_up(b - a, TILE_COLS) - (b - a)
        piece = f"x[..., {a}:{b}]"
        parts.append(f"jnp.pad({piece}, [(0, 0)] * (x.ndim - 1) + [(0, {pad})])" if pad else piece)
    return f"jnp.concatenate([{', '.join(parts)}], axis=-1)"


def _take(spans: Sequence[Piece]) -> str:
    if len(spans) == 1:
        a, b = spans[0]
        return f"out[..., {a}:{b}]"
    return f"jnp.concatenate([{', '.join(f'out[..., {a}:{b}]' for a, b in spans)}], axis=-1)"
