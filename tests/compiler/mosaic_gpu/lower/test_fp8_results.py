"""fp8 results: a body casts float32 (or bfloat16) to float8_e4m3fn or float8_e5m2 and returns
it, stored directly, in every register form (block, strided, rows), with a cast that saturates
at the format's largest finite magnitude as Hopper's `cvt.rn.satfinite` does.

The oracle is `jnp.clip(v.astype(float32), -max, max).astype(fp8)`. Where the float32 values
are computed in the same order (an elementwise body) the bytes must be equal; where a
reduction's order may differ (a norm), the fp8 values may be one step apart."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float, Float8e4m3fn, Float8e5m2, Float32

import statickernel as sk
from markers import line_finder
from norm_quant import norm_quant, norm_quant_reference

line_of = line_finder(__file__)

E4M3 = jnp.dtype(jnp.float8_e4m3fn)
E5M2 = jnp.dtype(jnp.float8_e5m2)
FP8 = [pytest.param(E4M3, id="e4m3fn"), pytest.param(E5M2, id="e5m2")]


def saturated(v: Any, dtype: Any) -> jax.Array:
    """The documented cast: clipped to the largest finite magnitude, then rounded."""
    bound = float(jnp.finfo(dtype).max)
    return jnp.clip(jnp.asarray(v, jnp.float32), -bound, bound).astype(dtype)


def steps(q: Any) -> np.ndarray:
    """fp8 values as ordered integers: adjacent fp8 values are one apart, +0 and -0 both 0."""
    raw = np.asarray(q).view(np.uint8).astype(np.int32)
    magnitude = raw & 0x7F
    return np.where(raw & 0x80, -magnitude, magnitude)


def assert_within_one_step(got: Any, want: Any) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = np.asarray(got.astype(jnp.float32)), np.asarray(want.astype(jnp.float32))
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    finite = ~np.isnan(w)
    assert np.abs(steps(got) - steps(want))[finite].max(initial=0) <= 1


def assert_same_bytes(got: Any, want: Any) -> None:
    """Equal bytes, and NaN where the oracle has NaN (whose payload e5m2 does not fix)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(np.asarray(want.astype(jnp.float32)))
    np.testing.assert_array_equal(np.isnan(np.asarray(got.astype(jnp.float32))), nan)
    g, w = np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8)
    np.testing.assert_array_equal(g[~nan], w[~nan])


def elementwise(dtype: Any) -> sk.Kernel[..., Any]:
    """x * 4 cast to fp8, tiled on both dims: an elementwise body, the strided form."""
    result = (Float8e4m3fn if dtype == E4M3 else Float8e5m2)[Array, "M N"]

    @sk.kernel(tile={"M": "BM", "N": "BN"}, name=f"scaled_{dtype.name}")
    def scaled(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
    ) -> result:  # pyright: ignore[reportInvalidTypeForm]
        return (sk.load(x).astype(jnp.float32) * 4).astype(dtype)

    return scaled


def row_scaled(dtype: Any) -> sk.Kernel[..., Any]:
    """Each row over its largest magnitude, times 1.5 so that some values saturate: the block
    form for narrow rows, the row form for wide ones."""
    result = (Float8e4m3fn if dtype == E4M3 else Float8e5m2)[Array, "M N"]
    bound = float(jnp.finfo(dtype).max)

    @sk.kernel(tile={"M": "BM"}, name=f"row_scaled_{dtype.name}")
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> tuple[result, Float32[Array, " M"]]:  # pyright: ignore[reportInvalidTypeForm]
        v = sk.load(x).astype(jnp.float32)
        scale = jnp.maximum(jnp.max(jnp.abs(v), axis=1) / bound, 1e-12)
        return (v * 1.5 / scale[:, None]).astype(dtype), scale

    return k


def row_scaled_oracle(x: jax.Array, dtype: Any) -> tuple[jax.Array, jax.Array]:
    v = x.astype(jnp.float32)
    scale = jnp.maximum(jnp.max(jnp.abs(v), axis=1) / float(jnp.finfo(dtype).max), 1e-12)
    return saturated(v * 1.5 / scale[:, None], dtype), scale


def special_values(shape: tuple[int, int], dtype: Any) -> jax.Array:
    """Normal values spread past the fp8 range, with infinities, a NaN, values just past the
    largest finite (465 rounds past 448 in e4m3fn) and tiny ones (subnormals) in row 0."""
    rng = np.random.default_rng(list(shape))
    x = rng.standard_normal(shape, dtype=np.float32) * 4000
    first = [np.inf, -np.inf, np.nan, 465 / 4, -465 / 4, 1e5, 1e-3, -2e-5]
    x[0, : min(len(first), shape[1])] = first[: shape[1]]
    return jnp.asarray(x, dtype)


def test_an_fp8_result_annotation_allows_that_format_alone() -> None:
    assert elementwise(E4M3).spec.results[0].dtypes == ("float8_e4m3fn",)
    assert elementwise(E5M2).spec.results[0].dtypes == ("float8_e5m2",)
    assert norm_quant.spec.results[0].dtypes == ("float8_e4m3fn",)


# --- saturation, bit for bit ---------------------------------------------------------------


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("shape", [(129, 48), (1, 16), (100, 40)], ids=str)
@pytest.mark.parametrize("source", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_elementwise_cast_saturates(fp8: Any, shape: tuple[int, int], source: Any) -> None:
    """Out-of-range values and infinities become the largest finite value, NaN stays NaN;
    the strided form stores the bytes the oracle gives (100 x 40 B rows are host-padded)."""
    kernel = elementwise(fp8)
    x = special_values(shape, source)
    assert kernel.plan(x).form is sk.Form.STRIDED
    got = kernel(x)
    want = saturated(x.astype(jnp.float32) * 4, fp8)
    assert_same_bytes(got, want)
    values = np.asarray(got.astype(jnp.float32))
    bound = float(jnp.finfo(fp8).max)
    assert np.nanmax(np.abs(values)) == bound
    assert not np.isinf(values).any()


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize(
    ("shape", "form"),
    [((129, 48), sk.Form.BLOCK), ((1, 16), sk.Form.BLOCK), ((1000, 4096), sk.Form.ROWS)],
    ids=["129x48", "1x16", "1000x4096"],
)
def test_row_scaled_saturates_in_block_and_row_forms(
    fp8: Any, shape: tuple[int, int], form: sk.Form
) -> None:
    kernel = row_scaled(fp8)
    x = special_values(shape, jnp.bfloat16)
    x = x.at[0].set(jnp.where(jnp.isfinite(x[0]), x[0], 1.0))  # a finite scale for row 0
    assert kernel.plan(x).form is form
    q, scale = kernel(x)
    q_want, scale_want = row_scaled_oracle(x, fp8)
    np.testing.assert_allclose(np.asarray(scale), np.asarray(scale_want), rtol=1e-6)
    assert_within_one_step(q, q_want)
    values = np.asarray(q.astype(jnp.float32))
    assert np.abs(values).max() == float(jnp.finfo(fp8).max)  # 1.5 x the range saturates


# --- the gallery's norm_quant --------------------------------------------------------------


def norm_quant_args(m: int, n: int, seed: int = 0) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng([seed, m, n])
    x = rng.standard_normal((m, n), dtype=np.float32) * 3 + 1
    residual = rng.standard_normal((m, n), dtype=np.float32)
    weight = 1 + 0.1 * rng.standard_normal((n,), dtype=np.float32)
    if m > 1:
        x[1] = 0.0  # a row of zeros: the smallest scale, zeros stored
        residual[1] = 0.0
    return tuple(jnp.asarray(a, jnp.bfloat16) for a in (x, residual, weight))


@pytest.mark.parametrize(
    ("shape", "form"),
    [((1000, 4096), sk.Form.ROWS), ((1, 16), sk.Form.BLOCK), ((129, 48), sk.Form.BLOCK)],
    ids=["1000x4096", "1x16", "129x48"],
)
def test_norm_quant_matches_its_reference(shape: tuple[int, int], form: sk.Form) -> None:
    x, residual, weight = norm_quant_args(*shape)
    assert norm_quant.plan(x, residual, weight).form is form
    q, scale = norm_quant(x, residual, weight)
    q_want, scale_want = norm_quant_reference(x, residual, weight)
    assert q.dtype == E4M3 and scale.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(scale), np.asarray(scale_want), rtol=1e-5)
    assert_within_one_step(q, q_want)
    # The largest magnitude of each row is stored as 448 (or one step below it).
    assert np.abs(np.asarray(q.astype(jnp.float32))).max() >= 416
    if shape[0] > 1:
        assert float(scale[1]) == pytest.approx(1e-12) and not np.asarray(q[1]).view(np.uint8).any()


# --- cross-lowering for CUDA ---------------------------------------------------------------


@pytest.mark.parametrize("fp8", FP8)
def test_every_form_cross_lowers(fp8: Any) -> None:
    x16 = jax.ShapeDtypeStruct((1000, 4096), jnp.bfloat16)
    small = jax.ShapeDtypeStruct((129, 48), jnp.bfloat16)
    for kernel, arg, form in [
        (elementwise(fp8), small, sk.Form.STRIDED),
        (row_scaled(fp8), small, sk.Form.BLOCK),
        (row_scaled(fp8), x16, sk.Form.ROWS),
    ]:
        assert kernel.plan(arg).form is form
        kernel.lower(arg)


def test_norm_quant_cross_lowers_at_model_width() -> None:
    x = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((4096,), jnp.bfloat16)
    norm_quant.lower(x, x, w)


def test_the_generated_cast_clips_before_converting() -> None:
    source = norm_quant.emit(*norm_quant_args(129, 48))
    assert (
        "lax.convert_element_type(lax.clamp(-448.0, v" in source
        and "), jnp.float8_e4m3fn)" in source
    )


# --- what stays refused ---------------------------------------------------------------------


def test_arithmetic_on_an_fp8_value_says_to_compute_in_float32() -> None:
    with pytest.raises(sk.UnsupportedOpError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float8e4m3fn[Array, "M N"]:
            q = sk.load(x).astype(jnp.float8_e4m3fn)
            return q * q  # @fp8-mul

    exc = info.value
    assert exc.where is not None and exc.where.endswith(f":{line_of('fp8-mul')}")
    assert "fp8 values only by casting" in exc.what
    assert "float32" in str(exc.fix)


def test_an_fp8_result_returned_uncast_is_a_result_mismatch() -> None:
    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float8e5m2[Array, "M N"]:
            return sk.load(x).astype(jnp.float32)

    assert info.value.expected == "float8_e5m2" and info.value.actual == "float32"


def test_a_per_row_fp8_result_needs_128_rows_a_block() -> None:
    """A 1-D fp8 block is a copy of its own: 128 bytes, so 128 rows."""
    with pytest.raises(sk.BlockAlignmentError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float8e4m3fn[Array, " M"]:
            return jnp.max(sk.load(x).astype(jnp.float32), axis=1).astype(jnp.float8_e4m3fn)

    assert "BM to 128" in str(info.value.fix)


def test_a_per_row_fp8_result_with_128_rows_saturates() -> None:
    @sk.kernel(tile={"M": "BM"})
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 128) -> Float8e4m3fn[Array, " M"]:
        return jnp.max(sk.load(x).astype(jnp.float32), axis=1).astype(jnp.float8_e4m3fn)

    x = special_values((300, 64), jnp.float32)
    x = x.at[0].set(jnp.where(jnp.isnan(x[0]), 0.0, x[0]))
    k.lower(x)
    assert_same_bytes(k(x), saturated(jnp.max(x, axis=1), E4M3))


def test_a_cross_block_fp8_result_saturates_in_the_wrapper() -> None:
    """A per-column sum over blocks of rows: the wrapper adds the blocks' float32 partials
    and casts after, clipping as the kernel's own cast does."""

    @sk.kernel(tile={"M": "BM"})
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float8e4m3fn[Array, " N"]:
        return sk.sum(sk.load(x).astype(jnp.float32), axis=0).astype(jnp.float8_e4m3fn)

    x = jnp.full((200, 64), 3.0, jnp.float32).at[:, 0].set(-3.0).at[:, 1].set(0.5)
    k.lower(x)
    got = k(x)
    assert_same_bytes(got, saturated(jnp.sum(x, axis=0), E4M3))
    # 600 saturates; 100 rounds to 96, the even one of its two neighbours.
    assert float(got[0].astype(jnp.float32)) == -448.0 and float(got[1]) == 96.0


def test_a_matmul_epilogue_stores_fp8() -> None:
    """The warp-specialized matmul's epilogue casts its float32 tile and stores it as fp8."""

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def mm(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 128,
        BK: sk.Const[int] = 64,
    ) -> Float8e5m2[Array, "M N"]:
        acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
        return acc.astype(jnp.float8_e5m2)

    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((130, 200)) * 40, jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((200, 260)) * 40, jnp.bfloat16)
    mm.lower(a, b)
    want = saturated(jnp.dot(a, b, preferred_element_type=jnp.float32), E5M2)
    assert_within_one_step(mm(a, b), want)
