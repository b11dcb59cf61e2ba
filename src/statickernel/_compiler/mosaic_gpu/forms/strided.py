"""The strided block: an elementwise body's whole block spread over the warpgroup in the
strided layout, whose shared-memory copies are free of bank conflicts."""

import dataclasses

from ....language.context import operand_fills
from .. import hardware as hw
from ..lower.geometry import block_geometry
from ..pallas import FlatFrame, reads_zero
from ..plan.inputs import FormFacts
from .base import Declined, FormChoice, FormInputs, translate_in

__all__ = ["StridedForm"]


class StridedForm:
    def propose(self, inputs: FormInputs) -> FormChoice | None:
        if inputs.crosses:
            return None
        frame = _flat_frame(inputs)
        if frame is None:
            return None
        spec, layout = inputs.spec, inputs.layout
        geometry = dataclasses.replace(
            block_geometry(spec, inputs.trace, layout, inputs.interpreted), flat_frame=frame
        )
        translation = translate_in(inputs, inputs.trace, layout, geometry)
        if isinstance(translation, Declined):
            return None
        # One CTA an SM computes an elementwise body at ease: it may walk the blocks.
        facts = FormFacts(flat_frame=frame, walks_blocks_when_it_pays=True)
        return FormChoice(layout, translation, facts)


def _flat_frame(inputs: FormInputs) -> FlatFrame | None:
    """The strided frame for a body that is elementwise on whole blocks, or None: no loops or
    vectors, every operand and result a 2-D block copied in one box (or, in a kernel of
    vectors alone, every one a vector), no edge masks (no reduction needs one, and every fill
    is what TMA reads past the edge; a vector's bulk copy leaves shared memory as it was past
    the array's end, and an elementwise body's values there are never stored)."""
    spec, layout = inputs.spec, inputs.layout
    if spec.loop or inputs.translation.masks:
        return None
    full = (spec.rows, spec.cols) if spec.cols else (spec.rows,)  # vectors alone: (rows,)
    fills = operand_fills(inputs.trace.loads)
    # An index the body does not load is read from global memory by the copies alone.
    indices = {name for _, name in spec.index if name not in fills}
    arrays = [o for o in spec.operands + spec.results if o.name not in indices]
    if any(o.block_dims != full for o in arrays):
        return None
    dims = [layout.dim(d) for d in full]
    if dims[-1].boxes != 1:
        return None
    ragged = any(d.ragged for d in dims)
    if ragged and any(not reads_zero(f) for f in fills.values()):
        return None
    vector = max(hw.per_bytes(hw.TMA_ALIGN_BYTES, d) for d in inputs.dtypes.values())
    frame = FlatFrame(tuple(d.extent for d in dims), vector)
    return frame if frame.fits() else None
