"""Code generation for the row form: each block's rows copied in bulk, computed one row at a
time as a vector, and copied back in bulk.

Every copy is a bulk copy of whole 128-byte pieces that lies inside its array (an array whose
rows are not a multiple of 16 bytes is addressed flat instead: `emit.flat_rows`):
  - a row that is not a whole number of 128-byte pieces ends with a copy of its last 128
    bytes, which overlaps the piece before it (those bytes are written twice, with the same
    values);
  - a block's rows past the array's edge read its last row again, and are never stored;
  - a per-row result is written an element a row, from registers, where the row computes it.
So no copy reads or writes past an edge, and none depends on how TMA fills or clips there.
Shared memory past the row's end is never written: loads select the operand's fill there.
"""

import dataclasses

from ...ir.names import (
    LocalNames,
    barrier_ref,
    block_function,
    gmem_ref,
    row_form_first,
    row_form_running,
    row_form_update,
    smem_ref,
)
from ...ir.nodes import (
    Assign,
    BinOp,
    Comment,
    Const,
    Expr,
    ExprStmt,
    FunctionDef,
    Kind,
    Literal,
    Mask,
    Name,
    Operator,
    SourceLine,
    Stmt,
    Subscript,
    call,
    names_read,
)
from .. import hardware as hw
from ..lower.rules import reduction_identity
from ..lower.translation import Line, LoopBlock, Translation
from ..pallas import RowFrame, full, load, read_scalar, select, store
from ..plan.plan import LaunchPlan, OperandPlan, Role
from ..plan.schedule import ScheduleKind
from .flat_rows import flat_copies, flat_row_loads, flat_row_stores
from .forms import unpadded
from .persistent import PersistentNames, persistent_statements
from .row_chunks import ChunkedRow, chunk_start, chunked_row_body
from .row_loops import RowLoop, row_loop_statements, row_masks

__all__ = ["ROW_FORM", "row_block_function"]

_PROMISE = Name("plgpu.OOBFillMode.PROMISE_IN_BOUNDS")
# A copy moves a whole number of these: one byte a thread of the warpgroup.
_PIECE_BYTES = 128


def _pieces(elements: int, dtype: str) -> list[tuple[int, int]]:
    """(start, size) of the bulk copies of `elements` contiguous elements: whole 128-byte
    pieces, and a last one that ends at the last element, overlapping the one before."""
    unit = hw.per_bytes(_PIECE_BYTES, dtype)
    whole = elements - elements % unit
    pieces = [(0, whole)]
    if whole != elements:
        pieces.append((elements - unit, unit))
    return pieces


@dataclasses.dataclass(frozen=True)
class _RowForm:
    """The row form (`emit.forms.FormEmitter`): blocks copied in bulk a row at a time, a
    per-row vector in 16-byte slots, only the 2-D blocks staged by a persistent launch, and
    a block function of its own."""

    def smem_shape(self, plan: LaunchPlan, op: OperandPlan, slots: int) -> tuple[int, ...]:
        if op.kind == Kind.ROW:  # a 16-byte slot a row
            return (*op.block_shape, op.gmem_shape[-1])
        stages = slots if op.role is Role.INPUT and op.kind == Kind.TILE else 1
        return (stages, *op.block_shape) if stages > 1 else op.block_shape

    def copies(self, plan: LaunchPlan, op: OperandPlan) -> int:
        per_row = flat_copies(op) if op.flat else len(_pieces(op.gmem_shape[-1], op.dtype))
        return per_row * (plan.dim(plan.rows).block if op.kind == Kind.TILE else 1)

    def staged(self, op: OperandPlan) -> bool:
        return op.kind == Kind.TILE

    def unpadded(self, op: OperandPlan) -> Expr:
        if op.flat:  # the launch wrote it flattened
            return call("jnp.reshape", Name(op.name), Const(op.shape))
        return unpadded(op)

    def block_function(
        self, plan: LaunchPlan, translation: Translation, new_store_api: bool
    ) -> FunctionDef | None:
        return row_block_function(plan, translation, new_store_api)


ROW_FORM = _RowForm()


class _RowGenerator:
    def __init__(self, plan: LaunchPlan, translation: Translation, new_store_api: bool):
        assert plan.row_frame is not None and plan.schedule is not None
        self.plan = plan
        self.t = translation
        # The row form's own locals, renamed around any array that takes one (an operand `r`).
        arrays = [op.name for op in (*plan.operands, *plan.results)]
        self.names = LocalNames.around(arrays, plan.grid_names)
        self.row_counter = Name(self.names.local("r"))
        self.row_start = Name(self.names.local("row_start"))
        self.row = Name(self.names.local("row"))
        self.launch = PersistentNames.around(self.names)
        self.frame: RowFrame = plan.row_frame
        self.new_store_api = new_store_api
        self.rows = plan.dim(plan.rows).block
        self.size = plan.dim(plan.rows).size
        self.width = plan.dim(plan.cols).size if plan.cols else 0
        self.ragged = self.size % self.rows != 0
        # A scalar operand is not copied: each block reads it from global memory, and so
        # does each row its element of a per-row operand.
        self.inputs = [op for op in plan.operands if op.loaded]
        self.scalars = [op for op in self.inputs if op.in_place and op.kind == Kind.SCALAR]
        self.per_row = [op for op in self.inputs if op.in_place and op.kind == Kind.ROW]
        self.loaded = [op for op in self.inputs if not op.in_place]
        self.tiles = [op for op in self.loaded if op.kind == Kind.TILE]
        self.columns = [op for op in self.loaded if op.kind != Kind.TILE]
        # A persistent launch keeps a buffer a stage for each row-wise operand: its blocks'
        # refs take the slot first.
        self.persistent = plan.schedule.kind is ScheduleKind.PERSISTENT
        self.stages = plan.schedule.stages
        self.ctas = plan.schedule.ctas
        # Results summed over the rows: each CTA adds its rows into one vector in shared
        # memory and writes it once, as its partial (see `trace.crossblock`).
        self.accumulators = [op for op in plan.results if op.per_block]
        combines = {plan.results[c.index].name: c.combine for c in plan.cross_blocks}
        self.combine = {op.name: combines[op.name] for op in self.accumulators}

    def _loop(self, name: str, body: list[Stmt]) -> list[Stmt]:
        """`body` once for each row `r` of the block; inline when the block has one row."""
        if self.rows == 1:
            return [Assign((self.row_counter,), Const(0)), *body]
        loop = call("pl.loop", Const(0), Const(self.rows))
        counter = self.row_counter.text
        return [FunctionDef(self.names.local(name), (counter,), tuple(body), decorators=(loop,))]

    def _at(self, buffer: str, *index: Expr, staged: bool) -> Expr:
        lead = (self.launch.slot,) if staged and self.persistent else ()
        return Subscript(Name(f"{buffer}.at"), (*lead, *index))

    def _barrier(self, op: OperandPlan) -> Expr:
        barrier = Name(barrier_ref(op.name))
        if self.persistent and op.kind == Kind.TILE:
            return Subscript(Name(f"{barrier_ref(op.name)}.at"), (self.launch.slot,))
        return barrier

    def _copies(
        self, op: OperandPlan, row: Expr | None, buffer: str | None = None
    ) -> list[tuple[Expr, Expr]]:
        """(GMEM slice, SMEM slice) of each bulk copy of one row of `op` (or of the whole
        1-D operand when `row` is None), to or from the shared-memory `buffer`."""
        smem = buffer or smem_ref(op.name)
        # A row-wise operand's buffer has a slot a stage, and so does a result written into it.
        staged = row is not None and (buffer is None or op.shares_smem_with is not None)
        out: list[tuple[Expr, Expr]] = []
        for start, size in _pieces(op.gmem_shape[-1], op.dtype):
            span = call("pl.ds", Const(start), Const(size))
            if row is None:
                out.append(
                    (
                        Subscript(Name(f"{gmem_ref(op.name)}.at"), (span,)),
                        self._at(smem, span, staged=False),
                    )
                )
            else:
                gmem = Subscript(Name(f"{gmem_ref(op.name)}.at"), (row, span))
                out.append((gmem, self._at(smem, self.row_counter, span, staged=staged)))
        return out

    def _copy_in(self, op: OperandPlan, row: Expr | None) -> list[Stmt]:
        if op.flat:  # a row, or a per-column vector whole
            smem = (
                self._at(smem_ref(op.name), self.row_counter, staged=True)
                if row is not None
                else Subscript(Name(f"{smem_ref(op.name)}.at"), ())
            )
            return flat_row_loads(op, row, smem, self._barrier(op), self.names)
        return [
            ExprStmt(
                call("plgpu.copy_gmem_to_smem", gmem, smem, self._barrier(op), oob_mode=_PROMISE)
            )
            for gmem, smem in self._copies(op, row)
        ]

    def _load_block(self) -> list[Stmt]:
        """The copies of one block's rows of every row-wise operand."""
        row: Expr = self.row
        per_row = [stmt for op in self.tiles for stmt in self._copy_in(op, row)]
        if not per_row:
            return []
        return self._loop("load_row", [Assign((row,), self._row_position()), *per_row])

    def _masks(self, needed: set[Mask]) -> list[Stmt]:
        """The row's edge masks, or the loop's chunk's in a row computed in chunks."""
        start = chunk_start(self.frame) if self.frame.chunks > 1 else None
        return row_masks(self.frame, needed, self.width, start)

    def _row_body(self) -> list[Stmt]:
        if self.frame.chunks > 1:
            return self._per_row_reads() + self._chunked_row_body()
        padded = self.frame.width != self.width
        needed = set(self.t.masks)
        assert not needed & {Mask.ROW_OK, Mask.ROW_OK_VEC}, "the row form has no row masks"
        lines = list(self.t.lines)
        # Each operand's row is read from shared memory just before its first use: a wide row
        # held from the top through the reductions would double what is live (x and a norm's
        # weight, 128 registers each at 16384 f32) and spill. A loop's steps read their own.
        first_use = {op.name: _first_use(lines, op.name) for op in self.loaded}
        outputs = [v for v in self.t.outputs if v is not None]
        read = [
            op
            for op in self.loaded
            if first_use[op.name] < len(lines) or any(op.name in names_read(v) for v in outputs)
        ]
        if padded and read:
            needed.add(Mask.COL_OK)
        body = self._masks(needed) + self._per_row_reads()
        body.append(Comment("The kernel body, one statement per traced op, on one row."))
        for i in range(len(lines) + 1):
            for op in read:
                if first_use[op.name] == i:
                    body += self._load_row(op, padded)
            if i < len(lines):
                line = lines[i]
                body += self._walk(line) if isinstance(line, LoopBlock) else [line]
        for op, value in zip(self.plan.results, self.t.outputs, strict=True):
            if value is None:  # a map's, written by its steps
                continue
            if op.kind == Kind.TILE:
                if op.shares_smem_with is not None:
                    body.append(
                        Comment(
                            f"`{op.name}` goes into `{op.shares_smem_with}`'s block: the row is read."
                        )
                    )
                ref = self._at(
                    _buffer(op), self.row_counter, staged=op.shares_smem_with is not None
                )
                body.append(store(ref, value, self.new_store_api, self.frame))
            elif op.per_block:
                body += self._accumulate(op, value)
            else:
                body.append(self._row_slot_store(op, value))
        return body

    def _walk(self, block: LoopBlock) -> list[Stmt]:
        """A loop's walk over the row's columns in shared memory (`emit.row_loops`)."""
        frame = self.frame.step_frame()
        writes = {b: self.plan.results[r] for r, i, b in self.t.streamed if i == block.index}

        def load_step(name: str, columns: Expr) -> Stmt:
            op = self.plan.operand(name)
            if op.kind == Kind.TILE:
                ref = self._at(smem_ref(name), self.row_counter, columns, staged=True)
            else:
                ref = Subscript(Name(f"{smem_ref(name)}.at"), (columns,))
            return Assign((Name(name),), load(ref, op.kind, frame))

        def write_step(b: int, columns: Expr, value: Expr) -> Stmt:
            op = writes[b]
            staged = op.shares_smem_with is not None
            ref = self._at(_buffer(op), self.row_counter, columns, staged=staged)
            return store(ref, value, self.new_store_api, frame)

        dtypes = {op.name: op.dtype for op in self.loaded}
        walk = RowLoop(block, self.width, self.frame, load_step, write_step, dtypes)
        return row_loop_statements(walk)

    def _row_slot_store(self, op: OperandPlan, value: Expr) -> Stmt:
        """A per-row scalar result, into its row's element of the array (a row past a ragged
        edge is the last row again: the same value to the same element)."""
        return Assign((Subscript(Name(gmem_ref(op.name)), (self.row,)),), value)

    def _chunked_row_body(self) -> list[Stmt]:
        """A row too wide for the registers, in passes over its chunks (`emit.row_chunks`):
        the operands' chunks loaded by each pass that reads them, the results' chunks stored
        by the last, and the per-row results after it."""
        columns = call("pl.ds", chunk_start(self.frame), Const(self.frame.chunk_width))
        padded = self.frame.width != self.width
        needed = set(self.t.masks) | ({Mask.COL_OK} if padded and self.loaded else set())
        row = ChunkedRow(
            lines=tuple(self.t.lines),  # type: ignore[arg-type]  # a row in chunks has no loops
            reductions={name: (prim, dtype) for name, prim, dtype in self.t.row_reductions},
            vectors=self.t.row_vectors,
            loads={op.name: tuple(self._load_row(op, padded, columns)) for op in self.loaded},
            frame=self.frame,
            prologue=tuple(self._masks(needed)),
        )
        stores: list[Stmt] = []
        after: list[Stmt] = []
        for op, value in zip(self.plan.results, self.t.outputs, strict=True):
            assert value is not None and not op.per_block
            if op.kind == Kind.TILE:
                staged = op.shares_smem_with is not None
                ref = self._at(_buffer(op), self.row_counter, columns, staged=staged)
                stores.append(store(ref, value, self.new_store_api, self.frame))
            else:
                after.append(self._row_slot_store(op, value))
        comment = Comment(
            f"The kernel body on a row in {self.frame.chunks} chunks of "
            f"{self.frame.chunk_width} columns, one statement per traced op."
        )
        return [comment, *chunked_row_body(row, stores), *after]

    def _row_position(self) -> Expr:
        """The array row of the block's row `r`: past a ragged edge, the last row again."""
        position: Expr = BinOp(Operator.ADD, self.row_start, self.row_counter)
        if self.ragged:
            position = call("jnp.minimum", position, Const(self.size - 1))
        return position

    def _per_row_reads(self) -> list[Stmt]:
        """Each per-row operand's element of this row, from global memory: first in the row's
        body, so that its latency overlaps the row's loads from shared memory. (The row's
        position is set for a per-row result too, which is written there.)"""
        if not self.per_row and not any(op.in_place for op in self.plan.results):
            return []
        lines: list[Stmt] = [Assign((self.row,), self._row_position())]
        for op in self.per_row:
            value = Subscript(Name(gmem_ref(op.name)), (self.row,))
            lines.append(Assign((Name(op.name),), value, comment="this row's, from global memory"))
        return lines

    def _accumulate(self, op: OperandPlan, value: Expr) -> list[Stmt]:
        """The row's value added into the CTA's vector (each thread adds its own elements,
        as it loaded them); a row past a ragged edge, a copy of the last one, is left out."""
        ref = Name(_buffer(op))
        combine = self.combine[op.name].pairwise
        so_far = Name(row_form_running(op.name))
        added = [
            Assign((so_far,), load(ref, Kind.COL, self.frame)),
            store(ref, call(combine, so_far, value), self.new_store_api, self.frame),
        ]
        if not self.ragged:
            return added
        inside = BinOp(
            Operator.LT, BinOp(Operator.ADD, self.row_start, self.row_counter), Const(self.size)
        )
        guard = call("pl.when", inside)
        return [FunctionDef(row_form_update(op.name), (), tuple(added), decorators=(guard,))]

    def _accumulators_start(self) -> list[Stmt]:
        """Each CTA's vectors start at the combination's identity, and its partial is the
        entry of the CTA (one block a CTA, or a persistent CTA's blocks)."""
        lines: list[Stmt] = []
        index = (
            self.launch.cta
            if self.persistent
            else call("lax.axis_index", Const(self.plan.grid_names[0]))
        )
        for op in self.accumulators:
            identity = reduction_identity(self.combine[op.name].primitive, op.dtype)
            start = full(
                Literal(identity, op.dtype, weak_type=False),
                (self.frame.width,),
                op.dtype,
                Kind.COL,
                self.frame,
            )
            gmem = Name(gmem_ref(op.name))
            lines.append(
                Assign(
                    (gmem,),
                    Subscript(Name(f"{gmem_ref(op.name)}.at"), (index,)),
                    comment="this CTA's partial",
                )
            )
            first = Name(row_form_first(op.name))
            lines.append(Assign((first,), start))
            lines.append(store(Name(_buffer(op)), first, self.new_store_api, self.frame))
        return lines

    def _accumulators_out(self) -> list[Stmt]:
        """Each CTA's vectors, once its last row is in: bulk copies to its partial."""
        if not self.accumulators:
            return []
        lines: list[Stmt] = [Comment("The CTA's sums over its rows: its partials, one copy each.")]
        lines.append(ExprStmt(call("plgpu.commit_smem")))
        for op in self.accumulators:
            for gmem, smem in self._copies(op, None, _buffer(op)):
                lines.append(ExprStmt(call("plgpu.copy_smem_to_gmem", smem, gmem)))
        lines.append(
            ExprStmt(call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True)))
        )
        return lines

    def _load_row(self, op: OperandPlan, padded: bool, columns: Expr | None = None) -> list[Stmt]:
        """The operand's row (or per-column block) from shared memory into registers: all of
        it, or its `columns` (a chunk's)."""
        at = () if columns is None else (columns,)
        if op.kind == Kind.TILE:
            ref = self._at(smem_ref(op.name), self.row_counter, *at, staged=True)
        else:
            ref = Subscript(Name(f"{smem_ref(op.name)}.at"), at) if at else Name(smem_ref(op.name))
        lines: list[Stmt] = [Assign((Name(op.name),), load(ref, op.kind, self.frame))]
        if padded:
            fill = op.fill if op.fill is not None else 0
            # Shared memory past the row's end is never written: it reads the fill.
            value = select(
                Name(Mask.COL_OK), Name(op.name), Literal(fill, op.dtype, weak_type=False), op.dtype
            )
            lines.append(Assign((Name(op.name),), value, comment="past the edge reads the fill"))
        return lines

    def _store_copies(self) -> list[Stmt]:
        per_row: list[Stmt] = []
        row = self.row
        for op in self.plan.results:
            # A per-row result went out in place, a sum over the rows goes out after them.
            assert op.kind == Kind.TILE or op.in_place or op.per_block
            if op.kind == Kind.TILE and op.flat:
                staged = op.shares_smem_with is not None
                smem = self._at(_buffer(op), self.row_counter, staged=staged)
                per_row += flat_row_stores(op, row, smem, self.names)
            elif op.kind == Kind.TILE:
                for gmem, smem in self._copies(op, row, _buffer(op)):
                    per_row.append(ExprStmt(call("plgpu.copy_smem_to_gmem", smem, gmem)))
        body: list[Stmt] = [ExprStmt(call("plgpu.commit_smem"))]
        if per_row:
            inner: list[Stmt] = [
                Assign((row,), BinOp(Operator.ADD, self.row_start, self.row_counter))
            ]
            if self.ragged:
                guard = call("pl.when", BinOp(Operator.LT, row, Const(self.size)))
                inner.append(
                    FunctionDef(
                        self.names.local("store_inside"), (), tuple(per_row), decorators=(guard,)
                    )
                )
            else:
                inner += per_row
            body += self._loop("store_row", inner)
        if any(op.flat for op in self.plan.results):
            # Every thread has read its elements from shared memory before any writes them.
            body.append(ExprStmt(call("plgpu.commit_smem")))
        # Shared memory may be reused (or released) once the copies have read it; the writes
        # finish on their own.
        body.append(ExprStmt(call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True))))
        return body

    def _load_comment(self) -> Comment:
        if any(op.flat for op in self.tiles):  # see `emit.flat_rows`
            return Comment("Load: 1-D TMA boxes of a flat row, and bulk copies of 128-byte pieces.")
        return Comment("Load: bulk copies of whole 128-byte pieces, each inside the array.")

    def _store_comment(self) -> Comment:
        if any(op.flat for op in self.plan.results):
            return Comment("Store: a flat row from registers, and bulk copies inside the array.")
        return Comment("Store: bulk copies back, each inside the array.")

    def _params(self) -> tuple[str, ...]:
        plan = self.plan
        params = [gmem_ref(op.name) for op in self.inputs]
        params += [gmem_ref(op.name) for op in plan.results]
        params += [smem_ref(op.name) for op in self.loaded]
        params += [
            smem_ref(op.name)
            for op in plan.results
            if op.shares_smem_with is None and not op.in_place
        ]
        params += [barrier_ref(op.name) for op in self.loaded]
        return tuple(params)

    def _header(self) -> list[Stmt]:
        return [
            Comment(
                f"Each block is {self.rows} row(s) from row_start. A row is a vector of "
                f"{self.frame.width} elements,"
            ),
            Comment(f"{self.frame.vector} contiguous a thread; a row's reductions are scalars."),
            *(
                [Comment("Rows past the edge read the last row again, and are never stored.")]
                if self.ragged
                else []
            ),
            *(read_scalar(op.name) for op in self.scalars),
        ]

    def _columns_in(self) -> list[Stmt]:
        """The per-column operands: copied once, waited once."""
        if not self.columns:
            return []
        lines = [stmt for op in self.columns for stmt in self._copy_in(op, None)]
        lines += [
            ExprStmt(call("plgpu.barrier_wait", Name(barrier_ref(op.name)))) for op in self.columns
        ]
        return lines

    def function(self) -> FunctionDef:
        if self.persistent:
            return self._persistent_function()
        plan = self.plan
        start = BinOp(
            Operator.MUL, call("lax.axis_index", Const(plan.grid_names[0])), Const(self.rows)
        )
        body: list[Stmt] = [*self._header(), Assign((self.row_start,), start)]
        body += self._accumulators_start()
        body.append(self._load_comment())
        body += self._load_block()
        body += [
            ExprStmt(call("plgpu.barrier_wait", Name(barrier_ref(op.name)))) for op in self.tiles
        ]
        body += self._columns_in()
        body += self._loop("compute_row", self._row_body())
        body.append(self._store_comment())
        body += self._store_copies()
        body += self._accumulators_out()
        return FunctionDef(block_function(plan.kernel), self._params(), tuple(body))

    def _persistent_function(self) -> FunctionDef:
        plan = self.plan
        blocks, ctas, stages = plan.grid[0], self.ctas, self.stages

        def block_start() -> Expr:
            block = BinOp(
                Operator.ADD, self.launch.cta, BinOp(Operator.MUL, self.launch.step, Const(ctas))
            )
            return BinOp(Operator.MUL, block, Const(self.rows))

        load_block = (
            self._load_comment(),
            Assign((self.row_start,), block_start()),
            *self._load_block(),
        )
        step: list[Stmt] = [
            Assign((self.row_start,), block_start()),
            *[ExprStmt(call("plgpu.barrier_wait", self._barrier(op))) for op in self.tiles],
            *self._loop("compute_row", self._row_body()),
            self._store_comment(),
            *self._store_copies(),
        ]
        body: list[Stmt] = [
            Comment(
                f"Persistent: CTA `cta` takes blocks cta, cta + {ctas}, ... of the {blocks}, "
                f"with {stages} in flight:"
            ),
            Comment(
                "while one block is computed on in its shared-memory slot, the next ones arrive."
            ),
            *self._header(),
            *persistent_statements(
                blocks,
                ctas,
                stages,
                load_block,
                [*self._accumulators_start(), *self._columns_in()],
                step,
                "Its stores have read the slot: the block `stages` ahead takes it.",
                self.launch,
            ),
            *self._accumulators_out(),
        ]
        return FunctionDef(block_function(plan.kernel), self._params(), tuple(body))


def _first_use(lines: list[Line], name: str) -> int:
    """The index of the first body line that reads `name`, moved up above the comments that
    name the user's line; `len(lines)` when only the results read it (or loops' steps)."""
    first = next(
        (
            i
            for i, line in enumerate(lines)
            if not isinstance(line, Comment | SourceLine | LoopBlock) and name in names_read(line)
        ),
        len(lines),
    )
    while first > 0 and isinstance(lines[first - 1], Comment | SourceLine):
        first -= 1
    return first


def _buffer(op: OperandPlan) -> str:
    """The shared-memory buffer a result is written to: its own, or an operand's."""
    return f"{op.shares_smem_with or op.name}_smem"


def row_block_function(
    plan: LaunchPlan, translation: Translation, new_store_api: bool
) -> FunctionDef:
    return _RowGenerator(plan, translation, new_store_api).function()
