"""Loop dims: `sk.loop`, `sk.map_blocks` and `sk.dot`, through the gallery kernels that use them.

The matmuls walk K in a software pipeline and fold WGMMA products into an accumulator; the
row kernels walk N, folding running statistics and then writing one output block per step.
Each kernel runs in the Mosaic GPU interpreter against its reference at shapes that stress the
edges (multiples of the blocks, one past them, primes, arrays smaller than one block, a single
row or column, rows TMA cannot address), cross-lowers for CUDA, and plans the launch it runs.
The declaration errors of loop bodies are checked as the decorator runs.

Each new shape compiles a new specialization in a slow interpreter, so the lists stay short.
Lines are found through `# @tag` marker comments, so the tests do not depend on the layout.
"""

import dataclasses
import math
import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float32

import statickernel as sk
from batched_matmul import batched_matmul
from layernorm_wide import layernorm_wide
from markers import line_finder
from matmul import matmul
from matmul_bias_gelu import matmul_bias_gelu
from softmax_online import softmax_online
from statickernel._compiler.mosaic_gpu.plan.warpspec import WarpSpecialized

F32 = jnp.dtype(jnp.float32)
BF16 = jnp.dtype(jnp.bfloat16)
SMEM_BYTES = 232448  # 227 KiB: the shared memory of one block on Hopper

_FILE = pathlib.Path(__file__)

line_of = line_finder(__file__)


def assert_at(exc: sk.StaticKernelError, tag: str) -> None:
    assert exc.where is not None, str(exc)
    assert exc.where.endswith(f"{_FILE.name}:{line_of(tag)}"), (exc.where, str(exc))


def assert_matches(out: Any, ref: Any, rtol: float, atol: float) -> None:
    """Same shape and dtype as the reference, finite, and close in float32."""
    assert out.shape == ref.shape
    assert out.dtype == ref.dtype
    got = np.asarray(out, np.float32)
    assert np.isfinite(got).all(), "a value past the edge leaked into the result"
    np.testing.assert_allclose(got, np.asarray(ref, np.float32), rtol=rtol, atol=atol)


def normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


# --- matmul and matmul_bias_gelu -------------------------------------------------------------


def matmul_args(m: int, k: int, n: int, seed: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    """bf16 a (M, K) and b (K, N), and an f32 bias (N,)."""
    rng = np.random.default_rng([seed, m, k, n])
    a = jnp.asarray(normal(rng, m, k), BF16)
    b = jnp.asarray(normal(rng, k, n), BF16)
    bias = jnp.asarray(normal(rng, n), F32)
    return a, b, bias


def matmul_tolerance(k: int, out_dtype: Any) -> tuple[float, float]:
    """(rtol, atol) in float32. Entries of a product of unit normals grow like sqrt(K). The
    reference multiplies the same bf16 inputs into float32, so only the order of the sums
    differs (about 1e-6 relative); a bf16 result may round one ulp apart (0.4%)."""
    scale = math.sqrt(k)
    if out_dtype == BF16:
        return 1e-2, 1e-2 * scale
    return 1e-3, 1e-3 * scale


def check_matmul(m: int, k: int, n: int, seed: int = 0, **overrides: Any) -> None:
    a, b, _ = matmul_args(m, k, n, seed)
    assert matmul.reference is not None
    out = matmul(a, b, **overrides)
    bf16_out = bool(overrides.get("bf16_out", False))
    ref = matmul.reference(a, b, bf16_out)
    assert out.dtype == (BF16 if bf16_out else F32)
    assert_matches(out, ref, *matmul_tolerance(k, out.dtype))


def check_matmul_bias_gelu(m: int, k: int, n: int, seed: int = 0, **overrides: Any) -> None:
    a, b, bias = matmul_args(m, k, n, seed)
    assert matmul_bias_gelu.reference is not None
    out = matmul_bias_gelu(a, b, bias, **overrides)
    assert out.dtype == BF16
    assert_matches(out, matmul_bias_gelu.reference(a, b, bias), *matmul_tolerance(k, BF16))


MATMUL_SHAPES = {
    "128x64x128": (128, 64, 128),  # one block of every dim
    "256x128x256": (256, 128, 256),  # multiples: two blocks of M and N, two steps of K
    "129x65x129": (129, 65, 129),  # one past the blocks on every dim
    "97x131x53": (97, 131, 53),  # primes
    "211x67x13": (211, 67, 13),  # primes; result rows of 52 B, padded on the host
    "64x40x64": (64, 40, 64),  # K smaller than BK: one masked step
    "70x8x90": (70, 8, 90),  # K of one 16-byte bf16 row
    "100x1x100": (100, 1, 100),  # K=1
    "7x5x3": (7, 5, 3),  # smaller than one block everywhere
    "1x1x1": (1, 1, 1),
    "1x100x200": (1, 100, 200),  # a single row
    "200x100x1": (200, 100, 1),  # a single column
}


@pytest.mark.parametrize("shape", MATMUL_SHAPES.values(), ids=MATMUL_SHAPES.keys())
def test_matmul_matches_reference(shape: tuple[int, int, int]) -> None:
    check_matmul(*shape)


@pytest.mark.parametrize("shape", MATMUL_SHAPES.values(), ids=MATMUL_SHAPES.keys())
def test_matmul_bias_gelu_matches_reference(shape: tuple[int, int, int]) -> None:
    check_matmul_bias_gelu(*shape)


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"BN": 256, "stages": 2}, id="BN256-stages2"),
        pytest.param({"BM": 64, "BN": 64, "stages": 1}, id="BM64-BN64-stages1"),
        pytest.param({"BK": 128, "stages": 2}, id="BK128-stages2"),
        pytest.param({"bf16_out": True}, id="bf16_out"),
    ],
)
def test_matmul_with_overrides_matches_reference(overrides: dict[str, Any]) -> None:
    # Ragged on every dim, and K over several steps of every BK tried.
    check_matmul(130, 257, 70, **overrides)
    a, b, _ = matmul_args(130, 257, 70)
    constants = dict(matmul.plan(a, b, **overrides).constants)
    for name, value in overrides.items():
        assert constants[name] == value


def test_matmul_bias_gelu_with_overrides_matches_reference() -> None:
    check_matmul_bias_gelu(97, 131, 53, BM=64, BN=64, stages=2)


def test_matmul_inside_jit() -> None:
    a, b, _ = matmul_args(97, 131, 53)
    assert matmul.reference is not None
    out = jax.jit(lambda a, b: matmul(a, b) * 2)(a, b)
    assert_matches(out, matmul.reference(a, b) * 2, *matmul_tolerance(131, F32))


MATMUL_DIMS = st.integers(1, 300)


@settings(max_examples=4, deadline=None)
@given(m=MATMUL_DIMS, k=MATMUL_DIMS, n=MATMUL_DIMS)
def test_matmul_any_shape(m: int, k: int, n: int) -> None:
    check_matmul(m, k, n)


@settings(max_examples=4, deadline=None)
@given(m=MATMUL_DIMS, k=MATMUL_DIMS, n=MATMUL_DIMS)
def test_matmul_bias_gelu_any_shape(m: int, k: int, n: int) -> None:
    check_matmul_bias_gelu(m, k, n)


@pytest.mark.parametrize(
    "shape",
    [(2, 97, 131, 53), (3, 7, 5, 3), (1, 1, 1, 1)],
    ids=["2x97x131x53", "3x7x5x3", "1x1x1x1"],
)
def test_batched_matmul_matches_reference(shape: tuple[int, int, int, int]) -> None:
    batch, m, k, n = shape
    rng = np.random.default_rng(list(shape))
    a = jnp.asarray(normal(rng, batch, m, k), BF16)
    b = jnp.asarray(normal(rng, batch, k, n), BF16)
    assert batched_matmul.reference is not None
    out = batched_matmul(a, b)
    assert_matches(out, batched_matmul.reference(a, b), *matmul_tolerance(k, F32))


# --- float32 and transposed operands of sk.dot ----------------------------------------------


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def matmul_f32_nt(
    a: Float32[Array, "M K"],
    b: Float32[Array, "N K"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
    BK: sk.Const[int] = 32,
) -> Float32[Array, "M N"]:
    # WGMMA reads a float32 b only as (N, K); sk.dot contracts the shared loop dim either way.
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def matmul_bf16_nt(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "N K"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 72,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:
    # A b stored (N, K) needs BN a multiple of 8 only, not of the 64-element swizzle.
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))


@pytest.mark.parametrize("shape", [(64, 32, 64), (97, 131, 53)], ids=["64x32x64", "97x131x53"])
def test_float32_operands_with_b_as_n_k(shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    rng = np.random.default_rng(list(shape))
    a = jnp.asarray(normal(rng, m, k))
    b = jnp.asarray(normal(rng, n, k))
    out = matmul_f32_nt(a, b)
    ref = jnp.dot(a, b.T, precision=jax.lax.Precision.HIGHEST)
    # The tensor cores multiply float32 as tf32 (10 mantissa bits); the interpreter does not.
    assert_matches(out, ref, 1e-2, 1e-2 * math.sqrt(k))
    plan = matmul_f32_nt.plan(a, b)
    assert plan.loops[0].dots == (("a", "b", True),)
    assert plan.loops[0].dots == (sk.PlannedDot(a="a", b="b", b_transposed=True),)
    assert plan.loops[0].mode is sk.LoopMode.FOLD
    assert "sk.dot(a, b.T)" in str(plan)
    assert "mosaic_gpu" in matmul_f32_nt.lower(a, b).as_text()


def test_bf16_operands_with_b_as_n_k() -> None:
    a, _, _ = matmul_args(97, 131, 150)
    b = jnp.asarray(normal(np.random.default_rng(1), 150, 131), BF16)
    out = matmul_bf16_nt(a, b)
    ref = jnp.dot(a, b.T, preferred_element_type=jnp.float32)
    assert_matches(out, ref, *matmul_tolerance(131, F32))
    assert "mosaic_gpu" in matmul_bf16_nt.lower(a, b).as_text()


# --- softmax_online and layernorm_wide -------------------------------------------------------


def row_args(name: str, m: int, n: int, dtype: Any, seed: int = 0) -> tuple[jax.Array, ...]:
    """Operands chosen so that a wrong edge shows."""
    rng = np.random.default_rng([seed, m, n])
    x = normal(rng, m, n)
    if name == "softmax_online":
        # All negative: a zero read past the edge would win the row max and swell the sum.
        return (jnp.asarray(x - 10, dtype),)
    # A large mean: one pass of sums and sums of squares would cancel catastrophically, and a
    # zero past the edge would shift the mean and the variance.
    weight = 1 + 0.1 * normal(rng, n)
    bias = normal(rng, n)
    return tuple(jnp.asarray(v, dtype) for v in (3 * x + 100, weight, bias))


ROW_KERNELS: dict[str, sk.Kernel[..., Any]] = {
    "softmax_online": softmax_online,
    "layernorm_wide": layernorm_wide,
}


def row_tolerance(name: str, dtype: Any) -> tuple[float, float]:
    """(rtol, atol) in float32."""
    if dtype == BF16:
        # One bf16 ulp apart at most; softmax values are small, so atol stays small too.
        return (1e-2, 1e-6) if name == "softmax_online" else (1e-2, 1e-2)
    # layernorm centers rows whose mean is 100: rounding in the mean shows at about 1e-5.
    return (1e-5, 1e-7) if name == "softmax_online" else (1e-5, 1e-4)


def check_row_kernel(name: str, args: tuple[jax.Array, ...], **overrides: Any) -> None:
    kernel = ROW_KERNELS[name]
    assert kernel.reference is not None
    out = kernel(*args, **overrides)
    reference_kwargs = {"eps": overrides["eps"]} if "eps" in overrides else {}
    ref = kernel.reference(*args, **reference_kwargs)
    assert_matches(out, ref, *row_tolerance(name, args[0].dtype))


ROW_SHAPES = {
    "64x256": (64, 256),  # one block, one step
    "128x512": (128, 512),  # two blocks, two steps
    "65x257": (65, 257),  # one past the blocks
    "97x1009": (97, 1009),  # primes, four steps
    "3x8": (3, 8),  # smaller than one block
    "7x5": (7, 5),
    "1x1000": (1, 1000),  # a single row
    "300x1": (300, 1),  # a single column
    "65x7": (65, 7),  # f32 rows of 28 B: padded on the host for TMA
    "40x777": (40, 777),  # f32 rows of 3108 B: padded on the host for TMA
}


def _row_cases() -> list[Any]:
    return [
        pytest.param(name, shape, dtype, id=f"{name}-{dtype.name}-{label}")
        for name in ROW_KERNELS
        for label, shape in ROW_SHAPES.items()
        for dtype in (F32, BF16)
    ]


@pytest.mark.parametrize(("name", "shape", "dtype"), _row_cases())
def test_row_kernel_matches_reference(name: str, shape: tuple[int, int], dtype: Any) -> None:
    check_row_kernel(name, row_args(name, *shape, dtype))


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        pytest.param("softmax_online", {"BN": 128, "stages": 3}, id="softmax-BN128-stages3"),
        pytest.param("softmax_online", {"BN": 64, "stages": 1}, id="softmax-BN64-stages1"),
        pytest.param(
            "layernorm_wide", {"BN": 128, "stages": 3, "eps": 1e-3}, id="layernorm-BN128-eps"
        ),
    ],
)
def test_row_kernel_with_overrides_matches_reference(name: str, overrides: dict[str, Any]) -> None:
    check_row_kernel(name, row_args(name, 97, 1009, F32), **overrides)


def test_layernorm_wide_is_exact_for_a_very_large_mean() -> None:
    """Rows of mean 1000 and variance 1: E[x^2] - E[x]^2 in float32 would lose most digits."""
    _, weight, bias = row_args("layernorm_wide", 70, 1000, F32)
    x = jnp.asarray(normal(np.random.default_rng(7), 70, 1000) + 1000)
    out = layernorm_wide(x, weight, bias)
    assert layernorm_wide.reference is not None
    assert_matches(out, layernorm_wide.reference(x, weight, bias), 1e-3, 1e-3)


@pytest.mark.slow
def test_softmax_online_over_rows_of_100k_columns() -> None:
    x = jnp.asarray(normal(np.random.default_rng(0), 2, 100_000) - 10)
    out = softmax_online(x)
    assert softmax_online.reference is not None
    # Entries are about 1e-5: compare relative to them, not to 1.
    assert_matches(out, softmax_online.reference(x), 1e-4, 1e-10)
    np.testing.assert_allclose(np.asarray(out).sum(axis=1), 1.0, rtol=1e-4)
    assert softmax_online.plan(x).loops[0].steps == math.ceil(100_000 / 256)


ROW_M = st.integers(1, 300)
# Up to six steps of the default BN=256.
ROW_N = st.integers(1, 1500)
DTYPES = st.sampled_from([F32, BF16])


@settings(max_examples=4, deadline=None)
@given(m=ROW_M, n=ROW_N, dtype=DTYPES)
def test_softmax_online_any_shape(m: int, n: int, dtype: Any) -> None:
    check_row_kernel("softmax_online", row_args("softmax_online", m, n, dtype))


@settings(max_examples=4, deadline=None)
@given(m=ROW_M, n=ROW_N, dtype=DTYPES)
def test_layernorm_wide_any_shape(m: int, n: int, dtype: Any) -> None:
    check_row_kernel("layernorm_wide", row_args("layernorm_wide", m, n, dtype))


# --- cross-lowering ----------------------------------------------------------------------------


def specs(name: str, shape: tuple[int, ...], dtype: Any = F32) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Abstract operands of a loop example: shapes and dtypes, no data."""
    sds = jax.ShapeDtypeStruct
    if name in ("matmul", "matmul_bias_gelu"):
        m, k, n = shape
        a, b = sds((m, k), BF16), sds((k, n), BF16)
        return (a, b) if name == "matmul" else (a, b, sds((n,), F32))
    if name == "batched_matmul":
        batch, m, k, n = shape
        return sds((batch, m, k), BF16), sds((batch, k, n), BF16)
    m, n = shape
    x = sds((m, n), dtype)
    return (x,) if name == "softmax_online" else (x, sds((n,), dtype), sds((n,), dtype))


LOOP_KERNELS: dict[str, sk.Kernel[..., Any]] = {
    "matmul": matmul,
    "matmul_bias_gelu": matmul_bias_gelu,
    "softmax_online": softmax_online,
    "layernorm_wide": layernorm_wide,
    "batched_matmul": batched_matmul,
}
LOWERING_CASES = [
    # name, shape, overrides
    ("matmul", (256, 128, 256), {}),
    ("matmul", (997, 331, 257), {}),
    ("matmul", (997, 331, 257), {"BN": 256, "stages": 2}),
    ("matmul", (997, 331, 257), {"BM": 64}),
    ("matmul", (997, 331, 257), {"bf16_out": True}),
    ("matmul", (1000, 40, 1000), {}),  # K under one block
    ("matmul", (7, 5, 3), {}),
    ("matmul_bias_gelu", (256, 128, 256), {}),
    ("matmul_bias_gelu", (997, 331, 257), {}),
    ("matmul_bias_gelu", (997, 331, 257), {"BM": 64, "BN": 64, "stages": 2}),
    ("batched_matmul", (2, 256, 128, 256), {}),
    ("batched_matmul", (2, 997, 331, 257), {"BN": 64, "stages": 2}),
    ("softmax_online", (128, 512), {}),
    ("softmax_online", (1000, 777), {}),
    ("softmax_online", (1000, 777), {"BN": 128, "stages": 3}),
    ("softmax_online", (65, 7), {}),
    ("softmax_online", (2, 100_000), {}),
    ("layernorm_wide", (128, 512), {}),
    ("layernorm_wide", (1000, 777), {}),
    ("layernorm_wide", (1000, 777), {"BN": 128, "stages": 3, "eps": 1e-3}),
    ("layernorm_wide", (65, 7), {}),
]


def _lowering_cases() -> list[Any]:
    cases = []
    for name, shape, overrides in LOWERING_CASES:
        label = f"{name}-{'x'.join(map(str, shape))}" + "".join(
            f"-{k}{v}" for k, v in overrides.items()
        )
        dtypes = (F32, BF16) if name in ROW_KERNELS else (BF16,)
        for dtype in dtypes:
            cases.append(pytest.param(name, shape, overrides, dtype, id=f"{label}-{dtype.name}"))
    return cases


@pytest.mark.parametrize(("name", "shape", "overrides", "dtype"), _lowering_cases())
def test_cross_lowers(
    name: str, shape: tuple[int, ...], overrides: dict[str, Any], dtype: Any
) -> None:
    kernel = LOOP_KERNELS[name]
    args = specs(name, shape, dtype)
    lowered = kernel.lower(*args, **overrides)
    assert "mosaic_gpu" in lowered.as_text()
    plan = kernel.plan(*args, backend="mosaic_gpu", **overrides)
    assert plan.loops or plan.form is sk.Form.ROWS, (
        "a loop kernel plans its pipelines, or walks rows it holds in shared memory"
    )
    constants = dict(plan.constants)
    for const, value in overrides.items():
        assert constants[const] == value


def test_lowering_with_other_stages_differs() -> None:
    x = jax.ShapeDtypeStruct((1000, 1000), F32)
    two = softmax_online.lower(x, BN=128, stages=2).as_text()
    assert two != softmax_online.lower(x, BN=128, stages=3).as_text()


# --- plans -------------------------------------------------------------------------------------


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(value: int, multiple: int) -> int:
    return cdiv(value, multiple) * multiple


@pytest.mark.parametrize(
    ("k", "steps", "stages"),
    [(40, 1, 1), (64, 1, 1), (128, 2, 2), (192, 3, 3), (1024, 16, 4)],
)
def test_stages_are_capped_at_the_step_count(k: int, steps: int, stages: int) -> None:
    """The pipeline never holds more blocks than there are steps, and pays SMEM only for those.
    (Blocks enough to fill the SMs: fewer would split a long loop across CTAs.)"""
    plan = matmul.plan(*specs("matmul", (1280, k, 1280)))
    assert dict(plan.constants)["stages"] is None  # fitted to shared memory, up to 4
    (loop,) = plan.loops
    assert (loop.axis, loop.constant, loop.block, loop.size) == ("K", "BK", 64, k)
    assert (loop.steps, loop.stages) == (steps, stages)
    assert loop.mode == "fold"
    assert loop.operands == ("a", "b")
    assert loop.dots == (("a", "b", False),)
    # Warp-specialized, paired along N: each stage holds one (128, 64) block of a and the
    # consumers' (64, 256) block of b, in bf16.
    assert plan.warp_specialized is not None
    assert plan.warp_specialized.stage_bytes == (128 * 64 + 64 * 256) * 2
    assert loop.smem_bytes >= stages * (128 * 64 + 64 * 256) * 2
    assert loop.smem_bytes < (stages + 1) * (128 * 64 + 64 * 256) * 2
    assert loop.smem_bytes <= plan.smem_bytes <= SMEM_BYTES
    plan.check_invariants()


def test_a_stage_count_too_big_for_a_long_k_fits_a_short_one() -> None:
    long_k = specs("matmul", (256, 1024, 256))
    with pytest.raises(sk.SharedMemoryError) as info:
        matmul.plan(*long_k, BN=256, stages=8)
    assert "stages=" in str(info.value.fix)
    # With one step, one stage is all the pipeline holds.
    plan = matmul.plan(*specs("matmul", (256, 64, 256)), BN=256, stages=8)
    assert plan.loops[0].stages == 1
    assert plan.smem_bytes <= SMEM_BYTES


@pytest.mark.parametrize(
    ("shape", "overrides"),
    [
        ((256, 128, 256), {}),
        ((997, 331, 257), {}),
        ((997, 331, 257), {"BM": 64, "BN": 256, "stages": 2}),
        ((1, 1, 1), {}),
    ],
    ids=["aligned", "ragged", "ragged-BM64-BN256", "1x1x1"],
)
def test_grid_covers_the_result(shape: tuple[int, int, int], overrides: dict[str, Any]) -> None:
    m, k, n = shape
    plan = matmul.plan(*specs("matmul", shape), **overrides)
    consts = dict(plan.constants)
    assert plan.grid == (cdiv(m, consts["BM"]), cdiv(n, consts["BN"]))
    assert plan.grid_names == ("M", "N")
    assert plan.bindings == {"M": m, "K": k, "N": n}
    k_dim = plan.dim("K")
    assert k_dim.looped_by == "BK" and k_dim.tiled_by is None and k_dim.grid_axis is None
    assert k_dim.ragged == (k % consts["BK"] != 0)
    assert plan.dim("M").tiled_by == "BM" and plan.dim("N").tiled_by == "BN"


def assert_tma_can_tile(
    shape: tuple[int, int], gmem: tuple[int, int], floors: tuple[int, int] = (0, 0)
) -> None:
    """TMA copies a bf16 sk.dot operand into WGMMA's tiled (8, 64) shared memory only when each
    of its dims is a multiple of its tile (or, for Mosaic GPU, no larger than it) and its rows are
    whole 16 bytes. The host pads with zeros as far as that needs, and not a tile further, except
    up to `floors`: the two blocks a warp-specialized matmul's consumers share."""
    for size, padded, tile, floor in zip(shape, gmem, (8, 64), floors, strict=True):
        assert padded == max(round_up(size, tile), floor), (shape, gmem, floors)
        assert padded <= tile or padded % tile == 0, (shape, gmem)
    assert gmem[1] * 2 % 16 == 0, gmem


@pytest.mark.parametrize(
    "shape", [(129, 65, 129), (97, 131, 53), (7, 5, 3)], ids=["129x65x129", "97x131x53", "7x5x3"]
)
def test_ragged_dot_operands_are_padded_on_the_host(shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    plan = matmul.plan(*specs("matmul", shape))
    a, b = plan.operand("a"), plan.operand("b")
    assert a.shape == (m, k) and b.shape == (k, n)
    # A warp-specialized matmul's paired operand holds at least the two blocks it shares.
    ws = plan.warp_specialized
    paired = ws.paired if isinstance(ws, WarpSpecialized) else None
    a_floor, b_floor = (256 if paired == "M" else 0, 0), (0, 256 if paired == "N" else 0)
    assert_tma_can_tile((m, k), (a.gmem_shape[0], a.gmem_shape[1]), a_floor)
    assert_tma_can_tile((k, n), (b.gmem_shape[0], b.gmem_shape[1]), b_floor)
    assert a.host_padded and b.host_padded
    assert a.swizzle == b.swizzle == 64
    assert a.loop_dim == b.loop_dim == "K"
    for name in ("a", "b"):
        notes = [note for note in plan.notes if f"`{name}`" in note]
        held = (name == "a" and a_floor[0]) or (name == "b" and b_floor[1])
        assert len(notes) == (2 if held else 1) and "padded" in notes[0], plan.notes
    # The f32 result only needs rows of whole 16 bytes.
    result = plan.operand("result")
    assert result.gmem_shape == (m, round_up(n, 4))
    assert "host-padded" in str(plan)


def test_aligned_dot_operands_are_not_padded() -> None:
    plan = matmul.plan(*specs("matmul", (256, 128, 256)))
    for op in plan.operands + plan.results:
        assert op.gmem_shape == op.shape and not op.host_padded
    assert plan.notes == ()


def test_matmul_plan_text_describes_the_loop() -> None:
    text = str(matmul.plan(*specs("matmul", (1000, 1000, 1000))))
    assert "looped by BK=64" in text
    assert "loop 0: K in 16 step(s) of 64, 4 stage(s), fold into a carry" in text
    assert "WGMMA sk.dot(a, b)" in text
    assert "the last step is masked" in text  # 1000 % 64 != 0


def test_softmax_online_plans_a_fold_then_a_map() -> None:
    """Rows too wide for shared memory (400 KB) stream through a pipeline a loop."""
    plan = softmax_online.plan(*specs("softmax_online", (130, 100_000)))
    assert plan.grid == (cdiv(130, 64),)
    assert [(lp.axis, lp.mode, lp.operands, lp.dots) for lp in plan.loops] == [
        ("N", "fold", ("x",), ()),
        ("N", "map", ("x",), ()),
    ]
    assert all((lp.steps, lp.stages) == (391, 2) for lp in plan.loops)
    assert plan.dim("N").looped_by == "BN"
    text = str(plan)
    assert "loop 0: N in 391 step(s) of 256" in text
    assert "loop 1: N in 391 step(s) of 256, 2 stage(s), write a block per step" in text


def test_layernorm_wide_plans_one_fold_then_a_map() -> None:
    """Both statistics in one pass over x, then the pass that writes: x is read twice."""
    plan = layernorm_wide.plan(*specs("layernorm_wide", (65, 7)))
    assert [lp.mode for lp in plan.loops] == ["fold", "map"]
    assert plan.loops[0].operands == ("x",)
    assert plan.loops[-1].operands == ("x", "weight", "bias")
    # N=7 is one step: one stage, whatever the constant says.
    assert all((lp.steps, lp.stages) == (1, 1) for lp in plan.loops)
    # f32 rows of 28 B cannot be addressed by TMA.
    assert plan.operand("x").gmem_shape == (65, 8)
    assert any("`x`" in note and "padded" in note for note in plan.notes)


def test_plans_are_frozen() -> None:
    plan = matmul.plan(*specs("matmul", (256, 128, 256)))
    assert isinstance(plan, sk.LaunchPlan)
    assert isinstance(plan.loops[0], sk.LoopPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.loops[0].stages = 1  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.grid = (1, 1)  # pyright: ignore[reportAttributeAccessIssue]


def test_overrides_at_the_call_share_the_plan() -> None:
    a, b = specs("matmul", (300, 200, 260))
    plan = matmul.plan(a, b, BN=256, stages=2)
    assert plan.grid == (cdiv(300, 128), cdiv(260, 256))
    assert plan.loops[0].stages == 2
    assert plan == matmul.plan(a, b, stages=2, BN=256)
    assert plan != matmul.plan(a, b)


# --- WGMMA rules ----------------------------------------------------------------------------


def declare_matmul(
    *, bm: int = 128, bn: int = 128, bk: int = 64, stages: int = 2
) -> sk.Kernel[..., Any]:
    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})  # @declare-matmul
    def k(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = bm,
        BN: sk.Const[int] = bn,
        BK: sk.Const[int] = bk,
        stages: sk.Const[int] = stages,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))

    return k


def declare_matmul_nt(*, bn: int = 128, bk: int = 64) -> sk.Kernel[..., Any]:
    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})  # @declare-matmul-nt
    def k(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "N K"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = bn,
        BK: sk.Const[int] = bk,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))

    return k


def declare_matmul_f32(*, bk: int = 32) -> sk.Kernel[..., Any]:
    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})  # @declare-matmul-f32
    def k(
        a: Float32[Array, "M K"],
        b: Float32[Array, "N K"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
        BK: sk.Const[int] = bk,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))

    return k


DECLARERS = {
    "declare-matmul": declare_matmul,
    "declare-matmul-nt": declare_matmul_nt,
    "declare-matmul-f32": declare_matmul_f32,
}


def proposed(fix: str | None) -> tuple[str, int]:
    """The constant and value a fix proposes, e.g. "set BK=64" or "set BN to at most 256"."""
    found = re.search(r"set (\w+)(?:=| to (?:at most )?)(\d+)", str(fix))
    assert found, fix
    return found.group(1), int(found.group(2))


@pytest.mark.parametrize(
    ("declarer", "consts", "dim"),
    [
        pytest.param("declare-matmul", {"bm": 32}, "M", id="BM32"),  # WGMMA's M is 64
        pytest.param("declare-matmul", {"bm": 96}, "M", id="BM96"),
        pytest.param("declare-matmul", {"bn": 264}, "N", id="BN264"),  # WGMMA's N is at most 256
        pytest.param("declare-matmul", {"bn": 72}, "N", id="BN72"),  # b (K, N): 16-element swizzle
        pytest.param("declare-matmul", {"bk": 24}, "K", id="BK24"),  # 16-element (32-byte) swizzle
        pytest.param("declare-matmul", {"bk": 40}, "K", id="BK40"),
        pytest.param("declare-matmul-nt", {"bn": 100}, "N", id="nt-BN100"),  # b (N, K): 8
        pytest.param("declare-matmul-f32", {"bk": 12}, "K", id="f32-BK12"),  # 8-element swizzle
    ],
)
def test_wgmma_rules_are_checked_at_import(declarer: str, consts: dict[str, int], dim: str) -> None:
    declare = DECLARERS[declarer]
    with pytest.raises(sk.HardwareRuleError) as info:
        declare(**consts)
    err = info.value
    assert err.phase is sk.Phase.DECLARATION
    assert_at(err, declarer)
    assert err.kernel == "k"
    assert err.dim == dim
    assert err.bindings == {}
    const, value = proposed(err.fix)
    assert const == f"B{dim}"
    # The proposed value declares cleanly.
    kernel = declare(**{**consts, const.lower(): value})
    assert isinstance(kernel, sk.Kernel)


@pytest.mark.parametrize(
    "overrides",
    [{"BK": 24}, {"BM": 32}, {"BN": 72}, {"BN": 512}, {"BK": 40}],
    ids=["BK24", "BM32", "BN72", "BN512", "BK40"],
)
def test_wgmma_rules_are_checked_for_overrides(overrides: dict[str, Any]) -> None:
    # K=128 takes two stages, so that even BN=256 fits in shared memory.
    args = specs("matmul", (1024, 128, 1024))
    with pytest.raises(sk.HardwareRuleError) as info:
        matmul.plan(*args, **overrides)  # @override-plan
    err = info.value
    assert err.phase is sk.Phase.CALL
    assert_at(err, "override-plan")
    assert err.kernel == "matmul"
    assert err.bindings == {"M": 1024, "K": 128, "N": 1024}
    const, value = proposed(err.fix)
    assert const in overrides
    assert matmul.plan(*args, **{**overrides, const: value}).loops
    # A call and a rebinding are checked the same way.
    with pytest.raises(sk.HardwareRuleError):
        matmul(jnp.zeros((64, 128), BF16), jnp.zeros((128, 64), BF16), **overrides)
    with pytest.raises(sk.HardwareRuleError):
        matmul.bind(**overrides)


def test_float32_operands_need_b_as_n_k() -> None:
    with pytest.raises(sk.DotLayoutError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})  # @f32-k-n
        def k(
            a: Float32[Array, "M K"],
            b: Float32[Array, "K N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
            BK: sk.Const[int] = 32,
        ) -> Float32[Array, "M N"]:
            return sk.loop(
                "K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32)
            )

    err = info.value
    assert_at(err, "f32-k-n")
    assert err.operand == "b"
    assert "b.T" in str(err.fix)
    assert "'N K'" in str(err.fix)


# --- shared memory -----------------------------------------------------------------------------


def declare_wide_matmul(stages: int) -> sk.Kernel[..., Any]:
    """A (128, 256) float32 accumulator block and 48 KiB of bf16 operands per stage."""

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})  # @wide-matmul
    def k(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 256,
        BK: sk.Const[int] = 64,
        stages: sk.Const[int] = stages,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))

    return k


def proposed_stages(fix: str | None) -> int:
    found = re.search(r"stages=(\d+)", str(fix))
    assert found, fix
    return int(found.group(1))


def test_stages_over_shared_memory_propose_a_count_that_fits() -> None:
    with pytest.raises(sk.SharedMemoryError) as info:
        declare_wide_matmul(5)
    err = info.value
    assert_at(err, "wide-matmul")
    assert "232,448" in str(err.expected)
    assert "5 stage(s)" in str(err.actual)
    fitting = proposed_stages(err.fix)
    assert 1 <= fitting < 5
    kernel = declare_wide_matmul(fitting)
    plan = kernel.plan(*specs("matmul", (256, 1024, 512)))
    assert plan.loops[0].stages == fitting
    assert plan.smem_bytes <= SMEM_BYTES
    # It is the largest count that fits.
    with pytest.raises(sk.SharedMemoryError):
        declare_wide_matmul(fitting + 1)


def test_stages_over_shared_memory_when_rebound_or_overridden() -> None:
    kernel = declare_wide_matmul(1)
    with pytest.raises(sk.SharedMemoryError) as info:
        kernel.bind(stages=5)
    fitting = proposed_stages(info.value.fix)
    long_k = specs("matmul", (256, 1024, 512))
    assert kernel.bind(stages=fitting).plan(*long_k).loops[0].stages == fitting
    with pytest.raises(sk.SharedMemoryError) as info:
        kernel.plan(*long_k, stages=5)
    assert proposed_stages(info.value.fix) == fitting


def test_declaration_errors_bind_no_dims() -> None:
    """No dim is bound when the decorator runs: the sizes it probes with are not the user's."""
    with pytest.raises(sk.SharedMemoryError) as info:
        declare_wide_matmul(5)
    assert info.value.bindings == {}
    assert "bindings" not in str(info.value)
    with pytest.raises(sk.SharedMemoryError) as info:
        declare_wide_matmul(1).bind(stages=5)
    assert info.value.bindings == {}


# --- misuse of loops in the body ---------------------------------------------------------------


def check_misuse(exc: sk.StaticKernelError, tag: str) -> None:
    """What every import-time error of a loop body carries."""
    assert isinstance(exc, sk.DeclarationError)
    assert_at(exc, tag)
    assert exc.kernel == "k"
    assert exc.fix, str(exc)
    assert exc.fix in str(exc)


def test_jnp_dot_of_the_matmul_operands() -> None:
    """The natural slip: multiplying loaded blocks of `a` (M, K) and `b` (K, N) with jnp.dot."""
    with pytest.raises(sk.UnsupportedOpError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def k(
            a: BFloat16[Array, "M K"],
            b: BFloat16[Array, "K N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 128,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "M N"]:
            def step(acc):
                product = jnp.dot(sk.load(a), sk.load(b))  # @jnp-dot-operands
                return acc + product.astype(jnp.float32)

            return sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32))

    check_misuse(info.value, "jnp-dot-operands")
    assert "jnp.dot" in info.value.what
    assert "sk.dot(a, b)" in str(info.value.fix)


def test_jnp_dot_in_a_step() -> None:
    with pytest.raises(sk.UnsupportedOpError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
        ) -> Float32[Array, "M N"]:
            def block():
                v = sk.load(x)
                return jnp.dot(v, v)  # @jnp-dot

            return sk.map_blocks("N", block)

    check_misuse(info.value, "jnp-dot")
    assert "dot_general" in info.value.what
    assert "sk.dot" in str(info.value.fix)


def test_matmul_operator_in_a_step() -> None:
    with pytest.raises(sk.UnsupportedOpError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
        ) -> Float32[Array, "M N"]:
            def block():
                v = sk.load(x)
                return v @ v + v  # @matmul-operator

            return sk.map_blocks("N", block)

    check_misuse(info.value, "matmul-operator")
    assert "dot_general" in info.value.what
    assert "sk.dot" in str(info.value.fix)


def test_load_of_a_looped_operand_outside_a_loop() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, "M N"]:
            v = sk.load(x)  # @load-outside
            return sk.map_blocks("N", lambda: v)

    check_misuse(info.value, "load-outside")
    assert info.value.operand == "x"
    assert info.value.dim == "N"


def test_dot_outside_a_loop() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def k(
            a: BFloat16[Array, "M K"],
            b: BFloat16[Array, "K N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 128,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "M N"]:
            return sk.dot(a, b)  # @dot-outside

    check_misuse(info.value, "dot-outside")
    assert "sk.loop" in str(info.value.fix)


@pytest.mark.parametrize("bn", [64, 128])
def test_dot_of_a_scaled_load_of_its_operand(bn: int) -> None:
    """`a` ("M K") is a block of the rows and the loop dim: in the loop's step it is the
    step's block, loaded into registers and computed with, then multiplied (before, it was
    refused: only sk.dot could read it, as it is)."""

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def doubled_a(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = bn,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        def step(acc):
            return acc + sk.dot(sk.load(a) * 2, b)

        return sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32))

    a = jax.random.normal(jax.random.key(0), (100, 200), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(1), (200, 130), jnp.bfloat16)
    want = 2 * a.astype(jnp.float32) @ b.astype(jnp.float32)
    np.testing.assert_allclose(doubled_a(a, b), want, rtol=1e-5, atol=1e-3)


def test_dot_of_a_loaded_b() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def k(
            a: BFloat16[Array, "M K"],
            b: BFloat16[Array, "K N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "M N"]:
            def step(acc):
                return acc + sk.dot(a, sk.load(b).astype(jnp.float32) * 2)  # @dot-loaded-b

            return sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32))

    # A b computed in the step is multiplied in 16 bits (tests/compiler/mosaic_gpu/lower/test_computed_b.py).
    check_misuse(info.value, "dot-loaded-b")
    assert "a float32 value" in info.value.what
    assert info.value.actual == "a float32[64, 64] value"  # not the tracer's class
    assert "astype(jnp.bfloat16)" in str(info.value.fix)


def test_dot_of_a_product_over_the_tiled_columns() -> None:
    """A product along the tiled N, contracted again: with BN == BK its columns were taken for
    K's by their length, and the refusal named K; it is N that is split across the grid."""
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def k(
            a: BFloat16[Array, "M K"],
            b: BFloat16[Array, "K N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "M N"]:
            def step(acc):
                p = sk.dot(a, b).astype(jnp.bfloat16)
                return acc + sk.dot(p, b)  # @dot-of-dot

            return sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32))

    check_misuse(info.value, "dot-of-dot")
    assert info.value.dim == "N"
    assert "split across the grid" in info.value.what


def _scaled_scores_max_reference(q: jax.Array, k: jax.Array) -> jax.Array:
    scores = jnp.dot(q * 2, k.T, preferred_element_type=jnp.float32)
    return jnp.max(scores, axis=1)


@pytest.mark.parametrize(("d", "bn"), [(64, 64), (128, 128), (64, 128)], ids=str)
def test_dot_of_a_value_over_a_whole_dim_as_long_as_the_loop_block(d: int, bn: int) -> None:
    """`sk.dot(sk.load(q) * 2, k)` contracts the whole D. When D has the length of the loop's
    block (64, the default), the value's columns were taken for the loop dim's, and a kernel
    the docs allow was refused."""

    @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, reference=_scaled_scores_max_reference)
    def scaled_scores_max(
        q: BFloat16[Array, "M D"],
        k: BFloat16[Array, "N D"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = bn,
    ) -> Float32[Array, " M"]:
        scaled = sk.load(q) * 2

        def step(running: jax.Array) -> jax.Array:
            return jnp.maximum(running, sk.max(sk.dot(scaled, k), axis=1))

        return sk.loop("N", step, init=jnp.full((BM,), -jnp.inf, jnp.float32))

    rng = np.random.default_rng(d + bn)
    q = jnp.asarray(normal(rng, 100, d), jnp.bfloat16)
    k = jnp.asarray(normal(rng, 200, d), jnp.bfloat16)
    # bf16 products are exact in float32: only the order of the D additions may differ.
    assert_matches(scaled_scores_max(q, k), _scaled_scores_max_reference(q, k), 1e-5, 1e-3)
    structs = (jax.ShapeDtypeStruct(q.shape, BF16), jax.ShapeDtypeStruct(k.shape, BF16))
    lowered = scaled_scores_max.with_backend("mosaic_gpu").lower(*structs)
    assert "mosaic_gpu" in lowered.as_text()


# A product that is not simply added to a zero-started carry is a value of the step: scaled,
# replacing the carry, or added to a carry that starts elsewhere. Each is its own WGMMA.


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def scaled_products(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "K N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:
    # From ones, each step adds twice its product, so the result is 1 + 2 a @ b.
    return sk.loop("K", lambda acc: acc + 2.0 * sk.dot(a, b), init=jnp.ones((BM, BN), jnp.float32))


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def last_product(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "K N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:
    # Each step replaces the carry: the product of the last block of K alone.
    return sk.loop("K", lambda acc: sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))


def test_products_that_are_values_of_the_step() -> None:
    rng = np.random.default_rng(7)
    m, k, n = 70, 150, 72  # ragged on every dim; the last block of K has 22 columns
    a = jnp.asarray(normal(rng, m, k), jnp.bfloat16)
    b = jnp.asarray(normal(rng, k, n), jnp.bfloat16)
    full = jnp.dot(a, b, preferred_element_type=jnp.float32)
    assert_matches(scaled_products(a, b), 1.0 + 2.0 * full, 2e-2, 2e-2 * math.sqrt(k))
    tail = jnp.dot(a[:, 128:], b[128:], preferred_element_type=jnp.float32)
    assert_matches(last_product(a, b), tail, 2e-2, 2e-2 * math.sqrt(k))
    plan = scaled_products.plan(a, b)
    assert plan.loops[0].dots == () and plan.loops[0].products == (("a", "b", False),)
    assert "sk.dot(a, b) a step" in str(plan)


def test_step_returns_a_carry_of_another_shape() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, " M"]:
            init = jnp.zeros((BM,), jnp.float32)
            return sk.loop("N", lambda acc: sk.load(x), init=init)  # @carry-shape

    check_misuse(info.value, "carry-shape")
    assert info.value.expected == "(float32[64])"
    assert info.value.actual == "(float32[64, 128])"


def test_step_returns_a_carry_of_another_dtype() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, " M"]:
            def step(acc):
                return (acc + sk.sum(sk.load(x), axis=1)).astype(jnp.bfloat16)

            return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32))  # @carry-dtype

    check_misuse(info.value, "carry-dtype")
    assert ".astype" in str(info.value.fix)


def test_loop_names_an_undeclared_dim() -> None:
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"Q": "BN"})  # @loop-undeclared
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, "M N"]:
            return sk.map_blocks("N", lambda: sk.load(x))

    check_misuse(info.value, "loop-undeclared")
    assert info.value.dim == "Q"


def test_body_walks_a_dim_not_in_loop() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, "M N"]:
            return sk.map_blocks("M", lambda: sk.load(x))  # @walks-m

    check_misuse(info.value, "walks-m")
    assert info.value.dim == "M"


def test_dim_both_tiled_and_looped() -> None:
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"N": "BN"})  # @tiled-and-looped
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, "M N"]:
            return sk.map_blocks("N", lambda: sk.load(x))

    check_misuse(info.value, "tiled-and-looped")
    assert info.value.dim == "N"


def test_nested_loops() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN", "K": "BK"})
        def k(
            x: Float32[Array, "M N"],
            y: Float32[Array, "M K"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 128,
            BK: sk.Const[int] = 128,
        ) -> Float32[Array, " M"]:
            def outer(acc):
                inner = sk.loop("K", lambda c: c + sk.sum(sk.load(y), axis=1), init=acc)  # @nested
                return inner + sk.sum(sk.load(x), axis=1)

            return sk.loop("N", outer, init=jnp.zeros((BM,), jnp.float32))

    check_misuse(info.value, "nested")


def test_result_with_the_loop_dim_not_from_map_blocks() -> None:
    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})  # @not-from-map
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, "M N"]:
            init = jnp.zeros((BM,), jnp.float32)
            total = sk.loop("N", lambda acc: acc + sk.sum(sk.load(x), axis=1), init=init)
            return jnp.broadcast_to(total[:, None], (BM, sk.dim("N")))

    check_misuse(info.value, "not-from-map")
    assert info.value.operand == "result"
    assert info.value.dim == "N"
    assert "sk.map_blocks" in str(info.value.fix)


def test_computing_with_the_value_of_map_blocks() -> None:
    with pytest.raises(sk.UnsupportedOpError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, "M N"]:
            y = sk.map_blocks("N", lambda: sk.load(x))
            return y * 2.0  # @uses-map-value

    check_misuse(info.value, "uses-map-value")
    assert "inside the function given to sk.map_blocks" in str(info.value.fix)


def test_empty_carry() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, "M N"]:
            sk.loop("N", lambda carry: carry, init=())  # @empty-carry
            return sk.map_blocks("N", lambda: sk.load(x))

    check_misuse(info.value, "empty-carry")
    assert "sk.map_blocks" in str(info.value.fix)


def test_loop_outside_a_kernel_body() -> None:
    with pytest.raises(sk.BodyError) as info:
        sk.loop("K", lambda acc: acc, init=jnp.zeros((64,), jnp.float32))  # @loop-outside
    assert info.value.fix
    assert_at(info.value, "loop-outside")
    with pytest.raises(sk.BodyError, match="outside a kernel body") as info:
        sk.dim("M")  # @dim-outside
    assert_at(info.value, "dim-outside")


# --- operands of sk.dot read in the step -------------------------------------------------------


def test_loading_a_dot_operand_in_the_step() -> None:
    """`a` (M, K) reaches the tensor cores straight from shared memory, and in the step it is
    also the step's block of the rows and K: its row sums are taken in registers beside the
    product (before, the load was refused)."""

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def product_and_row_sums(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        def step(carry):
            acc, row_sums = carry
            row_sums = row_sums + sk.sum(sk.load(a).astype(jnp.float32), axis=1)
            return acc + sk.dot(a, b), row_sums

        init = (jnp.zeros((BM, BN), jnp.float32), jnp.zeros((BM,), jnp.float32))
        acc, row_sums = sk.loop("K", step, init=init)
        return acc + row_sums[:, None]

    a = jax.random.normal(jax.random.key(2), (70, 130), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(3), (130, 72), jnp.bfloat16)
    wide = a.astype(jnp.float32)
    want = wide @ b.astype(jnp.float32) + wide.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(product_and_row_sums(a, b), want, rtol=1e-5, atol=1e-3)


def test_a_loop_with_sixteen_carries_generates_valid_code() -> None:
    # Sixteen carries make the line that unpacks the pipeline's result too long for one line.
    @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, backend="interpret")
    def weighted_sums(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
    ) -> Float[Array, " M"]:
        def step(carry):
            v = sk.load(x)
            return tuple(c + sk.sum(v * float(k + 1), axis=1) for k, c in enumerate(carry))

        sums = sk.loop("N", step, init=tuple(jnp.zeros((BM,), jnp.float32) for _ in range(16)))
        total = sums[0]
        for s in sums[1:]:
            total = total + s
        return total

    x = jnp.asarray(np.random.default_rng(0).standard_normal((70, 130)), jnp.float32)
    got = np.asarray(weighted_sums(x))
    np.testing.assert_allclose(got, np.asarray(x).sum(axis=1) * 136, rtol=1e-5, atol=1e-3)


# --- a loop over the row dim --------------------------------------------------------------------


def _column_max_reference(x: jax.Array) -> jax.Array:
    return jnp.max(x.astype(jnp.float32), axis=0)


@sk.kernel(tile={"N": "BN"}, loop={"M": "BM"}, reference=_column_max_reference)
def column_max_streamed(
    x: Float[Array, "M N"],
    *,
    BN: sk.Const[int] = 128,
    BM: sk.Const[int] = 64,
    stages: sk.Const[int] = 3,
) -> Float32[Array, " N"]:
    """Each CTA takes a block of columns and walks every row of it, block by block."""

    def step(running: jax.Array) -> jax.Array:
        v = sk.load(x, fill=-jnp.inf).astype(jnp.float32)  # rows past M read -inf
        return jnp.maximum(running, sk.max(v, axis=0))

    return sk.loop("M", step, init=jnp.full((BN,), -jnp.inf, jnp.float32))


def _weighted_column_sums_reference(x: jax.Array, r: jax.Array) -> jax.Array:
    return jnp.sum(x.astype(jnp.float32) * r[:, None], axis=0)


@sk.kernel(tile={"N": "BN"}, loop={"M": "BM"}, reference=_weighted_column_sums_reference)
def weighted_column_sums(
    x: Float[Array, "M N"],
    r: Float32[Array, " M"],
    *,
    BN: sk.Const[int] = 128,
    BM: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Float32[Array, " N"]:
    """A norm's dweight, rows streamed: a per-row operand walks the loop with its rows."""

    def step(acc: jax.Array) -> jax.Array:
        v = sk.load(x).astype(jnp.float32) * sk.load(r)[:, None]
        return acc + sk.sum(v, axis=0)

    return sk.loop("M", step, init=jnp.zeros((BN,), jnp.float32))


ROW_LOOP_SHAPES = [(300, 260), (64, 128), (1, 7), (131, 1000), (1000, 4096)]


@pytest.mark.parametrize("shape", ROW_LOOP_SHAPES, ids=str)
def test_a_loop_over_the_rows(shape: tuple[int, int]) -> None:
    x = -jnp.abs(jax.random.normal(jax.random.key(shape[0]), shape, jnp.float32))  # all < 0
    np.testing.assert_array_equal(column_max_streamed(x), _column_max_reference(x))
    r = jax.random.uniform(jax.random.key(1), (shape[0],), jnp.float32)
    np.testing.assert_allclose(
        weighted_column_sums(x, r), _weighted_column_sums_reference(x, r), rtol=1e-4, atol=1e-4
    )


def test_a_loop_over_the_rows_plans_and_lowers() -> None:
    x = jax.ShapeDtypeStruct((16384, 4096), BF16)
    r = jax.ShapeDtypeStruct((16384,), F32)
    plan = weighted_column_sums.plan(x, r, BN=128)  # left at its default, BN narrows to 32
    (loop,) = plan.loops
    assert loop.axis == "M" and loop.steps == 16384 // 64 and loop.operands == ("x", "r")
    assert plan.grid == (4096 // 128,)
    lowered = weighted_column_sums.with_backend("mosaic_gpu").lower(x, r, BN=128)
    assert "mosaic_gpu" in lowered.as_text()


@sk.kernel(tile={"N": "BN"}, loop={"M": "BM"})
def column_sum_max_and_count(
    x: Float32[Array, "M N"], *, BN: sk.Const[int] = 64, BM: sk.Const[int] = 64
) -> tuple[Float32[Array, " N"], Float32[Array, " N"], Float32[Array, " N"]]:
    """Three column carries as long as the rows of a step, one only ever added a constant."""

    def step(carry: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, ...]:
        total, biggest, steps = carry
        v = sk.load(x, fill=-jnp.inf)
        kept = jnp.where(v == -jnp.inf, 0.0, v)
        return total + sk.sum(kept, axis=0), jnp.maximum(biggest, sk.max(v, axis=0)), steps + 1

    zeros = jnp.zeros((BN,), jnp.float32)
    return sk.loop("M", step, init=(zeros, jnp.full((BN,), -jnp.inf, jnp.float32), zeros))


@pytest.mark.parametrize("shape", [(1000, 300), (64, 64), (130, 70)], ids=str)
def test_a_loop_over_the_rows_with_square_blocks(shape: tuple[int, int]) -> None:
    """BN == BM (64, the default of both): a carry of BN elements is as long as a step's rows
    as its columns. Before, it was read as a per-row vector, and the kernel was refused ("the
    body combines a per-row and a per-column vector") or raised an AssertionError."""
    square = weighted_column_sums.bind(BN=64)
    x = jax.random.normal(jax.random.key(shape[1]), shape, jnp.float32)
    r = jax.random.uniform(jax.random.key(1), (shape[0],), jnp.float32)
    np.testing.assert_allclose(
        square(x, r), _weighted_column_sums_reference(x, r), rtol=1e-4, atol=1e-4
    )
    total, biggest, steps = column_sum_max_and_count(x)
    np.testing.assert_allclose(total, jnp.sum(x, axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(biggest, jnp.max(x, axis=0))
    np.testing.assert_array_equal(steps, jnp.full((shape[1],), -(-shape[0] // 64), jnp.float32))
    structs = (jax.ShapeDtypeStruct(shape, F32), jax.ShapeDtypeStruct((shape[0],), F32))
    assert "mosaic_gpu" in square.with_backend("mosaic_gpu").lower(*structs).as_text()
    lowered = column_sum_max_and_count.with_backend("mosaic_gpu").lower(structs[0])
    assert "mosaic_gpu" in lowered.as_text()


def test_the_row_dim_neither_tiled_nor_looped() -> None:
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"N": "BN"}, loop={"K": "BK"})
        def k(
            a: Float[Array, "M K"],
            b: Float[Array, "K N"],
            *,
            BN: sk.Const[int] = 128,
            BK: sk.Const[int] = 64,
        ) -> Float[Array, "M N"]:
            return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((64, BN)))

    assert info.value.dim == "M"
    assert 'loop={"M": "BM"}' in str(info.value.fix)


# --- a loop that stops early ----------------------------------------------------------------


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def prefix_row_sum(
    x: Float32[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
    upto: sk.Const[int] = 100,
) -> Float32[Array, " M"]:
    def step(total):
        v = sk.load(x)
        # The loop walks the blocks up to `upto`; inside the last one, positions past it count 0.
        kept = jnp.where(sk.position("N")[None, :] < upto, v, 0.0)
        return total + sk.sum(kept, axis=1)

    return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32), stop=upto)


@pytest.mark.parametrize("upto", [1, 100, 128, 1000])
def test_loop_with_a_stop(upto: int) -> None:
    rng = np.random.default_rng(upto)
    x = jnp.asarray(normal(rng, 70, 300))
    out = prefix_row_sum(x, upto=upto)
    assert_matches(out, jnp.sum(x[:, :upto], axis=1), 1e-5, 1e-4)
    plan = prefix_row_sum.plan(x, upto=upto)
    assert plan.loops[0].stops_early
    assert "at most 5 step(s)" in str(plan)
    assert "_steps = lax.max(" in prefix_row_sum.emit(x, upto=upto)


def test_loop_stop_that_is_not_an_integer() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
        ) -> Float32[Array, " M"]:
            def step(total):
                return total + sk.sum(sk.load(x), axis=1)

            return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32), stop=2.5)  # @float-stop

    assert_at(info.value, "float-stop")
    assert "not an integer scalar" in info.value.what
