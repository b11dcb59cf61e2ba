"""The block-scaled fp8 matmul (DeepGEMM's scaling) against a jnp reference that applies the
scales to each K block's product: on ragged M, N and K (a partial last scale block), one row,
a single K block, and a model shape's plan and cross-lowering."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import statickernel as sk
from matmul_fp8_blockwise import (
    SCALE_BLOCK,
    matmul_fp8_blockwise,
    matmul_fp8_blockwise_reference,
    matmul_fp8_blockwise_steps,
)

F32 = jnp.float32


def _operands(m: int, n: int, k: int, seed: int) -> tuple[jax.Array, ...]:
    """fp8 a and b, and positive scales per 1x128 of a and per 128x128 of b."""
    rng = np.random.default_rng([seed, m, n, k])
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    a = jnp.asarray(rng.standard_normal((m, k)) * 4, F32).astype(jnp.float8_e4m3fn)
    b = jnp.asarray(rng.standard_normal((n, k)) * 4, F32).astype(jnp.float8_e4m3fn)
    a_scales = jnp.asarray(rng.uniform(0.01, 0.1, (m, kb)), F32)
    b_scales = jnp.asarray(rng.uniform(0.01, 0.1, (nb, kb)), F32)
    return a, b, a_scales, b_scales


def _check(m: int, n: int, k: int, seed: int = 0) -> None:
    args = _operands(m, n, k, seed)
    got = matmul_fp8_blockwise(*args).astype(F32)
    want = matmul_fp8_blockwise_reference(*args).astype(F32)
    assert got.shape == (m, n) and got.dtype == F32
    # bf16 results: the kernel and the reference may round a sum to neighbouring bf16 values.
    np.testing.assert_allclose(got, want, rtol=2**-7, atol=1e-3)


# (m, n, k): ragged everything with a partial last scale block; one row; one K block; N less
# than a scale block; K exactly two scale blocks.
SHAPES = [(100, 200, 300), (1, 130, 129), (64, 128, 128), (70, 50, 256), (130, 260, 1000)]


@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_blockwise_scaling_matches_the_reference(m: int, n: int, k: int) -> None:
    _check(m, n, k)


@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 150), n=st.integers(1, 300), k=st.integers(1, 400))
def test_blockwise_scaling_at_drawn_shapes(m: int, n: int, k: int) -> None:
    _check(m, n, k, seed=1)


def test_each_step_applies_its_own_scales() -> None:
    """Scales that differ by K block change the result: a kernel applying one scale to the
    whole sum (the per-tensor matmul_fp8's way) would not match."""
    a, b, a_scales, b_scales = _operands(64, 128, 256, 2)
    a_scales = a_scales.at[:, 1].multiply(100.0)
    got = matmul_fp8_blockwise(a, b, a_scales, b_scales).astype(F32)
    want = matmul_fp8_blockwise_reference(a, b, a_scales, b_scales).astype(F32)
    np.testing.assert_allclose(got, want, rtol=2**-7, atol=1e-3)
    uniform = matmul_fp8_blockwise_reference(a, b, a_scales[:, :1].repeat(2, 1), b_scales)
    assert not np.allclose(np.asarray(got), np.asarray(uniform.astype(F32)), rtol=1e-2)


def test_the_kernel_passes_its_own_probe_checks() -> None:
    sk.testing.check_kernel(matmul_fp8_blockwise_steps, dtypes=["float8_e4m3fn"])


def test_a_model_shape_plans_and_cross_lowers() -> None:
    """DeepSeek-V3-like: 4096 tokens by 4096 by 7168, 128-element scale blocks."""
    m, n, k = 4096, 4096, 7168
    args: Any = (
        jax.ShapeDtypeStruct((m, k), jnp.float8_e4m3fn),
        jax.ShapeDtypeStruct((n, k), jnp.float8_e4m3fn),
        jax.ShapeDtypeStruct((k // SCALE_BLOCK, m), F32),
        jax.ShapeDtypeStruct((k // SCALE_BLOCK, n), F32),
    )
    text = str(matmul_fp8_blockwise_steps.plan(*args))
    assert "Kb=56" in text and "groups of K" in text
    assert "mosaic_gpu" in matmul_fp8_blockwise_steps.lower(*args).as_text()


def test_scales_for_the_wrong_block_are_refused() -> None:
    """Kb must number the K steps: scales per 64 columns with BK = 128 are a ShapeError."""
    a, b, a_scales, b_scales = _operands(64, 128, 256, 3)
    b_cols = jnp.repeat(b_scales, SCALE_BLOCK, axis=0)[:128]
    with pytest.raises(sk.ShapeError, match="Kb"):
        matmul_fp8_blockwise_steps(a, b, jnp.tile(a_scales.T, (2, 1)), jnp.tile(b_cols.T, (2, 1)))
