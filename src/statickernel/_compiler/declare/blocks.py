"""The block each constant cuts along a dim: what the body sees, whatever the target."""

from collections.abc import Mapping
from typing import Any

from .spec import KernelSpec

__all__ = ["logical_blocks", "split_blocks"]


def split_blocks(spec: KernelSpec, consts: Mapping[str, Any]) -> dict[str, int]:
    """The block of every dim a constant cuts, tiled or looped: the one place that reads a
    block constant's value."""
    return {dim: int(consts[const]) for dim, const in spec.block_map.items()}


def logical_blocks(
    spec: KernelSpec, sizes: Mapping[str, int], consts: Mapping[str, Any]
) -> dict[str, int]:
    """The block the body sees along each dim: a split dim its constant's block (a loop dim is
    seen one loop block at a time), a whole dim its size."""
    blocks = split_blocks(spec, consts)
    return {dim: blocks.get(dim, size) for dim, size in sizes.items()}
