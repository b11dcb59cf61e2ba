"""The tolerance the suite compares reordered floating-point sums with (tests/tolerances.py):
it admits the one-ulp differences that the order of accumulation makes, which no test may
assert away, and still catches a wrong sum."""

import jax.numpy as jnp
import numpy as np
import pytest

from tolerances import assert_close, tolerance_for

BF16 = jnp.bfloat16


def _sums_in_two_orders(m: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of `k` products of bf16 normals summed in float32 front to back and back to
    front (numpy's cumsum adds strictly in order, on any machine), and the terms."""
    rng = np.random.default_rng(27)
    a = rng.standard_normal((m, k), np.float32).astype(BF16).astype(np.float32)
    b = rng.standard_normal((m, k), np.float32).astype(BF16).astype(np.float32)
    terms = a * b  # exact: the product of two bf16 values fits a float32
    forward = np.cumsum(terms, axis=1, dtype=np.float32)[:, -1]
    backward = np.cumsum(terms[:, ::-1], axis=1, dtype=np.float32)[:, -1]
    return forward, backward, terms


def test_a_reordered_bf16_sum_rounds_apart_and_is_within_the_tolerance() -> None:
    forward, backward, _ = _sums_in_two_orders(20_000, 100)
    rounded_forward, rounded_backward = forward.astype(BF16), backward.astype(BF16)
    # The premise: the order alone changes how some results round, so exact comparison (and
    # numpy's default rtol of 1e-7) fails on data like the suite's.
    assert (rounded_forward != rounded_backward).any()
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(
            rounded_forward.astype(np.float32), rounded_backward.astype(np.float32)
        )
    assert_close(rounded_forward, rounded_backward, tolerance_for(BF16, 100))
    assert_close(forward, backward, tolerance_for(jnp.float32, 100))


def test_a_sum_missing_a_term_is_caught() -> None:
    forward, _, terms = _sums_in_two_orders(2_000, 100)
    short = forward - terms[:, -1]
    with pytest.raises(AssertionError):
        assert_close(short.astype(BF16), forward.astype(BF16), tolerance_for(BF16, 100))
    with pytest.raises(AssertionError):
        assert_close(short, forward, tolerance_for(jnp.float32, 100))


def test_the_tolerance_grows_with_the_terms_and_the_dtype() -> None:
    f32, bf16 = tolerance_for(jnp.float32, 1), tolerance_for(BF16, 1)
    assert bf16.rtol > 100 * f32.rtol
    assert tolerance_for(jnp.float32, 10_000).rtol > tolerance_for(jnp.float32, 100).rtol
    assert tolerance_for(jnp.float32, 10_000).atol == pytest.approx(10_000 * f32.atol)
    assert tolerance_for(jnp.float32, 100, scale=4.0).atol == pytest.approx(
        4 * tolerance_for(jnp.float32, 100).atol
    )
