"""Code generation for a loop split across CTAs (`plan.split`): the body's statements less
the casts of its sums, its partial sums as the results, and the wrapper's sum of the parts."""

import dataclasses

from ...ir.names import block_index
from ...ir.nodes import Assign, BinOp, Comment, Const, Expr, Name, Operator, Stmt, call
from ...trace.crossblock import PostOp, PostOpKind, applied
from ..lower.translation import Translation
from ..plan.plan import LaunchPlan
from ..plan.split import LoopSplit
from .launches import ScheduleEmitter, WalkedPart

__all__ = ["SPLIT_LOOP", "combined_partials", "part_first_block", "part_steps", "partial_sums"]


def partial_sums(translation: Translation, split: LoopSplit) -> Translation:
    """The body as each CTA runs it: its statements but the casts of its sums, and as each
    result, the sum its part of the loop leaves, scaled as the body scales it. The casts are
    the wrapper's, after the parts are added."""
    lines = tuple(
        line
        for line in translation.lines
        if not (isinstance(line, Assign) and _assigns(line) & split.cast_vars)
    )
    return dataclasses.replace(
        translation, lines=lines, outputs=tuple(Name(p) for p in split.partials)
    )


def _assigns(line: Assign) -> set[str]:
    return {t.text for t in line.targets if isinstance(t, Name)}


def part_first_block(split: LoopSplit) -> Expr:
    """The first block of the loop this CTA's part walks."""
    return BinOp(Operator.MUL, Name(block_index(split.axis)), Const(split.part_steps))


def part_steps(split: LoopSplit) -> Expr:
    """The steps this CTA's part walks: a part's, or the last part's (fewer) steps left."""
    if split.last_part_steps == split.part_steps:
        return Const(split.part_steps)
    left = BinOp(Operator.SUB, Const(split.steps), part_first_block(split))
    return call("lax.min", left, Const(split.part_steps))


def combined_partials(
    split: LoopSplit, index: int, name: str, partials: Expr, batch: int
) -> tuple[list[Stmt], Expr]:
    """The wrapper's comment and expression for result `index` (`name`): its parts' sums
    (axis `batch`, after the batch dims) added in order, then cast as the body casts them."""
    casts = tuple(PostOp(PostOpKind.CAST, None, dtype) for dtype in split.casts[index])
    value = applied(call("jnp.sum", partials, axis=Const(batch)), casts)
    what = f"{split.parts} partial sums along {split.axis}, added in a fixed order"
    cast = ", then cast" if split.casts[index] else ""
    return [Comment(f"{name}: {what}{cast}.")], value


def _split(plan: LaunchPlan) -> LoopSplit:
    split = plan.schedule_variant
    assert isinstance(split, LoopSplit)
    return split


@dataclasses.dataclass(frozen=True)
class _SplitLoop(ScheduleEmitter):
    """A CTA a block and part of the split loop, along a grid axis after the blocks' named
    after the loop: each stores its part's sums, which the wrapper adds and casts."""

    def translation(self, plan: LaunchPlan, translation: Translation) -> Translation:
        return partial_sums(translation, _split(plan))

    def part_axes(self, plan: LaunchPlan) -> tuple[str, ...]:
        return (_split(plan).axis,)

    def launch_grid(self, plan: LaunchPlan) -> tuple[int, ...]:
        return (*plan.grid, _split(plan).parts)

    def walked_part(self, plan: LaunchPlan, axis: str) -> WalkedPart | None:
        split = _split(plan)
        if split.axis != axis:
            return None
        fewer = part_steps(split) if split.last_part_steps != split.part_steps else None
        return WalkedPart(part_first_block(split), split.part_steps, fewer)

    def grid_text(self, plan: LaunchPlan, launched: tuple[int, ...], blocks: str) -> str:
        return f"{launched}: the blocks {blocks}, by the parts of {_split(plan).axis}"

    def finished_results(self, plan: LaunchPlan, outs: list[Expr]) -> list[Stmt]:
        split, body = _split(plan), []
        for i, op in enumerate(plan.results):
            comments, value = combined_partials(split, i, f"`{op.name}`", outs[i], len(op.batch))
            body += comments
            body.append(Assign((Name(op.name),), value))
            outs[i] = Name(op.name)
        return body


SPLIT_LOOP = _SplitLoop()
