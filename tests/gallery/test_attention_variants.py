"""Attention's variants (examples/attention_variants.py) in the interpreter: grouped-query
attention, packed sequences and decoding, each against `jax.nn.dot_product_attention` (which
groups query heads and takes a mask itself) or, where it has no form of its own, a jnp
reference; gradients against `jax.grad` of the same.

Covered: GQA group sizes 1 (MHA), 3 and 4 and MQA; causal and windowed; packed segments of
several lengths, one segment, a query whose segment has no keys; decoding of 1 to 16 new
tokens against caches of ragged lengths (0, 1, a part's edge, the whole cache), split in 1 to
8 parts, a part past every length, MHA and GQA; the wrappers' refusals; the race detector.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import statickernel as sk
from attention_variants import (
    attention_decode,
    attention_decode_parts,
    attention_decode_reference,
    attention_gqa,
    attention_packed,
    attention_packed_dkdv,
    attention_packed_dq,
    attention_packed_reference,
    decode_splits,
    grouped_query_attention,
)


def f32(x: Any) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def normal(shape: tuple[int, ...], seed: int) -> jax.Array:
    rng = np.random.default_rng([seed, *shape])
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32), jnp.bfloat16)


def heads_last(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(f32(x), 1, 2)


def dot_product_attention(q: Any, k: Any, v: Any, **kwargs: Any) -> jax.Array:
    """jax.nn.dot_product_attention on (B, H, S, D) arrays, in float32."""
    out = jax.nn.dot_product_attention(heads_last(q), heads_last(k), heads_last(v), **kwargs)
    return jnp.swapaxes(out, 1, 2)


def assert_gradients_close(got: Any, want: Any) -> None:
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        assert g.shape == w.shape and np.isfinite(g).all()
        bound = 2.0**-6 * max(float(np.abs(w).max()), 1e-3)
        np.testing.assert_allclose(g, w, rtol=2e-2, atol=bound)


def weighted_loss(fn: Any, weights: jax.Array) -> Any:
    return lambda q, k, v: jnp.sum(f32(fn(q, k, v)) * weights)


# --- grouped-query attention ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("heads", "kv_heads", "sq", "skv", "d"),
    [
        (4, 4, 100, 300, 64),  # MHA: groups of one
        (6, 2, 130, 130, 128),  # groups of 3
        (8, 1, 64, 200, 64),  # MQA
        (4, 2, 1, 37, 64),  # one query
    ],
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_attention_matches_jax(
    heads: int, kv_heads: int, sq: int, skv: int, d: int, causal: bool
) -> None:
    q, k = normal((2, heads, sq, d), 1), normal((2, kv_heads, skv, d), 2)
    v = normal((2, kv_heads, skv, d), 3)
    out = grouped_query_attention(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype
    want = dot_product_attention(q, k, v, is_causal=causal)
    np.testing.assert_allclose(f32(out), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradients_of_grouped_query_attention(causal: bool) -> None:
    q, k, v = normal((1, 6, 100, 64), 4), normal((1, 2, 130, 64), 5), normal((1, 2, 130, 64), 6)
    weights = f32(normal(q.shape, 7))
    got = jax.grad(
        weighted_loss(lambda *a: grouped_query_attention(*a, causal=causal), weights), (0, 1, 2)
    )(q, k, v)
    oracle = lambda q, k, v: dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    want = jax.grad(weighted_loss(oracle, weights), (0, 1, 2))(q, k, v)
    assert_gradients_close(got, want)


def test_grouped_query_attention_takes_the_windows_and_soft_cap() -> None:
    q, k, v = normal((1, 4, 200, 64), 8), normal((1, 2, 200, 64), 9), normal((1, 2, 200, 64), 10)
    out = grouped_query_attention(q, k, v, causal=True, window_left=40)
    want = dot_product_attention(q, k, v, local_window_size=(40, 0))
    np.testing.assert_allclose(f32(out), want, rtol=2e-2, atol=2e-2)
    grouped = q.reshape(1, 2, 2, 200, 64)
    capped, lse = attention_gqa(grouped, k, v, softcap=10.0)
    assert capped.shape == grouped.shape and lse.shape == grouped.shape[:-1]


def test_grouped_query_attention_refuses_heads_not_a_multiple() -> None:
    q, k = normal((1, 5, 64, 64), 1), normal((1, 2, 64, 64), 2)
    with pytest.raises(ValueError, match="5 heads, not a multiple of the 2"):
        grouped_query_attention(q, k, k)


# --- packed sequences ------------------------------------------------------------------------


def packed_ids(lengths: list[int]) -> jax.Array:
    """Segment ids of sequences of these lengths packed into one row."""
    return jnp.asarray(np.repeat(np.arange(len(lengths)), lengths)[None], jnp.int32)


PACKINGS = {
    "four-sequences": [90, 7, 120, 83],  # 300 tokens, segments across block edges
    "one-sequence": [130],
    "many-short": [3] * 40 + [17],
}


@pytest.mark.parametrize("lengths", list(PACKINGS.values()), ids=list(PACKINGS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_packed_sequences_match_jax_with_the_segments_mask(
    lengths: list[int], causal: bool
) -> None:
    ids = packed_ids(lengths)
    n = ids.shape[1]
    q, k, v = normal((1, 2, n, 64), 1), normal((1, 2, n, 64), 2), normal((1, 2, n, 64), 3)
    out, lse = attention_packed(q, k, v, ids, ids, causal=causal)
    mask = ids[:, None, :, None] == ids[:, None, None, :]
    want = dot_product_attention(q, k, v, mask=mask, is_causal=causal)
    np.testing.assert_allclose(f32(out), want, rtol=2e-2, atol=2e-2)
    _, ref_lse = attention_packed_reference(q, k, v, ids, ids, causal=causal)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(ref_lse), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradients_of_packed_sequences(causal: bool) -> None:
    ids = packed_ids([90, 7, 120, 83])
    q, k, v = normal((1, 2, 300, 64), 4), normal((1, 2, 300, 64), 5), normal((1, 2, 300, 64), 6)
    weights = f32(normal(q.shape, 7))

    def ours(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return attention_packed(q, k, v, ids, ids, causal=causal)[0]

    mask = ids[:, None, :, None] == ids[:, None, None, :]
    oracle = lambda q, k, v: dot_product_attention(q, k, v, mask=mask, is_causal=causal)  # noqa: E731
    got = jax.grad(weighted_loss(ours, weights), (0, 1, 2))(q, k, v)
    want = jax.grad(weighted_loss(oracle, weights), (0, 1, 2))(q, k, v)
    assert_gradients_close(got, want)


def test_a_query_whose_segment_has_no_keys_gets_zeros() -> None:
    q_ids = jnp.asarray([[0] * 50 + [7] * 50], jnp.int32)  # segment 7 has no keys
    kv_ids = jnp.asarray([[0] * 120], jnp.int32)
    q, k, v = normal((1, 1, 100, 64), 8), normal((1, 1, 120, 64), 9), normal((1, 1, 120, 64), 10)
    out, lse = attention_packed(q, k, v, q_ids, kv_ids)
    assert (np.asarray(out, np.float32)[0, 0, 50:] == 0).all()
    assert np.isneginf(np.asarray(lse)[0, 0, 50:]).all()
    ref, _ = attention_packed_reference(q, k, v, q_ids, kv_ids)
    np.testing.assert_allclose(f32(out), f32(ref), rtol=2e-2, atol=2e-2)
    # The rows without keys pass no NaN into the gradients.
    grads = jax.grad(
        lambda q, k, v: jnp.sum(f32(attention_packed(q, k, v, q_ids, kv_ids)[0])), (0, 1, 2)
    )(q, k, v)
    assert all(np.isfinite(np.asarray(g, np.float32)).all() for g in grads)


def test_the_backward_kernels_take_the_forwards_lse_of_a_query_without_keys() -> None:
    # Called with the forward's lse as it is, -inf for segment 7's queries: their
    # probabilities are 0 and their gradients zeros, not exp2(-inf - -inf) = NaN.
    q_ids = jnp.asarray([[0] * 50 + [7] * 50], jnp.int32)
    kv_ids = jnp.asarray([[0] * 120], jnp.int32)
    q, k, v = normal((1, 1, 100, 64), 8), normal((1, 1, 120, 64), 9), normal((1, 1, 120, 64), 10)
    dout = normal(q.shape, 11)
    out, lse = attention_packed_reference(q, k, v, q_ids, kv_ids)
    assert np.isneginf(np.asarray(lse)[0, 0, 50:]).all()
    delta = jnp.sum(f32(dout) * f32(out), axis=-1)
    dq = attention_packed_dq(q, k, v, dout, lse, delta, q_ids, kv_ids)
    dk, dv = attention_packed_dkdv(q, k, v, dout, lse, delta, q_ids, kv_ids)
    assert (f32(dq)[0, 0, 50:] == 0).all()
    for grad in (dq, dk, dv):
        assert np.isfinite(np.asarray(grad, np.float32)).all()


@pytest.mark.slow
@settings(max_examples=4, deadline=None)
@given(lengths=st.lists(st.integers(1, 90), min_size=1, max_size=5), causal=st.booleans())
def test_packed_sequences_at_any_packing(lengths: list[int], causal: bool) -> None:
    ids = packed_ids(lengths)
    n = ids.shape[1]
    q, k, v = normal((1, 1, n, 64), 11), normal((1, 1, n, 64), 12), normal((1, 1, n, 64), 13)
    out, _ = attention_packed(q, k, v, ids, ids, causal=causal)
    mask = ids[:, None, :, None] == ids[:, None, None, :]
    want = dot_product_attention(q, k, v, mask=mask, is_causal=causal)
    np.testing.assert_allclose(f32(out), want, rtol=2e-2, atol=2e-2)


# --- decoding ---------------------------------------------------------------------------------


def cache(b: int, kv_heads: int, tokens: int, d: int, seed: int) -> tuple[jax.Array, jax.Array]:
    return normal((b, kv_heads, tokens, d), seed), normal((b, kv_heads, tokens, d), seed + 1)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "sq", "tokens", "lengths", "splits"),
    [
        (8, 2, 1, 1024, [1000, 37], None),  # GQA 4, one token, default splits
        (4, 4, 3, 512, [300], 4),  # MHA, 3 new tokens, causal among them
        (6, 3, 1, 256, [0, 1, 256], None),  # an empty cache, one token, a full one
        (32, 8, 16, 2048, [2048], 8),  # 16 tokens of 4 heads: 64 rows
        (2, 1, 1, 300, [64, 65], 3),  # MQA; lengths at a block's edge, ragged parts
        (4, 2, 1, 512, [10], 8),  # every part past the first is past the length
    ],
)
def test_decoding_matches_the_reference(
    heads: int, kv_heads: int, sq: int, tokens: int, lengths: list[int], splits: int | None
) -> None:
    b = len(lengths)
    q = normal((b, heads, sq, 128 if heads == 32 else 64), 1)
    k, v = cache(b, kv_heads, tokens, q.shape[-1], 2)
    length = jnp.asarray(lengths, jnp.int32)
    out = attention_decode(q, k, v, length, splits=splits)
    assert out.shape == q.shape and out.dtype == q.dtype
    want = attention_decode_reference(q, k, v, length)
    np.testing.assert_allclose(f32(out), f32(want), rtol=2e-2, atol=2e-2)
    # An empty cache gives zeros, not NaN.
    for i, n in enumerate(lengths):
        if n == 0:
            assert (np.asarray(out, np.float32)[i] == 0).all()


def test_decoding_one_token_is_attention_over_the_cache_so_far() -> None:
    """The independent oracle: jax.nn.dot_product_attention of the token against the first
    `length` keys (the new token is the last of them), grouped as jax groups heads."""
    q = normal((1, 8, 1, 64), 3)
    k, v = cache(1, 2, 1024, 64, 4)
    out = attention_decode(q, k, v, jnp.asarray([700], jnp.int32))
    want = dot_product_attention(q, k[:, :, :700], v[:, :, :700])
    np.testing.assert_allclose(f32(out), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("splits", [1, 2, 4, 8])
def test_decoding_gives_the_same_result_for_any_split(splits: int) -> None:
    q = normal((2, 4, 2, 64), 5)
    k, v = cache(2, 2, 512, 64, 6)
    length = jnp.asarray([500, 129], jnp.int32)
    out = attention_decode(q, k, v, length, splits=splits)
    want = attention_decode_reference(q, k, v, length)
    np.testing.assert_allclose(f32(out), f32(want), rtol=2e-2, atol=2e-2)


def test_decode_splits_fill_the_gpu_and_divide_the_cache() -> None:
    assert decode_splits(1, 8, 32768) == 16  # 128 grid steps of 2048 tokens
    assert decode_splits(32, 8, 4096) == 1  # the batch fills the GPU
    assert decode_splits(1, 1, 300) == 1  # parts of at least 4 blocks
    assert decode_splits(1, 2, 3000) == 10  # 66 wanted, 11 by length: 10 divides 3000
    for b, h, n in [(1, 8, 32768), (2, 4, 1000), (1, 1, 777)]:
        assert n % decode_splits(b, h, n) == 0


def test_decoding_refuses_heads_not_a_multiple_and_splits_not_dividing() -> None:
    q = normal((1, 3, 1, 64), 7)
    k, v = cache(1, 2, 256, 64, 8)
    with pytest.raises(ValueError, match="3 heads, not a multiple of the 2"):
        attention_decode(q, k, v, jnp.asarray([10], jnp.int32))
    q = normal((1, 2, 1, 64), 7)
    with pytest.raises(ValueError, match="splits=3 does not divide the 256"):
        attention_decode(q, k, v, jnp.asarray([10], jnp.int32), splits=3)


def test_no_races_in_the_decode_parts() -> None:
    q = normal((1, 2, 4, 64), 9)
    k = normal((1, 2, 2, 200, 64), 10)
    starts = jnp.asarray([0, 200], jnp.int32)
    report = sk.testing.detect_races(
        attention_decode_parts, q, k, k, jnp.asarray([350], jnp.int32), starts, stages=3
    )
    assert not report.races_found
    assert report.result is not None
