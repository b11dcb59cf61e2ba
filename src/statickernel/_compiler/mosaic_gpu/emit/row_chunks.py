"""The body of a row computed in chunks (`plan.row_chunks`): passes over the row's chunks.

The translation is of the body on one chunk: its vectors are a chunk's columns, and each
reduction of the row (`row_reductions`) is that chunk's part. The statements are scheduled
in passes. A reduction is computed in the first pass after every scalar it depends on is
known: a pass walks the chunks, computes the vectors its reductions read, and combines each
chunk's part into the row's (a sum adds, a max takes the larger). The scalar statements that
follow a pass's reductions run once after it. A last pass walks the chunks again and stores
each result's chunk. Each pass loads the chunks of the operands it reads from shared memory.
"""

import dataclasses
from collections.abc import Mapping, Sequence

from ...ir.names import CHUNK
from ...ir.nodes import (
    Assign,
    BinOp,
    Comment,
    Const,
    Expr,
    For,
    Literal,
    Name,
    Operator,
    SourceLine,
    Stmt,
    call,
)
from ...ir.nodes import names_read as reads_of
from ..lower.rules import reduction_identity
from ..pallas import RowFrame

__all__ = ["ChunkedRow", "chunk_start", "chunked_row_body"]

_COMBINE = {"reduce_sum": "lax.add", "reduce_max": "jnp.maximum", "reduce_min": "jnp.minimum"}


@dataclasses.dataclass(frozen=True)
class ChunkedRow:
    """What the passes read: the body on one chunk, and how each chunk reaches registers
    and goes out."""

    lines: tuple[Stmt, ...]
    """The translated body on one chunk: assignments, and the comments above them."""
    reductions: Mapping[str, tuple[str, str]]
    """Each reduction of the row: variable -> (primitive, dtype)."""
    vectors: frozenset[str]
    """The variables the translation holds as vectors: chunks of the row."""
    loads: Mapping[str, tuple[Stmt, ...]]
    """Each operand read chunk by chunk -> the statements that load its chunk (the loop's
    `chunk`, from column `chunk_start(frame)`)."""
    frame: RowFrame
    prologue: tuple[Stmt, ...] = ()
    """What each walk over the chunks computes first: the chunk's edge masks, vectors of
    the chunk."""


@dataclasses.dataclass(frozen=True)
class _Line:
    target: str
    reads: frozenset[str]
    comments: tuple[Stmt, ...]  # the comments just above it
    stmt: Assign


def chunked_row_body(row: ChunkedRow, stores: Sequence[Stmt]) -> list[Stmt]:
    """The passes over the row's chunks, then the results' `stores`, each of the loop's
    chunk."""
    lines = _assignments(row.lines)
    vectors = _vectors(lines, row)
    avail = _availability(lines, row)
    passes = 1 + max((avail[r] for r in row.reductions), default=-1)
    out: list[Stmt] = []
    emitted: set[str] = set()
    out += _scalars_after(lines, vectors, avail, row, -1, emitted)
    for number in range(passes):
        reductions = [
            ln for ln in lines if ln.target in row.reductions and avail[ln.target] == number
        ]
        out += _pass(number, reductions, lines, vectors, row, emitted)
        out += _scalars_after(lines, vectors, avail, row, number, emitted)
    if stores:
        reads = frozenset().union(*(reads_of(stmt) for stmt in stores))
        body = _vector_lines(reads, lines, vectors, row, emitted_comments=emitted)
        out.append(Comment("The results, chunk by chunk."))
        out.append(For(CHUNK, row.frame.chunks, (*_loads(body, reads, row), *body, *stores)))
    return out


def _assignments(lines: Sequence[Stmt]) -> list[_Line]:
    found: list[_Line] = []
    comments: list[Stmt] = []
    for stmt in lines:
        if isinstance(stmt, Comment | SourceLine):
            comments.append(stmt)
            continue
        assert isinstance(stmt, Assign) and len(stmt.targets) == 1
        (target,) = stmt.targets
        assert isinstance(target, Name)
        found.append(_Line(target.text, reads_of(stmt), tuple(comments), stmt))
        comments = []
    return found


def _vectors(lines: list[_Line], row: ChunkedRow) -> set[str]:
    """The variables that hold a chunk: the translation's vectors, the chunks loaded, and
    every value computed from one that is not a reduction."""
    masks = {
        t.text
        for m in row.prologue
        if isinstance(m, Assign)
        for t in m.targets
        if isinstance(t, Name)
    }
    vectors = set(row.vectors) | set(row.loads) | masks
    for line in lines:
        if line.target not in row.reductions and line.reads & vectors:
            vectors.add(line.target)
    return vectors


def _availability(lines: list[_Line], row: ChunkedRow) -> dict[str, int]:
    """For each variable, the pass after which it is known (-1: before the first). A vector
    is known in any pass after those of the scalars it reads; a reduction is computed in the
    pass after everything it reads is known."""
    avail: dict[str, int] = {}
    for line in lines:
        before = max((avail.get(name, -1) for name in line.reads), default=-1)
        avail[line.target] = before + 1 if line.target in row.reductions else before
    return avail


def _vector_lines(
    reads: frozenset[str],
    lines: list[_Line],
    vectors: set[str],
    row: ChunkedRow,
    *,
    emitted_comments: set[str],
) -> list[Stmt]:
    """The vector statements that compute `reads` in a chunk, in their order."""
    by_target = {line.target: line for line in lines}
    needed: set[str] = set()
    stack = [name for name in reads if name in by_target and name in vectors]
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        stack += [r for r in by_target[name].reads if r in by_target and r in vectors]
    out: list[Stmt] = []
    for line in lines:
        if line.target in needed and line.target not in row.reductions:
            out += _with_comments(line, emitted_comments)
    return out


def _with_comments(line: _Line, emitted: set[str]) -> list[Stmt]:
    """The statement, with the comments above it the first time it is written."""
    first = line.target not in emitted
    emitted.add(line.target)
    return [*(line.comments if first else ()), line.stmt]


def _pass(
    number: int,
    reductions: list[_Line],
    lines: list[_Line],
    vectors: set[str],
    row: ChunkedRow,
    emitted: set[str],
) -> list[Stmt]:
    """One walk over the chunks: the vectors its reductions read, each chunk's reductions,
    and their combination into the row's."""
    reads = frozenset().union(*(line.reads for line in reductions))
    body = _vector_lines(reads, lines, vectors, row, emitted_comments=emitted)
    whole = {line.target: Name(f"{line.target}_row") for line in reductions}
    start: list[Stmt] = [Comment(f"Pass {number + 1} over the row's chunks: its reductions.")]
    combined: list[Stmt] = []
    for line in reductions:
        prim, dtype = row.reductions[line.target]
        identity = Literal(reduction_identity(prim, dtype), dtype, weak_type=False)
        start.append(Assign((whole[line.target],), identity))
        body += _with_comments(line, emitted)
        part = call(_COMBINE[prim], whole[line.target], Name(line.target))
        combined.append(Assign((whole[line.target],), part))
    loop = For(CHUNK, row.frame.chunks, (*_loads(body, reads, row), *body, *combined))
    finals = [Assign((Name(t),), w) for t, w in whole.items()]
    return [*start, loop, *finals]


def _loads(body: list[Stmt], reads: frozenset[str], row: ChunkedRow) -> list[Stmt]:
    """The chunk's masks, then the chunk of each operand the statements (or `reads`) read."""
    used = set(reads).union(*(reads_of(stmt) for stmt in body))
    loads = [stmt for name, load in row.loads.items() if name in used for stmt in load]
    return [*row.prologue, *loads]


def _scalars_after(
    lines: list[_Line],
    vectors: set[str],
    avail: dict[str, int],
    row: ChunkedRow,
    number: int,
    emitted: set[str],
) -> list[Stmt]:
    """The scalar statements known after pass `number` (-1: before the first)."""
    out: list[Stmt] = []
    for line in lines:
        scalar = line.target not in vectors and line.target not in row.reductions
        if scalar and avail[line.target] == number:
            out += _with_comments(line, emitted)
    return out


def chunk_start(frame: RowFrame) -> Expr:
    """The first column of the loop's chunk."""
    return BinOp(Operator.MUL, Name(CHUNK), Const(frame.chunk_width))
