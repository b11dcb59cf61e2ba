"""Scans along the columns of a block (`jnp.cumsum`, `jnp.cumprod`, `lax.cummax`, `lax.cummin`,
forward and reversed): against jnp and lax on whole arrays, on ragged, padded and one-column
shapes, integers, 16-bit floats, hypothesis; the refusals, the plan's shared memory, and
cross-lowered for Mosaic GPU."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jaxtyping import Array, Float, Shaped

import statickernel as sk


@sk.kernel(tile={"M": "BM"})
def every_scan(
    x: Shaped[Array, "M N"], *, BM: sk.Const[int] = 64
) -> tuple[Shaped[Array, "M N"], Shaped[Array, "M N"], Shaped[Array, "M N"], Shaped[Array, "M N"]]:
    v = sk.load(x)
    return (
        jnp.cumsum(v, axis=1),
        lax.cummax(v, axis=1),
        lax.cummin(v, axis=1, reverse=True),
        lax.cumsum(v, axis=1, reverse=True),
    )


@sk.kernel(tile={"M": "BM"})
def products(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return jnp.cumprod(1.0 + 0.01 * sk.load(x).astype(jnp.float32), axis=1)


def _wanted(x: jax.Array) -> tuple[jax.Array, ...]:
    return (
        jnp.cumsum(x, axis=1),
        lax.cummax(x, axis=1),
        lax.cummin(x, axis=1, reverse=True),
        lax.cumsum(x, axis=1, reverse=True),
    )


def _check_floats(x: jax.Array) -> None:
    got = every_scan(x)
    wide = x.astype(jnp.float32)
    for i, (g, w) in enumerate(zip(got, _wanted(wide), strict=True)):
        if i in (1, 2):  # max and min are exact, NaN included
            np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))
        else:  # a sum in another order: within float32's rounding of the partial sums
            partial = np.abs(np.cumsum(np.abs(np.asarray(wide)), axis=1))
            scale = float(np.max(partial[np.isfinite(partial)], initial=1.0))
            tolerance = scale * (1e-6 if x.dtype == jnp.float32 else 1e-2)
            np.testing.assert_allclose(np.asarray(g, np.float32), w, atol=tolerance, rtol=0)


@pytest.mark.parametrize("shape", [(100, 128), (7, 5), (130, 120), (64, 1), (1, 100), (65, 37)])
def test_scans_match_jnp_on_ragged_and_padded_shapes(shape: tuple[int, int]) -> None:
    _check_floats(jax.random.normal(jax.random.key(0), shape, jnp.float32))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_16_bit_floats_are_scanned_in_float32(dtype: Any) -> None:
    _check_floats(jax.random.normal(jax.random.key(1), (70, 100), dtype))


def test_a_nan_carries_through_max_and_min_scans() -> None:
    x = np.array(jax.random.normal(jax.random.key(2), (40, 24)))
    x[3, 5] = np.nan
    x[9, 20] = np.inf
    _check_floats(jnp.asarray(x))


def test_integer_scans_are_exact() -> None:
    x = jnp.asarray(np.random.default_rng(3).integers(-1000, 1000, (90, 60)), jnp.int32)
    for g, w in zip(every_scan(x), _wanted(x), strict=True):
        np.testing.assert_array_equal(g, w)


def test_cumprod_matches_jnp() -> None:
    x = jax.random.normal(jax.random.key(4), (100, 256), jnp.float32)
    np.testing.assert_allclose(products(x), jnp.cumprod(1.0 + 0.01 * x, axis=1), rtol=2e-5, atol=0)


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 140), cols=st.integers(1, 128), seed=st.integers(0, 2**16))
def test_scans_match_jnp_on_any_shape(rows: int, cols: int, seed: int) -> None:
    _check_floats(jax.random.normal(jax.random.key(seed), (rows, cols), jnp.float32))


def test_the_plan_counts_the_scans_shared_memory() -> None:
    x = jax.ShapeDtypeStruct((1000, 128), jnp.float32)
    plan = every_scan.plan(x)
    # Each scan's buffer: 64 rows of 128 columns and a margin of 64, in float32; the scans
    # run one after another, so the largest is what they take.
    assert "the body's scans run in 49,152 B of shared memory of their own" in str(plan)
    blocks = 5 * 64 * 128 * 4  # the operand's block and the four results'
    assert plan.smem_bytes >= blocks + 49_152


def test_a_scan_over_the_rows_is_refused_with_a_fix() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="over the rows") as info:

        @sk.kernel(tile={"M": "BM"})
        def down(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return jnp.cumsum(sk.load(x), axis=0)

    assert "transposed operand" in str(info.value)


def test_a_scan_along_tiled_columns_is_refused_with_a_fix() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="tiled") as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"})
        def tiled(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return jnp.cumsum(sk.load(x), axis=1)

    assert "drop it from tile=" in str(info.value)


@pytest.mark.parametrize("dtype", [jnp.int8, jnp.uint8, jnp.int16])
def test_narrow_integer_scans_wrap_as_jaxs(dtype: Any) -> None:
    """8- and 16-bit integers are scanned as int32 and cast back: sums wrap as lax's do."""
    info = np.iinfo(np.dtype(dtype))
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.integers(info.min, info.max, (70, 50), endpoint=True), dtype)
    for g, w in zip(every_scan(x), _wanted(x), strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "int8"])
def test_scans_cross_lower_for_the_gpu(dtype: str) -> None:
    x = jax.ShapeDtypeStruct((1000, 96), jnp.dtype(dtype))
    assert "mosaic_gpu" in every_scan.lower(x).as_text()


@sk.kernel(tile={"M": "BM"})
def constant_scan(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return jnp.cumsum(jnp.full_like(sk.load(x), 0.5), axis=1)


def test_a_scan_of_a_constant_block_held_as_its_scalar() -> None:
    """A block of one value is held as a scalar; the scan spreads it first (the body fuzzer
    found this one raising an IndexError at the declaration)."""
    np.testing.assert_array_equal(
        constant_scan(jnp.ones((70, 40))), jnp.cumsum(jnp.full((70, 40), 0.5), axis=1)
    )


def test_a_scan_in_a_loops_step_is_refused_with_a_fix() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="inside a loop's step") as info:

        @sk.kernel(loop={"M": "BM"})
        def streamed(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
            def step(total: jax.Array) -> jax.Array:
                return total + jnp.sum(jnp.cumsum(sk.load(x), axis=1), axis=0)

            return sk.loop("M", step, init=jnp.zeros((x.shape[1],), jnp.float32))

    assert "after the loop" in str(info.value)


# --- whole rows in the row form: one row at a time, scanned in a 1-D buffer --------------------


@sk.kernel(tile={"M": "BM"})
def row_scan(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    """A top-p style running sum of a row of probabilities, wider than the block form holds."""
    v = sk.load(x).astype(jnp.float32)
    return jnp.cumsum(jnp.exp(v - sk.max(v, axis=1, keepdims=True)), axis=1).astype(x.dtype)


def _row_scan_reference(x: jax.Array) -> jax.Array:
    v = x.astype(jnp.float32)
    return jnp.cumsum(jnp.exp(v - jnp.max(v, axis=1, keepdims=True)), axis=1).astype(x.dtype)


@pytest.mark.parametrize(
    "shape", [(3, 4096), (5, 4095), (2, 8192), (2, 16384), (7, 5000), (1, 12289)]
)
def test_whole_rows_are_scanned_in_the_row_form(shape: tuple[int, int]) -> None:
    """Rows of one group of elements a thread (4096) and of several (8192 and wider, combined
    a group at a time from the last), ragged and padded widths."""
    x = jax.random.normal(jax.random.key(shape[1]), shape, jnp.float32)
    assert row_scan.plan(x).form is sk.Form.ROWS
    got, want = row_scan(x), _row_scan_reference(x)
    # Partial sums of up to N terms of at most 1, in another order.
    np.testing.assert_allclose(got, want, rtol=2e-5 * np.log2(shape[1]), atol=1e-3)


@pytest.mark.parametrize("shape", [(4, 4096), (3, 8193)])
def test_every_scan_of_a_whole_row_matches_jnp(shape: tuple[int, int]) -> None:
    """Forward and reversed, sums, maxima and minima: the block form's scans, row by row."""
    x = jax.random.normal(jax.random.key(7), shape, jnp.float32)
    assert every_scan.plan(x).form is sk.Form.ROWS
    _check_floats(x)


def test_integer_and_bfloat16_rows_scan_as_the_block_forms_do() -> None:
    ints = jnp.asarray(np.random.default_rng(8).integers(-1000, 1000, (3, 6000)), jnp.int32)
    assert every_scan.plan(ints).form is sk.Form.ROWS
    for g, w in zip(every_scan(ints), _wanted(ints), strict=True):
        np.testing.assert_array_equal(g, w)
    _check_floats(jax.random.normal(jax.random.key(9), (3, 8192), jnp.bfloat16))


def test_the_row_forms_scan_buffer_is_planned_beside_its_rows() -> None:
    """A row of 16384 float32 and the scan's buffer (the row and a margin of half of it):
    the row form keeps the buffer within a block's shared memory, with fewer stages."""
    x = jax.ShapeDtypeStruct((4096, 16384), jnp.float32)
    plan = row_scan.plan(x, backend="mosaic_gpu")
    assert plan.form is sk.Form.ROWS
    assert "the body's scans run in 98,304 B of shared memory of their own" in str(plan)
    assert plan.smem_bytes <= 232_448


@pytest.mark.parametrize("shape", [(4096, 4096), (4096, 16384), (4095, 8191)])
def test_row_scans_cross_lower_for_the_gpu(shape: tuple[int, int]) -> None:
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    assert "mosaic_gpu" in row_scan.lower(x).as_text()


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(2049, 9000), seed=st.integers(0, 2**16))
def test_row_scans_match_jnp_on_any_wide_shape(rows: int, cols: int, seed: int) -> None:
    x = jax.random.normal(jax.random.key(seed), (rows, cols), jnp.float32)
    np.testing.assert_allclose(row_scan(x), _row_scan_reference(x), rtol=3e-4, atol=1e-3)


def test_a_row_scan_has_no_races() -> None:
    """Each round's reads come before its writes, group by group, under the race detector."""
    x = jax.random.normal(jax.random.key(11), (2, 8192), jnp.float32)
    report = sk.testing.detect_races(row_scan, x)
    assert not report.races_found and report.result is not None
