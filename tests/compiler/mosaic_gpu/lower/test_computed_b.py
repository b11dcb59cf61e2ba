"""`sk.dot(a, b)` of a `b` the step computed: a block of the loop dim by the kernel's columns,
loaded from an operand laid out "K N" and dequantized in registers, staged through swizzled
shared memory for WGMMA (`lower.dots`).

Against jnp on whole arrays: the int4 example (`linear_int4`) at ragged M, K (a partial last
group and step) and N, with bfloat16 and float32 scales and a float16 product; an int8
weight with per-column scales; `a` computed in the step too; hypothesis over the shapes and
blocks. The refusals (a float32 b, a b of another shape, a b mixed with per-row values, a
loop block not a multiple of 64, a b outside a loop step), the plan's lines, the
generated module (the staging buffer, the zeroed rows of a ragged K), and the
cross-lowering for Mosaic GPU."""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float16, Float32, Int8

import statickernel as sk
from matmul_int4 import linear_int4, linear_int4_reference, matmul_w4a16, quantize_int4
from tolerances import assert_close, tolerance_for

F32, BF16 = jnp.float32, jnp.bfloat16


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _int4_data(
    m: int, k: int, n: int, seed: int, bk: int = 128, scale_dtype: Any = BF16
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Activations (M, K), an int4 weight (K, N) in -8..7 and its (cdiv(K, bk), N) scales."""
    kx, kw, ks = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, (m, k), BF16)
    w = jax.random.randint(kw, (k, n), -8, 8, jnp.int32).astype(jnp.int4)
    scales = jax.random.uniform(ks, (_cdiv(k, bk), n), F32, 0.01, 0.1).astype(scale_dtype)
    return x, w, scales


def _check_int4(m: int, k: int, n: int, seed: int = 0, **consts: int) -> None:
    bk = consts.get("BK", 128)
    x, w, scales = _int4_data(m, k, n, seed, bk)
    got = linear_int4(x, w, scales, **consts)
    want = linear_int4_reference(x, w, scales, BK=bk)
    assert got.shape == (m, n) and got.dtype == BF16
    assert_close(got, want, tolerance_for(BF16, k, scale=0.8))


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(5, 200, 100), (1, 128, 64), (64, 256, 128), (130, 384, 192), (17, 1000, 70), (3, 7, 9)],
)
def test_linear_int4_matches_jnp(m: int, k: int, n: int) -> None:
    _check_int4(m, k, n)


@pytest.mark.parametrize("consts", [{"BK": 64}, {"BN": 128}, {"BM": 128}, {"BK": 256}])
def test_linear_int4_matches_jnp_at_other_blocks(consts: dict[str, int]) -> None:
    _check_int4(70, 300, 200, seed=3, **consts)


@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.generate])  # no shrinking
@given(
    m=st.integers(1, 140),
    k=st.integers(1, 400),
    n=st.integers(1, 200),
    bn=st.sampled_from([64, 128]),
    seed=st.integers(0, 2**16),
)
def test_linear_int4_matches_jnp_on_drawn_shapes(
    m: int, k: int, n: int, bn: int, seed: int
) -> None:
    _check_int4(m, k, n, seed, BN=bn)


def test_float32_scales_and_the_transposed_kernel_agree() -> None:
    """The same weight through both orientations: (K, N) as b, and (N, K) as a (transposed)."""
    weight = jax.random.normal(jax.random.key(5), (300, 256), F32) * 0.02  # (N, K)
    w, scales = quantize_int4(weight)
    x = jax.random.normal(jax.random.key(6), (33, 256), BF16)
    as_b = linear_int4(x, w.T, scales.astype(F32))
    as_a = matmul_w4a16(w, scales.astype(F32), x).T
    assert_close(as_b, as_a, tolerance_for(BF16, 256, scale=0.05))


@functools.cache
def _int8_columns() -> sk.Kernel:
    """W8A16 with one scale a column, the weight laid out (K, N)."""

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def w8a16_kn(
        x: Float16[Array, "M K"],
        w: Int8[Array, "K N"],
        scale: Float32[Array, " N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        def step(acc: jax.Array) -> jax.Array:
            b = (sk.load(w).astype(F32) * sk.load(scale)[None, :]).astype(jnp.float16)
            return acc + sk.dot(x, b)

        return sk.loop("K", step, init=jnp.zeros((BM, BN), F32))

    return w8a16_kn


@pytest.mark.parametrize(("m", "k", "n"), [(5, 100, 70), (64, 64, 64), (129, 257, 131)])
def test_an_int8_weight_with_column_scales_matches_jnp(m: int, k: int, n: int) -> None:
    kx, kw, ks = jax.random.split(jax.random.key(m + k + n), 3)
    x = jax.random.normal(kx, (m, k), jnp.float16)
    w = jax.random.randint(kw, (k, n), -128, 128, jnp.int32).astype(jnp.int8)
    scale = jax.random.uniform(ks, (n,), F32, 0.001, 0.01)
    got = _int8_columns()(x, w, scale)
    b = (w.astype(F32) * scale[None, :]).astype(jnp.float16).astype(F32)
    want = jnp.dot(x.astype(F32), b, precision=jax.lax.Precision.HIGHEST)
    assert_close(got, want, tolerance_for(F32, k, scale=0.5))


@functools.cache
def _both_computed() -> sk.Kernel:
    """Both operands computed in the step: a scaled, b shifted."""

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def both(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        def step(acc: jax.Array) -> jax.Array:
            scaled = (sk.load(a) * 2).astype(BF16)
            shifted = (sk.load(b).astype(F32) + 1.0).astype(BF16)
            return acc + sk.dot(scaled, shifted)

        return sk.loop("K", step, init=jnp.zeros((BM, BN), F32))

    return both


@pytest.mark.parametrize(("m", "k", "n"), [(5, 100, 70), (128, 128, 64)])
def test_a_and_b_both_computed_in_the_step(m: int, k: int, n: int) -> None:
    ka, kb = jax.random.split(jax.random.key(9))
    a = jax.random.normal(ka, (m, k), BF16)
    b = jax.random.normal(kb, (k, n), BF16)
    got = _both_computed()(a, b)
    shifted = (b.astype(F32) + 1.0).astype(BF16).astype(F32)
    want = jnp.dot((a * 2).astype(F32), shifted, precision=jax.lax.Precision.HIGHEST)
    assert_close(got, want, tolerance_for(F32, k, scale=3.0))


def _declare_b(body: Any, *, bk: int = 64, b_dims: str = "K N") -> sk.Kernel:
    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def k(
        x: BFloat16[Array, "M K"],
        w: BFloat16[Array, b_dims],
        r: Float32[Array, " M"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
        BK: sk.Const[int] = bk,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + body(x, w, r), init=jnp.zeros((BM, BN), F32))

    return k


def test_a_float32_b_is_refused() -> None:
    with pytest.raises(sk.BodyError, match="WGMMA multiplies a computed b only as a 16-bit") as e:
        _declare_b(lambda x, w, r: sk.dot(x, sk.load(w).astype(F32)))
    assert "astype(jnp.bfloat16)" in str(e.value.fix)


def test_a_b_of_another_shape_is_refused() -> None:
    with pytest.raises(sk.BodyError, match="not a block of the step's K") as e:
        _declare_b(lambda x, w, r: sk.dot(x, jnp.ones((64, 32), BF16)))
    assert e.value.expected is not None and "'K N'" in e.value.expected


def test_a_b_mixed_with_a_per_row_vector_is_refused() -> None:
    """A (K, N) block meets per-column vectors: a vector along the rows M is of another dim."""

    def body(x: Any, w: Any, r: Any) -> Any:
        rows = sk.load(r)[:64, None]  # (BM, 1): as long as BK, but along M
        return sk.dot(x, (sk.load(w) * rows).astype(BF16))

    with pytest.raises(sk.UnsupportedOpError, match="block of the loop dim by the columns"):
        _declare_b(body)


def test_a_loop_block_off_the_wgmma_rows_is_refused() -> None:
    with pytest.raises(sk.DotShapeError, match="groups of 64") as e:
        _declare_b(lambda x, w, r: sk.dot(x, (sk.load(w) * 2).astype(BF16)), bk=32)
    assert e.value.fix == "set BK=64"


def test_a_computed_b_outside_a_loop_step_is_refused() -> None:
    with pytest.raises(sk.BodyError, match="in no loop step: a computed b is a block of the step"):

        @sk.kernel(tile={"M": "BM", "N": "BN"})
        def k(
            x: BFloat16[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
        ) -> Float32[Array, "M N"]:
            return sk.dot(x, jnp.ones((64, 64), BF16))


def test_the_plan_says_b_is_staged_and_counts_its_buffer() -> None:
    x, w, scales = _int4_data(5, 200, 100, 0)
    text = str(linear_int4.plan(x, w, scales))
    assert "WGMMA sk.dot(x, b computed in registers, staged in shared memory) a step" in text
    # (BK, BN) bfloat16: 128 x 64 x 2 bytes.
    assert "the body's products' computed operands are staged in 16,384 B of shared memory" in text
    assert "(200, 2, 64) view" in text  # int4 blocks of N copied from column 0 of a view


def test_the_module_stages_b_and_zeroes_its_rows_past_k() -> None:
    x, w, scales = _int4_data(5, 200, 100, 0)
    source = linear_int4.emit(x, w, scales, backend="mosaic_gpu")
    assert "loop_row_ok_vec = loop_row_index + loop0_index * 128 < 200" in source
    assert "jnp.where(loop_row_ok, v6, 0.0)  # past the edge: zeros" in source
    assert "v8_b_smem[...] = v8_b" in source
    assert "plgpu.wgmma(v8_acc, x_smem, v8_b_smem)" in source
    assert "w_gmem.at[:, block_N, :]" in source
    # K a multiple of the block: nothing to zero.
    x, w, scales = _int4_data(5, 256, 128, 0)
    assert "loop_row_ok" not in linear_int4.emit(x, w, scales, backend="mosaic_gpu")


@pytest.mark.parametrize(("m", "k", "n"), [(16, 4096, 4096), (5, 200, 100)])
def test_linear_int4_cross_lowers_for_the_gpu(m: int, k: int, n: int) -> None:
    shapes = (
        jax.ShapeDtypeStruct((m, k), BF16),
        jax.ShapeDtypeStruct((k, n), jnp.int4),
        jax.ShapeDtypeStruct((_cdiv(k, 128), n), BF16),
    )
    assert "mosaic_gpu" in linear_int4.lower(*shapes).as_text()


def test_an_int8_weight_cross_lowers_for_the_gpu() -> None:
    shapes = (
        jax.ShapeDtypeStruct((64, 512), jnp.float16),
        jax.ShapeDtypeStruct((512, 256), jnp.int8),
        jax.ShapeDtypeStruct((256,), F32),
    )
    assert "mosaic_gpu" in _int8_columns().lower(*shapes).as_text()


def test_the_example_declares_float_scales() -> None:
    """`Float` scales take bfloat16 and float32 alike."""
    x, w, scales = _int4_data(9, 130, 64, 1, scale_dtype=F32)
    want = linear_int4_reference(x, w, scales)
    assert_close(linear_int4(x, w, scales), want, tolerance_for(BF16, 130, scale=0.8))


def test_a_staged_b_has_no_races() -> None:
    """The staging buffer is written, fenced, then read by WGMMA, each step, race-free."""
    x, w, scales = _int4_data(70, 300, 100, 4)
    report = sk.testing.detect_races(linear_int4, x, w, scales)
    assert not report.races_found and report.result is not None
