"""Slices, splits and concatenations of blocks along their columns: `v[:, :half]`,
`jnp.split(v, 2, axis=1)`, `jnp.concatenate([-x2, x1], axis=1)` (RoPE's rotate-half).

The WGMMA layout tiles a block by 64 rows and 8 columns in registers, so a slice whose bounds are
multiples of 8 columns is a choice of register tiles and costs nothing, and a concatenation sets
tiles side by side; Mosaic GPU slices no other way. A slice of the frame's columns is held in
registers of its own width (`Geometry.own_width`). Its columns lie inside the array, for the
block holds its dim whole, so it needs no edge mask; a concatenation back to the frame's width
is padded with zeros to the frame's registers.
"""

import dataclasses
from collections.abc import Mapping, Sequence

from ...._errors import JoinedColumnsError, SliceError
from ...ir.nodes import Const, Expr, Kind, List, Literal, Slice, Subscript
from ...ir.nodes import call as ir_call
from ...trace.body import Atom, Eqn
from .. import hardware as hw
from ..pallas import full, is_8bit
from .context import Rule, Support, Translator, Where
from .slice_padding import join_fix, part_slice_fix, slice_fix

__all__ = ["SLICE_RULES"]

_TILE_COLS = hw.WGMMA_COLS  # the WGMMA layout's register tile is 64 rows by 8 columns


def _slice(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    strides = eqn.param("strides")
    if strides is not None and any(int(s) != 1 for s in strides):
        raise tr.fail(
            eqn,
            "the body slices a block with a step (x[:, ::2]), which Mosaic GPU cannot lower",
            "lay the operand out so that the values are contiguous (for an interleaved RoPE, "
            "permute the columns of q, k and the weights that make them outside the kernel), "
            "or slice it outside the kernel",
        )
    starts = tuple(int(i) for i in eqn.param("start_indices"))
    limits = tuple(int(i) for i in eqn.param("limit_indices"))
    _take_columns(tr, eqn, atom, starts, limits, eqn.outputs[0])


def _split(tr: Translator, eqn: Eqn) -> None:
    (atom,) = eqn.inputs
    axis = int(eqn.param("axis"))
    shape = tr.logical_shape(atom)
    sizes = [int(size) for size in eqn.param("sizes")]
    cuts = tuple(sum(sizes[:i]) for i in range(1, len(sizes)))  # every piece's, for the fix
    start = 0
    for size, out in zip(sizes, eqn.outputs, strict=True):
        starts = tuple(start if a == axis else 0 for a in range(len(shape)))
        limits = tuple(start + size if a == axis else n for a, n in enumerate(shape))
        _take_columns(tr, eqn, atom, starts, limits, out, cuts)
        start += size


def _take_columns(
    tr: Translator,
    eqn: Eqn,
    atom: Atom,
    starts: tuple[int, ...],
    limits: tuple[int, ...],
    out: str,
    cuts: tuple[int, ...] = (),
) -> None:
    """`out = atom[starts:limits]`, a slice along the last axis of a block or a per-column
    vector (a constant block's slice is the constant); `cuts`, the other bounds of a split the
    slice is one piece of."""
    shape = tr.logical_shape(atom)
    kind = tr.kind(atom)
    dtype = tr.dtype(atom)
    changed = [a for a, n in enumerate(shape) if (starts[a], limits[a]) != (0, n)]
    if kind is Kind.SCALAR or not changed:
        tr.alias(dataclasses.replace(eqn, outputs=(out,)), atom, kind)
        return
    axis = len(shape) - 1
    _check_columns(tr, eqn, kind, dtype, changed, axis, "slices")
    start, stop = starts[axis], limits[axis]
    _check_alignment(
        tr,
        eqn,
        ((start, "start"), (stop, "end")),
        f"[{start}:{stop}] of {shape[axis]} columns",
        shape[axis],
        cuts=cuts,
    )
    first = Const(start) if start else None
    index = (*(Slice() for _ in range(axis)), Slice(first, Const(stop)))
    tr.assign(dataclasses.replace(eqn, outputs=(out,)), kind, Subscript(tr.source(atom), index))


def _concatenate(tr: Translator, eqn: Eqn) -> None:
    dimension = int(eqn.param("dimension"))
    out_shape = tr.logical_shape(Atom(eqn.outputs[0]))
    kind = Kind.TILE if len(out_shape) == 2 else Kind.COL
    last = len(out_shape) - 1
    for atom in eqn.inputs:
        have = tr.kind(atom)
        have = kind if have is Kind.SCALAR else have
        _check_columns(tr, eqn, have, tr.dtype(atom), [dimension], last, "concatenates")
    widths = [tr.logical_shape(a)[dimension] if a.var else 1 for a in eqn.inputs]
    # A join to the frame's width (a joined result's columns) may end off a tile: the last
    # piece keeps its padded tile, whose columns past the edge the frame's masks cover.
    frame_width = out_shape[-1] == tr.g.col_size and tr.g.own_width(kind, out_shape) is None
    if frame_width and tr.g.col_parts:
        _join_parts_apart(tr, eqn, kind, widths)
        return
    edges, total = [], 0
    for width in widths[:-1]:
        total += width
        edges.append((total, "join"))
    ends = () if frame_width else ((sum(widths), "width"),)
    joined = " + ".join(str(w) for w in widths) + " columns"
    _check_alignment(tr, eqn, (*edges, *ends), joined, sum(widths), widths)
    if frame_width:
        widths[-1] = hw.round_up(widths[-1], _TILE_COLS)
    _assign_join(tr, eqn, kind, widths)


def _join_parts_apart(tr: Translator, eqn: Eqn, kind: Kind, widths: list[int]) -> None:
    """The joined columns where a block holds the parts apart (`Geometry.col_parts`): each
    part in its own register tiles, the next from the tile after it; the pieces must be the
    parts, whole and in order."""
    sizes = [size for _, size in tr.g.col_parts]
    if widths != sizes:
        dim = tr.g.col_dim or ""
        raise tr.fail(
            eqn,
            f"the body joins pieces of {' + '.join(map(str, widths))} columns into {dim}, "
            f"whose parts ({' + '.join(map(str, sizes))} columns) a block holds apart, each "
            "from a register tile of its own",
            f"join the parts of {dim} whole, in order: jnp.concatenate([...], axis=1) of one "
            f"value of each of {', '.join(dim.split('+'))}; slice or join them further after "
            "the kernel",
            error=JoinedColumnsError,
            expected=f"one piece a part: {' + '.join(map(str, sizes))} columns",
            dim=dim,
        )
    _assign_join(tr, eqn, kind, [hw.round_up(w, _TILE_COLS) for w in widths])


def _assign_join(tr: Translator, eqn: Eqn, kind: Kind, widths: list[int]) -> None:
    """`jnp.concatenate` of the pieces, each taking `widths[i]` of its registers' columns,
    padded with zeros to the output's registers."""
    out_shape = tr.logical_shape(Atom(eqn.outputs[0]))
    last = len(out_shape) - 1
    pieces: list[Expr] = []
    for atom, width in zip(eqn.inputs, widths, strict=True):
        piece = tr.as_kind(atom, kind, tr.logical_shape(atom))
        held = tr.g.register_shape(kind, tr.logical_shape(atom) or None)[-1]
        if held != width:  # a block of its own width padded in registers: its columns alone
            piece = Subscript(piece, (*([Slice()] * last), Slice(None, Const(width))))
        pieces.append(piece)
    registers = tr.g.register_shape(kind, out_shape)[-1]
    if registers > sum(widths):
        # The frame's width or a dim a constant sizes, padded in registers: the columns past
        # the edge hold zeros.
        pad_shape = (*tr.g.shape(kind)[:-1], registers - sum(widths))
        dtype = tr.trace.aval(eqn.outputs[0])[1]
        pieces.append(full(Literal(0, dtype, weak_type=True), pad_shape, dtype, kind))
    axis = Const(len(out_shape) - 1)
    tr.assign(eqn, kind, ir_call("jnp.concatenate", List(tuple(pieces)), axis=axis))


def _check_columns(
    tr: Translator,
    eqn: Eqn,
    kind: Kind,
    dtype: str,
    axes: Sequence[int],
    last: int,
    verb: str,
) -> None:
    """Only a block's or a per-column vector's columns, held whole, in the block form."""
    if kind not in (Kind.TILE, Kind.COL) or any(a != last for a in axes):
        what = "a per-row vector" if kind is Kind.ROW else "a block along its rows"
        if kind in (Kind.LOOP_TILE, Kind.LOOP_COL):
            what = "a value along the loop dim"
        shifted = (
            f"to read a block shifted along its rows (jnp.roll or a join with zeros: a causal "
            f'convolution\'s taps), load it shifted, sk.load(x, offset={{"{tr.g.row_dim}": -3}}) '
            f"for the block 3 rows of {tr.g.row_dim} back, the fill before the array; otherwise "
            if kind in (Kind.TILE, Kind.ROW)
            else ""
        )
        raise tr.fail(
            eqn,
            f"the body {verb} {what}; blocks are sliced and joined along their columns only",
            f"{shifted}slice or join blocks along axis 1 (the columns), or do it outside the "
            "kernel",
            error=SliceError,
            expected="a slice or join of a block's columns",
        )
    if tr.g.col_tiled:
        raise tr.fail(
            eqn,
            f"the body {verb} blocks along {tr.g.col_dim}, which the grid splits: each block "
            "holds only part of that dim",
            f"hold {tr.g.col_dim} whole: drop it from tile= in the decorator; to read a block "
            f"shifted along {tr.g.col_dim} (jnp.roll), load it shifted instead, "
            f'sk.load(x, offset={{"{tr.g.col_dim}": -3}}) for the block 3 columns back',
            error=SliceError,
            expected=f"{tr.g.col_dim} held whole by the block",
            dim=tr.g.col_dim,
        )
    if is_8bit(dtype):
        raise tr.fail(
            eqn,
            f"the body {verb} a block of {dtype}, which Mosaic GPU holds in 8-bit register tiles",
            f"cast it first, e.g. v.astype(jnp.int32), and cast the result back to {dtype}",
            error=SliceError,
            expected="a block of 16- or 32-bit values",
        )


def _check_alignment(
    tr: Translator,
    eqn: Eqn,
    bounds: Sequence[tuple[int, str]],
    actual: str,
    width: int,
    joined_widths: Sequence[int] = (),
    cuts: Sequence[int] = (),
) -> None:
    """Every bound on the register layout's 8-column tiles, at the call (the declaration's
    sizes are probes). `width` is the columns of the value sliced, or of the join;
    `joined_widths` the widths a join puts side by side; `cuts` the equation's other bounds
    (a split's), which the fix pads too."""
    if tr.g.probe_sizes:
        return
    off = [(n, name) for n, name in bounds if n % _TILE_COLS]
    if not off:
        return
    n, name = off[0]
    raise tr.fail(
        eqn,
        f"the body slices or joins blocks at column {n} (the {name}), off the register "
        f"layout's tiles of {_TILE_COLS} columns",
        _padding_fix(tr, [*(b for b, _ in bounds), *cuts], width, joined_widths),
        actual,
        error=SliceError,
        expected=f"bounds and widths that are multiples of {_TILE_COLS} columns",
        dim=tr.g.col_dim,
    )


def _padding_fix(
    tr: Translator, bounds: Sequence[int], width: int, joined_widths: Sequence[int]
) -> str:
    """The padding that moves every bound onto a tile and keeps every value in its place."""
    dim = tr.g.col_dim or "the columns"
    # A joined dim's name is a sum of names (declare.joined), which no other dim's can be.
    if "+" not in dim:
        whole = width if width == tr.g.col_size else None
        return slice_fix(dim, whole, bounds, join=bool(joined_widths))
    parts = tr.g.part_sizes
    if joined_widths:  # a join of some of the parts, or of other pieces
        return join_fix(dim)
    return part_slice_fix(dim, parts, width, [b for b in bounds if b != width])


_NOTE = (
    "in the block form, along a block's columns held whole, at multiples of 8 columns (the "
    "WGMMA layout's register tiles; the row form's and the strided block's layouts have none)"
)
_RULE = Rule(_slice, support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.NO)), note=_NOTE)
SLICE_RULES: Mapping[str, Rule] = {
    "slice": _RULE,
    "split": Rule(_split, support=_RULE.support, note=_NOTE),
    "concatenate": Rule(_concatenate, support=_RULE.support, note=_NOTE),
}
