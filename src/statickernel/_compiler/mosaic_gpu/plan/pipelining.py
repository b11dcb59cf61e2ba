"""Planning for loop dims: pipeline stages, shared memory, WGMMA rules and TMA tiling of `sk.dot`.

Each loop of a body becomes one software pipeline (`plgpu.emit_pipeline`) that holds
`stages` blocks of every operand it reads in shared memory. The operands of `sk.dot` are
copied into tiled, swizzled shared memory that WGMMA reads directly; that tiling also
constrains the global arrays, which are padded on the host only as far as TMA needs.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

from ...._errors import DotDtypeError, DotLayoutError, DotShapeError, ErrorContext, Phase
from ...ir.nodes import LoopMode
from .. import hardware as hw
from ..layout.blocks import BlockLayout
from ..lower.translation import DotUpdate, LoopBlock, Product

__all__ = [
    "MODE_TEXT",
    "LoopPlan",
    "check_dots",
    "dot_gmem_shape",
    "dot_operands",
    "dot_swizzle",
    "pipeline_bytes",
    "swizzle_elements",
]

SWIZZLE_BYTES = hw.SWIZZLE_BYTES
MIN_SWIZZLE_BYTES = hw.SWIZZLES[-1]
WGMMA_N_MAX = 256
WGMMA_DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2", "int8")


class PlannedDot(NamedTuple):
    """One `sk.dot(a, b)` of a loop's step, a WGMMA per step. A tuple, so that code written
    for the `(a, b, b_transposed)` triples it replaces keeps working."""

    a: str
    b: str
    b_transposed: bool
    """True when `b` is stored (N, K)."""


# What a loop's steps do, as the plan says it.
MODE_TEXT: Mapping[LoopMode, str] = {
    LoopMode.FOLD: "fold into a carry",
    LoopMode.MAP: "write a block per step",
}


@dataclasses.dataclass(frozen=True)
class LoopPlan:
    """One loop of the body: a software pipeline over the blocks of one loop dim."""

    axis: str
    """The loop dim."""
    constant: str
    """The constant that sets its block."""
    block: int
    """Elements of the loop dim per step."""
    size: int
    """The loop dim's bound size."""
    steps: int
    """Pipeline steps, `cdiv(size, block)`; the last one is masked when `size % block`."""
    stages: int
    """Blocks in flight: the declared stage count, capped at `steps`."""
    mode: LoopMode
    """`LoopMode.FOLD` ("fold") for `sk.loop`, folding into a carry; `LoopMode.MAP` ("map") for
    `sk.map_blocks`, writing an output block per step."""
    operands: tuple[str, ...]
    """The operands whose blocks the pipeline copies, in order."""
    dots: tuple[PlannedDot, ...]
    """Every `sk.dot` accumulated into a carry of the loop."""
    fills: tuple[tuple[str, Any], ...]
    """What each operand the step loads reads past the edge, in this loop."""
    smem_bytes: int
    """Shared memory of the pipeline's buffers while it runs."""
    products: tuple[PlannedDot, ...] = ()
    """The step's other `sk.dot` products, values of the step; an `a` of "" is in registers."""
    stops_early: bool = False
    """True when `sk.loop(..., start=, stop=)` bounds it: each block walks `steps` blocks at
    most."""
    carries: int = 0
    """For a map, the values it carries from step to step (a scan's, `init=`); else 0."""
    reverse: bool = False
    """True when the loop walks its blocks from the last to the first (`reverse=True`)."""

    @property
    def ragged(self) -> bool:
        return self.size % self.block != 0


def swizzle_elements(dtype: str, swizzle: int = SWIZZLE_BYTES) -> int:
    """Elements in one swizzle row (`swizzle` bytes, 128 by default): the minor tile of a
    WGMMA operand in SMEM."""
    return hw.per_bytes(swizzle, dtype)


def dot_swizzle(
    loops: tuple[LoopBlock, ...],
    dims: Mapping[str, tuple[str, ...]],
    layout: BlockLayout,
    dtypes: Mapping[str, str],
) -> int:
    """The swizzle, in bytes, of every operand `sk.dot` reads from shared memory.

    WGMMA takes a product's two operands in one swizzle, and an operand may meet several
    products, so a kernel's products share one: the widest whose row every such operand's
    block holds a whole number of. A block of 64 bfloat16 columns or more takes the 128-byte
    swizzle; a narrow one (a matmul's `b` in blocks of 32 columns) a narrower swizzle, which
    `a` then takes too.
    """
    rows: list[int] = []
    for block in loops:
        for dot in (*block.dots, *block.products):
            for name in (dot.a, dot.b):
                if name:  # not a value in registers
                    minor = layout.dim(dims[name][-1]).extent
                    rows.append(hw.nbytes(minor, dtypes[name]))
        # A computed b, staged in shared memory in the swizzle its translation chose.
        rows.extend(p.staged_swizzle for p in block.products if p.staged_swizzle)
    return hw.widest_swizzle(rows)


def dot_operands(loops: tuple[LoopBlock, ...]) -> dict[str, bool]:
    """Operand name -> True for the `b` of an `sk.dot` (False for an `a`)."""
    roles: dict[str, bool] = {}
    for block in loops:
        for dot in (*block.dots, *block.products):
            if dot.a:  # not a value in registers
                roles[dot.a] = False
            if dot.b:  # not a value staged by the step
                roles[dot.b] = True
    return roles


def dot_gmem_shape(shape: tuple[int, ...], swizzle: int) -> tuple[int, ...]:
    """The smallest padded shape whose last two dims TMA can copy into WGMMA's tiled SMEM.

    Tiled SMEM requires each of the last two global dims to be a multiple of its tile, (8, S),
    S the `swizzle` row's elements.
    (Mosaic GPU also accepts a dim smaller than its tile, but then TMA fills a partial tile,
    which has not been verified on a device; a small dim is padded too, at little cost.) Past
    the padded edge, TMA's zero fill covers the blocks.
    """
    rows, cols = shape[-2:]
    return (*shape[:-2], hw.round_up(rows, 8), hw.round_up(cols, swizzle))


def pipeline_bytes(block_bytes: list[int], stages: int) -> int:
    """Shared memory of one pipeline: each operand's `stages` blocks, 1 KiB aligned, and one
    barrier per stage."""
    total = sum(hw.round_up(stages * b, hw.SMEM_BUFFER_ALIGN) for b in block_bytes)
    return total + hw.BARRIER_BYTES * stages


def check_dots(
    loops: tuple[LoopBlock, ...],
    dims: Mapping[str, tuple[str, ...]],
    layout: BlockLayout,
    dtypes: Mapping[str, tuple[str, ...]],
    block_consts: Mapping[str, str],
    ctx: ErrorContext,
) -> None:
    """WGMMA's shape, dtype and layout rules for every `sk.dot`, before anything is lowered."""
    for block in loops:
        for dot in block.dots:
            a_dims, b_dims = dims[dot.a], dims[dot.b]
            k = block.axis
            m_dim = a_dims[0]
            n_dim = b_dims[0] if dot.transpose_b else b_dims[1]
            bm, bk, bn = (layout.dim(d).extent for d in (m_dim, k, n_dim))
            for a_dtype, b_dtype in _dtype_pairs(dtypes[dot.a], dtypes[dot.b], ctx):
                _check_dot(
                    dot, (m_dim, k, n_dim), (bm, bk, bn), a_dtype, b_dtype, block_consts, ctx
                )
        for product in block.products:
            m_dim = dims[product.a][0] if product.a else layout.rows
            names = (m_dim, product.over, product.along)
            bm, bk, bn = (layout.dim(d).extent for d in names)
            a_dtypes = dtypes[product.a] if product.a else (product.a_dtype,)
            b_dtypes = dtypes[product.b] if product.b else (product.b_dtype,)
            for a_dtype, b_dtype in _dtype_pairs(a_dtypes, b_dtypes, ctx):
                _check_dot(product, names, (bm, bk, bn), a_dtype, b_dtype, block_consts, ctx)
            if not product.b:
                rows = _operand_rows(loops, dims, layout, dtypes)
                _check_staged_b(product, layout, rows, block_consts, ctx)


def _operand_rows(
    loops: tuple[LoopBlock, ...],
    dims: Mapping[str, tuple[str, ...]],
    layout: BlockLayout,
    dtypes: Mapping[str, tuple[str, ...]],
) -> dict[str, tuple[int, ...]]:
    """The bytes of a block row of each operand the kernel's products read from shared
    memory, in each dtype it may take."""
    rows: dict[str, tuple[int, ...]] = {}
    for block in loops:
        for dot in (*block.dots, *block.products):
            for name in (n for n in (dot.a, dot.b) if n):
                minor = layout.dim(dims[name][-1]).extent
                rows[name] = tuple(hw.nbytes(minor, d) for d in dtypes[name])
    return rows


def _dtype_pairs(
    a_dtypes: tuple[str, ...], b_dtypes: tuple[str, ...], ctx: ErrorContext
) -> list[tuple[str, str]]:
    """The (a, b) dtypes to check a product in. At the declaration, where each operand may
    take any dtype its annotation allows, the pairs of one dtype, when there are any: a call
    binding two different ones is refused then."""
    pairs = [(a, b) for a in a_dtypes for b in b_dtypes]
    if ctx.phase is Phase.DECLARATION:
        return [(a, b) for a, b in pairs if a == b] or pairs
    return pairs


def _dtype_fix(dot: DotUpdate | Product, a_dtype: str, b_dtype: str) -> str:
    packed = next((d for d in (a_dtype, b_dtype) if d in hw.SUB_BYTE_DTYPES), None)
    if packed is None:
        return f"cast {dot.b or 'b'} to {a_dtype} outside the kernel"
    # WGMMA does not multiply packed integers: they are converted in registers first.
    return (
        f"convert the {packed} operand in the loop's step: sk.dot(x, "
        "sk.load(w).astype(jnp.bfloat16)) for w laid out 'K N' (a b computed in registers), "
        "or sk.dot(sk.load(w).astype(jnp.bfloat16), x) for w 'N K' (see "
        "examples/matmul_int4.py)"
    )


def _check_dot(
    dot: DotUpdate | Product,
    names: tuple[str, str, str],
    sizes: tuple[int, int, int],
    a_dtype: str,
    b_dtype: str,
    consts: Mapping[str, str],
    ctx: ErrorContext,
) -> None:
    m_dim, k_dim, n_dim = names
    bm, bk, bn = sizes
    what = f"sk.dot({dot.a or 'a'}, {dot.b or 'b'})"
    if a_dtype != b_dtype:
        raise ctx.error(
            DotDtypeError,
            f"{what} multiplies {a_dtype} by {b_dtype}",
            operand=dot.b,
            expected=f"{dot.b} of the same dtype as {dot.a}",
            actual=f"{dot.a}: {a_dtype}, {dot.b}: {b_dtype}",
            fix=_dtype_fix(dot, a_dtype, b_dtype),
        )
    if a_dtype not in WGMMA_DTYPES:
        raise ctx.error(
            DotDtypeError,
            f"{what} has {a_dtype} operands, which WGMMA does not take here",
            operand=dot.a,
            expected="bfloat16, float16, float32 (tf32), float8_e4m3fn, float8_e5m2 or int8 "
            "operands",
            actual=a_dtype,
            fix="cast the operands to bfloat16 outside the kernel",
        )
    # WGMMA reads b as (K, N) rows only for 16-bit dtypes; the others take b stored (N, K).
    if hw.bits(a_dtype) != 16 and not dot.transpose_b:
        kind = "float32 (tf32)" if a_dtype == "float32" else a_dtype
        raise ctx.error(
            DotLayoutError,
            f"{what} takes {kind} operands with {dot.b} laid out '{k_dim} {n_dim}'; WGMMA "
            f"reads a {a_dtype} b only as (N, K)",
            operand=dot.b,
            dim=k_dim,
            expected=f"{dot.b} annotated '{n_dim} {k_dim}' for {a_dtype}",
            actual=f"'{k_dim} {n_dim}'",
            fix=f"pass {dot.b}.T from outside the kernel and annotate it '{n_dim} {k_dim}' (sk.dot "
            "contracts the shared loop dim either way), or cast both operands to bfloat16",
        )
    swizzle = swizzle_elements(a_dtype)
    # The narrowest swizzle sets the unit of a block's rows; `dot_swizzle` picks the widest
    # that the blocks hold.
    unit = swizzle_elements(a_dtype, MIN_SWIZZLE_BYTES)

    def fail(dim: str, extent: int, expected: str, fixed: int) -> DotShapeError:
        if dim not in consts:  # a whole dim: the block is the whole of it, and too large
            return ctx.error(
                DotShapeError,
                f"{what}: {dim} is whole, and its block of {extent} is more than WGMMA or one "
                "TMA box takes",
                dim=dim,
                expected=expected,
                actual=f"{dim} whole: a block of {extent}",
                fix=f'walk {dim} in a loop (loop={{"{dim}": "B{dim}"}}) or tile it, in '
                f"blocks of at most {fixed}",
            )
        const = consts[dim]
        return ctx.error(
            DotShapeError,
            f"{what}: the block along {dim} is {extent}, which WGMMA cannot take",
            dim=dim,
            expected=expected,
            actual=f"{const}={extent}",
            fix=f"set {const}={fixed}",
        )

    if ctx.phase is Phase.DECLARATION:
        # A whole dim is a probe size here: its true size is checked at the call.
        bm, bk, bn = (1 if d not in consts else n for d, n in zip(names, sizes, strict=True))
        bm, bk, bn = (hw.WGMMA_ROWS if bm == 1 else bm, swizzle if bk == 1 else bk, bn)
        bn = (8 if dot.transpose_b else swizzle) if bn == 1 else bn
    if bm % hw.WGMMA_ROWS:
        raise fail(
            m_dim,
            bm,
            f"a multiple of {hw.WGMMA_ROWS} (WGMMA's M)",
            max(hw.WGMMA_ROWS, hw.round_up(bm, hw.WGMMA_ROWS)),
        )
    if bn > WGMMA_N_MAX:
        raise fail(n_dim, bn, f"at most {WGMMA_N_MAX} (WGMMA's N)", WGMMA_N_MAX)
    n_unit = 8 if dot.transpose_b else unit
    if bn % n_unit:
        why = "WGMMA's N" if dot.transpose_b else _swizzle_unit(a_dtype)
        raise fail(
            n_dim, bn, f"a multiple of {n_unit} ({why})", min(WGMMA_N_MAX, hw.round_up(bn, n_unit))
        )
    if bk > hw.TMA_BOX_MAX and k_dim not in consts:
        raise fail(k_dim, bk, f"at most {hw.TMA_BOX_MAX} (one TMA box)", hw.TMA_BOX_MAX)
    if bk % unit:
        raise fail(
            k_dim, bk, f"a multiple of {unit} ({_swizzle_unit(a_dtype)})", hw.round_up(bk, unit)
        )


def _check_staged_b(
    product: Product,
    layout: BlockLayout,
    operand_rows: Mapping[str, tuple[int, ...]],
    consts: Mapping[str, str],
    ctx: ErrorContext,
) -> None:
    """A computed b is a (loop block, columns) block in the WGMMA layout, whose rows come in
    64s, stored into shared memory in the swizzle its translation chose, which the kernel's
    products share (`dot_swizzle`): every operand they read holds whole rows of it."""
    k_dim = product.over
    bk = layout.dim(k_dim).extent
    what = f"sk.dot({product.a or 'a'}, b) of a computed b"
    if bk % hw.WGMMA_ROWS:
        const = consts.get(k_dim, k_dim)
        raise ctx.error(
            DotShapeError,
            f"{what}: the block along {k_dim} is {bk}, but a block computed in registers has "
            f"its rows in the WGMMA layout's groups of {hw.WGMMA_ROWS}",
            dim=k_dim,
            expected=f"a multiple of {hw.WGMMA_ROWS}",
            actual=f"{const}={bk}",
            fix=f"set {const}={hw.round_up(bk, hw.WGMMA_ROWS)}",
        )
    swizzle = product.staged_swizzle
    for name, rows in operand_rows.items():
        narrower = next((r for r in rows if r % swizzle), None)
        if narrower is not None:
            raise ctx.error(
                DotShapeError,
                f"{what} is staged in the {swizzle}-byte swizzle, but the block of `{name}`, "
                f"which a product of the kernel reads, has rows of {narrower} bytes",
                operand=name,
                expected=f"blocks whose rows hold whole {swizzle}-byte swizzle rows",
                actual=f"rows of {narrower} bytes",
                fix="give the products' operands blocks of the same width, or compute the "
                "products in separate kernels",
            )


def _swizzle_unit(dtype: str) -> str:
    return f"the {MIN_SWIZZLE_BYTES}-byte swizzle of {dtype}, WGMMA's narrowest"
