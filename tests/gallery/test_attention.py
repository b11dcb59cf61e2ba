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
from attention import (
    attention,
    attention_dkdv,
    attention_dq,
    attention_lse,
    attention_lse_reference,
    attention_reference,
)
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


@pytest.mark.parametrize(
    "variant", [{}, {"causal": True}, {"window_left": 20}], ids=["full", "causal", "window"]
)
def test_an_infinite_score_is_the_log_sum_exp(variant: dict[str, Any]) -> None:
    """A query whose score of a key is +inf has a log-sum-exp of +inf, and one whose scores
    are all -inf one of -inf, as jax.nn.logsumexp's and the reference's. Before, the online
    softmax's exp2(inf - inf) made both NaN."""
    q, k, v = qkv(1, 1, 70, 90, 64)
    k = k.at[..., 0].set(jnp.abs(k[..., 0]) + 0.5)  # every key's first element positive
    row = jnp.zeros(64, jnp.bfloat16)
    q = q.at[0, 0, 5].set(row.at[0].set(jnp.inf)).at[0, 0, 7].set(row.at[0].set(-jnp.inf))
    _, lse = attention_lse(q, k, v, **variant)
    _, ref_lse = attention_lse_reference(q, k, v, **variant)
    assert float(ref_lse[0, 0, 5]) == jnp.inf and float(ref_lse[0, 0, 7]) == -jnp.inf
    np.testing.assert_allclose(np.asarray(lse), np.asarray(ref_lse), rtol=1e-5, atol=1e-5)


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


@pytest.mark.parametrize(("sq", "skv"), [(4096, 4096), (300, 300), (300, 100), (100, 300)])
def test_causal_attention_masks_only_the_diagonals_blocks(sq: int, skv: int) -> None:
    """Causally, the blocks of keys wholly at or before a block's first query are seen whole
    by all its queries: a first loop walks them without the causal mask (none for the first
    block of queries), a second the diagonal's, masked."""
    q, k, v = qkv(1, 2, sq, skv, 64)
    plan = attention.plan(q, k, v, causal=True)
    assert len(plan.loops) == 2 and all(loop.stops_early for loop in plan.loops)
    with sk.backend("mosaic_gpu"):
        source = attention.emit(q, k, v, causal=True)
    unmasked = source[source.index("def loop0_step") : source.index("def loop1_step")]
    masked = source[source.index("def loop1_step") :]
    assert "row_position" not in unmasked and "row_position" in masked
    assert "loop1_first" in masked  # the diagonal's blocks begin where the first loop stopped


# --- the backward and the variants -----------------------------------------------------------


def f32(x: Any) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def assert_gradients_close(got: Any, want: Any) -> None:
    """Gradients of bf16 inputs: each is rounded to bf16 (one ulp, 2**-8 relative, of the
    largest element of its array) after sums of float32 products in the kernel's order."""
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        assert g.shape == w.shape
        assert np.isfinite(g).all(), "a NaN or inf in a gradient"
        bound = 2.0**-6 * max(float(np.abs(w).max()), 1e-3)
        np.testing.assert_allclose(g, w, rtol=2e-2, atol=bound)


def loss_of(fn: Any, weights: jax.Array) -> Any:
    """A scalar loss of an attention's output, so its gradient is a weighted sum."""
    return lambda q, k, v: jnp.sum(f32(fn(q, k, v)) * weights)


def weights_like(q: jax.Array, seed: int = 9) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(q.shape), jnp.float32)


def reference_gradients(q: Any, k: Any, v: Any, weights: jax.Array, **variant: Any) -> Any:
    ref = lambda q, k, v: attention_lse_reference(f32(q), f32(k), f32(v), **variant)[0]  # noqa: E731
    return jax.grad(loss_of(ref, weights), (0, 1, 2))(q, k, v)


@pytest.mark.parametrize(
    "shape",
    [
        (1, 2, 128, 128, 64),  # aligned
        (1, 2, 100, 300, 64),  # ragged, Sq != Skv
        (1, 1, 1, 37, 128),  # one query
        (2, 1, 131, 67, 128),  # primes, fewer keys than queries
    ],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradients_of_attention_match_jax_grad(
    shape: tuple[int, int, int, int, int], causal: bool
) -> None:
    q, k, v = qkv(*shape)
    weights = weights_like(q)
    got = jax.grad(loss_of(lambda *a: attention(*a, causal=causal), weights), (0, 1, 2))(q, k, v)
    # The independent oracle: jax.nn.dot_product_attention, differentiated by JAX.
    oracle = lambda q, k, v: attention_reference(f32(q), f32(k), f32(v), causal=causal)  # noqa: E731
    want = jax.grad(loss_of(oracle, weights), (0, 1, 2))(q, k, v)
    assert_gradients_close(got, want)


def test_gradients_of_the_log_sum_exp_enter_the_backward() -> None:
    q, k, v = qkv(1, 2, 100, 130, 64)
    w_out, w_lse = weights_like(q), weights_like(q[..., 0], seed=3)

    def loss(fn: Any) -> Any:
        def of(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            out, lse = fn(q, k, v)
            return jnp.sum(f32(out) * w_out) + jnp.sum(lse * w_lse)

        return of

    got = jax.grad(loss(lambda *a: attention_lse(*a, causal=True)), (0, 1, 2))(q, k, v)
    ref = lambda *a: attention_lse_reference(*(f32(x) for x in a), causal=True)  # noqa: E731
    want = jax.grad(loss(ref), (0, 1, 2))(q, k, v)
    assert_gradients_close(got, want)


@pytest.mark.slow
@settings(max_examples=4, deadline=None)
@given(
    sq=st.integers(1, 140),
    skv=st.integers(1, 140),
    d=st.sampled_from([64, 128]),
    causal=st.booleans(),
)
def test_gradients_at_any_shape(sq: int, skv: int, d: int, causal: bool) -> None:
    q, k, v = qkv(1, 1, sq, skv, d, seed=5)
    weights = weights_like(q)
    got = jax.grad(loss_of(lambda *a: attention(*a, causal=causal), weights), (0, 1, 2))(q, k, v)
    assert_gradients_close(got, reference_gradients(q, k, v, weights, causal=causal))


def test_the_backward_is_deterministic() -> None:
    q, k, v = qkv(1, 2, 130, 200, 64, seed=2)
    weights = weights_like(q)
    grad = jax.grad(loss_of(lambda *a: attention(*a, causal=True), weights), (0, 1, 2))
    for a, b in zip(grad(q, k, v), grad(q, k, v), strict=True):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


WINDOWS = {
    "causal-sliding": dict(causal=True, window_left=50),
    "both-sides": dict(window_left=70, window_right=20),
    "left-only": dict(window_left=30),
    "right-only": dict(window_right=10),
    "causal-window-of-a-block": dict(causal=True, window_left=64),
}


@pytest.mark.parametrize("variant", list(WINDOWS.values()), ids=list(WINDOWS))
@pytest.mark.parametrize("shape", [(300, 300), (200, 100), (100, 300)], ids=str)
def test_windows_match_dot_product_attention_local_windows(
    variant: dict[str, Any], shape: tuple[int, int]
) -> None:
    assert_window_matches_jax(variant, shape)


# Windows with a side of 0 keys, as jax.nn.dot_product_attention's local_window_size=(W, 0):
# before, an int constant had to be positive, and these were refused.
ZERO_SIDED = {
    "no-future": dict(window_left=50, window_right=0),
    "no-past": dict(window_left=0, window_right=30),
    "diagonal": dict(window_left=0, window_right=0),
    "causal-by-window": dict(window_right=0),
}


@pytest.mark.parametrize("variant", list(ZERO_SIDED.values()), ids=list(ZERO_SIDED))
def test_a_window_side_of_zero_keys_matches_dot_product_attention(
    variant: dict[str, Any],
) -> None:
    assert_window_matches_jax(variant, (130, 100))


def test_gradients_through_a_window_of_no_past_keys() -> None:
    q, k, v = qkv(1, 1, 100, 130, 64, seed=8)
    weights = weights_like(q)
    variant = ZERO_SIDED["no-past"]
    got = jax.grad(loss_of(lambda *a: attention(*a, **variant), weights), (0, 1, 2))(q, k, v)
    assert_gradients_close(got, reference_gradients(q, k, v, weights, **variant))


def test_a_negative_window_is_refused() -> None:
    q, k, v = qkv(1, 1, 64, 64, 64)
    with pytest.raises(sk.OverrideError) as info:
        attention(q, k, v, window_left=-1)
    assert info.value.constant == "window_left" and "negative" in info.value.what


def assert_window_matches_jax(variant: dict[str, Any], shape: tuple[int, int]) -> None:
    q, k, v = qkv(1, 2, *shape, 64, seed=shape[0])
    out, lse = attention_lse(q, k, v, **variant)
    # jax.nn.dot_product_attention's local_window_size=(left, right), the other side unbounded.
    left, right = variant.get("window_left"), variant.get("window_right")
    right = 0 if variant.get("causal") else right
    unbounded = sum(shape)
    window = (unbounded if left is None else left, unbounded if right is None else right)
    heads_last = lambda x: jnp.swapaxes(f32(x), 1, 2)  # noqa: E731
    oracle = jax.nn.dot_product_attention(
        heads_last(q), heads_last(k), heads_last(v), local_window_size=window
    )
    oracle = np.asarray(jnp.swapaxes(oracle, 1, 2))
    ref_out, ref_lse = attention_lse_reference(q, k, v, **variant)
    sees_a_key = np.isfinite(np.asarray(ref_lse))
    got = np.asarray(out, np.float32)
    # Rows that see a key: jax's; rows that see none (a window past the keys): zeros and
    # -inf (jax averages every key there).
    np.testing.assert_allclose(got[sees_a_key], oracle[sees_a_key], rtol=2e-2, atol=2e-2)
    assert (got[~sees_a_key] == 0).all()
    np.testing.assert_array_equal(np.isneginf(np.asarray(lse)), ~sees_a_key)
    np.testing.assert_allclose(
        np.asarray(lse)[sees_a_key], np.asarray(ref_lse)[sees_a_key], rtol=1e-5, atol=1e-5
    )
    del ref_out


@pytest.mark.parametrize("variant", list(WINDOWS.values()), ids=list(WINDOWS))
def test_gradients_through_windows(variant: dict[str, Any]) -> None:
    q, k, v = qkv(1, 2, 200, 100, 64, seed=7)
    weights = weights_like(q)
    got = jax.grad(loss_of(lambda *a: attention(*a, **variant), weights), (0, 1, 2))(q, k, v)
    assert_gradients_close(got, reference_gradients(q, k, v, weights, **variant))


def test_a_window_walks_only_the_blocks_inside_it() -> None:
    q, k, v = qkv(1, 16, 4096, 4096, 128)
    plan = attention.plan(q, k, v, causal=True, window_left=256)
    assert plan.loops[0].stops_early
    with sk.backend("mosaic_gpu"):
        source = attention.emit(q, k, v, causal=True, window_left=256)
        backward = attention_dkdv.emit(
            q, k, v, q, q[..., 0].astype(jnp.float32), q[..., 0].astype(jnp.float32),
            causal=True, window_left=256,
        )  # fmt: skip
    assert "loop0_first = lax.min(" in source and "grid=(loop0_steps,)" in source
    assert "loop0_first = lax.min(" in backward


@pytest.mark.parametrize(
    ("softcap", "causal"),
    [(5.0, False), pytest.param(50.0, True, marks=pytest.mark.slow)],
    ids=["5-full", "50-causal"],
)
def test_soft_capped_scores_and_their_gradients(softcap: float, causal: bool) -> None:
    q, k, v = qkv(1, 2, 130, 260, 128, seed=11)
    # Scores of up to ~30: a cap of 5 bends most of them.
    q = (3 * f32(q)).astype(jnp.bfloat16)
    out, lse = attention_lse(q, k, v, softcap=softcap, causal=causal)
    ref_out, ref_lse = attention_lse_reference(q, k, v, softcap=softcap, causal=causal)
    np.testing.assert_allclose(f32(out), f32(ref_out), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(ref_lse), rtol=1e-4, atol=1e-4)
    weights = weights_like(q)
    variant = dict(softcap=softcap, causal=causal)
    got = jax.grad(loss_of(lambda *a: attention(*a, **variant), weights), (0, 1, 2))(q, k, v)
    assert_gradients_close(got, reference_gradients(q, k, v, weights, **variant))


def test_a_soft_cap_far_above_the_scores_changes_nothing() -> None:
    q, k, v = qkv(1, 1, 100, 100, 64, seed=12)
    capped = attention(q, k, v, softcap=1e4)
    assert_close(capped, attention(q, k, v), tolerance_for(jnp.bfloat16, 100))


@pytest.mark.parametrize("softcap", [0.0, -5.0, float("inf"), float("nan")])
def test_a_soft_cap_that_is_not_positive_is_refused_for_what_it_is(softcap: float) -> None:
    """A cap of 0 divided the scores by zero while the body traced (a ZeroDivisionError);
    it is jax's None that means no cap, not FlashAttention's 0.0."""
    q, k, v = qkv(1, 1, 64, 64, 64)
    for kernel in (attention, attention_lse):
        with pytest.raises(sk.OverrideError) as info:
            kernel(q, k, v, softcap=softcap)
        error = info.value
        assert error.constant == "softcap" and error.kernel == kernel.spec.name
        assert "positive soft cap or None" in error.what
        assert error.fix is not None and "softcap=None" in error.fix
        assert error.where is not None and "attention.py" in error.where
    with pytest.raises(sk.OverrideError, match="softcap"):
        attention_dq.bind(softcap=0.0)(q, k, v, q, jnp.zeros((1, 1, 64)), jnp.zeros((1, 1, 64)))


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_no_races_in_the_backward(stages: int) -> None:
    q, k, v = qkv(1, 1, 200, 130, 64, seed=13)
    dout = qkv(1, 1, 200, 130, 64, seed=14)[0]
    out, lse = attention_lse(q, k, v, causal=True)
    delta = jnp.sum(f32(dout) * f32(out), axis=-1)
    args = (q, k, v, dout, lse, delta)
    for kernel in (attention_dq, attention_dkdv):
        report = sk.testing.detect_races(kernel, *args, causal=True, stages=stages)
        assert not report.races_found, kernel.spec.name
        assert report.result is not None


def test_the_backward_kernels_cross_lower_and_plan() -> None:
    q, k, v = qkv(1, 16, 4096, 4096, 128)
    vector = jax.ShapeDtypeStruct((1, 16, 4096), jnp.float32)
    args = (q, k, v, q, vector, vector)
    plan = str(attention_dkdv.plan(*args, causal=True))
    # Each block of keys walks the queries from its own position: at most all of them.
    assert "Sq in at most 64 step(s)" in plan
    assert "pipelines q (fill 0), lse (fill inf), dout (fill 0), delta (fill 0)" in plan
    with sk.backend("mosaic_gpu"):
        for kernel in (attention_dq, attention_dkdv):
            assert "mosaic_gpu" in kernel.lower(*args, causal=True).as_text()


def test_a_window_wider_than_int32_positions_is_no_window() -> None:
    """A window bound is a position plus the window: capped, it cannot wrap around int32."""
    q, k, v = qkv(1, 1, 100, 130, 64, seed=15)
    for variant in (
        dict(window_left=2**31 - 1),
        dict(window_left=2**31 - 1, causal=True),
        dict(window_right=2**31 - 2),
    ):
        plain = {"causal": variant.get("causal", False)}
        assert_close(
            attention(q, k, v, **variant),
            attention(q, k, v, **plain),
            tolerance_for(jnp.bfloat16, 130),
        )
