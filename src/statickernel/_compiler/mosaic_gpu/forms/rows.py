"""The row form: whole rows too wide for the block form, a few rows a block and one row at a
time in registers (`plan.rows` chooses the blocks, `emit.rows` writes them)."""

import dataclasses

from ...._errors import SharedMemoryError
from ....language.context import operand_fills
from ...declare.spec import KernelSpec
from ...trace.crossblock import accumulated_rows
from .. import hardware as hw
from ..layout.blocks import BlockLayout
from ..layout.smem import smem_fix
from ..lower.geometry import block_geometry
from ..lower.scans import row_scan_bytes, row_scan_dtypes
from ..lower.translation import Geometry, Translation
from ..pallas import RowFrame
from ..plan.inputs import FormFacts
from ..plan.row_chunks import chunked_frame, takes_chunks
from ..plan.rows import (
    RowChoice,
    TooWide,
    choose_rows,
    row_form_notes,
    row_loop_lines,
    rows_read_less,
    too_wide_error,
)
from .base import Declined, FormChoice, FormInputs, translate_in

__all__ = ["RowsForm"]


class RowsForm:
    def propose(self, inputs: FormInputs) -> FormChoice | None:
        spec, layout = inputs.spec, inputs.layout
        # Its rows are read in 16-byte vectors a thread, 32 elements of a 4-bit dtype: more
        # than the register layout's vectors hold (16).
        if any(d in hw.SUB_BYTE_DTYPES for d in inputs.dtypes.values()):
            return None
        # Copies addressed by data (rows an index picks, pages) are the block forms'.
        if spec.copies_by_data:
            return None
        # The row form writes per-row partials as per-row results, and adds up the rows of
        # each partial along the columns in its CTA.
        accumulation = accumulated_rows(spec, inputs.trace, inputs.crosses)
        if accumulation is None:
            return None
        row_trace, accumulated = accumulation
        if spec.loop and not rows_read_less(spec, layout, inputs.dtypes, inputs.trace):
            return None  # the block form's loops move the same bytes
        fills = set(operand_fills(inputs.trace.loads))
        scans = row_scan_dtypes(row_trace)
        rows = choose_rows(
            spec,
            layout,
            inputs.dtypes,
            fills,
            accumulated,
            lambda width: max((row_scan_bytes(width, d) for d in scans), default=0),
        )
        if rows is None:
            return None
        row_layout = rows.layout if isinstance(rows, RowChoice) else layout
        geometry = dataclasses.replace(
            block_geometry(spec, row_trace, row_layout, inputs.interpreted),
            rows=row_layout.dim(spec.rows).block,
            ragged_rows=False,  # rows never meet: those past the edge are never stored
            ragged_cols=rows.frame.width != row_layout.dim(spec.cols).size if spec.cols else False,
            row_frame=rows.frame,
        )
        if spec.loop:  # each loop's steps walk the row a block of columns at a time
            steps = block_geometry(spec, row_trace, layout, inputs.interpreted).steps
            geometry = dataclasses.replace(geometry, steps=_row_steps(steps, rows.frame))
        in_rows = translate_in(inputs, row_trace, row_layout, geometry, accumulated)
        if isinstance(in_rows, Declined):
            if isinstance(rows, RowChoice) and rows.block_form_smem > hw.SMEM_BYTES:
                # Neither form holds the body: say what keeps it out of the one that fits.
                raise declined_rows_error(spec, layout, inputs, rows, in_rows)
            return None
        if isinstance(rows, TooWide):
            if spec.loop:  # the block form streams the row
                return None
            raise too_wide_error(spec, layout, rows, inputs.ctx)
        frame, cols = rows.frame, spec.cols
        assert cols is not None  # a row candidate has its columns
        chunked = None if spec.loop else chunked_frame(frame, bool(accumulated))
        if chunked is not None:  # a row too wide for the registers, where the body allows
            in_chunks = translate_in(
                inputs,
                row_trace,
                row_layout,
                dataclasses.replace(geometry, row_frame=chunked),
                accumulated,
            )
            if isinstance(in_chunks, Translation) and takes_chunks(in_chunks):
                in_rows, frame = in_chunks, chunked
        facts = FormFacts(
            row_frame=frame,
            aliases=rows.aliases,
            block_form_smem=rows.block_form_smem,
            persistent=rows.persistent,
            stages_tiles_only=True,
            copies_vectors_in_bulk=True,
            addresses_rows_flat=True,
            stores_blocks_after_the_body=False,
            reads_in_place=rows.reads_in_place,
            pipelines_loops=False,
            notes=tuple(
                row_form_notes(
                    spec,
                    rows.layout,
                    inputs.consts,
                    rows.block_form_smem,
                    rows.persistent,
                    rows.aliases,
                )
                + row_loop_lines(in_rows.loops, layout.dim(cols).size, frame.step_block)
            ),
        )
        return FormChoice(rows.layout, in_rows, facts)


# How the error names what the row form refused, where the body spelled it otherwise.
_WRITTEN_AS = {"debug_print": "the print (jax.debug.print or pl.debug_print)"}


def declined_rows_error(
    spec: KernelSpec,
    layout: BlockLayout,
    inputs: FormInputs,
    rows: RowChoice,
    declined: Declined,
) -> SharedMemoryError:
    """The block form's blocks do not fit in shared memory, and the row form, whose blocks
    would, does not take the body: the error names what in the body keeps it out."""
    eqn = declined.eqn
    written = "the body" if eqn is None else _WRITTEN_AS.get(eqn.prim, f"`{eqn.prim}`")
    at = f" at {eqn.line}: {eqn.source}" if eqn is not None and eqn.line else ""
    loaded = set(operand_fills(inputs.trace.loads))
    fix = smem_fix(spec, layout, inputs.dtypes, loaded, inputs.trace.loads)
    if eqn is not None and eqn.prim in _WRITTEN_AS:  # a print is the body's to leave out
        fix = f"take {written} at {eqn.line} out of the body (the row form takes none); or {fix}"
    block = layout.dim(spec.rows).block
    return inputs.ctx.error(
        SharedMemoryError,
        f"blocks of {block} whole rows need {rows.block_form_smem:,} B of shared memory, over "
        f"the {hw.SMEM_BYTES:,} B a block has, and the row form, which would hold them a row "
        f"at a time, does not take {written}{at}: {declined.reason}",
        dim=spec.cols,
        expected=f"<= {hw.SMEM_BYTES:,} B, or a body the row form takes",
        actual=f"{rows.block_form_smem:,} B in the block form; {written} in the body",
        fix=fix,
    )


def _row_steps(
    steps: tuple[tuple[str, Geometry], ...], frame: RowFrame
) -> tuple[tuple[str, Geometry], ...]:
    """The row form's loop steps, from the block form's (`steps`): a step's block of one row
    is a vector of the step's columns (`RowFrame.step_frame`), of which the last step's may
    lie past the edge; its rows are the block form's, which the body was traced with."""
    return tuple(
        (axis, dataclasses.replace(g, ragged_rows=False, row_frame=frame.step_frame()))
        for axis, g in steps
    )
