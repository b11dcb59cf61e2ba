"""Flash attention: `sk.dot` over a whole dim and of values in registers, in a loop that may
stop early, against `jax.nn.dot_product_attention` in the interpreter."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import statickernel as sk
from attention import attention, attention_lse, attention_lse_reference, attention_reference
from markers import line_finder
from tolerances import assert_close, tolerance_for

line_of = line_finder(__file__)


def qkv(
    b: int, h: int, sq: int, skv: int, d: int, dtype: Any = jnp.bfloat16, seed: int = 0
) -> tuple[jax.Array, jax.Array, jax.Array]:
    rng = np.random.default_rng([seed, b, h, sq, skv, d])

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32), dtype)

    return normal(b, h, sq, d), normal(b, h, skv, d), normal(b, h, skv, d)


def assert_attention(q: jax.Array, k: jax.Array, v: jax.Array, **consts: Any) -> None:
    out = attention(q, k, v, **consts)
    semantics = {n: c for n, c in consts.items() if n in ("causal", "sm_scale")}
    ref = attention_reference(q, k, v, **semantics)
    assert out.shape == q.shape and out.dtype == q.dtype
    got = np.asarray(out, np.float32)
    assert np.isfinite(got).all(), "a key past the edge leaked into the result"
    # bf16 rounds the result and p; the reference computes in float32.
    np.testing.assert_allclose(got, np.asarray(ref, np.float32), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(
    "shape",
    [
        (1, 2, 128, 128, 64),  # aligned
        (2, 1, 100, 1000, 64),  # Sq != Skv, both ragged, Skv = 1000
        (1, 1, 1, 37, 128),  # one query, fewer keys than a block
        (1, 2, 131, 67, 128),  # primes
    ],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_matches_dot_product_attention(
    shape: tuple[int, int, int, int, int], causal: bool
) -> None:
    assert_attention(*qkv(*shape), causal=causal)


def test_attention_float16_and_a_scale() -> None:
    q, k, v = qkv(1, 1, 70, 90, 64, jnp.float16)
    assert_attention(q, k, v, sm_scale=0.3)
    assert_attention(q, k, v, causal=True, BKV=128)


@settings(max_examples=6, deadline=None)
@given(
    b=st.integers(1, 2),
    h=st.integers(1, 2),
    sq=st.integers(1, 140),
    skv=st.integers(1, 140),
    d=st.sampled_from([64, 128]),
    causal=st.booleans(),
)
def test_attention_at_any_shape(b: int, h: int, sq: int, skv: int, d: int, causal: bool) -> None:
    assert_attention(*qkv(b, h, sq, skv, d), causal=causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_with_its_log_sum_exp(causal: bool) -> None:
    # Two batch entries of ragged heads: each head's per-row result is written in whole
    # blocks, so that its last block does not reach into the next head's.
    q, k, v = qkv(2, 3, 100, 130, 64)
    out, lse = attention_lse(q, k, v, causal=causal)
    ref_out, ref_lse = attention_lse_reference(q, k, v, causal=causal)
    assert lse.shape == (2, 3, 100) and lse.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(lse), np.asarray(ref_lse), rtol=1e-5, atol=1e-5)
    # Another kernel, whose sums over the 130 keys may round one bf16 ulp apart from these.
    assert_close(out, attention(q, k, v, causal=causal), tolerance_for(jnp.bfloat16, 130))
    np.testing.assert_allclose(
        np.asarray(out, np.float32), np.asarray(ref_out, np.float32), rtol=2e-2, atol=2e-2
    )
    assert "sliced back" in str(attention_lse.plan(q, k, v))


def test_attention_plan_and_device_lowering() -> None:
    q, k, v = qkv(1, 16, 4096, 4096, 128)
    plan = attention.plan(q, k, v)
    (loop,) = plan.loops
    assert loop.dots == ()
    assert loop.products == (("q", "k", True), ("", "v", False))
    assert "sk.dot(q, k.T) a step" in str(plan) and "sk.dot(a in registers, v)" in str(plan)
    assert plan.grid == (1, 16, 64)
    with sk.backend("mosaic_gpu"):
        source = attention.emit(q, k, v)
        text = attention.lower(q, k, v).as_text()
    # The device form multiplies p from registers, accumulating into the rescaled carry.
    assert "pl.run_state" in source and "plgpu.ACC.init" in source
    assert "_staged" not in source
    assert "mosaic_gpu" in text
    # Causal: each block of queries stops at its last query, a traced trip count.
    causal = attention.plan(q, k, v, causal=True)
    assert causal.loops[0].stops_early and not loop.stops_early
    with sk.backend("mosaic_gpu"):
        assert "grid=(loop0_steps,)" in attention.emit(q, k, v, causal=True)
    # The interpreter's form stages p through swizzled shared memory instead.
    interpreted = attention.emit(*qkv(1, 1, 100, 300, 64))
    assert "_staged" in interpreted and "pl.run_state" not in interpreted
