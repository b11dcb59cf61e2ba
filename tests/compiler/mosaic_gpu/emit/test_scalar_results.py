"""A 0-d result of each grid step: one value a batch entry (`-> "B"` under batch=("B",)), or
the one value of a kernel with no grid dims (`-> ""`). No TMA box holds a 0-d block: the
value is written from registers to its element of the array (`OperandPlan.in_place`).
Against jnp, at ragged and one-element shapes, and cross-lowered for Mosaic GPU."""

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float, Float32

import statickernel as sk
from tolerances import assert_close, tolerance_for


@sk.kernel(batch=("B",))
def entry_sums(x: Float[Array, "B N"]) -> Float32[Array, " B"]:
    """Each batch entry's vector summed: a kernel of vectors alone, one value an entry."""
    return jnp.sum(sk.load(x).astype(jnp.float32))


@sk.kernel(batch=("B", "H"))
def entry_stats(
    x: Float[Array, "B H M N"],
) -> tuple[Float[Array, "B H M N"], Float32[Array, "B H"], Float32[Array, "B H"]]:
    """Each (B, H) entry's block centred, with its mean and its max beside it."""
    v = sk.load(x).astype(jnp.float32)
    mean = jnp.mean(v)
    return (v - mean).astype(x.dtype), mean, jnp.max(v)


@sk.kernel()
def total(x: Float[Array, "M N"]) -> Float32[Array, ""]:
    """The whole array in one block, summed."""
    return jnp.sum(sk.load(x).astype(jnp.float32))


def _normal(seed: int, shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, dtype)


def test_a_vector_per_batch_entry_is_the_frame_not_parameters() -> None:
    # Before: "B N" alone made N a dim of parameter vectors, and no frame was left.
    assert (entry_sums.spec.rows, entry_sums.spec.cols, entry_sums.spec.param_dims) == (
        "N",
        None,
        (),
    )


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((3, 20), jnp.float32),
        ((1, 1), jnp.float32),
        ((2, 300), jnp.bfloat16),
        ((5, 64), jnp.float32),
    ],
)
def test_one_sum_per_batch_entry_matches_jnp(shape: tuple[int, int], dtype: jnp.dtype) -> None:
    x = _normal(0, shape, dtype)
    got = entry_sums(x)
    assert got.shape == (shape[0],) and got.dtype == jnp.float32
    want = jnp.sum(x.astype(jnp.float32), axis=1)
    assert_close(got, want, tolerance_for(jnp.float32, terms=shape[1]))


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 1, 1, 1), (1, 2, 65, 13)])
def test_statistics_per_entry_beside_a_block_match_jnp(shape: tuple[int, ...]) -> None:
    x = _normal(1, shape)
    centred, mean, top = entry_stats(x)
    want_mean = jnp.mean(x, axis=(2, 3))
    terms = shape[2] * shape[3]
    assert mean.shape == shape[:2] and top.shape == shape[:2]
    assert_close(mean, want_mean, tolerance_for(jnp.float32, terms=terms))
    assert_close(top, jnp.max(x, axis=(2, 3)), tolerance_for(jnp.float32))
    assert_close(centred, x - want_mean[..., None, None], tolerance_for(jnp.float32, terms=terms))


@pytest.mark.parametrize("shape", [(5, 9), (1, 1), (70, 130)])
def test_the_one_value_of_a_kernel_without_grid_dims_matches_jnp(shape: tuple[int, int]) -> None:
    x = _normal(2, shape)
    got = total(x)
    assert got.shape == ()
    assert_close(got, jnp.sum(x), tolerance_for(jnp.float32, terms=x.size))


def test_the_plan_and_the_module_write_the_value_from_registers() -> None:
    x = jax.ShapeDtypeStruct((3, 20), jnp.float32)
    plan = entry_sums.plan(x)
    assert plan.results[0].in_place and plan.results[0].block_shape == ()
    assert "its element written from registers, one a grid step" in str(plan)
    source = entry_sums.emit(x)
    assert "result_gmem = result_gmem.at[block_B]" in source
    assert "result_gmem[...] = " in source and "copy_smem_to_gmem" not in source


@pytest.mark.parametrize(
    ("kernel", "shape"),
    [(entry_sums, (3, 20)), (entry_stats, (2, 3, 70, 40)), (total, (5, 9))],
)
def test_a_value_per_grid_step_cross_lowers_for_the_gpu(
    kernel: sk.Kernel, shape: tuple[int, ...]
) -> None:
    assert "mosaic_gpu" in kernel.lower(jax.ShapeDtypeStruct(shape, jnp.float32)).as_text()
