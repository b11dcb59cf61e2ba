"""Persistent CTAs: each CTA walks every `ctas`-th block, `stages` blocks' loads in flight,
each loaded block in a shared-memory slot a stage, refilled once the slot's block has been
read. Taken where the form chose it with its blocks (the row form), or where the form allows
it and it keeps more loads in flight than one block a CTA (the strided block)."""

from ...._targets import GpuTarget, occupancy
from .. import hardware as hw
from ..layout.blocks import BlockLayout
from ..plan import schedule as figures
from ..plan.operands import OperandPlan, Role
from ..plan.schedule import Persistent, ScheduleKind, schedule_figures
from .base import ScheduleChoice, ScheduleInputs, check_blocks_fit, once_bytes

__all__ = ["PersistentBlocks", "persistent_blocks"]

# A persistent block-form launch keeps this many buffers of each operand, else two.
_BLOCK_STAGES = (3, 2)


class PersistentBlocks:
    def propose(self, inputs: ScheduleInputs) -> ScheduleChoice | None:
        plan = inputs.plan
        # A buffer the body reads itself (a shifted load's) is copied once, not staged.
        # Copies addressed by data are made by the launch of one block a CTA too.
        if plan.loops or plan.buffers_read_by_body or plan.spec.copies_by_data:
            return None
        if any(op.in_place and not op.dims for op in inputs.results):  # a 0-d result's element
            return None
        smem = plan.held_smem_bytes
        staged = [op for op in inputs.operands if plan.form.staged(op)]
        stage_bytes = [hw.round_up(op.smem_bytes, hw.SMEM_BUFFER_ALIGN) for op in staged]
        persistent = plan.form.persistent
        if (
            persistent is None
            and plan.form.walks_blocks_when_it_pays
            and _one_box_each(plan.layout, inputs.operands, inputs.results)
        ):
            persistent = persistent_blocks(plan.layout.grid, smem, stage_bytes)
        if persistent is None:
            return None
        smem += (persistent.stages - 1) * (sum(stage_bytes) + hw.BARRIER_BYTES * len(staged))
        check_blocks_fit(plan, smem)
        in_flight = once_bytes(inputs.operands) + (persistent.stages - 1) * sum(
            op.smem_bytes for op in staged
        )
        kind = ScheduleKind.PERSISTENT
        schedule = schedule_figures(kind, persistent.ctas, persistent.stages, in_flight, smem)
        return ScheduleChoice(schedule, smem, inputs.operands)


def persistent_blocks(
    grid: tuple[int, ...], smem_bytes: int, stage_bytes: list[int]
) -> Persistent | None:
    """A persistent launch for a block form of `smem_bytes` whose loaded blocks take
    `stage_bytes` each: two CTAs an SM (else one), three stages (else two), when there are
    blocks for at least two a CTA and it keeps as many loads in flight as co-resident CTAs of
    one block each would (and keeps them in flight, where those come in bursts). None
    otherwise. (The results' buffers are in `smem_bytes`: one serves every block.)"""
    target = figures.PLANNED_FOR
    threads = figures.WARPGROUP_THREADS
    blocks = 1
    for g in grid:
        blocks *= g
    if not stage_bytes:
        return None
    loads = sum(stage_bytes)
    one_block = _resident(target, smem_bytes, threads) * loads
    for resident in (2, 1):
        ctas = figures.sm_count() * resident
        if blocks < 2 * ctas:
            continue
        for stages in _BLOCK_STAGES:
            smem = smem_bytes + (stages - 1) * (loads + hw.BARRIER_BYTES * len(stage_bytes))
            fits = _resident(target, smem, threads) >= resident
            if fits and smem <= target.smem_per_cta and resident * stages * loads >= one_block:
                return Persistent(ctas, stages)
    return None


def _resident(target: GpuTarget, smem_bytes: int, threads: int) -> int:
    """CTAs an SM holds with this shared memory, before registers are counted."""
    return occupancy(target, 0, smem_bytes, threads).ctas_per_sm


def _one_box_each(
    layout: BlockLayout, operands: tuple[OperandPlan, ...], results: tuple[OperandPlan, ...]
) -> bool:
    """Every block copied in one TMA box that starts inside its array: no batch dims, and no
    whole dim split in boxes or padded past the array."""
    for op in (*operands, *results):
        if op.batch or (op.role is Role.INPUT and not op.loaded):
            continue
        for name, gmem in zip(op.dims, op.block_gmem_shape, strict=True):
            d = layout.dim(name)
            if d.batched or (not d.tiled_by and (d.boxes != 1 or d.extent != gmem)):
                return False
    return not any(d.batched for d in layout.dims)
