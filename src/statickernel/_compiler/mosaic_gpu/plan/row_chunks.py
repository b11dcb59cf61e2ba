"""Rows too wide for a warpgroup's registers, computed a chunk of columns at a time.

The row form holds a whole row in registers, spread over the warpgroup's 128 threads: at
32768 bfloat16 columns that is 256 values a thread for each vector the body keeps live, and
ptxas spills. The row sits whole in shared memory, so a body whose values are elementwise
along the row, with reductions of it to scalars (a softmax, a norm), can be computed in
chunks: each reduction runs over the chunks, combining their partial reductions, before the
statements that read it; the results are computed and stored chunk by chunk at the end. A
chunk's values are read again from shared memory by every pass that needs them (a softmax
reads its row three times), which costs shared-memory bandwidth, not HBM, and keeps the
registers of one chunk live instead of the row's.
"""

from ...ir.nodes import Assign, Comment, Name, SourceLine
from ..lower.translation import Translation
from ..pallas import RowFrame

__all__ = ["CHUNK_ELEMENTS", "MAX_ROW_ELEMENTS", "chunked_frame", "takes_chunks"]

# Rows up to this many elements are held whole: at 16384 float32 columns, 128 values a thread
# for each live vector, softmax, rmsnorm and layernorm compile without spills (206 to 255
# registers); at 32768 they spill 280 to 832 bytes.
MAX_ROW_ELEMENTS = 16384
# A chunk's columns: 64 values a thread for each live vector.
CHUNK_ELEMENTS = 8192


def chunked_frame(frame: RowFrame, accumulates: bool) -> RowFrame | None:
    """The frame of a row computed in chunks, or None where the row is held whole: rows up to
    `MAX_ROW_ELEMENTS`, and rows whose values a CTA adds up along the columns (a norm's
    `dw`). A row padded past the array's columns masks each chunk's columns past the edge."""
    if frame.width <= MAX_ROW_ELEMENTS or accumulates:
        return None
    step = 128 * frame.vector
    widths = [w for w in range(CHUNK_ELEMENTS, step - 1, -step) if frame.width % w == 0]
    if not widths:
        return None
    chunked = RowFrame(frame.width, frame.vector, frame.width // widths[0])
    chunked.check_invariants()
    return chunked


def takes_chunks(translation: Translation) -> bool:
    """Whether a body translated on a chunk of a row can be computed chunk by chunk: only
    assignments, each of one variable once, and comments (no scoped buffers, no nested
    functions). (The positions of the columns are each chunk's: the masks' prologue, which
    every chunk runs, offsets them by the chunk's first column.)"""
    if translation.loops:
        return False
    if not all(isinstance(line, Assign | Comment | SourceLine) for line in translation.lines):
        return False
    # Each variable assigned once, to one name: the passes place a statement by its target.
    targets = [line.targets for line in translation.lines if isinstance(line, Assign)]
    names = [t[0].text for t in targets if len(t) == 1 and isinstance(t[0], Name)]
    return len(names) == len(targets) == len(set(names))
