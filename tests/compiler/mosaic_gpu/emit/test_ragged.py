"""Ragged groups (`ragged={"M": "group_sizes"}`) run in the interpreter, against a reference
written here in numpy, independently of the gallery's (which calls jax.lax.ragged_dot).

The reference walks the groups in order: group g's rows are [sum(sizes[:g]), sum(sizes[:g+1]))
of M, each size counted as 0 where it is negative and every boundary cut at row M, and they
are multiplied by w[g] in float64; a row past the last boundary is zeros. The kernel adds its
K blocks in its own order, so products are compared within tolerances, and the rows past the
sum (which it stores as zeros) exactly.

Covered: empty groups (first, middle, last, all), a group of one row, boundaries on and off
the row blocks, every group inside one block, a group over many blocks, sizes summing under
M, negative sizes, sizes summing past M; M under one block, one row and primes, K and N
ragged, N under one block (the second consumer's columns past the edge), one group, 16
groups, more groups than row blocks; a bfloat16 result; BM, BN, BK and stage overrides;
float16 and float32 operands and w laid out 'G N K' in kernels written here; int16, int8 and
uint8 sizes; an epilogue with a per-column bias and gelu, and with a per-row scale and a
scalar; jax.jit; drawn shapes and sizes; the race detector; the emitted module; the
cross-lowering for Mosaic GPU; the plan's text; sk.testing's probes and check_kernel.

Every run here is on 2 SMs (`few_sms`), so that each CTA walks several (group, row block)
items, a slot and the pipeline's buffers reused from one item to the next.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float16, Float32, Int8, Int16, Int32, UInt8

import statickernel as sk
from grouped_matmul import grouped_matmul
from jax_support import needs_mosaic_gpu
from statickernel._compiler.mosaic_gpu.plan import schedule as _schedule
from statickernel._compiler.mosaic_gpu.plan.warpspec import WarpSpecialized
from tolerances import Tolerance, assert_close, tolerance_for

# --- the reference --------------------------------------------------------------------------


def bounds(sizes: Any, rows: int) -> list[tuple[int, int]]:
    """Each group's rows [start, end): the running sum of the sizes (a negative one counted
    as 0), cut at `rows`. Summed in Python ints: no size wraps around."""
    out, start = [], 0
    for size in np.asarray(sizes).reshape(-1).tolist():
        end = min(start + max(int(size), 0), rows)
        out.append((start, end))
        start = end
    return out


def grouped(x: Any, w: Any, sizes: Any) -> np.ndarray:
    """x (M, K) with each group's rows times its w[g] (G, K, N), in float64; the rows in no
    group are zeros."""
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    out = np.zeros((x64.shape[0], w64.shape[-1]))
    for g, (start, end) in enumerate(bounds(sizes, x64.shape[0])):
        out[start:end] = x64[start:end] @ w64[g]
    return out


def past_the_groups(sizes: Any, rows: int) -> slice:
    """The rows past the last group's end: in no group."""
    return slice(bounds(sizes, rows)[-1][1], rows)


# --- data -----------------------------------------------------------------------------------


def normal(shape: tuple[int, ...], dtype: Any, seed: int) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, np.float32), dtype)


def operands(
    M: int, K: int, N: int, G: int, dtype: Any = jnp.bfloat16, seed: int = 0
) -> tuple[jax.Array, jax.Array]:
    """x (M, K) and w (G, K, N), standard normal."""
    return normal((M, K), dtype, seed), normal((G, K, N), dtype, seed + 1)


def i32(values: Any) -> jax.Array:
    return jnp.asarray(values, jnp.int32)


def assert_grouped(got: jax.Array, x: Any, w: Any, sizes: Any, dtype: Any = jnp.float32) -> None:
    """Within the tolerance of a float32 sum of K products of bfloat16 or float16 values
    (each exact in float32, of magnitude up to about 4), rounded once to `dtype`; the rows
    past the groups exactly zero."""
    assert got.dtype == dtype, got.dtype
    want = grouped(x, w, sizes)
    assert got.shape == want.shape, (got.shape, want.shape)
    terms = np.shape(x)[1]
    assert_close(got, want, tolerance_for(dtype, terms, scale=4.0))
    rest = np.asarray(got, np.float32)[past_the_groups(sizes, np.shape(x)[0])]
    assert not np.any(rest), "a row past the sum of the sizes is not zero"


@pytest.fixture(autouse=True)
def few_sms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two SMs: each CTA walks several items, so that the item placed by each tile, and the
    slots and buffers it reuses, change from one tile to the next."""
    monkeypatch.setattr(_schedule, "SMS", 2)


# --- the kernels a user writes for other dtypes and layouts ---------------------------------


def ragged_matmul(annotation: Any, w_dims: str, name: str, bk: int = 64) -> sk.Kernel[..., Any]:
    """The gallery's body over x and w of `annotation` (one for both), w laid out `w_dims`
    ('G K N' or 'G N K')."""
    x_type, w_type = annotation[Array, "M K"], annotation[Array, w_dims]

    @sk.kernel(
        tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, ragged={"M": "group_sizes"}, name=name
    )
    def kernel(
        x: x_type,  # pyright: ignore[reportInvalidTypeForm]
        w: w_type,  # pyright: ignore[reportInvalidTypeForm]
        group_sizes: Int32[Array, " G"],
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 128,
        BK: sk.Const[int] = bk,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(x, w), init=jnp.zeros((BM, BN), jnp.float32))

    return kernel


def sized_by(annotation: Any, name: str) -> sk.Kernel[..., Any]:
    """The gallery's kernel with sizes of another integer dtype."""
    sizes_type = annotation[Array, " G"]

    @sk.kernel(
        tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, ragged={"M": "group_sizes"}, name=name
    )
    def kernel(
        x: BFloat16[Array, "M K"],
        w: BFloat16[Array, "G K N"],
        group_sizes: sizes_type,  # pyright: ignore[reportInvalidTypeForm]
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 128,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(x, w), init=jnp.zeros((BM, BN), jnp.float32))

    return kernel


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, ragged={"M": "group_sizes"})
def grouped_bias_gelu(
    x: BFloat16[Array, "M K"],
    w: BFloat16[Array, "G K N"],
    group_sizes: Int32[Array, " G"],
    bias: Float32[Array, " N"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
) -> BFloat16[Array, "M N"]:
    """An MoE expert's up-projection: each group's product, a bias per column, gelu."""
    acc = sk.loop("K", lambda acc: acc + sk.dot(x, w), init=jnp.zeros((BM, BN), jnp.float32))
    return jax.nn.gelu(acc + sk.load(bias)[None, :]).astype(jnp.bfloat16)


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, ragged={"M": "group_sizes"})
def grouped_row_scaled(
    x: BFloat16[Array, "M K"],
    w: BFloat16[Array, "G K N"],
    group_sizes: Int32[Array, " G"],
    gate: Float32[Array, " M"],
    scale: Float32[Array, ""],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:
    """Each row's routing weight and one scale for all: a row's own value wherever its
    block is computed, once for each group the block holds."""
    acc = sk.loop("K", lambda acc: acc + sk.dot(x, w), init=jnp.zeros((BM, BN), jnp.float32))
    return acc * sk.load(gate)[:, None] * sk.load(scale)


def gelu(x: np.ndarray) -> np.ndarray:
    """jax.nn.gelu's default, the tanh approximation."""
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# --- group sizes ----------------------------------------------------------------------------

# M=300 in row blocks of 128 (0-127, 128-255, 256-299), K=130 (3 steps, the last ragged),
# N=260 (3 column blocks: the second CTA tile's second consumer is past the edge), 4 groups:
# one compiled kernel for every pattern.
M, K, N = 300, 130, 260
SIZE_PATTERNS = {
    "first-empty": [0, 100, 100, 100],
    "middle-empty": [150, 0, 0, 150],
    "last-empty": [100, 100, 100, 0],
    "all-empty": [0, 0, 0, 0],
    "one-row-groups": [1, 1, 0, 298],
    "one-row-then-nothing": [0, 0, 1, 0],
    "aligned-with-BM": [128, 0, 128, 44],
    "one-off-BM": [127, 2, 127, 44],
    "all-inside-one-block": [10, 20, 30, 40],
    "all-inside-the-last-block": [0, 256, 7, 37],
    "one-group-over-every-block": [0, 300, 0, 0],
    "one-group-over-many-blocks": [1, 298, 1, 0],
    "the-last-group-all-rows": [0, 0, 0, 300],
    "sum-below-M": [50, 50, 50, 50],
    "sum-one-below-M": [100, 100, 99, 0],
    "a-negative-size": [100, -7, 50, 100],
    "all-negative": [-1, -300, -2, -(2**31)],
    "int32-min-then-rows": [-(2**31), 100, 100, 100],
    "sum-past-M": [200, 200, 50, 7],
    "sum-one-past-M": [100, 100, 100, 1],
    "the-first-group-past-M": [301, 5, 5, 5],
    "int32-max-first": [2**31 - 1, 0, 0, 0],
}


@pytest.mark.parametrize("sizes", SIZE_PATTERNS.values(), ids=SIZE_PATTERNS.keys())
def test_group_size_patterns(sizes: list[int]) -> None:
    x, w = operands(M, K, N, 4)
    got = grouped_matmul(x, w, i32(sizes))
    assert_grouped(got, x, w, sizes)
    if sum(max(s, 0) for s in sizes) == 0:
        assert not np.any(np.asarray(got)), "no group has rows, yet a row is not zero"


def test_the_rows_of_each_group_use_its_own_weight() -> None:
    """w[g] = (g + 1) * I: each row of the result is its row of x times its group's number."""
    sizes = [0, 100, 1, 150]  # group 0 empty, the rows past 251 in no group
    x = normal((M, 128), jnp.bfloat16, seed=3)
    w = jnp.stack([(g + 1) * jnp.eye(128, 256, dtype=jnp.bfloat16) for g in range(4)])
    got = np.asarray(grouped_matmul(x, w, i32(sizes)))
    factor = np.zeros(M)
    for g, (start, end) in enumerate(bounds(sizes, M)):
        factor[start:end] = g + 1
    want = np.zeros((M, 256))
    want[:, :128] = np.asarray(x, np.float64) * factor[:, None]
    np.testing.assert_array_equal(got, want)  # one product a row, exact


# --- shapes ---------------------------------------------------------------------------------

SHAPES = {
    "M-below-one-block": (100, 64, 128, [30, 0, 70]),
    "M-1": (1, 64, 128, [0, 1, 0]),
    "M-1-in-no-group": (1, 64, 128, [0, 0, 0]),
    "M-127-primes": (127, 67, 131, [0, 50, 0, 77]),
    "M-131-K-131-N-257": (131, 131, 257, [3, 64, 64]),
    "M-257-N-300": (257, 160, 300, [10, -5, 300, 2]),
    "M-512-exact": (512, 128, 256, [128, 256, 128]),
    "K-below-one-block": (200, 8, 128, [60, 60, 60]),
    "N-below-one-block": (200, 96, 60, [70, 0, 100]),
    "N-one-block-exact": (200, 96, 128, [70, 0, 130]),
    "N-1": (130, 64, 1, [64, 66]),
    "G-1-all-rows": (300, 64, 130, [300]),
    "G-1-some-rows": (300, 64, 130, [129]),
    "G-16-more-than-the-row-blocks": (
        131,
        96,
        60,
        [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3],
    ),
    "G-9-in-one-row-block": (100, 64, 60, [5, 0, 7, 11, 0, 13, 17, 19, 0]),
    "G-12-in-one-row": (1, 64, 128, [0] * 7 + [1] + [0] * 4),
    "tiny": (3, 5, 7, [1, 2]),
}


@pytest.mark.parametrize(("m", "k", "n", "sizes"), SHAPES.values(), ids=SHAPES.keys())
def test_shapes(m: int, k: int, n: int, sizes: list[int]) -> None:
    x, w = operands(m, k, n, len(sizes), seed=m + k + n)
    assert_grouped(grouped_matmul(x, w, i32(sizes)), x, w, sizes)


@pytest.mark.parametrize("bf16_out", [False, True], ids=["f32-out", "bf16-out"])
@pytest.mark.parametrize(
    ("m", "k", "n", "sizes"),
    [(300, 130, 260, [90, 0, 137, 73]), (131, 67, 61, [30, 40, 0, 50])],
    ids=["M-300", "M-131-N-below-one-block"],
)
def test_a_bfloat16_result(m: int, k: int, n: int, sizes: list[int], bf16_out: bool) -> None:
    x, w = operands(m, k, n, len(sizes), seed=7)
    got = grouped_matmul(x, w, i32(sizes), bf16_out=bf16_out)
    assert_grouped(got, x, w, sizes, jnp.bfloat16 if bf16_out else jnp.float32)


# --- block constants ------------------------------------------------------------------------

CONSTS = {
    "BM-64": {"BM": 64},
    "BN-64": {"BN": 64},
    "BM-64-BN-64": {"BM": 64, "BN": 64},
    "BM-64-BN-256": {"BM": 64, "BN": 256},
    "BK-128-stages-1": {"BK": 128, "stages": 1},
    "stages-2": {"stages": 2},
}


@pytest.mark.parametrize("consts", CONSTS.values(), ids=CONSTS.keys())
def test_block_constants(consts: dict[str, Any]) -> None:
    """Groups straddling the 64-row blocks and the 128-row ones alike."""
    sizes = [50, 0, 150, 63, 1]
    x, w = operands(300, 256, 520, len(sizes), seed=11)
    plan = grouped_matmul.plan(x, w, i32(sizes), **consts)
    assert isinstance(plan.warp_specialized, WarpSpecialized)
    assert plan.warp_specialized.ragged is not None
    assert_grouped(grouped_matmul(x, w, i32(sizes), **consts), x, w, sizes)


def test_blocks_past_one_accumulator_are_refused_naming_the_blocks() -> None:
    S = jax.ShapeDtypeStruct
    structs = (S((256, 64), jnp.bfloat16), S((2, 64, 512), jnp.bfloat16), S((2,), jnp.int32))
    with pytest.raises(sk.StaticKernelError) as info:
        grouped_matmul.plan(*structs, BN=256)
    assert info.value.fix and ("BN" in info.value.fix or "BM" in info.value.fix), str(info.value)


# --- dtypes and layouts ---------------------------------------------------------------------

DTYPE_KERNELS = {
    "float16-G-K-N": (ragged_matmul(Float16, "G K N", "ragged_f16"), jnp.float16, False),
    "float16-G-N-K": (ragged_matmul(Float16, "G N K", "ragged_f16_nk"), jnp.float16, True),
    "bfloat16-G-N-K": (ragged_matmul(BFloat16, "G N K", "ragged_bf16_nk"), jnp.bfloat16, True),
    "float-as-float16-G-N-K": (ragged_matmul(Float, "G N K", "ragged_float"), jnp.float16, True),
}


@pytest.mark.parametrize("name", DTYPE_KERNELS)
def test_16_bit_operands_and_w_laid_out_n_k(name: str) -> None:
    kernel, dtype, n_k = DTYPE_KERNELS[name]
    sizes = [70, 0, 100, 5]
    x, w = operands(200, 128, 130, len(sizes), dtype, seed=13)
    w_in = jnp.swapaxes(w, 1, 2) if n_k else w
    got = kernel(x, w_in, i32(sizes))
    assert kernel.plan(x, w_in, i32(sizes)).warp_specialized is not None
    assert_grouped(got, x, w, sizes)


def test_float32_operands_with_w_laid_out_n_k() -> None:
    """WGMMA reads a float32 b as (N, K) only: 'G N K', BK=32 (the 128-byte swizzle)."""
    kernel = ragged_matmul(Float32, "G N K", "ragged_f32_nk", bk=32)
    sizes = [70, 0, 100]
    x, w = operands(200, 96, 130, len(sizes), jnp.float32, seed=17)
    got = kernel(x, jnp.swapaxes(w, 1, 2), i32(sizes))
    # The tensor cores multiply float32 as tf32 (10 mantissa bits); the interpreter does not.
    assert_close(got, grouped(x, w, sizes), Tolerance(rtol=1e-2, atol=1e-2 * math.sqrt(96)))
    assert not np.any(np.asarray(got)[170:])


SIZE_DTYPES = {
    "int16": (sized_by(Int16, "ragged_int16_sizes"), jnp.int16, [30, -2, 0, 300]),
    "int8": (sized_by(Int8, "ragged_int8_sizes"), jnp.int8, [30, -1, 127, 20]),
    "uint8": (sized_by(UInt8, "ragged_uint8_sizes"), jnp.uint8, [0, 255, 1, 1]),
}


@pytest.mark.parametrize("name", SIZE_DTYPES)
def test_sizes_of_other_integer_dtypes(name: str) -> None:
    """Negative int8 and int16 sizes count as 0; a uint8 255 is 255 rows, past M."""
    kernel, dtype, sizes = SIZE_DTYPES[name]
    x, w = operands(200, 64, 130, len(sizes), seed=19)
    got = kernel(x, w, jnp.asarray(sizes, dtype))
    assert_grouped(got, x, w, sizes)


# --- epilogues ------------------------------------------------------------------------------


def test_an_epilogue_with_a_bias_per_column_and_gelu() -> None:
    """The bias and gelu apply to every row: a row in no group multiplies no weights (its
    products are zeros), so it is gelu of the bias, as `gelu(ragged_dot(x, w) + bias)`."""
    sizes = [70, 0, 100]
    x, w = operands(200, 96, 260, len(sizes), seed=23)
    bias = normal((260,), jnp.float32, seed=29)
    got = grouped_bias_gelu(x, w, i32(sizes), bias)
    assert got.dtype == jnp.bfloat16
    want = gelu(grouped(x, w, sizes) + np.asarray(bias, np.float64)[None, :])
    # gelu of a float32 sum of 96 products, rounded to bfloat16 once: gelu's slope is at
    # most about 1.13, so the sum's tolerance, with bfloat16's ulp, bounds it.
    assert_close(got, want, tolerance_for(jnp.bfloat16, 96, scale=8.0))
    assert np.any(np.asarray(got, np.float32)[170:])


def test_an_epilogue_with_a_per_row_gate_and_a_scalar() -> None:
    sizes = [70, 0, 100]
    x, w = operands(200, 96, 130, len(sizes), seed=31)
    gate = normal((200,), jnp.float32, seed=37)
    got = grouped_row_scaled(x, w, i32(sizes), gate, jnp.float32(0.5))
    want = grouped(x, w, sizes) * np.asarray(gate, np.float64)[:, None] * 0.5
    assert_close(got, want, tolerance_for(jnp.float32, 96, scale=4.0))
    assert not np.any(np.asarray(got)[170:])


# --- jax.jit --------------------------------------------------------------------------------


def test_under_jit() -> None:
    """The sizes are data: new sizes reuse the jitted kernel and move the groups."""
    x, w = operands(300, 130, 260, 4, seed=41)
    jitted = jax.jit(grouped_matmul)
    for sizes in ([90, 0, 137, 73], [0, 300, 0, 0], [1, 2, 3, -4]):
        got = jitted(x, w, i32(sizes))
        assert_grouped(got, x, w, sizes)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(grouped_matmul(x, w, i32(sizes))))
    bf16 = jax.jit(grouped_matmul, static_argnames=("bf16_out",))(
        x, w, i32([90, 0, 137, 73]), bf16_out=True
    )
    assert_grouped(bf16, x, w, [90, 0, 137, 73], jnp.bfloat16)


# --- drawn shapes and sizes -----------------------------------------------------------------


@st.composite
def ragged_cases(draw: st.DrawFn) -> tuple[int, int, int, list[int]]:
    """M, K, N and sizes: the sizes a split of up to 8 rows past M (sorted cuts, empty groups
    where cuts meet), one of them negative now and then."""
    m = draw(st.integers(1, 300))
    k = draw(st.integers(1, 160))
    n = draw(st.integers(1, 300))
    groups = draw(st.integers(1, 9))
    cuts = sorted(draw(st.lists(st.integers(0, m + 8), min_size=groups, max_size=groups)))
    sizes = np.diff([0, *cuts]).tolist()
    if draw(st.booleans()):
        sizes[draw(st.integers(0, groups - 1))] = -draw(st.integers(1, 5))
    return m, k, n, sizes


@settings(max_examples=6, deadline=None)
@given(case=ragged_cases())
def test_drawn_shapes_and_sizes(case: tuple[int, int, int, list[int]]) -> None:
    m, k, n, sizes = case
    x, w = operands(m, k, n, len(sizes), seed=m * 7 + k * 3 + n)
    assert_grouped(grouped_matmul(x, w, i32(sizes)), x, w, sizes)


# --- sizes past int32 when summed -----------------------------------------------------------

OVERFLOWING = {
    "two-int32-max": [2**31 - 1, 2**31 - 1, 5],
    "three-2**30": [2**30, 2**30, 2**30],
    "rows-then-two-int32-max": [40, 2**31 - 1, 2**31 - 1, 7],
}


@pytest.mark.parametrize("sizes", OVERFLOWING.values(), ids=OVERFLOWING.keys())
def test_sizes_whose_sum_passes_int32_are_cut_at_M(sizes: list[int]) -> None:
    x, w = operands(100, 64, 128, len(sizes), seed=43)
    assert_grouped(grouped_matmul(x, w, i32(sizes)), x, w, sizes)


# --- the race detector, the emitted module and the lowering -------------------------------


def test_no_races_where_each_item_fills_its_block() -> None:
    """Groups of whole blocks, one of them empty: every piece of every item stores its rows
    in one TMA store of 64."""
    sizes = [128, 0, 128]
    x, w = operands(256, 130, 260, len(sizes), seed=47)
    report = sk.testing.detect_races(grouped_matmul, x, w, i32(sizes))
    assert not report.races_found
    assert_grouped(report.result, x, w, sizes)


STRADDLING = {
    "a-block-of-two-groups": [64, 192],
    "two-groups-of-half-a-block": [128, 64, 64],
    "empty-groups-and-rows-past-the-sum": [70, 0, 100],
}


@pytest.mark.parametrize("sizes", STRADDLING.values(), ids=STRADDLING.keys())
def test_no_races_where_a_block_straddles_groups(sizes: list[int]) -> None:
    x, w = operands(256, 64, 128, len(sizes), seed=53)
    report = sk.testing.detect_races(grouped_matmul, x, w, i32(sizes))
    assert_grouped(report.result, x, w, sizes)
    assert not report.races_found


@needs_mosaic_gpu
def test_the_emitted_module_runs() -> None:
    sizes = i32([70, 0, 100, 5])
    x, w = operands(200, 96, 130, 4, seed=59)
    source = grouped_matmul.emit(x, w, sizes)
    assert "def group_rows(" in source and "def store_rows(" in source
    assert "commit_smem_to_gmem_group" in source and "@pl.when(row_count > 0)" in source
    assert "\nimport statickernel" not in source and "\nfrom statickernel" not in source
    namespace: dict[str, Any] = {"__name__": "emitted"}
    exec(compile(source, "<emitted grouped_matmul>", "exec"), namespace)
    got = namespace["grouped_matmul"](x, w, sizes)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(grouped_matmul(x, w, sizes)))
    assert_grouped(got, x, w, [70, 0, 100, 5])


def structs(
    m: int, k: int, n: int, groups: int, dtype: Any = jnp.bfloat16
) -> tuple[jax.ShapeDtypeStruct, ...]:
    S = jax.ShapeDtypeStruct
    return S((m, k), dtype), S((groups, k, n), dtype), S((groups,), jnp.int32)


LOWERED: dict[str, tuple[tuple[int, int, int, int], dict[str, Any]]] = {
    "model-16384x4096x4096-G8": ((16384, 4096, 4096, 8), {}),
    "model-bf16-out": ((16384, 4096, 4096, 8), {"bf16_out": True}),
    "ragged-4095x4000x1000-G7": ((4095, 4000, 1000, 7), {}),
    "ragged-BM-64-BN-64": ((4095, 4000, 1000, 7), {"BM": 64, "BN": 64}),
    "G-64-BM-64-BN-256": ((8192, 2048, 1024, 64), {"BM": 64, "BN": 256}),
    "M-1": ((1, 256, 512, 4), {}),
}


@pytest.mark.parametrize("name", LOWERED)
def test_cross_lowers_for_mosaic_gpu(name: str) -> None:
    shape, consts = LOWERED[name]
    assert "mosaic_gpu" in grouped_matmul.lower(*structs(*shape), **consts).as_text()


def test_a_user_kernel_of_float16_cross_lowers() -> None:
    kernel, _, _ = DTYPE_KERNELS["float16-G-K-N"]
    assert "mosaic_gpu" in kernel.lower(*structs(4096, 1024, 2048, 8, jnp.float16)).as_text()


# --- the plan ---------------------------------------------------------------------------------


def test_the_plan_says_how_the_groups_are_walked() -> None:
    text = str(grouped_matmul.plan(*structs(300, 200, 260, 4)))
    g_line = next(line for line in text.splitlines() if line.strip().startswith("G=4"))
    assert "ragged groups" in g_line, g_line
    sizes = next(line for line in text.splitlines() if line.strip().startswith("group_sizes:"))
    assert "the groups' sizes, read from global memory as each CTA tile starts" in sizes
    assert "int32[4]" in sizes
    assert "the CTAs walk 7 (group, 128-row block) items (cdiv(300, 128) + 4)" in text
    assert "paired along N" in text and "ragged rows pair along the columns" in text
    assert "the rows past the sizes' sum are stored as zeros" in text


def test_the_plan_at_a_model_shape() -> None:
    plan = grouped_matmul.plan(*structs(16384, 4096, 4096, 8))
    ws = plan.warp_specialized
    assert isinstance(ws, WarpSpecialized) and ws.ragged is not None
    assert ws.ragged.items == 16384 // 128 + 8 and ws.tile_grid == (136, 16)
    assert (ws.ragged.split, ws.ragged.group, ws.ragged.sizes) == ("M", "G", "group_sizes")
    text = str(plan)
    assert "cdiv(16384, 128) + 8" in text and "136 (group, 128-row block) items" in text


def test_the_plan_of_64_row_blocks() -> None:
    text = str(grouped_matmul.plan(*structs(300, 200, 260, 4), BM=64))
    assert "the CTAs walk 9 (group, 64-row block) items (cdiv(300, 64) + 4)" in text


# --- sk.testing -----------------------------------------------------------------------------


def test_the_probes_draw_sizes_that_split_at_most_the_rows() -> None:
    cases = sk.testing.probe_cases(grouped_matmul)
    assert cases
    for case in cases:
        grouped_matmul.plan(*case.structs())
        (m, _), (groups, _, _), (count,) = case.shapes
        assert groups == count
        for seed in range(4):
            sizes = np.asarray(sk.testing.random_operands(case, seed=seed)[2])
            assert sizes.min() >= 0 and sizes.sum() <= m, (case.label, seed, sizes)


def test_check_kernel_at_a_shape_of_straddling_groups() -> None:
    results = sk.testing.check_kernel(
        grouped_matmul, shapes=[{"M": 200, "K": 96, "N": 130, "G": 3}]
    )
    assert results and all(r.error is None and r.mismatches == 0 for r in results), results
    assert all(r.elements == 200 * 130 for r in results)


@pytest.mark.slow
def test_check_kernel_on_the_probe_shapes() -> None:
    """The 5 probe shapes: 4 groups aligned, 3 where an edge is probed, 2 in the smallest."""
    results = sk.testing.check_kernel(grouped_matmul)
    assert len(results) >= 5
    for result in results:
        assert result.error is None and result.mismatches == 0, result
