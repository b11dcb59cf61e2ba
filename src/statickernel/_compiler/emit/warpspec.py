"""Code generation for the warp-specialized, persistent matmul (see `plan.warpspec`).

The block function runs on three warpgroups (two with one consumer): a scoped region holds
the pipeline's buffers and the epilogue slots for the whole kernel; `plgpu.nd_loop` hands
each CTA its tiles; for each tile `plgpu.emit_pipeline_warp_specialized` has the producer
copy a's and b's K blocks while each consumer folds WGMMA into its accumulator, then runs
the body's epilogue and stores its block slot by slot.
"""

from ..ir.names import block_function
from ..ir.nodes import (
    Assign,
    BinOp,
    Call,
    Comment,
    Const,
    DType,
    EllipsisIndex,
    Expr,
    ExprStmt,
    FunctionDef,
    Keyword,
    Lambda,
    List,
    Name,
    Operator,
    Return,
    Slice,
    Stmt,
    Subscript,
    Tuple,
    call,
)
from ..ir.pallas import load
from ..ir.printer import expression_source
from ..lower.dots import wgmma_transforms
from ..lower.translation import LoopBlock, Translation
from ..plan.plan import LaunchPlan, OperandPlan
from ..plan.warpspec import MEMORY_REGISTERS, epilogue_vectors

__all__ = ["WG_AXIS", "warp_specialized_function"]

WG_AXIS = "wg"
CTA_AXIS = "cta"
_WG = Name("wg")


def _mul(x: Expr, n: int) -> Expr:
    return x if n == 1 else BinOp(Operator.MUL, x, Const(n))


def _add(x: Expr, y: Expr | int) -> Expr:
    if isinstance(y, int):
        return x if y == 0 else BinOp(Operator.ADD, x, Const(y))
    return BinOp(Operator.ADD, x, y)


def warp_specialized_function(
    plan: LaunchPlan, translation: Translation, new_store_api: bool
) -> FunctionDef:
    ws = plan.warp_specialized
    assert ws is not None
    (loop,) = plan.loops
    (block,) = translation.loops
    (dot,) = block.dots
    rows, cols = plan.rows, plan.cols
    assert cols is not None
    a, b = plan.operand(dot.a), plan.operand(dot.b)
    (result,) = plan.results
    bm, bn, bk = plan.dim(rows).block, plan.dim(cols).block, loop.block
    pair_rows = 2 if ws.paired == rows else 1
    pair_cols = 2 if ws.paired == cols else 1
    vectors = epilogue_vectors(plan.operands, block)
    scalars = [
        op
        for op in plan.operands
        if op.loaded and op.name not in (dot.a, dot.b) and op not in vectors
    ]
    batch = result.batch

    # The pipeline: a's and b's blocks of one K step, a CTA tile wide.
    a_rows = bm * pair_rows
    b_cols = bn * pair_cols
    a_spec = _spec((a_rows, bk), Lambda(("k",), Tuple((Const(0), Name("k")))), a.dtype)
    if dot.transpose_b:
        b_spec = _spec((b_cols, bk), Lambda(("k",), Tuple((Const(0), Name("k")))), b.dtype)
    else:
        b_spec = _spec((bk, b_cols), Lambda(("k",), Tuple((Name("k"), Const(0)))), b.dtype)
    pipeline = FunctionDef(
        "pipeline",
        ("step", "consumer"),
        (
            Return(
                Call(
                    Name("plgpu.emit_pipeline_warp_specialized"),
                    (Name("step"),),
                    (
                        Keyword("grid", Const((loop.steps,))),
                        Keyword("memory_registers", Const(MEMORY_REGISTERS)),
                        Keyword("in_specs", List((a_spec, b_spec), one_per_line=True)),
                        Keyword("wg_axis", Const(WG_AXIS)),
                        Keyword("num_compute_wgs", Const(ws.consumers)),
                        Keyword("max_concurrent_steps", Const(ws.stages)),
                        Keyword("compute_context", Name("consumer")),
                    ),
                    one_per_line=True,
                )
            ),
        ),
    )

    # The tile walk: batch entries, then a snake over the CTA tiles.
    tile_body: list[Stmt] = []
    batch_names = [Name(f"block_{d}") for d in batch]
    tile_index = Name("tile_index")
    tile_body.append(Assign((Tuple((*batch_names, tile_index)),), Name("tile_info.index")))
    tile_rows, tile_cols = Name(f"tile_{rows}"), Name(f"tile_{cols}")
    snake = call(
        "plgpu.planar_snake", tile_index, Const(ws.tile_grid), Const(ws.minor), Const(ws.band)
    )
    tile_body.append(Assign((Tuple((tile_rows, tile_cols)),), snake))
    block_rows = _add(_mul(tile_rows, 2), _WG) if pair_rows == 2 else tile_rows
    block_cols = _add(_mul(tile_cols, 2), _WG) if pair_cols == 2 else tile_cols
    tile_body.append(Assign((Name(f"block_{rows}"),), block_rows, comment="this consumer's block"))
    tile_body.append(Assign((Name(f"block_{cols}"),), block_cols))
    gmem = {op.name: Name(f"{op.name}_gmem") for op in (a, b, result, *vectors)}
    if batch:
        for op in (a, b, result, *(v for v in vectors if v.batch)):
            entry = Subscript(Name(f"{op.name}_gmem.at"), tuple(batch_names))
            tile_body.append(Assign((Name(f"{op.name}_entry"),), entry))
            gmem[op.name] = Name(f"{op.name}_entry")

    # A consumer: the body before the loop, the accumulation, the epilogue and the store.
    consumer: list[Stmt] = []
    for op in scalars:
        value = Subscript(Name(f"{op.name}_gmem"), (EllipsisIndex(),))
        consumer.append(Assign((Name(op.name),), value, comment="a scalar, from global memory"))
    for op in vectors:
        # Copied while the main loop runs; waited for after it.
        (dim,) = op.dims
        extent = op.block_shape[0]
        source = Subscript(
            Name(f"{gmem[op.name].text}.at"),
            (call("pl.ds", _mul(Name(f"block_{dim}"), extent), Const(extent)),),
        )
        consumer.append(
            ExprStmt(
                call(
                    "plgpu.copy_gmem_to_smem",
                    source,
                    Subscript(Name(f"{op.name}_smem.at"), (_WG,)),
                    Subscript(Name(f"{op.name}_barrier.at"), (_WG,)),
                ),
                comment="this block's part, while the main loop runs",
            )
        )
    acc = f"{dot.carry}_acc"
    for line in translation.lines:
        if not isinstance(line, LoopBlock):
            consumer.append(line)
            continue
        accumulate = FunctionDef(
            f"loop{line.index}",
            (acc,),
            (
                ExprStmt(call("run_pipeline", Name(acc))),
                Return(
                    Tuple(
                        tuple(
                            Subscript(Name(f"{c.var}_acc"), (EllipsisIndex(),))
                            for c in line.carries
                        )
                    )
                ),
            ),
        )
        finals = Tuple(tuple(Name(f) for f in line.finals))
        consumer.append(accumulate)
        consumer.append(
            Assign(
                (finals,),
                call(
                    "pl.run_scoped",
                    Name(accumulate.name),
                    call("plgpu.ACC", Const((bm, bn)), DType(dot.accumulator)),
                ),
            )
        )
        for op in vectors:
            consumer.append(
                ExprStmt(
                    call("plgpu.barrier_wait", Subscript(Name(f"{op.name}_barrier.at"), (_WG,)))
                )
            )
            ref = Subscript(Name(f"{op.name}_smem.at"), (_WG,))
            consumer.append(Assign((Name(op.name),), load(ref, op.kind)))
    (value,) = translation.outputs
    assert value is not None
    out = Name(result.name)
    consumer.append(Assign((out,), value))
    consumer += _epilogue_store(plan, result, gmem[result.name], out, new_store_api)
    step = FunctionDef(
        "step",
        ("indices", f"{a.name}_smem", f"{b.name}_smem", acc),
        (
            ExprStmt(
                call(
                    "plgpu.wgmma",
                    Name(acc),
                    _consumer_slice(Name(f"{a.name}_smem"), pair_rows, bm, rows_first=True),
                    _b_operand(Name(f"{b.name}_smem"), pair_cols, bn, dot.transpose_b),
                )
            ),
            ExprStmt(call("plgpu.wgmma_wait", Const(0)), comment="the step's slots go back"),
            Return(Name(acc)),
        ),
    )
    a_view = Subscript(
        Name(f"{gmem[a.name].text}.at"),
        (call("pl.ds", _mul(tile_rows, a_rows), Const(a_rows)), Slice()),
    )
    b_slice = call("pl.ds", _mul(tile_cols, b_cols), Const(b_cols))
    b_index = (b_slice, Slice()) if dot.transpose_b else (Slice(), b_slice)
    b_view = Subscript(Name(f"{gmem[b.name].text}.at"), b_index)
    tile_body += [
        FunctionDef("consumer", ("run_pipeline",), tuple(consumer)),
        step,
        ExprStmt(
            Call(
                call("pipeline", Name("step"), Name("consumer")),
                (a_view, b_view),
                (Keyword("allocations", Name("pipeline_allocations")),),
                one_per_line=True,
            )
        ),
    ]
    grid = (*(plan.dim(d).size for d in batch), ws.tile_grid[0] * ws.tile_grid[1])
    walk = call("plgpu.nd_loop", Const(grid), collective_axes=Const(CTA_AXIS))
    vector_refs = [f"{op.name}_{what}" for op in vectors for what in ("smem", "barrier")]
    tiles = FunctionDef(
        "tiles",
        ("pipeline_allocations", f"{result.name}_smem", *vector_refs),
        (FunctionDef("tile", ("tile_info",), tuple(tile_body), decorators=(walk,)),),
    )
    slots = call(
        "plgpu.SMEM",
        Const((ws.consumers, ws.slots, *ws.epilogue)),
        DType(result.dtype),
        **({"transforms": wgmma_transforms(result.dtype)} if ws.swizzled else {}),
    )
    # The pipeline's buffers are sized by the arrays of one batch entry.
    first = tuple(Const(0) for _ in batch)
    sized_by = [
        Subscript(Name(f"{op.name}_gmem.at"), first) if batch else Name(f"{op.name}_gmem")
        for op in (a, b)
    ]
    allocations = call(Name("pipeline(None, None).get_allocations"), *sized_by)
    body: list[Stmt] = [
        Comment(
            f"Warp-specialized: warpgroup {ws.consumers} copies a's and b's K blocks; "
            f"warpgroup(s) 0-{ws.consumers - 1} multiply and store."
        ),
        Comment(
            f"Persistent: {ws.ctas} CTAs walk the {ws.tiles} CTA tiles; a tile's stores drain "
            "while the next runs."
        ),
        Assign((_WG,), call("lax.axis_index", Const(WG_AXIS))),
        pipeline,
        tiles,
        ExprStmt(
            Call(
                Name("pl.run_scoped"),
                (Name("tiles"),),
                (
                    Keyword("pipeline_allocations", allocations),
                    Keyword(f"{result.name}_smem", slots),
                    *(
                        keyword
                        for op in vectors
                        for keyword in (
                            Keyword(
                                f"{op.name}_smem",
                                call(
                                    "plgpu.SMEM",
                                    Const((ws.consumers, op.block_shape[0])),
                                    DType(op.dtype),
                                ),
                            ),
                            Keyword(
                                f"{op.name}_barrier",
                                call("plgpu.Barrier", num_barriers=Const(ws.consumers)),
                            ),
                        )
                    ),
                    Keyword("collective_axes", Const(WG_AXIS)),
                ),
                one_per_line=True,
            )
        ),
        ExprStmt(
            call("plgpu.wait_smem_to_gmem", Const(0), wait_read_only=Const(True)),
            comment="the last tile's stores have read their slots",
        ),
    ]
    params = [f"{op.name}_gmem" for op in plan.operands if op.loaded]
    params += [f"{op.name}_gmem" for op in plan.results]
    return FunctionDef(block_function(plan.kernel), tuple(params), tuple(body))


def _spec(shape: tuple[int, int], index: Lambda, dtype: str) -> Expr:
    return call("plgpu.BlockSpec", Const(shape), index, transforms=wgmma_transforms(dtype))


def _consumer_slice(ref: Name, pair: int, extent: int, rows_first: bool) -> Expr:
    """A consumer's share of a paired block: its rows (or columns) of the CTA tile."""
    if pair == 1:
        return ref
    piece = call("pl.ds", _mul(_WG, extent), Const(extent))
    index = (piece,) if rows_first else (Slice(), piece)
    return Subscript(Name(f"{ref.text}.at"), index)


def _b_operand(ref: Name, pair: int, extent: int, transposed: bool) -> Expr:
    if transposed:  # b is stored (N, K): WGMMA reads it transposed
        piece = _consumer_slice(ref, pair, extent, rows_first=True)
        return Name(f"{expression_source(piece)}.T")
    return _consumer_slice(ref, pair, extent, rows_first=False)


def _epilogue_store(
    plan: LaunchPlan, result: OperandPlan, gmem: Name, value: Name, new_store_api: bool
) -> list[Stmt]:
    """The block into the consumer's epilogue slots in turn, each stored by TMA: a slot is
    refilled once the store two slots back has read it, so stores overlap what follows."""
    ws = plan.warp_specialized
    assert ws is not None
    rows, cols = plan.rows, plan.cols
    assert cols is not None
    bm, bn = plan.dim(rows).block, plan.dim(cols).block
    er, ec = ws.epilogue
    lines: list[Stmt] = []
    count = 0
    # With an odd number of pieces, a block's first piece takes the slot of the last tile's
    # last piece, whose store may still be reading it: wait for every store there.
    pieces = (bm // er) * (bn // ec)
    for r in range(0, bm, er):
        for c in range(0, bn, ec):
            slot = Subscript(Name(f"{result.name}_smem.at"), (_WG, Const(count % ws.slots)))
            piece = Subscript(
                value, (Slice(Const(r), Const(r + er)), Slice(Const(c), Const(c + ec)))
            )
            pending = 0 if count == 0 and pieces % 2 else ws.slots - 1
            lines.append(
                ExprStmt(
                    call("plgpu.wait_smem_to_gmem", Const(pending), wait_read_only=Const(True)),
                    comment="the slot's last store has read it" if count == 0 else None,
                )
            )
            if new_store_api:
                lines.append(
                    ExprStmt(call("plgpu.store", slot, piece, optimized=Const(ws.swizzled)))
                )
            else:
                lines.append(Assign((Subscript(slot, (EllipsisIndex(),)),), piece))
            lines.append(ExprStmt(call("plgpu.commit_smem")))
            target = Subscript(
                Name(f"{gmem.text}.at"),
                (
                    call("pl.ds", _add(_mul(Name(f"block_{rows}"), bm), r), Const(er)),
                    call("pl.ds", _add(_mul(Name(f"block_{cols}"), bn), c), Const(ec)),
                ),
            )
            lines.append(ExprStmt(call("plgpu.copy_smem_to_gmem", slot, target)))
            count += 1
    return lines
