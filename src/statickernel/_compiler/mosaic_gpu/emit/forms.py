"""What code generation does differently for each register form (`FormEmitter`): how the
launch holds an array's block in shared memory, how many copies fill it, which blocks a
persistent launch stages, how a result is sliced back, and whose block function runs.

The generator takes its form's emitter from one table (`emit/variants.py`) and asks it; no
other piece of the generator tests which form a plan took. The block form and the strided
block share `BLOCK_FORM`; the row form's is `emit.rows.ROW_FORM`.
"""

import dataclasses
import math
from typing import Protocol

from ...ir.nodes import Const, Expr, FunctionDef, List, Name, Slice, Subscript, call
from ..lower.translation import Translation
from ..plan.plan import LaunchPlan, OperandPlan, Role
from .halos import halo_copies

__all__ = ["BLOCK_FORM", "FormEmitter", "unpadded"]


class FormEmitter(Protocol):
    def smem_shape(self, plan: LaunchPlan, op: OperandPlan, slots: int) -> tuple[int, ...]:
        """The shared-memory buffer of `op`'s block, with `slots` buffers a staged block."""
        ...

    def copies(self, plan: LaunchPlan, op: OperandPlan) -> int:
        """The copies that fill a loaded operand's block: its barrier's arrivals."""
        ...

    def staged(self, op: OperandPlan) -> bool:
        """Whether a launch of several slots gives `op`'s block a barrier a slot."""
        ...

    def unpadded(self, op: OperandPlan) -> Expr:
        """The result `op` as the wrapper returns it, its host padding sliced off."""
        ...

    def block_function(
        self, plan: LaunchPlan, translation: Translation, new_store_api: bool
    ) -> FunctionDef | None:
        """The form's own block function, or None for the launch schedule's."""
        ...


def column_boxes(plan: LaunchPlan, op: OperandPlan) -> int:
    """The TMA boxes a block is copied in along its columns, each with its own leading
    shared-memory index (a TMA destination is contiguous). A block of a part of a joined
    dim has the part as its columns."""
    if plan.cols in op.dims:
        return plan.dim(plan.cols).boxes
    part = plan.dim(op.dims[-1]) if op.dims else None
    return part.boxes if part is not None and part.joins else 1


@dataclasses.dataclass(frozen=True)
class _BlockForm:
    """The block form and the strided block: a whole block in registers, copied by TMA in
    boxes, every loaded block staged by a persistent launch."""

    def smem_shape(self, plan: LaunchPlan, op: OperandPlan, slots: int) -> tuple[int, ...]:
        block = op.smem_block_shape
        if slots > 1 and op.role is Role.INPUT:  # a slot a stage
            return (slots, *block)
        boxes = column_boxes(plan, op)
        if boxes == 1:
            return block
        return (boxes, *block[:-1], block[-1] // boxes)

    def copies(self, plan: LaunchPlan, op: OperandPlan) -> int:
        # A TMA box along each tiled dim, and a whole dim's boxes along each whole dim; each
        # again for the rows above and below a tiled block that its shifted loads read.
        boxes = math.prod(1 if plan.dim(n).tiled_by else plan.dim(n).boxes for n in op.dims)
        if op.index is not None:  # each row gathered by copies of its own
            return op.block_shape[0] * math.prod(plan.dim(n).boxes for n in op.dims[1:])
        # A column-shifted load's window is one more copy each (`emit.halos`).
        return boxes * (1 + len(halo_copies(plan, op))) + len(op.halo.column_shifts)

    def staged(self, op: OperandPlan) -> bool:
        return True

    def unpadded(self, op: OperandPlan) -> Expr:
        return unpadded(op)

    def block_function(
        self, plan: LaunchPlan, translation: Translation, new_store_api: bool
    ) -> FunctionDef | None:
        return None


BLOCK_FORM = _BlockForm()


def unpadded(op: OperandPlan) -> Expr:
    """A result sliced back to its shape where the launch wrote it host-padded; a result of
    joined columns held part by part, its parts joined."""
    if op.parts:
        lead = [
            Slice(None, Const(s)) if s != g else Slice()
            for s, g in zip(op.shape, op.gmem_shape, strict=True)
        ][:-1]
        pieces = tuple(
            Subscript(
                Name(op.name), (*lead, Slice(Const(start) if start else None, Const(start + size)))
            )
            for start, size in op.parts
        )
        return call("jnp.concatenate", List(pieces), axis=Const(-1))
    if not op.host_padded:
        return Name(op.name)
    if op.gmem_shape[:-1] == op.shape[:-1]:
        index = (*[Slice()] * (len(op.shape) - 1), Slice(None, Const(op.shape[-1])))
    else:
        index = tuple(Slice(None, Const(s)) for s in op.shape)
    return Subscript(Name(op.name), index)
