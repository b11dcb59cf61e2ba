"""The cross-entropy on whole rows (`cross_entropy_rows` and its backward): the same loss and
gradient as the blocked `cross_entropy`, read once in the row form, at vocabularies whose
rows are not a multiple of 16 bytes (addressed flat) and wide enough to be taken in chunks."""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import statickernel as sk
from cross_entropy import (
    cross_entropy,
    cross_entropy_backward,
    cross_entropy_reference,
    cross_entropy_rows,
    cross_entropy_rows_backward,
)

F32, BF16 = jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)


def _logits(m: int, v: int, dtype: Any, seed: int = 0) -> tuple[jax.Array, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(seed))
    logits = (3 * jax.random.normal(k1, (m, v), jnp.float32)).astype(dtype)
    labels = jax.random.randint(k2, (m,), -1, v, jnp.int32)  # -1: an ignored row
    return logits, labels


def _check(logits: jax.Array, labels: jax.Array) -> None:
    value, grad = jax.value_and_grad(cross_entropy_rows)(logits, labels)
    want_value, want_grad = jax.value_and_grad(cross_entropy_reference)(logits, labels)
    assert value.shape == () and value.dtype == F32
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-5)
    assert grad.dtype == logits.dtype
    tolerance = 1e-7 if logits.dtype == F32 else 2e-3 / logits.shape[0]
    np.testing.assert_allclose(
        np.asarray(grad, np.float32), np.asarray(want_grad, np.float32), atol=tolerance, rtol=1e-2
    )


@pytest.mark.parametrize(
    ("m", "v", "dtype"),
    [(1, 1000, F32), (7, 4095, F32), (33, 32001, BF16), (3, 50257, BF16), (2, 32000, BF16)],
    ids=["one-row", "4095-f32", "32001-bf16", "50257-bf16-chunks", "32000-bf16-chunks"],
)
def test_the_loss_and_its_gradient_match_the_reference(m: int, v: int, dtype: Any) -> None:
    logits, labels = _logits(m, v, dtype, seed=v)
    plan = cross_entropy_rows.plan(logits, labels)
    assert "form: rows" in str(plan)
    _check(logits, labels)


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 40), v=st.integers(1000, 5000), dtype=st.sampled_from([F32, BF16]))
def test_the_loss_at_any_shape(m: int, v: int, dtype: Any) -> None:
    _check(*_logits(m, v, dtype, seed=m * 10000 + v))


def test_rows_are_read_once_where_the_blocked_loss_reads_them_three_times() -> None:
    """At a vocabulary of 50257 bfloat16 (rows of 100,514 bytes): the forward reads the logits
    once and the backward reads them once and writes the gradient once, with no host padding;
    the blocked kernels pad the logits on the host and read them again."""
    logits = jax.ShapeDtypeStruct((16384, 50257), BF16)
    labels = jax.ShapeDtypeStruct((16384,), jnp.int32)
    g = jax.ShapeDtypeStruct((), F32)
    size = math.prod(logits.shape) * 2
    forward = cross_entropy_rows.plan(logits, labels)
    backward = cross_entropy_rows_backward.plan(logits, labels, g)
    assert forward.operands[0].flat and backward.operands[0].flat and backward.results[0].flat
    assert forward.row_frame is not None and forward.row_frame.chunks > 1
    assert forward.cost is not None and backward.cost is not None
    assert forward.cost.hbm_bytes <= 1.01 * size
    assert backward.cost.hbm_bytes <= 1.01 * 2 * size
    blocked = cross_entropy.plan(logits, labels).cost
    blocked_backward = cross_entropy_backward.plan(logits, labels, g).cost
    assert blocked is not None and blocked_backward is not None
    assert blocked.hbm_bytes > 2.5 * forward.cost.hbm_bytes
    assert blocked_backward.hbm_bytes > 2.5 * backward.cost.hbm_bytes
    lowered = cross_entropy_rows.with_backend("mosaic_gpu").lower(logits, labels)
    assert "mosaic_gpu" in lowered.as_text()


def test_the_chunked_loss_has_no_race() -> None:
    logits, labels = _logits(2, 50257, BF16, seed=3)
    report = sk.testing.detect_races(cross_entropy_rows, logits, labels)
    assert not report.races_found and report.result is not None
    np.testing.assert_allclose(
        report.result, cross_entropy_reference(logits, labels), rtol=1e-5, atol=1e-5
    )


def test_a_row_wider_than_shared_memory_is_refused_with_the_blocked_loss_as_the_way() -> None:
    """A vocabulary of 128256 bfloat16 (256,512-byte rows) fits no block: a SharedMemoryError
    that says to walk the dim in blocks, which `cross_entropy` does."""
    logits = jax.ShapeDtypeStruct((16, 128256), BF16)
    labels = jax.ShapeDtypeStruct((16,), jnp.int32)
    with pytest.raises(sk.SharedMemoryError) as info:
        cross_entropy_rows.plan(logits, labels)
    assert "walk dim V in blocks" in str(info.value) and "V=128256" in str(info.value)
