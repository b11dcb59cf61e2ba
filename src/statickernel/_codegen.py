"""Code generation: a `LaunchPlan` and a translated body become a standalone Pallas module.

The module imports only jax (and numpy), defines one jitted function named after the kernel,
and is what statickernel itself executes for that specialization.
"""

import itertools
import re

import jax

from ._loopgen import loop_lines
from ._masks import MaskAxis, edge_mask_lines, fill_masks
from ._pallas import LAYOUTS, select_source, store_source
from ._plan import DimPlan, LaunchPlan, OperandPlan
from ._printer import dtype_source, literal_source
from ._translation import LoopBlock, Translation

__all__ = ["generate_source"]

_BACKEND_TEXT = {
    "interpret": "interpret (the Mosaic GPU interpreter; runs on any machine)",
    "mosaic_gpu": "mosaic_gpu (compiled for an NVIDIA Hopper GPU)",
}


def _new_store_api() -> bool:
    """jax 0.12 stores through `plgpu.store`, whose default no longer suits untiled refs."""
    from jax.experimental.pallas import mosaic_gpu as plgpu

    return hasattr(plgpu, "store")


def generate_source(plan: LaunchPlan, translation: Translation) -> str:
    gen = _Generator(plan, translation)
    return gen.module()


LINE_LIMIT = 100


def _split_top_level(text: str) -> list[str]:
    """Splits a call's argument text at the commas that are not nested in brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def _wrap(line: str) -> list[str]:
    """Wraps a long generated line the way a formatter would: one argument per line for a
    call or a def, and parentheses around any other long right-hand side."""
    if len(line) <= LINE_LIMIT or line.lstrip().startswith("#"):
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    body = line.strip()
    comment = ""
    if "  # " in body:
        body, comment = body.split("  # ", 1)
        comment = "  # " + comment
    open_at = body.find("(")
    head = body[: open_at + 1]
    if open_at > 0 and body.endswith(("):", ")")) and _closes_at_end(body, open_at):
        closing = "):" if body.endswith("):") else ")"
        args = _split_top_level(body[open_at + 1 : len(body) - len(closing)])
        inner = indent + "    "
        return [indent + head, *[f"{inner}{a}," for a in args], indent + closing + comment]
    if " = " in body:
        target, value = body.split(" = ", 1)
        return [f"{indent}{target} = (", f"{indent}    {value}", f"{indent}){comment}"]
    return [line]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _space_nested_functions(lines: list[str]) -> list[str]:
    """One blank line around each nested function, as a formatter puts it; comments just above
    a function stay with it."""
    out: list[str] = []
    closing: list[int] = []  # indents of nested functions whose bodies are still open
    for line in lines:
        stripped = line.strip()
        depth = _indent(line)
        if stripped and closing and depth <= closing[-1]:
            while closing and depth <= closing[-1]:
                closing.pop()
            if out and out[-1].strip():
                out.append("")
        if stripped.startswith("def ") and depth > 0:
            start = len(out)
            while start > 0 and out[start - 1].strip().startswith("#"):
                start -= 1
            before = out[start - 1].rstrip() if start > 0 else ""
            if before and not before.endswith(":"):
                out.insert(start, "")
            closing.append(depth)
        out.append(line)
    return out


def _closes_at_end(text: str, open_at: int) -> bool:
    """True when the bracket opened at `open_at` closes at the end of the statement."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return text[i + 1 :] in ("", ":")
    return False


class _Generator:
    def __init__(self, plan: LaunchPlan, translation: Translation):
        self.plan = plan
        self.t = translation
        self.new_store_api = _new_store_api()
        # Operands copied once per block; those with a loop dim are copied by their pipeline.
        self.loaded = [op for op in plan.operands if op.loaded and op.loop_dim is None]
        self.inputs = [op for op in plan.operands if op.loaded]
        written = {plan.results[r].name for r, _, _ in translation.streamed}
        self.stored = [op for op in plan.results if op.name not in written]
        # With loops, results stored after them take scoped shared memory, which reuses the
        # pipelines' buffers; results written by a loop keep theirs for the whole kernel.
        self.scoped = bool(plan.loops)
        self.kernel_results = [op for op in plan.results if not (self.scoped and op in self.stored)]

    # --- pieces ------------------------------------------------------------------------------

    def _block_var(self, dim: str) -> str:
        return f"block_{dim}"

    def _boxes(self, op: OperandPlan) -> list[tuple[str, str]]:
        """(GMEM slice, SMEM ref) of each TMA box of an operand's block.

        A whole dim wider than one box is copied in equal boxes: along rows they are
        contiguous slices of one SMEM buffer; along columns each box has its own leading SMEM
        index, because a TMA destination must be contiguous.
        """
        per_dim: list[list[tuple[str, int | None, str | None]]] = []
        for dim_name, extent, gmem in zip(
            op.dims, op.block_shape, op.block_gmem_shape, strict=True
        ):
            d = self.plan.dim(dim_name)
            if d.tiled_by:
                per_dim.append(
                    [(f"pl.ds({self._block_var(dim_name)} * {extent}, {extent})", None, None)]
                )
                continue
            boxes, size = d.boxes, extent // d.boxes
            column = dim_name == self.plan.cols
            options: list[tuple[str, int | None, str | None]] = []
            for k in range(boxes):
                start = k * size
                if boxes == 1 and extent == gmem:
                    gslice = ":"
                elif start + size <= gmem:
                    gslice = f"pl.ds({start}, {size})"
                else:
                    gslice = (
                        f"pl.ds(edge_start + {start}, {size})"
                        if start
                        else f"pl.ds(edge_start, {size})"
                    )
                if boxes == 1:
                    options.append((gslice, None, None))
                elif column:
                    options.append((gslice, k, None))
                else:
                    options.append((gslice, None, f"pl.ds({start}, {size})"))
            per_dim.append(options)
        boxes_out = []
        for combo in itertools.product(*per_dim):
            gmem_ref = f"{op.name}_gmem.at[{', '.join(g for g, _, _ in combo)}]"
            index = [str(k) for _, k, _ in combo if k is not None]
            index += [r for _, _, r in combo if r is not None]
            smem_ref = f"{op.name}_smem.at[{', '.join(index)}]" if index else f"{op.name}_smem"
            boxes_out.append((gmem_ref, smem_ref))
        return boxes_out

    def _column_boxes(self, op: OperandPlan) -> int:
        return self.plan.dim(self.plan.cols).boxes if self.plan.cols in op.dims else 1

    def _smem_shape(self, op: OperandPlan) -> tuple[int, ...]:
        boxes = self._column_boxes(op)
        if boxes == 1:
            return op.block_shape
        return (boxes, *op.block_shape[:-1], op.block_shape[-1] // boxes)

    def _masks(self) -> list[str]:
        """Edge masks, built in registers from iota and the true dims."""
        needed = set(self.t.masks)
        for op in self.loaded:
            needed |= fill_masks(self.plan, op, op.fill)
        if not needed:
            return []
        g_rows = self.plan.dim(self.plan.rows)
        g_cols = self.plan.dim(self.plan.cols) if self.plan.cols else None

        def axis(dim: DimPlan | None) -> MaskAxis | None:
            if dim is None:
                return None
            start = f"{self._block_var(dim.name)} * {dim.extent}" if dim.tiled_by else ""
            return MaskAxis(dim.extent, dim.size, start)

        rows = axis(g_rows)
        assert rows is not None
        return [
            "# Edge masks: positions inside the array, from iota and the true dims.",
            *edge_mask_lines(needed, rows, axis(g_cols)),
        ]

    def _load_lines(self, op: OperandPlan) -> list[str]:
        """Shared memory to registers, with the fill past the edge."""
        lines = []
        boxes = self._column_boxes(op)
        load = f"plgpu.load({op.name}_smem{{}}, layout={LAYOUTS[op.kind]}, optimized=False)"
        if boxes == 1:
            lines.append(f"{op.name} = {load.format('')}")
        else:
            parts = ", ".join(load.format(f".at[{k}]") for k in range(boxes))
            lines.append(f"{op.name} = jnp.concatenate([{parts}], axis={len(op.dims) - 1})")
        masks = sorted(fill_masks(self.plan, op, op.fill), key=lambda m: not m.startswith("row"))
        if masks:
            fill_value = literal_source(op.fill, op.dtype, weak_type=False)
            select = select_source(" & ".join(masks), op.name, fill_value, op.dtype)
            lines.append(f"{op.name} = {select}  # past the edge reads the fill")
        return lines

    def _loaded_after_loops(self) -> dict[str, int]:
        """Loaded operands whose first use comes after a loop, and the body line to load them
        before. Loading them at the top would hold their registers through the loop, next to
        its accumulators (a matmul's bias, say), and make the compiler spill."""
        lines = self.t.lines
        first_loop = next((i for i, line in enumerate(lines) if isinstance(line, LoopBlock)), None)
        if first_loop is None:
            return {}
        deferred = {}
        for op in self.loaded:
            uses = re.compile(rf"(?<![\w.]){re.escape(op.name)}(?!\w)")
            first = next(
                (i for i, line in enumerate(lines) if uses.search(_line_text(line))),
                len(lines) if any(uses.search(out) for out in self.t.outputs) else None,
            )
            if first is None or first <= first_loop:
                continue
            # Above the comment that names the user's line, when there is one.
            while first > first_loop + 1 and str(lines[first - 1]).startswith("# "):
                first -= 1
            deferred[op.name] = first
        return deferred

    def store(self, ref: str, value: str) -> str:
        return store_source(ref, value, self.new_store_api)

    # --- the block body ----------------------------------------------------------------------

    def block_function(self) -> list[str]:
        plan = self.plan
        params = [f"{op.name}_gmem" for op in self.inputs]
        params += [f"{op.name}_gmem" for op in plan.results]
        params += [f"{op.name}_smem" for op in self.loaded]
        params += [f"{op.name}_smem" for op in self.kernel_results]
        params += [f"{op.name}_barrier" for op in self.loaded]
        body: list[str] = []
        for d in plan.dims:
            if d.tiled_by or d.batched:
                body.append(f'{self._block_var(d.name)} = lax.axis_index("{d.name}")')
        for op in [*self.inputs, *plan.results]:
            if op.batch:
                index = ", ".join(self._block_var(d) for d in op.batch)
                body.append(
                    f"{op.name}_gmem = {op.name}_gmem.at[{index}]  # this grid step's entry"
                )
        if any(
            "edge_start" in g for op in [*self.loaded, *self.stored] for g, _ in self._boxes(op)
        ):
            body.append(
                "# Blocks wider than a whole dim start at a traced zero: the box may extend past"
            )
            body.append("# the array's edge, where TMA reads zeros and drops writes.")
            body.append(f'edge_start = lax.axis_index("{plan.grid_names[0]}") * 0')
        if self.loaded:
            body.append("# Load: start every TMA copy first so they overlap, then wait for each.")
            for op in self.loaded:
                # A box inside the array in every block needs no bounds handling: say so.
                promise = (
                    ", oob_mode=plgpu.OOBFillMode.PROMISE_IN_BOUNDS"
                    if not any(self.plan.dim(d).ragged for d in op.dims)
                    else ""
                )
                for gmem_ref, smem_ref in self._boxes(op):
                    body.append(
                        f"plgpu.copy_gmem_to_smem({gmem_ref}, {smem_ref}, {op.name}_barrier{promise})"
                    )
            for op in self.loaded:
                body.append(f"plgpu.barrier_wait({op.name}_barrier)")
        body += self._masks()
        deferred = self._loaded_after_loops()
        for op in self.loaded:
            if op.name not in deferred:
                body += self._load_lines(op)
        body.append("# The kernel body, one statement per traced op.")
        for i, line in enumerate(self.t.lines):
            for op in (op for op in self.loaded if deferred.get(op.name) == i):
                body.append(f"# `{op.name}` is first read after a loop: not held through it.")
                body += self._load_lines(op)
            if isinstance(line, LoopBlock):
                body += loop_lines(plan, line, self.t.streamed, self.new_store_api)
            else:
                body.append(line)
        for op in (op for op in self.loaded if deferred.get(op.name) == len(self.t.lines)):
            body += self._load_lines(op)
        if not self.stored:
            head = f"def _{plan.kernel}_block({', '.join(params)}):"
            return [head] + ["    " + line for line in body]
        store: list[str] = []
        for op, value in zip(plan.results, self.t.outputs, strict=True):
            if op not in self.stored:
                continue
            boxes = self._column_boxes(op)
            if boxes == 1:
                store.append(self.store(f"{op.name}_smem", value))
                continue
            store.append(f"{op.name} = {value}")
            width = op.block_shape[-1] // boxes
            lead = ":, " if len(op.dims) == 2 else ""
            for k in range(boxes):
                piece = f"{op.name}[{lead}{k * width}:{(k + 1) * width}]"
                store.append(self.store(f"{op.name}_smem.at[{k}]", piece))
        store.append("plgpu.commit_smem()")
        for op in self.stored:
            for gmem_ref, smem_ref in self._boxes(op):
                store.append(f"plgpu.copy_smem_to_gmem({smem_ref}, {gmem_ref})")
        store.append("plgpu.wait_smem_to_gmem(0)")
        if self.scoped:
            body.append(
                "# Store: registers to shared memory scoped after the loops (it reuses the "
                "pipelines'),"
            )
            body.append("# then TMA to global memory, clipped at the edge.")
            refs = ", ".join(f"{op.name}_smem" for op in self.stored)
            body.append(f"def store_results({refs}):")
            body += ["    " + line for line in store]
            buffers = ", ".join(
                f"plgpu.SMEM({self._smem_shape(op)}, {dtype_source(op.dtype)})"
                for op in self.stored
            )
            body.append(f"pl.run_scoped(store_results, {buffers})")
        else:
            body.append(
                "# Store: registers to shared memory, then TMA to global memory, clipped at the "
                "edge."
            )
            body += store
        head = f"def _{plan.kernel}_block({', '.join(params)}):"
        return [head] + ["    " + line for line in body]

    def launch(self) -> list[str]:
        plan = self.plan
        outs = [
            f"jax.ShapeDtypeStruct({op.gmem_shape}, {dtype_source(op.dtype)})"
            for op in plan.results
        ]
        out_type = outs[0] if len(outs) == 1 else f"({', '.join(outs)},)"
        scratch = [
            f"plgpu.SMEM({self._smem_shape(op)}, {dtype_source(op.dtype)})"
            for op in [*self.loaded, *self.kernel_results]
        ]
        for op in self.loaded:
            boxes = len(self._boxes(op))
            scratch.append(
                "plgpu.Barrier()" if boxes == 1 else f"plgpu.Barrier(num_arrivals={boxes})"
            )
        names = ", ".join(f'"{n}"' for n in plan.grid_names)
        lines = [
            "_launch = plgpu.kernel(",
            f"    _{plan.kernel}_block,",
            f"    out_type={out_type},",
            f"    grid={plan.grid},",
            f"    grid_names=({names}{',' if len(plan.grid_names) == 1 else ''}),",
            *(
                ["    scratch_types=[", *[f"        {s}," for s in scratch], "    ],"]
                if scratch
                else ["    scratch_types=[],"]
            ),
            "    compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane),",
            "    interpret=plgpu.InterpretGPUParams() if INTERPRET else None,",
            ")",
        ]
        return lines

    def wrapper(self) -> list[str]:
        plan = self.plan
        args = ", ".join(op.name for op in plan.operands)
        body: list[str] = []
        for op in self.inputs:
            if op.host_padded:
                pads = ", ".join(
                    f"(0, {g - s})" for s, g in zip(op.shape, op.gmem_shape, strict=False)
                )
                why = (
                    "pad for WGMMA's tiled shared memory"
                    if op.swizzle
                    else "rows are not a multiple of 16 bytes: pad for TMA"
                )
                body.append(f"# `{op.name}` {why} (extra copy).")
                body.append(f"{op.name} = jnp.pad({op.name}, ({pads}))")
        loaded = ", ".join(op.name for op in self.inputs)
        results = [op.name for op in plan.results]
        body.append(f"{', '.join(results)} = _launch({loaded})")
        outs = [_unpadded(op) for op in plan.results]
        if plan.tuple_result:
            body.append(f"return ({', '.join(outs)},)")
        else:
            body.append(f"return {outs[0]}")
        return ["@jax.jit", f"def {plan.kernel}({args}):"] + ["    " + line for line in body]

    def header(self) -> list[str]:
        plan = self.plan
        dims = ", ".join(f"{d.name}={d.size}" for d in plan.dims)
        consts = ", ".join(f"{k}={v!r}" for k, v in plan.constants) or "(none)"
        ops = ", ".join(f"{op.name}: {op.dtype}{list(op.shape)}" for op in plan.operands)
        return [
            f"# Pallas Mosaic GPU kernel `{plan.kernel}`, generated by statickernel.",
            f"# Declared at: {plan.location}",
            f"# Operands:    {ops}",
            f"# Dims:        {dims}",
            f"# Constants:   {consts}",
            f"# Grid:        {plan.grid} over ({', '.join(plan.grid_names)})",
            f"# Backend:     {_BACKEND_TEXT[plan.backend]}",
            f"# JAX:         {jax.__version__}",
            "# This module needs only jax; it does not import statickernel.",
        ]

    def module(self) -> str:
        parts = [
            *self.header(),
            "",
            "import jax",
            "import jax.numpy as jnp",
            "from jax import lax",
            "from jax.experimental import pallas as pl",
            "from jax.experimental.pallas import mosaic_gpu as plgpu",
            "",
            f"INTERPRET = {self.plan.backend == 'interpret'}",
            "",
            "",
            *self.block_function(),
            "",
            "",
            *self.launch(),
            "",
            "",
            *self.wrapper(),
        ]
        wrapped = [w for line in parts for w in _wrap(line)]
        return "\n".join(_space_nested_functions(wrapped)) + "\n"


def _unpadded(op: OperandPlan) -> str:
    if not op.host_padded:
        return op.name
    if op.gmem_shape[:-1] == op.shape[:-1]:
        return f"{op.name}[{':, ' * (len(op.shape) - 1)}:{op.shape[-1]}]"
    return f"{op.name}[{', '.join(f':{s}' for s in op.shape)}]"


def _line_text(line: "str | LoopBlock") -> str:
    """The source a body line holds, for finding the names it reads."""
    if isinstance(line, str):
        return line
    parts = [*line.lines, *line.blocks]
    parts += [text for c in line.carries for text in (c.init, c.update)]
    return "\n".join(parts)
