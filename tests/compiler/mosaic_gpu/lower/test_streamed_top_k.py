"""A top-K over rows wider than a block (`examples/top_k.py`): `jax.lax.top_k` of a loop step's
block (the step's own indices), of a block of its own width (the join of two top-K's), and
`jnp.take_along_axis` along the columns (`lower.take_along`); the example's wrapper that
ranks a few long rows in parts.

Against `jax.lax.top_k` on whole rows, bit for bit: ragged vocabularies (a last step shorter
than K, one step shorter than a block), ties, NaN and infinities, bfloat16 logits, K of 8
and 16, hypothesis; `take_along_axis` alone, with out-of-range indices (jnp's NaN and lowest
integer fills, and `mode="clip"`), negative ones, -0.0 and NaN payloads kept bit for bit;
the refusals; cross-lowering for Mosaic GPU."""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jaxtyping import Array, Float, Float32, Int32, Shaped

import statickernel as sk
from top_k import sampler_top_k, top_k

F32, BF16 = jnp.float32, jnp.bfloat16


def _check(logits: jax.Array, k: int, **consts: int) -> None:
    values, ids = top_k(logits, K=k, **consts)
    want_values, want_ids = lax.top_k(logits.astype(F32), k)
    np.testing.assert_array_equal(np.asarray(values), np.asarray(want_values))
    np.testing.assert_array_equal(np.asarray(ids), np.asarray(want_ids))


@pytest.mark.parametrize(
    ("m", "v", "k"),
    [(100, 1030, 8), (70, 100, 8), (5, 600, 16), (64, 256, 8), (1, 4099, 16), (130, 2000, 8)],
)
def test_the_top_k_of_long_rows_matches_lax(m: int, v: int, k: int) -> None:
    """Ragged vocabularies: a last step of 6 columns (1030 % 128), fewer than K; one step
    narrower than a block; a single row; blocks of rows past the edge."""
    _check(jax.random.normal(jax.random.key(m + v), (m, v), F32), k)


def test_ties_go_to_the_first_id() -> None:
    """Few distinct values: every rank is a tie, across steps and within them."""
    x = jax.random.randint(jax.random.key(1), (40, 900), 0, 4).astype(F32)
    _check(x, 16)


def test_nan_and_infinities_rank_as_lax_ranks_them() -> None:
    x = np.array(jax.random.normal(jax.random.key(2), (8, 700), F32))
    x[0, 650] = np.nan
    x[1, 3] = np.inf
    x[2, :] = -np.inf
    x[3, 200:] = np.inf
    _check(jnp.asarray(x), 8)


def test_bfloat16_logits_and_other_blocks() -> None:
    x = jax.random.normal(jax.random.key(3), (20, 1500), BF16)
    _check(x, 8)
    _check(x, 16, BV=64)


@settings(max_examples=6, deadline=None)
@given(
    m=st.integers(1, 70),
    v=st.integers(16, 1500),
    k=st.sampled_from([8, 16]),
    seed=st.integers(0, 2**16),
)
def test_the_top_k_matches_lax_on_any_shape(m: int, v: int, k: int, seed: int) -> None:
    _check(jax.random.normal(jax.random.key(seed), (m, v), F32), k)


@pytest.mark.parametrize(("m", "v", "parts"), [(3, 1000, 7), (16, 4096, 32), (2, 129, 4)])
def test_a_few_rows_ranked_in_parts_match_lax(m: int, v: int, parts: int) -> None:
    """The example's wrapper: pieces of each row ranked by CTAs of their own (the last piece
    padded with -NaN where parts does not divide V), then merged; ties keep the first id."""
    x = jax.random.randint(jax.random.key(v), (m, v), 0, 50).astype(F32)
    values, ids = sampler_top_k(x, K=8, parts=parts)
    want_values, want_ids = lax.top_k(x, 8)
    np.testing.assert_array_equal(np.asarray(values), np.asarray(want_values))
    np.testing.assert_array_equal(np.asarray(ids), np.asarray(want_ids))


def test_the_streamed_top_k_has_no_races() -> None:
    x = jax.random.normal(jax.random.key(4), (70, 600), F32)
    report = sk.testing.detect_races(top_k, x)
    assert not report.races_found and report.result is not None


# --- take_along_axis alone ------------------------------------------------------------------


@functools.cache
def _take(mode: str | None = None) -> sk.Kernel:
    @sk.kernel(tile={"M": "BM"})
    def take(
        x: Shaped[Array, "M N"], i: Int32[Array, "M N"], *, BM: sk.Const[int] = 64
    ) -> Shaped[Array, "M N"]:
        return jnp.take_along_axis(sk.load(x), sk.load(i), axis=1, mode=mode)

    return take


def _indices(m: int, n: int, low: int, high: int, seed: int = 0) -> jax.Array:
    return jax.random.randint(jax.random.key(seed), (m, n), low, high, jnp.int32)


@pytest.mark.parametrize("dtype", [F32, BF16, jnp.float16, jnp.int32, jnp.int8, jnp.uint8])
def test_take_along_axis_matches_jnp_bit_for_bit(dtype: Any) -> None:
    """Indices in the row, negative ones (jnp wraps them) and past it (jnp's fill)."""
    x = (jax.random.normal(jax.random.key(5), (70, 24)) * 50).astype(dtype)
    i = _indices(70, 24, -30, 30)
    got, want = _take()(x, i), jnp.take_along_axis(x, i, axis=1)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8))


def test_take_along_axis_keeps_negative_zero_and_nan_payloads() -> None:
    x = np.array(jax.random.normal(jax.random.key(6), (8, 16), F32))
    x[:, 0] = -0.0
    x[:, 1] = np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0]
    i = np.tile(np.array([0, 1] * 8, np.int32), (8, 1))
    got = _take()(jnp.asarray(x), jnp.asarray(i))
    want = np.take_along_axis(x, i, axis=1)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))


def test_take_along_axis_clips_with_mode_clip() -> None:
    x = jax.random.normal(jax.random.key(7), (33, 16), F32)
    i = _indices(33, 16, -40, 40, seed=1)
    got = _take("clip")(x, i)
    np.testing.assert_array_equal(got, jnp.take_along_axis(x, i, axis=1, mode="clip"))


def test_a_gather_other_than_take_along_the_columns_is_refused() -> None:
    with pytest.raises(sk.UnsupportedOpError, match=r"other than jnp\.take_along_axis") as info:

        @sk.kernel(tile={"M": "BM"})
        def rows(
            x: Float[Array, "M N"], i: Int32[Array, " M"], *, BM: sk.Const[int] = 64
        ) -> Float32[Array, "M N"]:
            return sk.load(x)[sk.load(i) % 4]

    assert "index the operand outside the kernel" in str(info.value.fix)


def test_take_along_a_wide_row_is_refused() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="at most 64") as info:
        _take()(jnp.ones((8, 100), F32), jnp.zeros((8, 100), jnp.int32))
    assert "narrow block" in str(info.value.fix)


def test_a_join_of_top_ks_off_the_register_tiles_is_refused() -> None:
    """K = 4 joins two blocks of 4 columns: off the layout's tiles of 8."""
    with pytest.raises(sk.SliceError, match="off the register layout's tiles of 8"):
        top_k(jnp.ones((8, 300), F32), K=4)


@pytest.mark.parametrize(("shape", "k"), [((64, 128256), 8), ((4096, 32000), 16), ((7, 1000), 8)])
def test_the_streamed_top_k_cross_lowers_for_the_gpu(shape: tuple[int, int], k: int) -> None:
    assert "mosaic_gpu" in top_k.lower(jax.ShapeDtypeStruct(shape, BF16), K=k).as_text()
