"""ALiBi attention (examples/attention_alibi.py) in the interpreter: the output against
`jax.nn.dot_product_attention` given the bias as an array, the log-sum-exp against a jnp
reference, and the gradients of q, k, v and the slopes against `jax.grad` of the oracle.

Covered: causal and not; ragged Sq and Skv (1, 17, 100, 130, 300), D of 64 and 128; slopes
of both signs and of 0; the paper's slopes; a cotangent of the lse; the race detector."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import statickernel as sk
from attention_alibi import (
    alibi_bias_reference,
    alibi_slopes,
    attention_alibi,
    attention_alibi_dkdv,
    attention_alibi_reference,
)


def f32(x: Any) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def normal(shape: tuple[int, ...], seed: int) -> jax.Array:
    rng = np.random.default_rng([seed, *shape])
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32), jnp.bfloat16)


def oracle(q: Any, k: Any, v: Any, slopes: Any, causal: bool) -> jax.Array:
    """jax.nn.dot_product_attention on (B, H, S, D) arrays with ALiBi's bias as an array."""
    sq, skv = q.shape[-2], k.shape[-2]
    bias = alibi_bias_reference(slopes, sq, skv)[None]
    mask = jnp.tril(jnp.ones((sq, skv), bool))[None, None] if causal else None
    heads_last = lambda x: jnp.swapaxes(f32(x), 1, 2)  # noqa: E731
    out = jax.nn.dot_product_attention(
        heads_last(q), heads_last(k), heads_last(v), bias=bias, mask=mask
    )
    return jnp.swapaxes(out, 1, 2)


def test_the_papers_slopes() -> None:
    np.testing.assert_allclose(alibi_slopes(8), [2.0**-i for i in range(1, 9)])
    # 12 heads: the 8 of 8, then the odd ones of 16 (2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5).
    want = [2.0**-i for i in range(1, 9)] + [2.0 ** -(i / 2) for i in (1, 3, 5, 7)]
    np.testing.assert_allclose(alibi_slopes(12), want, rtol=1e-6)


@pytest.mark.parametrize(
    ("sq", "skv", "d"), [(100, 300, 64), (130, 17, 128), (1, 130, 64), (17, 1, 64)]
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_alibi_attention_matches_jax(sq: int, skv: int, d: int, causal: bool) -> None:
    heads = 4
    q, k, v = (
        normal((2, heads, sq, d), 1),
        normal((2, heads, skv, d), 2),
        normal((2, heads, skv, d), 3),
    )
    slopes = alibi_slopes(heads)
    out, lse = attention_alibi(q, k, v, slopes, causal=causal)
    np.testing.assert_allclose(f32(out), oracle(q, k, v, slopes, causal), rtol=2e-2, atol=2e-2)
    _, want_lse = attention_alibi_reference(q, k, v, slopes, causal=causal)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(want_lse), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradients_of_alibi_attention(causal: bool) -> None:
    q, k, v = normal((1, 3, 100, 64), 4), normal((1, 3, 130, 64), 5), normal((1, 3, 130, 64), 6)
    # A slope of each sign and a zero one: the cotangent is not the bias over the slope.
    slopes = jnp.asarray([0.25, 0.0, -0.03], jnp.float32)
    weights = f32(normal(q.shape, 7))

    def loss(fn: Any) -> Any:
        return lambda q, k, v, s: jnp.sum(f32(fn(q, k, v, s)) * weights)

    ours = lambda q, k, v, s: attention_alibi(q, k, v, s, causal=causal)[0]  # noqa: E731
    theirs = lambda q, k, v, s: oracle(q, k, v, s, causal)  # noqa: E731
    got = jax.grad(loss(ours), (0, 1, 2, 3))(q, k, v, slopes)
    want = jax.grad(loss(theirs), (0, 1, 2, 3))(q, k, v, slopes)
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        assert g.shape == w.shape and np.isfinite(g).all()
        bound = 2.0**-6 * max(float(np.abs(w).max()), 1e-3)
        np.testing.assert_allclose(g, w, rtol=2e-2, atol=bound)


def test_a_cotangent_of_the_lse_reaches_the_slopes() -> None:
    q, k, v = normal((1, 2, 64, 64), 8), normal((1, 2, 70, 64), 9), normal((1, 2, 70, 64), 10)
    slopes = jnp.asarray([0.5, 0.125], jnp.float32)

    def lse_sum(fn: Any) -> Any:
        return lambda s: jnp.sum(fn(q, k, v, s)[1])

    got = jax.grad(lse_sum(attention_alibi))(slopes)
    want = jax.grad(lse_sum(attention_alibi_reference))(slopes)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-2, atol=1e-2)


def test_the_slope_sums_of_the_dkdv_kernel_are_per_key() -> None:
    """Each key's sum over the queries of ds * -|i - j|: a (B, H, Skv) result, float32."""
    q, k, v = normal((1, 2, 100, 64), 11), normal((1, 2, 77, 64), 12), normal((1, 2, 77, 64), 13)
    dout = normal(q.shape, 14)
    slopes = alibi_slopes(2)
    out, lse = attention_alibi_reference(q, k, v, slopes)
    delta = jnp.sum(f32(dout) * f32(out), axis=-1)
    *_, sums = attention_alibi_dkdv(q, k, v, dout, lse, delta, slopes)
    assert sums.shape == (1, 2, 77) and sums.dtype == jnp.float32
    *_, want = attention_alibi_dkdv.reference(q, k, v, dout, lse, delta, slopes)  # type: ignore[union-attr]
    np.testing.assert_allclose(np.asarray(sums), np.asarray(want), rtol=2e-2, atol=2e-2)


def test_no_races_in_alibi_attention() -> None:
    q, k = normal((1, 2, 100, 64), 15), normal((1, 2, 200, 64), 16)
    report = sk.testing.detect_races(attention_alibi, q, k, k, alibi_slopes(2), causal=True)
    assert not report.races_found
    assert report.result is not None
