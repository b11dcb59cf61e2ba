"""The slices of the arrays a block's copies address: this grid step's block along a tiled
dim, and a whole dim, which a block wider than the array takes from a traced zero."""

from ...ir.names import block_index
from ...ir.nodes import BinOp, Const, Expr, Name, Operator, Slice, call
from ..layout.blocks import DimLayout

__all__ = ["EDGE_START", "block_slice", "whole_slice"]

# A traced zero that boxes past a whole dim's edge start at: a box wider than the array.
EDGE_START = Name("edge_start")


def block_slice(dim: DimLayout) -> Expr:
    """This grid step's block along a tiled dim."""
    start = BinOp(Operator.MUL, Name(block_index(dim.name)), Const(dim.block))
    return call("pl.ds", start, Const(dim.block))


def whole_slice(extent: int, size: int) -> Expr:
    """A whole dim of the array: all of it, or a box of the block's `extent` from a traced
    zero where the block is wider than the array's `size` (TMA reads zeros past the edge)."""
    return Slice() if extent == size else call("pl.ds", EDGE_START, Const(extent))
