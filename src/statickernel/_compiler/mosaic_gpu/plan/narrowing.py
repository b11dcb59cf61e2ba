"""Blocks narrowed by the plan: a launch of too few blocks over a long loop takes narrower
blocks, where the call leaves their constants at the kernel's defaults.

A product of a few rows by a large weight (every decode step of a served model) in a
matmul's declared blocks, BM=128 by BN=128 at M=64 and N=4096, is 32 blocks for 132 SMs.
The split loop (`plan/split.py`) fills the SMs by cutting K into parts, but each part writes
float32 partial sums that the wrapper reads back: at M=64 that is 30 % more HBM traffic than
the weight itself. Blocks of 64 x 32 instead are 128 blocks, each streaming its columns of
the weight whole with no partials: one read of the weight, `a` once (L2 serves its other
reads), the result once.

So where the plan splits a loop, it also plans each tile constant the call did not pass
halved (down to 8 elements, while the blocks stay within one wave of the SMs), and keeps the
specialization with the lowest floor scaled by the SMs its CTAs leave idle
(`score`), then the fewest HBM bytes, the least shared memory, and the declared
blocks first. A block the rules refuse (WGMMA's M, a TMA box) is not a candidate. The
narrowed constants are the body's: the module is generated for them and its header says
so; a constant the call passes (`BN=128`) is kept as passed.
"""

import dataclasses
import itertools
import math
from collections.abc import Mapping

from .. import hardware as hw
from ..layout.blocks import DimLayout

__all__ = ["NARROWEST_BLOCK", "Narrowing", "narrowing_candidates", "score"]

# A narrowed block keeps at least this many elements.
NARROWEST_BLOCK = 8


@dataclasses.dataclass(frozen=True)
class Narrowing:
    """The tile constants the plan narrowed, and what the declared ones would have done."""

    declared: tuple[tuple[str, int], ...]
    """Each narrowed constant's declared value."""
    chosen: tuple[tuple[str, int], ...]
    """Each narrowed constant's value in this plan."""
    declared_ctas: int
    declared_hbm_bytes: int
    declared_split: int
    """The parts the declared blocks split the loop into (1: none)."""
    declared_smem_bytes: int
    ctas: int
    hbm_bytes: int
    smem_bytes: int
    sms: int

    def check_invariants(self) -> None:
        assert [n for n, _ in self.declared] == [n for n, _ in self.chosen]
        assert all(c < d for (_, d), (_, c) in zip(self.declared, self.chosen, strict=True))

    def __str__(self) -> str:
        changes = ", ".join(
            f"{name} {d} -> {c}"
            for (name, d), (_, c) in zip(self.declared, self.chosen, strict=True)
        )
        split = (
            f", split into {self.declared_split} parts whose partial sums the wrapper adds"
            if self.declared_split > 1
            else ""
        )
        keep = ", ".join(f"{name}={d}" for name, d in self.declared)
        return (
            f"narrowed: {changes} (the call left them at their defaults). Why: the declared "
            f"blocks run {self.declared_ctas:,} CTAs{split}, {self.declared_hbm_bytes:,} B "
            f"HBM, {self.declared_smem_bytes:,} B of shared memory a CTA; these run "
            f"{self.ctas:,} CTAs on {self.sms} SMs, {self.hbm_bytes:,} B, "
            f"{self.smem_bytes:,} B. Pass {keep} to keep the declared blocks"
        )


def narrowing_candidates(
    dims: tuple[DimLayout, ...],
    consts: Mapping[str, object],
    narrowable: frozenset[str],
    sms: int,
) -> list[dict[str, int]]:
    """The tile constants to plan besides the declared ones: each constant in `narrowable`
    that tiles a dim, halved down to `NARROWEST_BLOCK` (or kept), in every combination that
    narrows one at least and whose blocks fit one wave of `sms`."""
    tiled = [
        d
        for d in dims
        if d.tiled_by in narrowable and isinstance(consts.get(d.tiled_by), int) and not d.batched
    ]
    if not tiled:
        return []
    others = math.prod(hw.cdiv(d.size, d.block) for d in dims if d.grid_axis is not None)
    others //= math.prod(hw.cdiv(d.size, d.block) for d in tiled)
    options = [_halvings(d.block) for d in tiled]
    candidates = []
    for blocks in itertools.product(*options):
        if all(b == d.block for b, d in zip(blocks, tiled, strict=True)):
            continue
        count = others * math.prod(hw.cdiv(d.size, b) for d, b in zip(tiled, blocks, strict=True))
        if count <= sms:
            candidates.append(
                {d.tiled_by: b for d, b in zip(tiled, blocks, strict=True) if d.tiled_by}
            )
    return candidates


def _halvings(block: int) -> list[int]:
    values = [block]
    while values[-1] % 2 == 0 and values[-1] // 2 >= NARROWEST_BLOCK:
        values.append(values[-1] // 2)
    return values


def score(floor_seconds: float, ctas: int, sms: int) -> float:
    """A launch's floor scaled by the SMs it leaves idle: a launch of half the SMs takes twice
    its floor at best, whether its loads or its products bound it."""
    return floor_seconds * sms / min(ctas, sms)
