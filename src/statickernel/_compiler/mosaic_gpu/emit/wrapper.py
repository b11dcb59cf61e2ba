"""The jitted wrapper's statements around the launch: the operands made addressable before it
(host padding, a 4-bit operand's view by steps), and the results finished after it (partials
combined across blocks or added across the parts of a split loop)."""

from ...ir.nodes import Assign, Comment, Const, Expr, Name, Stmt, Tuple, call
from ...trace.crossblock import combined
from ..plan.plan import LaunchPlan, OperandPlan

__all__ = ["finished_results", "prepared_inputs"]


def prepared_inputs(inputs: list[OperandPlan]) -> list[Stmt]:
    """Each operand padded on the host where TMA or WGMMA cannot address it as it is, and a
    4-bit operand viewed by the steps of its loop."""
    body: list[Stmt] = []
    for op in inputs:
        if op.host_padded:
            pads = Tuple(
                tuple(Const((0, g - s)) for s, g in zip(op.shape, op.gmem_shape, strict=False))
            )
            why = (
                "pad for WGMMA's tiled shared memory"
                if op.swizzle
                else "rows are not a multiple of 16 bytes: pad for TMA"
            )
            why = "pad to whole steps of its loop" if op.column_steps else why
            why = "a pool of one page: pad with a page of zeros" if op.pages else why
            body.append(Comment(f"`{op.name}` {why} (extra copy)."))
            body.append(Assign((Name(op.name),), call("jnp.pad", Name(op.name), pads)))
        if op.flat and len(op.gmem_shape) == 2:
            what = (
                f"`{op.name}` rows are not a multiple of 16 bytes: addressed flattened (no copy)."
            )
            body.append(Comment(what))
            body.append(Assign((Name(op.name),), call("jnp.reshape", Name(op.name), Const((-1,)))))
        if op.column_steps:
            *rows, columns = op.gmem_shape
            view = (*rows, op.column_steps, columns // op.column_steps)
            what = f"`{op.name}` is 4-bit: each step's block is copied from column 0 of this view."
            body.append(Comment(what))
            body.append(Assign((Name(op.name),), call("jnp.reshape", Name(op.name), Const(view))))
    return body


def finished_results(plan: LaunchPlan, outs: list[Expr]) -> list[Stmt]:
    """The results reduced across blocks, combined in place in `outs`, each in a fixed order
    (a split loop's parts are added by its schedule's emitter, `emit.split`)."""
    body: list[Stmt] = []
    for cross in plan.cross_blocks:
        op = plan.results[cross.index]
        then = f", then a {cross.outer} over {cross.kept}" if cross.outer else ""
        what = f"one partial {cross.combine} per block; combined here, in a fixed order"
        body.append(Comment(f"`{op.name}`: {what}{then}."))
        body.append(Assign((Name(op.name),), combined(cross, outs[cross.index], len(op.batch))))
        outs[cross.index] = Name(op.name)
    return body
