"""What a plan shows and checks of the register form it took (`PlannedForm`): the form's
name, how its dims and edges read in `str(plan)`, its `form:` line, and the copy rules its
arrays keep. (Its notes come with its `FormFacts`, from the form that proposed itself.)

`planned_form` is the one place that tells the forms apart by their frames; the plan and
`make_plan` ask the form it returns.
"""

import dataclasses
from typing import Protocol

from ...ir.nodes import Form, Kind
from .. import hardware as hw
from ..layout.blocks import DimLayout
from ..pallas import FlatFrame, RowFrame
from .operands import OperandPlan

__all__ = ["BlockFormPlan", "PlannedForm", "RowFormPlan", "StridedFormPlan", "planned_form"]


class LaunchPlan(Protocol):
    """What a form reads of the plan that asks it (`plan.LaunchPlan` is one)."""

    @property
    def rows(self) -> str: ...

    @property
    def grid(self) -> tuple[int, ...]: ...

    def dim(self, name: str) -> DimLayout: ...

    def operand(self, name: str) -> OperandPlan: ...


class PlannedForm(Protocol):
    @property
    def form(self) -> Form: ...

    def dim_text(self, plan: LaunchPlan, d: DimLayout, split: str, status: str) -> tuple[str, str]:
        """A dim's split and status in `str(plan)`, given the block forms' text."""
        ...

    def edge(self, plan: LaunchPlan, d: DimLayout) -> str | None:
        """What a dim's edge reads in `str(plan)` where the form says its own; else None."""
        ...

    def form_line(self, plan: LaunchPlan) -> str | None:
        """The plan's `form:` line, or None for the block form, which has none."""
        ...

    def check_copies(self, plan: LaunchPlan, op: OperandPlan) -> None:
        """Asserts the rules the copies of `op`'s block rely on (a scalar and a swizzled
        block are checked by the plan)."""
        ...


@dataclasses.dataclass(frozen=True)
class BlockFormPlan:
    """The block form: blocks copied by TMA, in the WGMMA layout."""

    @property
    def form(self) -> Form:
        return Form.BLOCK

    def dim_text(self, plan: LaunchPlan, d: DimLayout, split: str, status: str) -> tuple[str, str]:
        return split, status

    def edge(self, plan: LaunchPlan, d: DimLayout) -> str | None:
        return None

    def form_line(self, plan: LaunchPlan) -> str | None:
        return None

    def check_copies(self, plan: LaunchPlan, op: OperandPlan) -> None:
        last_bytes = hw.nbytes(op.block_shape[-1], op.dtype)
        assert last_bytes % hw.TMA_ALIGN_BYTES == 0
        if len(op.block_gmem_shape) == 2:
            assert hw.nbytes(op.gmem_shape[-1], op.dtype) % hw.TMA_ALIGN_BYTES == 0
        if op.kind == Kind.TILE or op.kind == Kind.ROW:
            assert op.block_shape[0] % hw.WGMMA_ROWS == 0
        if op.kind == Kind.TILE or op.kind == Kind.COL:
            assert op.block_shape[-1] % hw.WGMMA_COLS == 0


@dataclasses.dataclass(frozen=True)
class StridedFormPlan(BlockFormPlan):
    """The strided block: an elementwise body's block, copied as the block form's is."""

    frame: FlatFrame

    @property
    def form(self) -> Form:
        return Form.STRIDED

    def form_line(self, plan: LaunchPlan) -> str | None:
        return (
            f"  form: strided: the block's elementwise body on {self.frame.vector} "
            "contiguous elements a thread; 16-byte shared-memory transfers"
        )


@dataclasses.dataclass(frozen=True)
class RowFormPlan:
    """The row form: a few rows a block, copied in bulk, computed one row at a time."""

    frame: RowFrame

    @property
    def form(self) -> Form:
        return Form.ROWS

    def dim_text(self, plan: LaunchPlan, d: DimLayout, split: str, status: str) -> tuple[str, str]:
        if d.name == plan.rows:
            return f"{d.block} row(s) a block", status
        padded = f", padded {d.size} -> {d.extent} in registers" if d.padded else ""
        return split, f"whole{padded}, copied in bulk"

    def edge(self, plan: LaunchPlan, d: DimLayout) -> str | None:
        if d.name == plan.rows and d.ragged:
            return ": the last block's rows past the edge read the last row, and are not stored"
        if d.name != plan.rows and self.frame.step_block and d.ragged:
            return ": a loop's last step is masked, its loads read the loop's fill there"
        return None

    def form_line(self, plan: LaunchPlan) -> str | None:
        rows = plan.dim(plan.rows).block
        frame = self.frame
        if frame.chunks > 1:  # too wide for the registers: passes over its chunks
            return (
                f"  form: rows: each block's {rows} row(s) computed one at a time, a row in "
                f"{frame.chunks} chunks of {frame.chunk_width} columns ({frame.vector} "
                "elements a thread each), its reductions a pass over the chunks each, then "
                "its results a chunk at a time"
            )
        walks = (
            f"; its loops walk the row in shared memory, a step a ({frame.step_block},) vector"
            if frame.step_block
            else ""
        )
        return (
            f"  form: rows: each block's {rows} row(s) computed one at a time, a row a "
            f"({frame.width},) vector of {frame.vector} elements a thread{walks}"
        )

    def check_copies(self, plan: LaunchPlan, op: OperandPlan) -> None:
        # Bulk copies: 16-byte aligned ends, whole rows, every block of rows inside; or a
        # flat array's 1-D boxes, which start anywhere.
        aligned = hw.nbytes(op.gmem_shape[-1], op.dtype) % hw.TMA_ALIGN_BYTES == 0
        assert aligned or op.in_place or (op.flat and not op.host_padded)
        if op.kind == Kind.COL or op.kind == Kind.TILE:
            assert op.block_shape[-1] == self.frame.width
        if op.kind == Kind.ROW and op.loaded:  # each row reads or writes its element in place
            assert op.in_place and op.gmem_shape == op.shape and op.smem_bytes == 0
        if op.shares_smem_with is not None:
            shared = plan.operand(op.shares_smem_with)
            assert shared.loaded and (shared.block_shape, shared.dtype) == (
                op.block_shape,
                op.dtype,
            )


def planned_form(row_frame: RowFrame | None, flat_frame: FlatFrame | None) -> PlannedForm:
    """The register form a plan took, from the frame it carries."""
    if row_frame is not None:
        return RowFormPlan(row_frame)
    if flat_frame is not None:
        return StridedFormPlan(flat_frame)
    return BlockFormPlan()
