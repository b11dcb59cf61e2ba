"""Translation of `sk.dot` as a value of a loop's step: a WGMMA into a scoped accumulator.

A carry updated only as `carry + sk.dot(a, b)` is an accumulator of the whole loop (`lower.steps`);
every other product is computed where the step needs it:

- `sk.dot(a, b)` alone: a WGMMA into a fresh accumulator ref, read back into registers;
- `x + sk.dot(a, b)`: a WGMMA into an accumulator that starts at `x` (`plgpu.ACC.init`), so the
  sum costs no registers of its own (attention's `acc * rescale[:, None] + sk.dot(p, v)`).

`b` is an operand's block in shared memory, or a block the step computed from a `"K N"`
operand's (a weight dequantized in registers): WGMMA reads `b` only from shared memory, so the
value is stored into a swizzled buffer scoped for the product, and read from there. An `a`
computed in the step is in registers: WGMMA reads it there on the device. The interpreter
cannot run that form, so for it `a` is staged too; the numbers are the same. Columns of `a`
and rows of `b` past a ragged loop dim's edge are zeroed first, as an operand's are by TMA.
"""

import dataclasses
from collections.abc import Mapping

from ...._errors import BodyError
from ...._targets import TensorCores
from ...ir.names import accumulator_ref, smem_ref, value_part
from ...ir.nodes import (
    Assign,
    Call,
    Const,
    DType,
    EllipsisIndex,
    Expr,
    ExprStmt,
    FunctionDef,
    Kind,
    Literal,
    Mask,
    Name,
    Return,
    Stmt,
    Subscript,
    Tuple,
    call,
)
from ...trace.body import Atom, Eqn
from .. import hardware as hw
from ..pallas import select, tensor_core_barrier
from .context import Rule, Support, Translator, Where
from .rules import refuse_columns_meeting_loop
from .translation import Geometry, Product

__all__ = ["DOT_RULES", "wgmma_transforms"]


def wgmma_transforms(dtype: str, swizzle: int | None = None) -> Expr:
    """The tiling and swizzle of a WGMMA operand in shared memory: tiles of 8 rows by one
    swizzle row of `swizzle` elements (by default the 128-byte swizzle's)."""
    elements = swizzle or hw.per_bytes(hw.SWIZZLE_BYTES, dtype)
    return Tuple(
        (
            call("plgpu.TilingTransform", Const((8, elements))),
            call("plgpu.SwizzleTransform", Const(hw.nbytes(elements, dtype))),
        )
    )


def translate_dot(tr: Translator, eqn: Eqn) -> None:
    a_atom, b_atom = eqn.inputs[0], eqn.inputs[1]
    start = eqn.inputs[2] if len(eqn.inputs) > 2 else None  # x of a fused `x + sk.dot(a, b)`
    a_name, b_name, over = eqn.param("a"), eqn.param("b"), eqn.param("over")
    b_dims: tuple[str, ...] = eqn.param("b_dims")
    b_label = b_name or "b"
    if not a_name:
        over = _value_contraction(tr, eqn, a_atom, b_label, over, b_dims)
    kind = _product_kind(tr, eqn, a_name or "a", b_label, over, b_dims)
    if start is not None:
        # The add this product was fused from: its operands meet as an elementwise add's do.
        kinds = {tr.kind(start), kind} - {Kind.SCALAR}
        if not {Kind.TILE, Kind.LOOP_TILE} <= kinds:  # equal shapes, as jnp checked
            actual = "`add`" + (f" in: {eqn.source}" if eqn.source else "")
            refuse_columns_meeting_loop(tr, eqn, kinds, actual)
    along = next(d for d in b_dims if d != over)
    transpose_b = b_dims.index(over) == 1
    out = eqn.outputs[0]
    a_value = Name(smem_ref(a_name)) if a_name else _register_a(tr, eqn, a_atom, over)
    b_dtype = tr.dtype(b_atom)
    # A computed b is staged through shared memory, where WGMMA reads it; so is a computed a
    # in the interpreter, which cannot read a from registers.
    staged: list[_Staged] = []
    swizzle = _staged_swizzle(tr, eqn, kind, transpose_b)
    a_ref: Expr = a_value
    tcgen05 = tr.g.tensor_cores is TensorCores.TCGEN05
    if not a_name and (tr.g.interpreted or tcgen05):
        # tcgen05 reads `a` from shared (or tensor) memory, never from registers.
        a_shape = tr.g.shape(tr.kind(a_atom))
        a_ref = _stage(staged, out, "a", a_value, a_shape, tr.dtype(a_atom), swizzle, tcgen05)
    if b_name:
        b_ref: Expr = Name(f"{smem_ref(b_name)}.T" if transpose_b else smem_ref(b_name))
    else:
        b_value = _register_b(tr, eqn, b_atom)
        b_ref = _stage(staged, out, "b", b_value, tr.g.shape(Kind.LOOP_ROWS), b_dtype, swizzle)
    tr.products.append(
        Product(
            a_name,
            b_name,
            transpose_b,
            over,
            along,
            tr.dtype(a_atom),
            b_dtype,
            # tcgen05 takes a's and b's blocks in one swizzle: a staged a's counts too.
            staged_swizzle=swizzle if not b_name or (tcgen05 and not a_name) else 0,
            staging=value_part(out, "staged") if staged else "",
            staged_buffers=tuple((s.buffer, s.smem) for s in staged),
        )
    )
    acc = Name(accumulator_ref(out))
    wgmma = ExprStmt(call("plgpu.wgmma", acc, a_ref, b_ref))
    # The interpreter cannot run a WGMMA inside `pl.run_state`: there the sum is a separate
    # add; so is a tcgen05 product's, whose accumulator starts in tensor memory.
    fused = (
        start is not None
        and tr.kind(start) in (kind, Kind.SCALAR)
        and tr.dtype(start) == "float32"
        and (tcgen05 or not tr.g.interpreted)
    )
    if tcgen05:
        first = tr.as_kind(start, kind) if fused and start is not None else None
        product, value = _tcgen05_product(out, a_ref, b_ref, tr.g.shape(kind), first)
    elif fused:
        assert start is not None
        product = FunctionDef(value_part(out, "product"), (acc.text,), (wgmma,))
        init = call("plgpu.ACC.init", tr.as_kind(start, kind))
        value: Expr = Call(call("pl.run_state", Name(product.name)), (init,))
    else:
        read = Return(Subscript(acc, (EllipsisIndex(),)))
        product = FunctionDef(value_part(out, "product"), (acc.text,), (wgmma, read))
        scoped = call("plgpu.ACC", Const(tr.g.shape(kind)), DType("float32"))
        value = call("pl.run_scoped", Name(product.name), scoped)
    statements: list[Stmt] = [product]
    if staged:
        stores: list[Stmt] = [
            Assign((Subscript(Name(s.ref), (EllipsisIndex(),)),), s.value) for s in staged
        ]
        staging = FunctionDef(
            value_part(out, "staged"),
            tuple(s.ref for s in staged),
            (*stores, ExprStmt(call("plgpu.commit_smem")), product, Return(value)),
        )
        statements = [staging]
        for s in staged:
            statements.append(Assign((Name(s.buffer),), s.smem))
        value = call("pl.run_scoped", Name(staging.name), *(Name(s.buffer) for s in staged))
        # The staged blocks' shared memory, scoped beside the pipelines' buffers.
        tr.scratch_bytes = max(tr.scratch_bytes, sum(s.nbytes for s in staged))
    tr.lines.extend(statements)
    if start is not None and not fused:
        separate = Name(value_part(out, "product_value"))
        tr.lines.append(Assign((separate,), value))
        value = call("lax.add", tr.as_kind(start, kind), separate)
    tr.assign(eqn, kind, value)


def _tcgen05_product(
    out: str, a_ref: Expr, b_ref: Expr, shape: tuple[int, ...], first: Expr | None
) -> tuple[FunctionDef, Expr]:
    """A tcgen05 product into tensor memory scoped for it, waited for on a barrier that
    orders the tensor cores, and loaded into registers (the TCGEN05 layout). With `first`
    (the x of `x + sk.dot(a, b)`), the accumulator starts at it: its registers are free
    while the MMA runs, and the sum costs none of its own."""
    acc = Name(accumulator_ref(out))
    done = Name(value_part(out, "mma_done"))
    barrier = Name(f"{done.text}.at[0]")
    value = Name(value_part(out, "value"))
    start: tuple[Stmt, ...] = ()
    if first is not None:
        start = (
            ExprStmt(call("plgpu.async_store_tmem", acc, first)),
            ExprStmt(call("plgpu.commit_tmem"), comment="the MMA adds to it"),
        )
    accumulate = Const(first is not None)
    body: tuple[Stmt, ...] = (
        *start,
        ExprStmt(call("plgpu.tcgen05_mma", acc, a_ref, b_ref, barrier, accumulate=accumulate)),
        ExprStmt(call("plgpu.barrier_wait", barrier)),
        Assign((value,), call("plgpu.async_load_tmem", acc)),
        ExprStmt(call("plgpu.wait_load_tmem"), comment="before the scope ends"),
        Return(value),
    )
    product = FunctionDef(value_part(out, "product"), (acc.text, done.text), body)
    scoped = Call(
        Name("pl.run_scoped"),
        (
            Name(product.name),
            call("plgpu.TMEM", Const(shape), DType("float32")),
            tensor_core_barrier(),
        ),
        one_per_line=True,
    )
    return product, scoped


@dataclasses.dataclass(frozen=True)
class _Staged:
    """A product's operand computed in registers, stored into swizzled shared memory."""

    ref: str  # the ref the staging function takes
    buffer: str  # the variable holding its `plgpu.SMEM` type
    value: Expr
    smem: Expr
    nbytes: int


def _staged_swizzle(tr: Translator, eqn: Eqn, kind: Kind, transpose_b: bool) -> int:
    """The swizzle, in bytes, of a staged operand: the widest that the rows of `a`'s block
    (the contracted dim's) and of `b`'s each hold whole, as the plan gives the operands in
    shared memory (`pipelining.dot_swizzle`)."""
    a_atom, b_atom = eqn.inputs[0], eqn.inputs[1]
    # An operand `a` met by a computed b is a block of the step: (rows, the loop block).
    a_kind = tr.kind(a_atom) if not eqn.param("a") else Kind.LOOP_TILE
    a_columns = tr.g.shape(a_kind)[-1]
    a_row = hw.nbytes(a_columns, tr.dtype(a_atom))
    b_row = hw.nbytes(a_columns if transpose_b else tr.g.shape(kind)[-1], tr.dtype(b_atom))
    return hw.widest_swizzle((a_row, b_row))


def _stage(
    staged: list[_Staged],
    out: str,
    role: str,
    value: Expr,
    shape: tuple[int, ...],
    dtype: str,
    swizzle: int,
    counted: bool = False,
) -> Name:
    """`counted`: whether the device stages it too (its shared memory counts)."""
    ref = value_part(out, f"{role}_smem")
    smem = call(
        "plgpu.SMEM",
        Const(shape),
        DType(dtype),
        transforms=wgmma_transforms(dtype, hw.per_bytes(swizzle, dtype)),
    )
    # A staged `a` is the interpreter's alone where WGMMA reads a from registers: it costs
    # the device no shared memory, and the plan counts none for it.
    nbytes = hw.nbytes(shape[0] * shape[1], dtype) if role == "b" or counted else 0
    nbytes = hw.round_up(nbytes, hw.SMEM_BUFFER_ALIGN)
    staged.append(_Staged(ref, value_part(out, f"{role}_buffer"), value, smem, nbytes))
    return Name(ref)


def _product_kind(
    tr: Translator, eqn: Eqn, a_name: str, b_name: str, over: str, b_dims: tuple[str, ...]
) -> Kind:
    """A product along the kernel's columns is a block of them; one along a loop dim outside
    the frame is a block of the step."""
    g = tr.g
    other = next((d for d in b_dims if d != over), None)
    if other is not None and other == g.col_dim:
        return Kind.TILE
    if other is not None and other == g.loop_dim:
        return Kind.LOOP_TILE
    return_dims = " or ".join(d for d in (g.loop_dim, g.col_dim) if d)
    raise tr.fail(
        eqn,
        f"the product of sk.dot({a_name}, {b_name}) runs along {other}, which is neither the "
        "loop dim nor the kernel's column dim",
        f"give {b_name} the dim {return_dims} besides the contracted one {over}",
    )


def _columns_of(g: Geometry, kind: Kind) -> str | None:
    """The dim a value's columns run along, by its register kind: a block of the step along
    the loop dim, or a block of the kernel's columns; None for a vector or a scalar."""
    if kind == Kind.LOOP_TILE:
        return g.loop_dim
    return g.col_dim if kind == Kind.TILE else None


def _value_contraction(
    tr: Translator, eqn: Eqn, atom: Atom, b_name: str, over: str, b_dims: tuple[str, ...]
) -> str:
    """The dim a value `a` of `sk.dot(a, b)` contracts: the one its columns run along.

    The trace matched a's columns to a dim of `b` by the length of its block, the loop dim
    first; when two dims of `b` have blocks that long (a loop block of 64 beside a whole D of
    64), the value's register kind says which one its columns are."""
    g = tr.g
    kind = tr.kind(atom)
    if tr.trace.misplaced and _columns_of(g, kind) != over:
        raise _misplaced_a(tr, b_name)
    along = _columns_of(g, kind)
    shape = tr.trace.aval(atom.var)[0] if atom.var is not None else ()
    if along is None or along == over or along not in b_dims or g.shape(kind) != tuple(shape):
        return over
    if kind == Kind.TILE and g.col_tiled:
        raise BodyError(
            f"sk.dot(a, {b_name}) contracts {along}, the dim a's columns run along, which is "
            "split across the grid: each block would hold only part of the sum",
            kernel=tr.kernel,
            where=eqn.line or tr.where,
            operand=b_name,
            dim=along,
            expected=f"a block of the step along the loop dim {g.loop_dim}, or of a whole dim",
            actual=f"a block of the kernel's columns {along}, split across the grid",
            fix=f"leave {along} out of tile= so that each block holds all of it, or multiply a "
            f"block of the step along {g.loop_dim}",
        )
    return along


def _misplaced_a(tr: Translator, b_name: str) -> BodyError:
    """`a` is computed from an operand loaded into registers though laid out unlike the
    kernel's blocks, which only `sk.dot` reads, straight from shared memory."""
    name, line = tr.trace.misplaced[0]
    g = tr.g
    frame = f"'{g.row_dim} {g.col_dim}'" if g.col_dim else f"'{g.row_dim}'"
    return BodyError(
        f"`{name}` is loaded into registers, but it is laid out unlike the kernel's blocks "
        f"({frame}): sk.dot reads such an operand only as it is, straight from shared memory",
        kernel=tr.kernel,
        where=line or tr.where,
        operand=name,
        expected=f"sk.dot({name}, {b_name}): the operand itself",
        actual=f"sk.load({name}), a value computed in registers",
        fix=f"pass {name} to sk.dot as it is, and scale or cast the product instead: "
        f"sk.dot({name}, {b_name}) * s rather than sk.dot(sk.load({name}) * s, {b_name})",
    )


def _register_a(tr: Translator, eqn: Eqn, atom: Atom, over: str) -> Expr:
    """The value `a`, its columns past a ragged loop dim's edge zeroed: WGMMA would add in
    whatever they hold, and the scores' exp there is not 0."""
    g = tr.g
    kind = tr.kind(atom)
    expected = Kind.LOOP_TILE if over == g.loop_dim else Kind.TILE
    if kind != expected or over not in (g.loop_dim, g.col_dim):
        along = _columns_of(g, kind)
        value = f"a block along {along}" if along else f"a {kind} value"
        raise tr.fail(
            eqn,
            f"sk.dot's `a` is {value}, but its columns must run along the contracted dim {over}",
            "multiply a block of the step whose columns are the contracted dim, e.g. the "
            "probabilities p of the scores sk.dot(q, k) by sk.dot(p.astype(jnp.bfloat16), v)",
        )
    src = tr.source(atom)
    if not (g.ragged_loop if kind == Kind.LOOP_TILE else g.ragged_cols):
        return src
    mask = Mask.LOOP_OK if kind == Kind.LOOP_TILE else Mask.COL_OK
    tr.masks.add(mask)
    dtype = tr.dtype(atom)
    zeroed = Name(value_part(eqn.outputs[0], "a"))
    zero = Literal(0, dtype, weak_type=True)
    tr.lines.append(
        Assign((zeroed,), select(Name(mask), src, zero, dtype), comment="past the edge: zeros")
    )
    return zeroed


def _register_b(tr: Translator, eqn: Eqn, atom: Atom) -> Expr:
    """The computed `b`, a (loop block, columns) block, its rows past a ragged loop dim's
    edge zeroed: WGMMA would add in whatever they hold times a's zeros there."""
    g = tr.g
    kind = tr.kind(atom)
    same = g.shape(Kind.TILE) == g.shape(Kind.LOOP_ROWS)
    if kind != Kind.LOOP_ROWS and not (kind == Kind.TILE and same):
        raise tr.fail(
            eqn,
            f"sk.dot's computed `b` is a {kind} value, not a block of the step's "
            f"{g.loop_dim} by the kernel's columns",
            f"compute b from an operand laid out '{g.loop_dim} {g.col_dim}' loaded in the step",
        )
    src = tr.source(atom)
    if not g.ragged_loop:
        return src
    tr.masks.add(Mask.LOOP_ROW_OK)
    dtype = tr.dtype(atom)
    zeroed = Name(value_part(eqn.outputs[0], "b"))
    zero = Literal(0, dtype, weak_type=True)
    tr.lines.append(
        Assign(
            (zeroed,),
            select(Name(Mask.LOOP_ROW_OK), src, zero, dtype),
            comment="past the edge: zeros",
        )
    )
    return zeroed


DOT_RULES: Mapping[str, Rule] = {
    "sk_dot": Rule(
        translate_dot,
        support=tuple((w, Support.NO) for w in (Where.BLOCK, Where.STRIDED, Where.ROWS)),
        note="a product is a value of the step of a loop over the contracted dim",
    )
}
