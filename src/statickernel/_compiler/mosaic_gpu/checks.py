"""The Mosaic GPU rules the compile path checks between its stages: a declaration's blocks in
shared memory, and a loop kernel's pipelined operands and results."""

from collections.abc import Mapping
from typing import Any

from ... import _dtypes
from ..._errors import ErrorContext, LoopOperandError, ResultMismatchError, SharedMemoryError
from ..declare.spec import KernelSpec
from . import hardware as hw
from .layout.blocks import BlockLayout
from .layout.smem import smem_bytes, smem_fix
from .lower.translate import Translation
from .plan.pipelining import check_dots

__all__ = ["check_declared_smem", "check_loops"]


def check_declared_smem(
    spec: KernelSpec,
    layout: BlockLayout,
    consts: Mapping[str, Any],
    options: Mapping[str, tuple[str, ...]],
    ctx: ErrorContext,
) -> None:
    """The blocks of a kernel without loops fit in shared memory with the widest dtypes the
    annotations allow. (A loop kernel's pipelines are counted by its plan, after the trace.)"""
    if spec.loop:
        return
    widest = {n: _dtypes.widest(opts) for n, opts in options.items()}
    loaded = {o.name for o in spec.operands}
    smem = smem_bytes(spec, layout, widest, loaded)
    if smem <= hw.SMEM_BYTES:
        return
    raise ctx.error(
        SharedMemoryError,
        f"the blocks need {smem:,} B of shared memory with the widest dtypes allowed, over "
        f"the {hw.SMEM_BYTES:,} B a block has",
        expected=f"<= {hw.SMEM_BYTES:,} B",
        actual=f"{smem:,} B ("
        + ", ".join(f"{n}: {widest[n]}" for n in widest)
        + ", "
        + ", ".join(f"{k}={consts[k]}" for k in spec.tile_map.values())
        + ")",
        fix=smem_fix(spec, layout, widest, loaded),
    )


def check_loops(
    spec: KernelSpec,
    translation: Translation,
    layout: BlockLayout,
    dtypes: Mapping[str, tuple[str, ...]],
    ctx: ErrorContext,
) -> None:
    """The rules of pipelined operands and of sk.dot, for these constants."""
    if not spec.loop:
        return
    dims = {o.name: o.block_dims for o in spec.operands + spec.results}
    for block in translation.loops:
        dot_read = {d.b for d in block.products} | {d.a for d in block.products}
        for name in block.operands:
            # sk.dot reads a whole dim of its operands' blocks straight from shared memory.
            if name in dot_read and name not in block.loads:
                continue
            for d in dims[name]:
                if d != block.axis and d not in spec.tile_map:
                    raise ctx.error(
                        LoopOperandError,
                        f"`{name}` is read block by block in the loop over {block.axis}, but its "
                        f"dim {d} is neither tiled nor that loop dim",
                        operand=name,
                        dim=d,
                        expected=f"every dim of `{name}` in tile= or the loop dim {block.axis}",
                        actual=f"'{' '.join(dims[name])}' with {d} whole",
                        fix=f'tile {d}, e.g. tile={{..., "{d}": "B{d}"}}',
                    )
    for i, result in enumerate(spec.results):
        looped = [d for d in result.dims if d in spec.loop_map]
        if looped and i not in {r for r, _, _ in translation.streamed}:
            raise ctx.error(
                ResultMismatchError,
                f"{result.name} has the loop dim {looped[0]}, but the body does not return it "
                "from sk.map_blocks",
                operand=result.name,
                dim=looped[0],
                expected=f"the value of sk.map_blocks({looped[0]!r}, ...)",
                actual="a value computed outside a loop",
                fix=f"write the result block by block: return sk.map_blocks({looped[0]!r}, fn), "
                "with fn computing one block",
            )
    check_dots(translation.loops, dims, layout, dtypes, spec.block_map, ctx)
