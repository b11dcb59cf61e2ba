"""The plans of results reduced across blocks: each block's (or each persistent CTA's)
partial as a result of the launch, and the notes that say how they combine."""

import math
from collections.abc import Mapping

from ...trace.crossblock import CrossBlock
from .operands import OperandPlan

__all__ = ["partial_plans"]


def partial_plans(
    results: tuple[OperandPlan, ...],
    crosses: tuple[CrossBlock, ...],
    grid: Mapping[str, int],
    per_cta: bool = False,
) -> tuple[tuple[OperandPlan, ...], tuple[str, ...]]:
    """The results' plans with the partials' leading block dims, and the notes that say so.
    `grid` gives the entries along each block dim: its blocks, or with `per_cta` (the row
    form's persistent CTAs, each adding up the rows of its blocks) the CTAs."""
    plans = list(results)
    notes: list[str] = []
    for cross in crosses:
        op = plans[cross.index]
        lead = tuple(grid[d] for d in cross.per_block)
        plans[cross.index] = op.with_partials(cross.per_block, lead)
        count = math.prod(lead) if lead else 1
        along = " x ".join(f"{grid[d]} along {d}" for d in cross.per_block)
        who = f"each of the {count:,} blocks ({along}) writes" if lead else "its blocks write"
        if per_cta:
            who = f"each of the {count:,} CTAs adds up the rows of its blocks and writes"
        notes.append(
            f"`{cross.name}` lacks the tiled dim {', '.join(cross.lacks)}: {who} "
            f"a partial {cross.combine} along {cross.kept} ({count:,} x "
            f"{op.shape[-1]:,} {op.dtype}); one {cross.combine} after the launch combines them"
            + (f", then a {cross.outer} over {cross.kept}" if cross.outer is not None else "")
            + ", in a fixed order (deterministic)"
        )
    return tuple(plans), tuple(notes)
