"""Training through the gallery: the mean cross-entropy and its backward kernel, and jax.grad of
a small model built from gallery kernels against the same model in jnp.

The model is an MLP block: rmsnorm -> matmul + bias + GELU -> matmul -> softmax cross-entropy,
at ragged shapes (no dim a multiple of its block). rmsnorm and the loss are differentiated by
their own backward kernels; the matmuls through their references.
"""

import functools
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
    cross_entropy_backward_reference,
    cross_entropy_reference,
)
from matmul import matmul, matmul_reference
from matmul_bias_gelu import matmul_bias_gelu, matmul_bias_gelu_reference
from rmsnorm import rmsnorm, rmsnorm_reference

F32 = jnp.dtype(jnp.float32)
BF16 = jnp.dtype(jnp.bfloat16)


def _logits(m: int, v: int, dtype: Any, seed: int = 0) -> tuple[jax.Array, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(seed))
    logits = (3 * jax.random.normal(k1, (m, v), jnp.float32)).astype(dtype)
    labels = jax.random.randint(k2, (m,), 0, v, jnp.int32)
    return logits, labels


# --- the loss ----------------------------------------------------------------------------------

LOSS_SHAPES = {
    "aligned": (128, 512),
    "ragged": (100, 1000),
    "primes": (131, 257),
    "one-row": (1, 7),
    "vocabulary": (64, 32000),
}


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("shape", list(LOSS_SHAPES.values()), ids=list(LOSS_SHAPES))
def test_cross_entropy_matches_the_reference(shape: tuple[int, int], dtype: Any) -> None:
    logits, labels = _logits(*shape, dtype)
    loss = cross_entropy(logits, labels)
    assert loss.shape == () and loss.dtype == F32
    np.testing.assert_allclose(loss, cross_entropy_reference(logits, labels), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("shape", list(LOSS_SHAPES.values()), ids=list(LOSS_SHAPES))
def test_cross_entropy_gradient(shape: tuple[int, int], dtype: Any) -> None:
    logits, labels = _logits(*shape, dtype)
    value, grad = jax.value_and_grad(cross_entropy)(logits, labels)
    want_value, want_grad = jax.value_and_grad(cross_entropy_reference)(logits, labels)
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-5)
    assert grad.shape == logits.shape and grad.dtype == logits.dtype
    atol = 1e-7 if dtype == F32 else 2e-2 / shape[0]
    np.testing.assert_allclose(
        np.asarray(grad, np.float32), np.asarray(want_grad, np.float32), atol=atol, rtol=2e-2
    )


def test_the_backward_kernel_matches_its_reference() -> None:
    logits, labels = _logits(100, 1000, F32)
    g = jnp.float32(0.7)
    np.testing.assert_allclose(
        cross_entropy_backward(logits, labels, g),
        cross_entropy_backward_reference(logits, labels, g),
        atol=1e-7,
    )


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 200), v=st.integers(1, 700), bv=st.sampled_from([128, 256]))
def test_cross_entropy_at_any_shape(m: int, v: int, bv: int) -> None:
    logits, labels = _logits(m, v, F32, seed=m * 1000 + v)
    loss = functools.partial(cross_entropy, BV=bv)
    value, grad = jax.value_and_grad(loss)(logits, labels)
    want_value, want_grad = jax.value_and_grad(cross_entropy_reference)(logits, labels)
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-7, rtol=1e-4)


@pytest.mark.slow
def test_the_loss_is_the_same_bits_on_every_call() -> None:
    logits, labels = _logits(1000, 3000, BF16, seed=4)
    first = np.asarray(cross_entropy(logits, labels))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(cross_entropy(logits, labels)), first)
    grad = np.asarray(jax.grad(cross_entropy)(logits, labels), np.float32)
    again = np.asarray(jax.grad(cross_entropy)(logits, labels), np.float32)
    np.testing.assert_array_equal(grad, again)


def test_the_loss_plans_partials_along_the_rows() -> None:
    logits = jax.ShapeDtypeStruct((16384, 32000), BF16)
    labels = jax.ShapeDtypeStruct((16384,), jnp.int32)
    plan = cross_entropy.plan(logits, labels)
    (cross,) = plan.cross_blocks
    assert cross.kept == "M" and cross.per_block == ()  # each row's loss, summed after
    assert plan.results[0].shape == (16384,)
    assert "mosaic_gpu" in cross_entropy.with_backend("mosaic_gpu").lower(logits, labels).as_text()


def test_integer_labels_have_no_gradient() -> None:
    logits, labels = _logits(70, 300, F32)
    dlogits, dlabels = jax.grad(cross_entropy, argnums=(0, 1), allow_int=True)(logits, labels)
    assert dlogits.shape == logits.shape
    assert dlabels.dtype == jax.dtypes.float0


# --- a small model -----------------------------------------------------------------------------


def _model(kernels: bool):
    norm = rmsnorm if kernels else rmsnorm_reference
    up = matmul_bias_gelu if kernels else matmul_bias_gelu_reference
    down = matmul if kernels else matmul_reference
    loss = cross_entropy if kernels else cross_entropy_reference

    def forward(params: dict[str, jax.Array], x: jax.Array, labels: jax.Array) -> jax.Array:
        h = norm(x, params["norm"])
        a = up(h, params["w1"], params["b1"])
        return loss(down(a, params["w2"]), labels)

    return forward


def _params(d: int, hidden: int, vocab: int) -> dict[str, jax.Array]:
    keys = jax.random.split(jax.random.key(7), 4)
    return {
        "norm": (1 + 0.1 * jax.random.normal(keys[0], (d,), jnp.float32)).astype(BF16),
        "w1": (jax.random.normal(keys[1], (d, hidden), jnp.float32) / d**0.5).astype(BF16),
        "b1": 0.1 * jax.random.normal(keys[2], (hidden,), jnp.float32),
        "w2": (jax.random.normal(keys[3], (hidden, vocab), jnp.float32) / hidden**0.5).astype(BF16),
    }


MODEL_SHAPES = {
    "ragged": (100, 200, 260, 1000),  # rows, model width, hidden, vocabulary
    "primes": (67, 136, 136, 509),
    "one-row": (1, 64, 64, 100),
}


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(MODEL_SHAPES.values()), ids=list(MODEL_SHAPES))
def test_grad_of_a_small_model_matches_jnp(shape: tuple[int, int, int, int]) -> None:
    m, d, hidden, vocab = shape
    params = _params(d, hidden, vocab)
    x = jax.random.normal(jax.random.key(3), (m, d), jnp.float32).astype(BF16)
    labels = jax.random.randint(jax.random.key(4), (m,), 0, vocab, jnp.int32)
    value, grads = jax.jit(jax.value_and_grad(_model(True)))(params, x, labels)
    want_value, want = jax.value_and_grad(_model(False))(params, x, labels)
    np.testing.assert_allclose(value, want_value, rtol=2e-2)
    for name in params:
        got, ref = np.asarray(grads[name], np.float32), np.asarray(want[name], np.float32)
        assert grads[name].dtype == params[name].dtype, name
        scale = float(np.max(np.abs(ref))) or 1.0
        # bf16 activations: the kernels and XLA round at other points of the chain.
        np.testing.assert_allclose(got, ref, atol=5e-2 * scale, rtol=0, err_msg=name)


def test_a_small_model_grad_under_jit_runs_the_kernels() -> None:
    m, d, hidden, vocab = MODEL_SHAPES["ragged"]
    params = _params(d, hidden, vocab)
    x = jnp.ones((m, d), BF16)
    labels = jnp.zeros((m,), jnp.int32)
    jaxpr = str(jax.make_jaxpr(jax.grad(_model(True)))(params, x, labels))
    # Forward: rmsnorm, two matmuls, the loss; backward: rmsnorm's two kernels and the loss's.
    assert jaxpr.count("pure_callback[") == 7


def test_forward_mode_through_the_loss_is_refused() -> None:
    logits, labels = _logits(64, 128, F32)
    with pytest.raises(sk.NotDifferentiableError):
        jax.jvp(lambda z: cross_entropy(z, labels), (logits,), (logits,))


def test_a_label_outside_the_vocabulary_marks_an_ignored_row() -> None:
    """-100 (and any label outside [0, V)) adds no loss and gets no gradient; the mean still
    divides by every row. The reference says the same, and differs from ignoring nothing."""
    logits, labels = _logits(129, 300, F32, seed=8)
    labels = labels.at[:7].set(-100).at[7:9].set(300)
    value, grad = jax.value_and_grad(cross_entropy)(logits, labels)
    want_value, want_grad = jax.value_and_grad(cross_entropy_reference)(logits, labels)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(grad[:9]), 0.0)
    kept = cross_entropy_reference(logits[9:], labels[9:]) * (120 / 129)
    np.testing.assert_allclose(value, kept, rtol=1e-5)
