"""Code generation: a `LaunchPlan` and a translated body become a standalone Pallas module.

The module imports only jax (and numpy), defines one jitted function named after the kernel,
and is what statickernel itself executes for that specialization. It is built as IR and
printed once, by `ir.printer`.
"""

from collections.abc import Callable, Mapping

import jax

from ...._compat import has_plgpu_store
from ...._targets import TensorCores
from ...ir.names import barrier_ref, block_function, block_index, gmem_ref, smem_ref
from ...ir.nodes import (
    Assign,
    BinOp,
    Call,
    Comment,
    Const,
    DType,
    Expr,
    ExprStmt,
    FunctionDef,
    IfExp,
    Import,
    ImportFrom,
    Keyword,
    Kind,
    List,
    Mask,
    Module,
    Name,
    Operator,
    Return,
    Slice,
    SourceLine,
    Stmt,
    Subscript,
    Tuple,
    call,
    names_read,
)
from ...ir.printer import module_source
from ..lower.dots import wgmma_transforms
from ..lower.translation import LoopBlock, Translation, line_reads
from ..pallas import fill_past_edge, load, load_buffer, read_scalar, store
from ..plan.plan import DimPlan, LaunchPlan, OperandPlan
from .boxes import element_stores, oob_mode, result_copies, tma_boxes
from .consumers import consumers_buffer, staged_buffers
from .forms import FormEmitter, column_boxes
from .halos import block_rows, column_window_copies
from .indexed import gather_copies, scatter_copies
from .launches import ScheduleEmitter
from .loops import loop_statements
from .masks import MaskAxis, edge_mask_statements, fill_masks
from .products import block_layouts
from .slices import EDGE_START
from .variants import form_emitter, schedule_emitter
from .warpspec import WG_AXIS
from .wrapper import finished_results, prepared_inputs

__all__ = ["generate_source"]

_BACKEND_TEXT = {
    "interpret": "interpret (the Mosaic GPU interpreter; runs on any machine)",
    "mosaic_gpu": "mosaic_gpu (compiled for an NVIDIA Hopper GPU)",
}


def _backend_text(plan: LaunchPlan) -> str:
    if plan.backend == "mosaic_gpu" and not plan.gpu_target.has_wgmma:
        return f"mosaic_gpu (compiled for an {plan.gpu_target.gpus} GPU)"
    return _BACKEND_TEXT[plan.backend]


def _target_line(plan: LaunchPlan) -> list[Comment]:
    """The target, where it is not Hopper's (whose module says nothing of it)."""
    if plan.gpu_target.has_wgmma:
        return []
    target = plan.gpu_target
    products = ": products by tcgen05" if plan.block_tensor_cores is not TensorCores.WGMMA else ""
    return [Comment(f"Target:      {target.name} ({target.gpus}){products}")]


_IMPORTS: tuple[Stmt, ...] = (
    Import("jax"),
    Import("jax.numpy", "jnp"),
    ImportFrom("jax", "lax"),
    ImportFrom("jax.experimental", "pallas", "pl"),
    ImportFrom("jax.experimental.pallas", "mosaic_gpu", "plgpu"),
)


def generate_source(plan: LaunchPlan, translation: Translation) -> str:
    return module_source(_Generator(plan, translation).module())


class _Generator:
    def __init__(self, plan: LaunchPlan, translation: Translation):
        assert plan.schedule is not None, "a plan at a call has its schedule"
        self.plan = plan
        self.schedule = plan.schedule
        # What the plan's form and schedule do their own way (`emit.variants`).
        self.form: FormEmitter = form_emitter(plan)
        self.launch_schedule: ScheduleEmitter = schedule_emitter(plan)
        # A loop split across CTAs: each CTA stores its part's sums; the wrapper casts them.
        self.t = self.launch_schedule.translation(plan, translation)
        # jax 0.12 stores through `plgpu.store`, whose default no longer suits untiled refs.
        self.new_store_api = has_plgpu_store()
        # Operands copied once per block; those with a loop dim are copied by their pipeline.
        # A scalar operand is not copied: each block reads it from global memory.
        self.loaded = [
            op
            for op in plan.operands
            if op.loaded
            and op.loop_dim is None
            and not op.in_place
            # The warp-specialized matmul's consumers each hold their own buffers.
            and self.launch_schedule.copies_blocks_once()
        ]
        # An index operand is read from global memory by the copies it addresses; an operand
        # a result updates in place is written.
        passed = {*plan.index_operands, *plan.updated_operands}
        self.inputs = [op for op in plan.operands if op.loaded or op.name in passed]
        # The results of new arrays: one that updates an operand is written into its array.
        self.launched = [op for op in plan.results if op.updates is None]
        # 0-d operands, read once; a parameter vector is read by index where the body does.
        self.scalars = [op for op in self.inputs if op.in_place and op.kind != Kind.PARAMS]
        written = {plan.results[r].name for r, _, _ in translation.streamed}
        # A 0-d result (one value a batch entry) is written where the body computes it.
        self.in_place = [op for op in plan.results if op.in_place]
        self.stored = [op for op in plan.results if op.name not in written and not op.in_place]
        # With loops, results stored after them take scoped shared memory, which reuses the
        # pipelines' buffers; results written by a loop keep theirs for the whole kernel.
        # Two consumers' results are kernel scratch, a pair: scoped shared memory is allocated
        # by every warpgroup at once.
        self.scoped = bool(plan.loops) and self.launch_schedule.scopes_stores()
        self.staged = staged_buffers(plan, translation)
        held = [op for op in plan.results if op not in self.in_place]
        self.kernel_results = [op for op in held if not (self.scoped and op in self.stored)]

    # --- pieces ------------------------------------------------------------------------------

    def _boxes(self, op: OperandPlan) -> list[tuple[Expr, Expr]]:
        return tma_boxes(self.plan, op)

    def _grid_text(self) -> str:
        plan = self.plan
        blocks = f"{plan.grid} over ({', '.join(plan.grid_names)})"
        launched = self.launch_schedule.launch_grid(plan)
        if launched == plan.grid:
            return blocks
        return self.launch_schedule.grid_text(plan, launched, blocks)

    def _smem_shape(self, op: OperandPlan) -> tuple[int, ...]:
        shape = self.form.smem_shape(self.plan, op, self.schedule.slots)
        return self.launch_schedule.smem_shape(shape)

    def _smem_buffer(self, op: OperandPlan) -> Expr:
        if op.swizzle:  # read by sk.dot: WGMMA's tiled, swizzled layout
            shape = Const(self._smem_shape(op))
            return call(
                "plgpu.SMEM",
                shape,
                DType(op.dtype),
                transforms=wgmma_transforms(op.dtype, op.swizzle),
            )
        return call("plgpu.SMEM", Const(self._smem_shape(op)), DType(op.dtype))

    def masks(self) -> list[Stmt]:
        """Edge masks, built in registers from iota and the true dims."""
        needed = set(self.t.masks)
        for op in self.loaded:
            needed |= fill_masks(self.plan, op, op.fill)
        if not needed:
            return []

        def axis(dim: DimPlan | None) -> MaskAxis | None:
            if dim is None:
                return None
            start = BinOp(Operator.MUL, Name(block_index(dim.name)), Const(dim.extent))
            return MaskAxis(dim.extent, dim.size, start if dim.tiled_by else None, dim.parts)

        rows = axis(self.plan.dim(self.plan.rows))
        assert rows is not None
        cols = axis(self.plan.dim(self.plan.cols) if self.plan.cols else None)
        positions = {Mask.ROW_POSITION, Mask.COL_POSITION}
        comment = (
            "Positions: the block's global indices, from iota and where the block starts."
            if needed <= positions
            else "Edge masks: positions inside the array, from iota and the true dims."
        )
        masks = edge_mask_statements(needed, rows, cols, tensor_cores=self.plan.block_tensor_cores)
        return [Comment(comment), *masks]

    def _load(self, op: OperandPlan, ref: Expr | None = None) -> list[Stmt]:
        """Shared memory (`ref`, by default the operand's buffer) to registers, with the fill
        past the edge."""
        boxes = column_boxes(self.plan, op)
        if ref is not None and boxes == 1:  # a persistent launch's slot
            value = load(ref, op.kind, self.plan.flat_frame)
        else:
            # The block's rows, below those its shifted loads read above, in its buffer.
            rows, axis = block_rows(op), len(op.dims) - 1
            value = load_buffer(smem_ref(op.name), op.kind, boxes, rows, self.plan.flat_frame, axis)
        lines: list[Stmt] = [Assign((Name(op.name),), value)]
        masks = fill_masks(self.plan, op, op.fill)
        if masks:
            lines.append(fill_past_edge(op.name, masks, op.fill, op.dtype))
        return lines

    def _in_registers(self, op: OperandPlan) -> bool:
        """False for an operand only `sk.dot` reads: WGMMA takes it from shared memory; and
        for a stack of parameter vectors, whose vectors are loaded where the body takes them."""
        return op.kind is not Kind.PARAMS and (
            not op.swizzle
            or any(line_reads(line, op.name) for line in self.t.lines)
            or any(out is not None and op.name in names_read(out) for out in self.t.outputs)
        )

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
            in_outputs = any(
                out is not None and op.name in names_read(out) for out in self.t.outputs
            )
            first = next(
                (i for i, line in enumerate(lines) if line_reads(line, op.name, mentioned=True)),
                len(lines) if in_outputs else None,
            )
            if first is None or first <= first_loop:
                continue
            # Above the comment that names the user's line, when there is one.
            while first > first_loop + 1 and isinstance(lines[first - 1], Comment | SourceLine):
                first -= 1
            deferred[op.name] = first
        return deferred

    # --- the block body ----------------------------------------------------------------------

    def params(self) -> tuple[str, ...]:
        """The block function's parameters: GMEM refs, then the scratch, as the launch lists it."""
        params = [gmem_ref(op.name) for op in self.inputs]
        params += [gmem_ref(op.name) for op in self.launched]
        params += [smem_ref(op.name) for op in self.loaded]
        params += [smem_ref(op.name) for op in self.kernel_results]
        params += [name for name, _ in self.staged]
        params += [barrier_ref(op.name) for op in self.loaded]
        return tuple(params)

    def block_function(self) -> FunctionDef:
        """The block function of the plan's form and schedule: the row form writes its own;
        the block forms' is the schedule's."""
        own = self.form.block_function(self.plan, self.t, self.new_store_api)
        return own if own is not None else self.launch_schedule.block_function(self)

    def one_block_function(self) -> FunctionDef:
        """One block a CTA (its loops pipelined): copy in, compute, copy out."""
        plan = self.plan
        body = [*self.block_header(), *self.load_statements(), *self.masks()]
        body += self.computed(
            lambda line: loop_statements(
                plan, line, self.t.streamed, self.new_store_api, self.launch_schedule
            )
        )
        body += element_stores(self.in_place, plan.results, self.t.outputs)
        if self.stored:
            body += self.store()
        return FunctionDef(block_function(plan.kernel), self.params(), tuple(body))

    def block_header(self, indices: Mapping[str, list[Stmt]] | None = None) -> list[Stmt]:
        """The block's indices along the grid (`indices` gives a dim's own statements), the
        results written in place, each array's batch entry, the scalar operands."""
        plan = self.plan
        body: list[Stmt] = []
        parts = self.launch_schedule.part_axes(plan)
        for d in plan.dims:
            if indices and d.name in indices:
                body += indices[d.name]
            elif d.tiled_by or d.batched or d.name in parts:
                axis_index = call("lax.axis_index", Const(d.name))
                body.append(Assign((Name(block_index(d.name)),), axis_index))
        for op in plan.results:
            if op.updates is not None:
                what = f"the result is written into `{op.updates}`, in place"
                body.append(Assign((Name(gmem_ref(op.name)),), Name(gmem_ref(op.updates)), what))
        for op in [*self.inputs, *plan.results]:
            if op.batch or op.per_block:
                gmem = gmem_ref(op.name)
                lead = (*op.batch, *op.per_block)
                entry = Subscript(Name(f"{gmem}.at"), tuple(Name(block_index(d)) for d in lead))
                what = "this grid step's partial" if op.per_block else "this grid step's entry"
                body.append(Assign((Name(gmem),), entry, comment=what))
        body += [read_scalar(op.name) for op in self.scalars]
        return body

    def load_statements(self) -> list[Stmt]:
        """The TMA copies of the blocks loaded once, started together, then waited for."""
        plan = self.plan
        body: list[Stmt] = []
        boxes: list[Expr | Stmt] = [
            g for op in [*self.loaded, *self.stored] for g, _ in self._boxes(op)
        ]
        windows = {
            op.name: column_window_copies(
                plan, op, Name(barrier_ref(op.name)), plan.backend == "interpret"
            )
            for op in self.loaded
        }
        boxes += [s for copies in windows.values() for s in copies]
        if any(EDGE_START.text in names_read(g) for g in boxes):
            body.append(
                Comment(
                    "Blocks wider than a whole dim start at a traced zero: the box may extend past"
                )
            )
            body.append(Comment("the array's edge, where TMA reads zeros and drops writes."))
            zero = BinOp(Operator.MUL, call("lax.axis_index", Const(plan.grid_names[0])), Const(0))
            body.append(Assign((EDGE_START,), zero))
        if not self.loaded:
            return body
        body.append(
            Comment("Load: start every TMA copy first so they overlap, then wait for each.")
        )
        for op in self.loaded:
            promise = oob_mode(self.plan, op)
            barrier = Name(barrier_ref(op.name))
            if op.index is not None:
                body += gather_copies(plan, op, barrier, promise)
                continue
            for gmem_box, smem_box in self._boxes(op):
                copy = call("plgpu.copy_gmem_to_smem", gmem_box, smem_box, barrier, **promise)
                body.append(ExprStmt(copy))
            body += windows[op.name]
        for op in self.loaded:
            body.append(ExprStmt(call("plgpu.barrier_wait", Name(barrier_ref(op.name)))))
        return body

    def computed(
        self, loop_lines: Callable[[LoopBlock], list[Stmt]], skipped: tuple[Stmt, ...] = ()
    ) -> list[Stmt]:
        """The body: the loaded blocks read into registers (each just before its first use
        after a loop, or at the top), the statements but those `skipped` (written elsewhere),
        each loop as `loop_lines` gives it."""
        body: list[Stmt] = []
        deferred = self._loaded_after_loops()
        for op in self.loaded:
            if op.name not in deferred and self._in_registers(op):
                body += self._load(op)
        body.append(Comment("The kernel body, one statement per traced op."))
        for i, line in enumerate(self.t.lines):
            for op in (op for op in self.loaded if deferred.get(op.name) == i):
                body.append(
                    Comment(f"`{op.name}` is first read after a loop: not held through it.")
                )
                body += self._load(op)
            if isinstance(line, LoopBlock):
                body += loop_lines(line)
            elif not any(line is s for s in skipped):
                body.append(line)
        for op in (op for op in self.loaded if deferred.get(op.name) == len(self.t.lines)):
            body += self._load(op)
        return body

    def store(self) -> list[Stmt]:
        """Registers to shared memory, then TMA to global memory, clipped at the edge."""
        stores: list[Stmt] = []
        for op, value in zip(self.plan.results, self.t.outputs, strict=True):
            if op not in self.stored:
                continue
            assert value is not None
            smem = smem_ref(op.name)
            boxes = column_boxes(self.plan, op)
            if boxes == 1:
                frame = self.plan.flat_frame
                swizzled = bool(op.swizzle)
                stores.append(store(Name(smem), value, self.new_store_api, frame, swizzled))
                continue
            stores.append(Assign((Name(op.name),), value))
            width = op.block_shape[-1] // boxes
            lead = (Slice(),) if len(op.dims) == 2 else ()
            for k in range(boxes):
                piece = Subscript(
                    Name(op.name), (*lead, Slice(Const(k * width), Const((k + 1) * width)))
                )
                stores.append(
                    store(Subscript(Name(f"{smem}.at"), (Const(k),)), piece, self.new_store_api)
                )
        stores.append(ExprStmt(call("plgpu.commit_smem")))
        for op in self.stored:
            if op.index is not None:  # its rows scattered to the rows its index picks
                stores += scatter_copies(self.plan, op)
                continue
            stores += result_copies(self.plan, op)
        # At the kernel's end shared memory is free once the copies have read it: the writes
        # finish on their own.
        wait = call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True))
        stores.append(ExprStmt(wait))
        if not self.scoped:
            return [
                Comment(
                    "Store: registers to shared memory, then TMA to global memory, clipped at the "
                    "edge."
                ),
                *stores,
            ]
        refs = tuple(smem_ref(op.name) for op in self.stored)
        buffers = [self._smem_buffer(op) for op in self.stored]
        return [
            Comment(
                "Store: registers to shared memory scoped after the loops (it reuses the "
                "pipelines'),"
            ),
            Comment("then TMA to global memory, clipped at the edge."),
            FunctionDef("store_results", refs, tuple(stores)),
            ExprStmt(call("pl.run_scoped", Name("store_results"), *buffers)),
        ]

    def launch(self) -> Stmt:
        plan = self.plan
        outs = [
            call("jax.ShapeDtypeStruct", Const(op.launched_shape), DType(op.dtype))
            for op in self.launched
        ]
        out_type = outs[0] if len(outs) == 1 else Tuple(tuple(outs))
        held = [op for op in self.kernel_results if op.shares_smem_with is None and not op.in_place]
        scratch = [self._smem_buffer(op) for op in [*self.loaded, *held]]
        scratch += [consumers_buffer(smem) for _, smem in self.staged]
        slots = self.schedule.slots
        for op in self.loaded:
            copies = self.form.copies(plan, op)
            arrivals = {} if copies == 1 else {"num_arrivals": Const(copies)}
            if slots > 1 and self.form.staged(op):  # one a slot
                arrivals["num_barriers"] = Const(slots)
            barriers = self.launch_schedule.barriers()
            if barriers is not None:  # the schedule's own (one a consumer)
                arrivals["num_barriers"] = Const(barriers)
            scratch.append(call("plgpu.Barrier", **arrivals))
        interpret = IfExp(Name("INTERPRET"), call("plgpu.InterpretGPUParams"), Const(None))
        threads: tuple[Keyword, ...] = ()
        if self.schedule.warpgroups > 1:  # the consumers, then the producer
            threads = (
                Keyword("num_threads", Const(self.schedule.warpgroups)),
                Keyword("thread_name", Const(WG_AXIS)),
            )
        threads = (*self.launch_schedule.cluster_keywords(plan), *threads)
        kernel = Call(
            Name("plgpu.kernel"),
            (Name(block_function(plan.kernel)),),
            (
                Keyword("out_type", out_type),
                Keyword("grid", Const(self.launch_schedule.launch_grid(plan))),
                Keyword(
                    "grid_names",
                    Tuple(tuple(Const(n) for n in self.launch_schedule.grid_names(plan))),
                ),
                *threads,
                Keyword("scratch_types", List(tuple(scratch), one_per_line=True)),
                Keyword("compiler_params", self._compiler_params()),
                Keyword("interpret", interpret),
            ),
            one_per_line=True,
        )
        return Assign((Name("_launch"),), kernel)

    def _compiler_params(self) -> Expr:
        """`plgpu.CompilerParams`: the lane semantics, approximate transcendentals where the
        plan takes them (`ApproxMath`), and the profiler's options when the launch is
        profiled (`sk.profile`)."""
        params: dict[str, Expr] = {"lowering_semantics": Name("plgpu.LoweringSemantics.Lane")}
        approx = self.plan.approx_math
        if approx is not None and approx.applied:
            params["approx_math"] = Const(True)
        profile = self.plan.profile
        if profile is not None:
            params["profile_space"] = Const(profile.space)
            params["profile_dir"] = Const(profile.directory)
        return call("plgpu.CompilerParams", **params)

    def wrapper(self) -> FunctionDef:
        plan = self.plan
        body: list[Stmt] = prepared_inputs(self.inputs)
        launched = call("_launch", *(Name(op.name) for op in self.inputs))
        for op in plan.results:
            if op.updates is not None:
                body.append(Comment(f"`{op.updates}` is updated in place: the kernel writes it."))
                body.append(Assign((Name(op.updates),), call("jax.new_ref", Name(op.updates))))
        if self.launched:
            body.append(Assign(tuple(Name(op.name) for op in self.launched), launched))
        else:
            body.append(ExprStmt(launched))
        for op in plan.results:
            if op.updates is not None:
                body.append(Assign((Name(op.name),), call("jax.freeze", Name(op.updates))))
        outs = [self.form.unpadded(op) for op in plan.results]
        body += self.launch_schedule.finished_results(plan, outs)
        body += finished_results(plan, outs)
        if plan.tuple_result:
            body.append(Return(Tuple(tuple(outs))))
        else:
            body.append(Return(outs[0]))
        params = tuple(op.name for op in plan.operands)
        return FunctionDef(plan.kernel, params, tuple(body), decorators=(Name("jax.jit"),))

    def header(self) -> list[Stmt]:
        plan = self.plan
        dims = ", ".join(f"{d.name}={d.size}" for d in plan.dims)
        consts = ", ".join(f"{k}={v!r}" for k, v in plan.constants) or "(none)"
        ops = ", ".join(f"{op.name}: {op.dtype}{list(op.shape)}" for op in plan.operands)
        return [
            Comment(f"Pallas Mosaic GPU kernel `{plan.kernel}`, generated by statickernel."),
            Comment(f"Declared at: {plan.location}"),
            Comment(f"Operands:    {ops}"),
            Comment(f"Dims:        {dims}"),
            Comment(f"Constants:   {consts}"),
            Comment(f"Grid:        {self._grid_text()}"),
            Comment(f"Backend:     {_backend_text(plan)}"),
            *_target_line(plan),
            Comment(f"JAX:         {jax.__version__}"),
            Comment("This module needs only jax; it does not import statickernel."),
        ]

    def module(self) -> Module:
        interpret = Assign((Name("INTERPRET"),), Const(self.plan.backend == "interpret"))
        code = (interpret, self.block_function(), self.launch(), self.wrapper())
        module = Module((tuple(self.header()), _IMPORTS, code))
        return block_layouts(module, self.plan.block_tensor_cores)
