"""The registers a body's values live in for one layout: the block form's geometry, with each
loop's step geometry inside it. The other register forms start from it."""

import dataclasses

from ...._errors import Phase
from ...._targets import TensorCores
from ....language.context import operand_fills
from ...declare.spec import KernelSpec
from ...ir.nodes import Kind
from ...trace.body import BodyTrace
from .. import hardware as hw
from ..layout.blocks import BlockLayout
from ..layout.smem import buffer_halos
from .translation import Geometry

__all__ = ["block_geometry"]


def _step_kinds(spec: KernelSpec, layout: BlockLayout, axis: str) -> tuple[tuple[str, str], ...]:
    """The operands' kinds in a step of the loop over `axis`: a block of the rows and a loop
    dim outside the frame is the step's block (`Kind.LOOP_TILE`)."""
    step_block = (spec.rows, axis)
    outside = axis not in (spec.rows, spec.cols)

    def kind(o) -> Kind:
        if outside and o.block_dims == step_block:
            return Kind.LOOP_TILE
        if outside and o.block_dims == (axis, spec.cols):
            return Kind.LOOP_ROWS  # a "K N" weight, dequantized for sk.dot's b
        if outside and o.block_dims == (axis,):
            return Kind.LOOP_COL  # a vector along the step's keys (segment ids, lse)
        return layout.kind(o.block_dims)

    return tuple((o.name, kind(o)) for o in spec.operands)


def _input_dtypes(trace: BodyTrace) -> dict[str, str]:
    """Each loaded operand's dtype, as the body's trace has it."""
    return {name: trace.aval(name)[1] for name in trace.inputs if name is not None}


def _param_stacks(spec: KernelSpec) -> tuple[tuple[str, tuple[int, str]], ...]:
    """Each 2-D operand of parameters: the axis of its parameters, and the kind of the vectors
    along the other, the rows' or the columns'."""
    stacks = []
    for name, dims in spec.parameter_operands().items():
        if len(dims) == 2:
            axis = 0 if dims[0] in spec.param_dims else 1
            stacks.append((name, (axis, Kind.ROW if dims[1 - axis] == spec.rows else Kind.COL)))
    return tuple(stacks)


def block_geometry(
    spec: KernelSpec,
    trace: BodyTrace,
    layout: BlockLayout,
    interpreted: bool,
    tensor_cores: TensorCores = TensorCores.WGMMA,
) -> Geometry:
    """The registers the body's values live in, and which of their edges are masked."""
    geometry = Geometry(
        interpreted=interpreted,
        tensor_cores=tensor_cores,
        rows=layout.dim(spec.rows).extent,
        cols=layout.dim(spec.cols).extent if spec.cols else hw.WGMMA_COLS,
        ragged_rows=layout.edge_masked(spec.rows),
        ragged_cols=layout.edge_masked(spec.cols),
        input_kinds=tuple((o.name, layout.kind(o.block_dims)) for o in spec.operands),
        input_fills=tuple(operand_fills(trace.loads).items()),
        row_dim=spec.rows,
        col_dim=spec.cols,
        row_tiled=spec.rows in spec.tile_map,
        row_size=layout.dim(spec.rows).size,
        col_array_size=layout.dim(spec.cols).size if spec.cols else 0,
        col_boxes=layout.dim(spec.cols).boxes if spec.cols else 1,
        param_stacks=_param_stacks(spec),
        input_halos=tuple(buffer_halos(spec, layout, _input_dtypes(trace), trace.loads).items()),
        col_tiled=spec.cols in spec.tile_map,
        col_size=layout.dim(spec.cols).block if spec.cols else 0,
        probe_sizes=layout.phase is Phase.DECLARATION,
        col_looped=spec.cols in spec.loop_map,
        col_parts=layout.dim(spec.cols).parts if spec.cols else (),
        const_widths=tuple(
            (layout.dim(d).block, layout.dim(d).extent)
            for d in (*spec.const_dims, *spec.joined_parts())
        ),
        part_sizes=tuple((d, layout.dim(d).size) for d in spec.joined_parts()),
    )
    loops = spec.loop_map
    if not loops:
        return geometry
    # Inside a loop's steps, the loop dim has its block, and only the last step can be ragged.
    steps = tuple(
        (
            axis,
            dataclasses.replace(
                geometry,
                rows=layout.dim(axis).extent if axis == spec.rows else geometry.rows,
                ragged_rows=layout.step_masked(axis) if axis == spec.rows else geometry.ragged_rows,
                cols=layout.dim(axis).extent if axis == spec.cols else geometry.cols,
                ragged_cols=layout.step_masked(axis) if axis == spec.cols else geometry.ragged_cols,
                col_size=layout.dim(axis).block if axis == spec.cols else geometry.col_size,
                loop_dim=axis if axis not in (spec.rows, spec.cols) else None,
                loop_cols=layout.dim(axis).extent if axis not in (spec.rows, spec.cols) else 0,
                ragged_loop=axis not in (spec.rows, spec.cols) and layout.step_masked(axis),
                in_step=True,
                input_kinds=_step_kinds(spec, layout, axis),
            ),
        )
        for axis in loops
    )
    return dataclasses.replace(
        geometry,
        steps=steps,
        looped_operands=tuple(
            (o.name, loop) for o in spec.operands if (loop := spec.operand_loop(o)) is not None
        ),
    )
