"""`top_p_mask` (examples/cumsum.py), nucleus sampling's filter: the row form's scan over
sorted candidates, against jnp on whole rows. A logit whose mass ahead lies within rounding
of p may be kept by one and dropped by the other (the running sums add in another order);
every other logit is compared exactly, and the kept ones are the row's first."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import statickernel as sk
from cumsum import top_p_mask, top_p_mask_reference

F32, BF16 = jnp.float32, jnp.bfloat16


def _sorted_logits(rows: int, cols: int, seed: int, dtype: Any = F32) -> jax.Array:
    logits = jax.random.normal(jax.random.key(seed), (rows, cols), F32) * 3
    return (-jnp.sort(-logits, axis=1)).astype(dtype)


def _check(logits: jax.Array, p: float = 0.9) -> None:
    got = np.asarray(top_p_mask(logits, p=p), np.float32)
    want = np.asarray(top_p_mask_reference(logits, p), np.float32)
    probs = jax.nn.softmax(logits.astype(F32), axis=1)
    before = np.asarray(jnp.cumsum(probs, axis=1) - probs)
    near = np.abs(before - p) < 1e-4  # within the sums' rounding of the boundary
    np.testing.assert_array_equal(got[~near], want[~near])
    # What is kept is a prefix of each row, the largest logits, the first always (p > 0).
    for row, near_row in zip(np.isfinite(got), near, strict=True):
        count = int(row.sum())
        assert count >= 1 and row[:count].all() and not row[count:][~near_row[count:]].any()


@pytest.mark.parametrize(
    ("rows", "cols"), [(8, 4096), (3, 4095), (2, 16384), (5, 1000), (1, 12289), (70, 300)]
)
def test_top_p_matches_jnp(rows: int, cols: int) -> None:
    _check(_sorted_logits(rows, cols, cols))


@pytest.mark.parametrize("p", [0.3, 0.5, 0.99])
def test_the_nucleus_grows_with_p(p: float) -> None:
    _check(_sorted_logits(4, 8192, 1), p)


def test_bfloat16_logits() -> None:
    _check(_sorted_logits(4, 6000, 2, BF16))


def test_wide_rows_take_the_row_form() -> None:
    logits = jax.ShapeDtypeStruct((4096, 16384), F32)
    plan = top_p_mask.plan(logits, backend="mosaic_gpu")
    assert plan.form is sk.Form.ROWS
    assert "the body's scans run in 98,304 B of shared memory of their own" in str(plan)


@settings(max_examples=5, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 9000), seed=st.integers(0, 2**16))
def test_top_p_matches_jnp_on_any_shape(rows: int, cols: int, seed: int) -> None:
    _check(_sorted_logits(rows, cols, seed))
