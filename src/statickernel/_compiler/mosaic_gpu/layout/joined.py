"""Where the parts of a joined dim (`-> "M N1+N2"`) lie in the block's columns.

The WGMMA layout holds a block's columns in register tiles of 8, and Mosaic GPU joins blocks
only tile by tile: a part can start only on a tile. Where every part but the last is a
multiple of 8 columns, the parts lie side by side, as in the array. Where one is not (N1 = 67),
each part starts on the tile after the one before ends: the block holds the joined columns
part by part, with a few columns between them, and the kernel writes its result so, as an
array the launch's wrapper joins into the user's (one copy, like a host-padded result's
slice back). Elementwise ops and reductions, whose masks leave the columns between the parts
out, are the same on either layout; an op that moves values along the columns is not
(`lower.context` refuses it there)."""

from collections.abc import Sequence

from .. import hardware as hw

__all__ = ["PartColumns", "part_columns", "part_span"]

# Each part's first column in the block and its size, in order.
PartColumns = tuple[tuple[int, int], ...]


def part_columns(sizes: Sequence[int]) -> PartColumns:
    """Where each part of sizes `sizes` starts in the block: each part but the last padded
    to whole register tiles. Empty where they lie side by side (every part but the last a
    multiple of the tile), which is how the array holds them."""
    tile = hw.WGMMA_COLS
    if all(size % tile == 0 for size in sizes[:-1]):
        return ()
    parts, start = [], 0
    for size in sizes:
        parts.append((start, size))
        start += hw.round_up(size, tile)
    return tuple(parts)


def part_span(parts: PartColumns) -> int:
    """The columns from the first part's first to the last part's last."""
    start, size = parts[-1]
    return start + size
