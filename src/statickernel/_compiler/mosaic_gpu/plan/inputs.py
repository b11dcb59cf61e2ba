"""What planning reads: one specialization's facts carried together (`PlanInputs`), and what
the register form it took tells the plan (`FormFacts`).

Each fact planning derives from them (the fills, a block's bytes, the declared stage count)
is derived once per specialization, here, and read from the inputs after that.
"""

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from ...._errors import ErrorContext
from ...._targets import DEFAULT_TARGET, TARGETS, GpuTarget
from ....language.context import Halo, LoadRecord, operand_fills
from ...declare.spec import KernelSpec
from ...ir.nodes import Kind
from ...trace.body import BodyTrace
from ...trace.crossblock import CrossBlock
from ...trace.splits import SplittableLoop
from .. import hardware as hw
from ..layout.blocks import BlockLayout
from ..layout.smem import block_bytes, buffer_halos, smem_bytes
from ..lower.translation import LoopBlock
from ..pallas import FlatFrame, RowFrame
from .narrowing import Narrowing
from .operands import OperandPlan
from .profile import Profile
from .schedule import Persistent

__all__ = ["CallFacts", "FormFacts", "PlanInputs"]


@dataclasses.dataclass(frozen=True)
class FormFacts:
    """What the plan needs of the register form a specialization took: its register frame,
    and what it allows the launch schedules. Each form sets these when it proposes itself
    (`forms/`); the schedules read the capabilities, never which form it is."""

    row_frame: RowFrame | None = None
    """The row form's register vector for one row; None for the other forms."""
    flat_frame: FlatFrame | None = None
    """The strided block's register frame; None for the other forms."""
    aliases: Mapping[str, str] | None = None
    """Result -> the operand whose shared-memory block it is written into, row by row."""
    block_form_smem: int = 0
    """The shared memory the block form would need: why the row form was taken."""
    persistent: Persistent | None = None
    """A persistent launch the form chose with its blocks (the row form's); else None."""
    walks_blocks_when_it_pays: bool = False
    """Whether a persistent launch may walk the blocks when it keeps more loads in flight
    (an elementwise body, which one CTA an SM computes at ease)."""
    specializes_warps: bool = False
    """Whether a matmul-shaped body may take the warp-specialized launch (the block form:
    WGMMA accumulators in the registers of whole blocks)."""
    stages_tiles_only: bool = False
    """Whether a persistent launch stages only the 2-D blocks (the row form keeps one copy
    of each per-column vector); else every loaded block has a buffer a stage."""
    copies_vectors_in_bulk: bool = False
    """Whether 1-D arrays are copied by bulk copies (the row form): a vector padded to
    16-byte multiples (or copied by 1-D boxes, `addresses_rows_flat`); a per-row result is
    written an element a row, from registers."""
    addresses_rows_flat: bool = False
    """Whether a 2-D array whose rows are not a multiple of 16 bytes is addressed flattened
    (the row form, which copies and stores a row at a time): a row loaded by 1-D TMA boxes
    and a result's row stored from registers, with no host padding (`emit.flat_rows`)."""
    stores_blocks_after_the_body: bool = True
    """Whether a result's block is stored by one copy after the body (the block and strided
    forms), so the last block of a batch entry's whole rows can copy its rows alone; the row
    form stores row by row."""
    reads_in_place: frozenset[str] = frozenset()
    """Operands read from global memory where the body uses them, never copied into shared
    memory: the row form's per-row operands, one element (a scalar in its registers) a row."""
    pipelines_loops: bool = True
    """Whether each loop of the body is a software pipeline of blocks from global memory (the
    block forms); the row form walks its loops over rows it holds whole in shared memory."""
    splits_loops: bool = False
    """Whether a loop that sums into the results may be split across CTAs (the block form,
    whose block function pipelines each CTA's part of it)."""
    notes: tuple[str, ...] = ()
    """What the plan says of the form the specialization took, and why."""

    def staged(self, op: OperandPlan) -> bool:
        """Whether a persistent launch gives `op`'s block a buffer (and a barrier) a stage."""
        return op.loaded and (op.kind == Kind.TILE or not self.stages_tiles_only)


@dataclasses.dataclass(frozen=True)
class CallFacts:
    """At a call, what the plan reports beyond the launch: the body as traced (its cost,
    numerics and approximate math are counted from it) and the profiler's options."""

    trace: BodyTrace
    profile: Profile | None = None
    notes: tuple[str, ...] = ()
    """What the constants stage changed, shown after the plan's other notes."""
    narrowable: frozenset[str] = frozenset()
    """The tile constants left at their defaults: a product may ask for another value."""
    narrowing: Narrowing | None = None
    """Narrower constants chosen over the declared ones, and why (`constants.narrowed`)."""


@dataclasses.dataclass(frozen=True)
class PlanInputs:
    """One specialization as planning reads it: its spec, block layout, dtypes, constants and
    load records, where errors point, the body's loops and masked reductions, and its form."""

    spec: KernelSpec
    layout: BlockLayout
    dtypes: Mapping[str, str]
    consts: Mapping[str, Any]
    backend: str
    loads: tuple[LoadRecord, ...]
    ctx: ErrorContext
    """Where errors point; at the declaration its bindings are empty (the sizes are probes)."""
    masked_reductions: frozenset[str] = frozenset()
    loops: tuple[LoopBlock, ...] = ()
    form: FormFacts = FormFacts()
    scratch_bytes: int = 0
    """Shared memory the body scopes for itself (a scan's buffer, a computed b staged)."""
    splittable: SplittableLoop | None = None
    """The body's loop when it sums into its carries from zero and its results are those
    sums: a launch may split it across CTAs (`schedules.split`). Else None."""
    part_steps: int = 0
    """The steps each CTA walks of a loop split across CTAs; 0 when no loop is split."""
    steps_self_contained: bool = False
    """Whether the first loop's step reads only its carries, its blocks, the block's indices
    and scalars computed from them and constants (`lower.translation.shared_step_prelude`):
    a step two consumer warpgroups can share (`schedules.consumers`)."""
    target: GpuTarget = TARGETS[DEFAULT_TARGET]
    """The GPU the launch is planned for: its tensor cores decide how `sk.dot` multiplies
    and which launches can issue it (`plan.products`)."""
    crosses: tuple[CrossBlock, ...] = ()
    """The results reduced across blocks, which the launch writes as partials."""
    call: CallFacts | None = None
    """At a call, what the plan reports beyond the launch; None at the declaration."""

    @property
    def narrowable(self) -> frozenset[str]:
        """The tile constants the call left at their defaults (none at the declaration)."""
        return frozenset() if self.call is None else self.call.narrowable

    @functools.cached_property
    def fills(self) -> dict[str, float | int | bool]:
        """Each loaded operand's fill, from the load records."""
        return operand_fills(self.loads)

    @functools.cached_property
    def halos(self) -> dict[str, Halo]:
        """The rows around its block that each operand read at a row offset is copied with,
        as its buffer holds them (`Halo.aligned`)."""
        return buffer_halos(self.spec, self.layout, self.dtypes, self.loads)

    @functools.cached_property
    def buffers_read_by_body(self) -> bool:
        """Whether the body reads an operand's shared-memory buffer itself (a shifted load's
        window, a vector of a stack): such a buffer is copied once, whole, by the launch of
        one block a CTA, never staged nor copied by a warp-specialized producer."""
        stacks = any(len(dims) == 2 for dims in self.spec.parameter_operands().values())
        return bool(self.halos) or stacks

    @functools.cached_property
    def halo_rows(self) -> dict[str, int]:
        return {name: halo.rows for name, halo in self.halos.items()}

    @functools.cached_property
    def block_bytes(self) -> dict[str, int]:
        """The bytes one block of each operand and result takes, before alignment."""
        names = [o.name for o in self.spec.operands + self.spec.results]
        return {n: block_bytes(self.spec, n, self.layout, self.dtypes) for n in names}

    @functools.cached_property
    def declared_stages(self) -> int | None:
        """The declared stage count; None when the stage constant is None (fitted)."""
        return self.spec.stage_count(self.consts)

    @functools.cached_property
    def declared_cluster(self) -> bool | None:
        """Clusters asked for (True), refused (False), or left to the plan (None)."""
        return self.spec.declared_cluster(self.consts)

    @functools.cached_property
    def held_smem_bytes(self) -> int:
        """Shared memory of a launch without loops: the loaded blocks and the results' (less
        those written into an operand's block), their barriers and the reserve."""
        held = {r.name for r in self.spec.results} - set(self.form.aliases or {})
        copied = set(self.fills) - self.form.reads_in_place
        blocks = smem_bytes(
            self.spec, self.layout, self.dtypes, copied, results=held, halo_rows=self.halo_rows
        )
        return blocks + hw.round_up(self.scratch_bytes, hw.SMEM_BUFFER_ALIGN)

    @property
    def blocks(self) -> int:
        """The blocks of the grid."""
        count = 1
        for g in self.layout.grid:
            count *= g
        return count
