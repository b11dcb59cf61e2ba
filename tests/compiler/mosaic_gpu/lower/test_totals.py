"""Reductions to a scalar inside the body (`jnp.sum(v)`, `jnp.mean(v)`, `jnp.max(v)`, a
vector's total), used in later math: each kernel in the interpreter against jnp run on each
block of the whole array, on ragged shapes, and cross-lowered for Mosaic GPU."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Float32, Int32

import statickernel as sk
from tolerances import assert_close, tolerance_for


def group_norm_reference(x: jax.Array, eps: float = 1e-5) -> jax.Array:
    v = x.astype(jnp.float32)
    mean = jnp.mean(v, axis=(1, 2), keepdims=True)
    var = jnp.mean(jnp.square(v - mean), axis=(1, 2), keepdims=True)
    return ((v - mean) * jax.lax.rsqrt(var + eps)).astype(x.dtype)


@sk.kernel(batch="G", reference=group_norm_reference)
def group_norm(x: Float[Array, "G C L"], *, eps: sk.Const[float] = 1e-5) -> Float[Array, "G C L"]:
    """Each group's (C, L) block normalized by its own mean and variance."""
    v = sk.load(x).astype(jnp.float32)
    mean = jnp.mean(v)
    var = jnp.mean(jnp.square(v - mean))
    return ((v - mean) * jax.lax.rsqrt(var + eps)).astype(x.dtype)


@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 64, 100), (1, 1, 1), (2, 100, 40), (4, 32, 256)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_group_norm_matches_jnp(shape: tuple[int, int, int], dtype: str) -> None:
    x = (jax.random.normal(jax.random.key(sum(shape)), shape) * 3.0 + 1.0).astype(dtype)
    terms = shape[1] * shape[2]
    assert_close(group_norm(x), group_norm_reference(x), tolerance_for(dtype, terms, scale=3.0))


def _by_blocks(fn: Any, x: jax.Array, rows: int = 64) -> jax.Array:
    return jnp.concatenate([fn(x[i : i + rows]) for i in range(0, len(x), rows)])


@sk.kernel(tile={"M": "BM"})
def centered_by_block(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
    """Each block less its largest element, over its smallest: the scalars of a block whose
    rows and columns are both ragged."""
    v = sk.load(x)
    return (v - jnp.max(v)) / jnp.abs(jnp.min(v))


@pytest.mark.parametrize("shape", [(1, 1), (100, 100), (129, 33), (64, 300)])
def test_the_max_and_min_of_a_block_are_its_own(shape: tuple[int, int]) -> None:
    x = jax.random.normal(jax.random.key(shape[0]), shape) - 4.0  # every element negative
    want = _by_blocks(lambda b: (b - jnp.max(b)) / jnp.abs(jnp.min(b)), x)
    assert_close(centered_by_block(x), want, tolerance_for(jnp.float32))


def test_a_nan_in_a_block_reaches_its_max() -> None:
    x = jax.random.normal(jax.random.key(1), (130, 40)).at[70, 5].set(jnp.nan)
    got = np.asarray(centered_by_block(x))
    assert np.isnan(got[64:128]).all() and not np.isnan(got[:64]).any()


@sk.kernel(tile={"M": "BM"})
def masked_mean(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
    """Each block's positive elements less their mean: a count reduced to a scalar."""
    v = sk.load(x)
    keep = v > 0.0
    count = jnp.sum(keep.astype(jnp.float32))
    mean = jnp.sum(jnp.where(keep, v, 0.0)) / jnp.maximum(count, 1.0)
    return jnp.where(keep, v - mean, 0.0)


@pytest.mark.parametrize("shape", [(1, 3), (100, 100), (200, 17)])
def test_a_masked_mean_counts_only_the_elements_inside_the_edge(shape: tuple[int, int]) -> None:
    x = jax.random.normal(jax.random.key(7), shape)

    def block(b: jax.Array) -> jax.Array:
        keep = b > 0.0
        mean = jnp.sum(jnp.where(keep, b, 0.0)) / jnp.maximum(jnp.sum(keep), 1)
        return jnp.where(keep, b - mean, 0.0)

    assert_close(masked_mean(x), _by_blocks(block, x), tolerance_for(jnp.float32, shape[1] * 64))


@sk.kernel(tile={"M": "BM"})
def scaled_by_weight_total(
    x: Int32[Array, "M N"], w: Int32[Array, " N"], *, BM: sk.Const[int] = 64
) -> Int32[Array, "M N"]:
    """A per-column vector's total, an int32 scalar (the columns ragged: 100 of 104)."""
    return sk.load(x) * jnp.sum(sk.load(w)) + jnp.sum(jnp.sum(sk.load(x), axis=1))


def test_an_integer_vector_and_block_total() -> None:
    x = jax.random.randint(jax.random.key(0), (70, 100), -50, 50)
    w = jax.random.randint(jax.random.key(1), (100,), -50, 50)
    want = _by_blocks(lambda b: b * jnp.sum(w) + jnp.sum(b), x)
    np.testing.assert_array_equal(scaled_by_weight_total(x, w), want)


@sk.kernel(tile={"M": "BM"})
def constant_totals(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
    twos = jnp.full_like(sk.load(x), 2.0)
    return twos - jnp.max(twos) + jnp.sum(twos)


def test_a_constant_blocks_total_counts_the_elements_inside_the_edge() -> None:
    """A block of one value is held as its scalar; its total spreads it over the block, so the
    sum counts the elements inside the array (47 x 100 here, one block of rows)."""
    got = constant_totals(jnp.ones((47, 100), jnp.float32))
    np.testing.assert_array_equal(got, jnp.full((47, 100), 2.0 * 47 * 100))


@pytest.mark.parametrize(
    ("kernel", "structs"),
    [
        (group_norm, (jax.ShapeDtypeStruct((4, 32, 256), jnp.bfloat16),)),
        (centered_by_block, (jax.ShapeDtypeStruct((129, 33), jnp.float32),)),
        (masked_mean, (jax.ShapeDtypeStruct((200, 17), jnp.float32),)),
        (
            scaled_by_weight_total,
            (
                jax.ShapeDtypeStruct((70, 100), jnp.int32),
                jax.ShapeDtypeStruct((100,), jnp.int32),
            ),
        ),
    ],
)
def test_a_reduction_to_a_scalar_cross_lowers_for_the_gpu(kernel: Any, structs: Any) -> None:
    kernel.lower(*structs)
