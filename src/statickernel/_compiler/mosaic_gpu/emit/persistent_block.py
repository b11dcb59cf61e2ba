"""The block function of the strided block's persistent launch (`ScheduleKind.PERSISTENT`):
CTA `cta` takes blocks cta, cta + ctas, ... each operand's block in a slot a stage."""

import dataclasses
import math

from ...ir.names import LocalNames, barrier_ref, block_function, smem_ref
from ...ir.nodes import Comment, Const, Expr, ExprStmt, FunctionDef, Name, Stmt, Subscript, call
from ..lower.translation import LoopBlock
from ..pallas import store
from ..plan.plan import OperandPlan
from .boxes import oob_mode
from .launches import ModuleGenerator, PersistentPieces, ScheduleEmitter
from .persistent import PersistentNames, persistent_statements

__all__ = ["PERSISTENT_BLOCKS", "persistent_block_function"]


def persistent_block_function(gen: PersistentPieces) -> FunctionDef:
    """CTA `cta` takes blocks cta, cta + ctas, ... with `stages` blocks' loads in flight:
    each operand has a shared-memory slot a stage, refilled once its block is in
    registers and the step has synchronized (commit_smem)."""
    plan = gen.plan
    assert not gen.scalars, "a persistent block has no scalar operands"
    ctas, stages = gen.schedule.ctas, gen.schedule.stages
    blocks = math.prod(plan.grid)

    arrays = [op.name for op in (*plan.operands, *plan.results)]
    launch = PersistentNames.around(LocalNames.around(arrays, plan.grid_names))

    def block_indices() -> list[Stmt]:
        return launch.block_indices(ctas, plan.grid, plan.grid_names)

    def slot_of(op: OperandPlan) -> Expr:
        return Subscript(Name(f"{smem_ref(op.name)}.at"), (launch.slot,))

    def barrier_of(op: OperandPlan) -> Expr:
        return Subscript(Name(f"{barrier_ref(op.name)}.at"), (launch.slot,))

    copies: list[Stmt] = []
    for op in gen.loaded:
        promise = oob_mode(gen.plan, op)
        for gmem_box, _ in gen._boxes(op):
            copy = call("plgpu.copy_gmem_to_smem", gmem_box, slot_of(op), barrier_of(op), **promise)
            copies.append(ExprStmt(copy))
    step: list[Stmt] = [
        *block_indices(),
        *[ExprStmt(call("plgpu.barrier_wait", barrier_of(op))) for op in gen.loaded],
        *gen.masks(),
    ]
    for op in gen.loaded:
        step += gen._load(op, slot_of(op))
    step.append(Comment("The kernel body, one statement per traced op."))
    for line in gen.t.lines:
        assert not isinstance(line, LoopBlock), "a persistent block has no loops"
        step.append(line)
    wait = ExprStmt(call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True)))
    step.append(Comment("The last block's stores have read the results' buffers."))
    step.append(wait)
    for op, value in zip(plan.results, gen.t.outputs, strict=True):
        assert value is not None
        step.append(store(Name(smem_ref(op.name)), value, gen.new_store_api, plan.flat_frame))
    step.append(ExprStmt(call("plgpu.commit_smem")))
    for op in plan.results:
        assert not op.last_block_rows, "a persistent launch walks no batch entries"
        for gmem_box, smem_box in gen._boxes(op):
            step.append(ExprStmt(call("plgpu.copy_smem_to_gmem", smem_box, gmem_box)))
    body: list[Stmt] = [
        Comment(
            f"Persistent: CTA `cta` takes blocks cta, cta + {ctas}, ... of the {blocks}, "
            f"with {stages} in flight."
        ),
        *persistent_statements(
            blocks,
            ctas,
            stages,
            (*block_indices(), *copies),
            [],
            step,
            "The slot's block is in registers: the block `stages` ahead takes it.",
            launch,
        ),
        wait,
    ]
    return FunctionDef(block_function(plan.kernel), gen.params(), tuple(body))


@dataclasses.dataclass(frozen=True)
class _PersistentBlocks(ScheduleEmitter):
    """Persistent CTAs that walk the blocks, each in a shared-memory slot a stage."""

    def block_function(self, gen: ModuleGenerator) -> FunctionDef:
        return persistent_block_function(gen)


PERSISTENT_BLOCKS = _PersistentBlocks()
