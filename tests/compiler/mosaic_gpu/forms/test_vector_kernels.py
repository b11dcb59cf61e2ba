"""Kernels of vectors alone (every operand and result 1-D along one dim, no loops): an
elementwise body in the strided layout, a body with masks or reductions in the block form,
dropout with `sk.random_bits` against its whole-array reference, a sum to a scalar, positions
and a 0-d operand, each against jnp on ragged sizes (one element, under and past one block,
primes); blocks over 256 elements (bulk copies take no TMA box); the declaration's refusals
that remain; cross-lowering for Mosaic GPU."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, Float, Float32, Int32, Shaped, UInt32

import statickernel as sk
from tolerances import assert_close, tolerance_for

# One element; under a block; one block and one past it; a prime past several blocks.
SIZES = (1, 5, 1024, 1025, 10007)


@sk.kernel(tile={"N": "BN"})
def axpy(
    x: Shaped[Array, " N"],
    y: Shaped[Array, " N"],
    *,
    a: sk.Const[int] = 3,
    BN: sk.Const[int] = 1024,
) -> Shaped[Array, " N"]:
    """a * x + y: elementwise, so the strided layout holds the block."""
    return sk.load(x) * a + sk.load(y)


@sk.kernel(tile={"N": "BN"})
def dropout_vector(
    x: Float[Array, " N"],
    seed: UInt32[Array, ""],
    *,
    rate: sk.Const[float] = 0.25,
    BN: sk.Const[int] = 2048,
) -> Float[Array, " N"]:
    v = sk.load(x)
    keep = sk.uniform(seed) >= rate
    return jnp.where(keep, v / (1 - rate), jnp.zeros_like(v))


@sk.kernel(tile={"N": "BN"})
def total(x: Float[Array, " N"], *, BN: sk.Const[int] = 2048) -> Float32[Array, ""]:
    return jnp.sum(sk.load(x).astype(jnp.float32))


@sk.kernel(tile={"N": "BN"})
def ramp(
    x: Float[Array, " N"], alpha: Float32[Array, ""], *, BN: sk.Const[int] = 512
) -> Float32[Array, " N"]:
    """A fill past the edge, a position and a scalar operand: the block form's masks."""
    v = sk.load(x, fill=-1.0).astype(jnp.float32)
    return jnp.maximum(v, 0.0) * sk.load(alpha) + sk.position("N").astype(jnp.float32)


def _vector(n: int, dtype: Any = jnp.float32, seed: int = 0) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), (n,), jnp.float32).astype(dtype)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32])
def test_an_elementwise_vector_kernel_matches_jnp(n: int, dtype: Any) -> None:
    x = (_vector(n, seed=1) * 50).astype(dtype)
    y = (_vector(n, seed=2) * 50).astype(dtype)
    want = x * 3 + y
    if dtype == jnp.int32:
        np.testing.assert_array_equal(axpy(x, y), want)
    else:
        assert_close(axpy(x, y), want, tolerance_for(dtype, 2, scale=200.0))


def test_an_elementwise_vector_kernel_takes_the_strided_layout() -> None:
    x = jax.ShapeDtypeStruct((1 << 20,), jnp.float32)
    source = axpy.emit(x, x)
    assert "plgpu.Layout.WG_STRIDED((1024,), 4)" in source
    # A block of 1024 elements is over one TMA box: vectors are copied by bulk copies.
    assert "x_gmem.at[pl.ds(block_N * 1024, 1024)]" in source


@pytest.mark.parametrize("n", SIZES)
def test_dropout_of_a_vector_matches_its_whole_array_reference(n: int) -> None:
    x = _vector(n, seed=3)
    got = dropout_vector(x, jnp.uint32(11))
    keep = sk.uniform_reference(jnp.uint32(11), (n,)) >= 0.25
    want = jnp.where(keep, x / 0.75, 0.0)
    assert_close(got, want, tolerance_for(jnp.float32, 1))


def test_a_vector_has_the_bits_of_the_first_row_of_its_2d_array() -> None:
    rows = sk.random_bits_reference(7, (4, 300))
    np.testing.assert_array_equal(sk.random_bits_reference(7, (300,)), rows[0])
    keep_rate = float(jnp.mean(sk.uniform_reference(7, (100_000,)) >= 0.25))
    assert abs(keep_rate - 0.75) < 0.01


@pytest.mark.parametrize("n", SIZES)
def test_a_vector_sums_to_a_scalar(n: int) -> None:
    x = _vector(n, jnp.bfloat16, seed=4)
    want = jnp.sum(x.astype(jnp.float32))
    assert_close(total(x), want, tolerance_for(jnp.float32, n, scale=4.0))


@pytest.mark.parametrize("n", SIZES)
def test_fills_positions_and_a_scalar_operand(n: int) -> None:
    x = _vector(n, jnp.bfloat16, seed=5)
    want = jnp.maximum(x.astype(jnp.float32), 0.0) * 2.5 + jnp.arange(n, dtype=jnp.float32)
    assert_close(ramp(x, jnp.float32(2.5)), want, tolerance_for(jnp.float32, 1, scale=n))


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 5000), bn=st.sampled_from([256, 512, 2048]))
def test_ragged_vectors_with_hypothesis(n: int, bn: int) -> None:
    x = _vector(n, seed=n)
    y = _vector(n, seed=n + 1)
    assert_close(axpy(x, y, BN=bn), x * 3 + y, tolerance_for(jnp.float32, 2, scale=8.0))


def test_vectors_along_two_dims_are_still_refused() -> None:
    with pytest.raises(sk.AnnotationError, match="no 2-D operand or result"):

        @sk.kernel(tile={"N": "BN"})
        def two_dims(
            x: Float[Array, " N"], w: Float[Array, " C"], *, BN: sk.Const[int] = 256
        ) -> tuple[Float[Array, " N"], Float[Array, " C"]]:
            return sk.load(x), sk.load(w)


def test_a_vector_block_is_still_a_multiple_of_128_bytes() -> None:
    with pytest.raises(sk.BlockAlignmentError):

        @sk.kernel(tile={"N": "BN"})
        def narrow(x: Int32[Array, " N"], *, BN: sk.Const[int] = 16) -> Int32[Array, " N"]:
            return sk.load(x)


@pytest.mark.parametrize(
    ("kernel", "args"),
    [
        (axpy, (jax.ShapeDtypeStruct((10007,), jnp.bfloat16),) * 2),
        (dropout_vector, (jax.ShapeDtypeStruct((10007,), jnp.float32), jnp.uint32(1))),
        (total, (jax.ShapeDtypeStruct((10007,), jnp.float32),)),
        (ramp, (jax.ShapeDtypeStruct((10007,), jnp.float32), jnp.float32(1))),
    ],
    ids=["axpy", "dropout", "total", "ramp"],
)
def test_vector_kernels_cross_lower_for_the_gpu(kernel: Any, args: tuple[Any, ...]) -> None:
    assert "mosaic_gpu" in kernel.lower(*args).as_text()


@pytest.mark.parametrize(
    ("n", "dtype", "padded"), [(1025, jnp.float32, 1028), (129, jnp.bfloat16, 136)]
)
def test_a_vector_of_another_byte_length_is_padded_to_16_bytes(
    n: int, dtype: Any, padded: int
) -> None:
    """A bulk copy clamped at the array's end must move a multiple of 16 bytes (else its
    barrier never completes: it hung on an H200), so the arrays are padded on the host."""
    x = jax.ShapeDtypeStruct((n,), dtype)
    plan = axpy.plan(x, x)
    assert plan.operand("x").gmem_shape == (padded,)
    assert plan.results[0].gmem_shape == (padded,)
    assert "not a multiple of 16 B, which a bulk copy clamped at its end must move" in str(plan)
    aligned = jax.ShapeDtypeStruct((1024,), jnp.float32)
    assert not axpy.plan(aligned, aligned).operand("x").host_padded
