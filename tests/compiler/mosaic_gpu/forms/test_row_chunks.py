"""Rows too wide for a warpgroup's registers, computed in passes over chunks of their columns:
which bodies and widths take chunks, and the chunked kernels against their references in the
interpreter. (Their registers and spills at 4096 x 32768 are in tests/aot/test_compile.py.)"""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jaxtyping import Array, Float, Int32

import statickernel as sk
from layernorm import layernorm, layernorm_backward_rows, layernorm_reference
from norm_quant import norm_quant, norm_quant_reference
from rmsnorm import rmsnorm, rmsnorm_reference
from softmax import softmax, softmax_reference
from statickernel._compiler.mosaic_gpu.pallas import RowFrame
from statickernel._compiler.mosaic_gpu.plan.row_chunks import (
    CHUNK_ELEMENTS,
    MAX_ROW_ELEMENTS,
    chunked_frame,
)
from tolerances import assert_close, tolerance_for

F32, BF16 = jnp.float32, jnp.bfloat16


def _normal(key: int, shape: tuple[int, ...], dtype: Any, scale: float = 1.0) -> jax.Array:
    return (scale * jax.random.normal(jax.random.key(key), shape, F32)).astype(dtype)


def _weight(key: int, n: int, dtype: Any) -> jax.Array:
    return (1.0 + _normal(key, (n,), F32, 0.1)).astype(dtype)


def _frame(plan: sk.LaunchPlan) -> RowFrame:
    form = str(plan).split("form: ")[1].split("\n")[0]
    assert form.startswith("rows:"), form
    frame = plan.row_frame
    assert frame is not None
    return frame


# --- which widths and bodies -----------------------------------------------------------------


@given(
    width=st.integers(1, 64).map(lambda n: n * 1024),
    vector=st.sampled_from([4, 8]),
    accumulates=st.booleans(),
)
def test_chunks_divide_a_wide_row_into_register_sized_pieces(
    width: int, vector: int, accumulates: bool
) -> None:
    frame = RowFrame(width, vector)
    chunked = chunked_frame(frame, accumulates)
    if width <= MAX_ROW_ELEMENTS or accumulates:
        assert chunked is None
        return
    assert chunked is not None
    chunked.check_invariants()
    assert chunked.width == width and chunked.chunk_width * chunked.chunks == width
    assert chunked.chunk_width <= CHUNK_ELEMENTS and chunked.chunk_width % (128 * vector) == 0


@pytest.mark.parametrize(
    ("kernel", "args"),
    [
        (softmax, [_normal(0, (3, 32768), BF16)]),
        (rmsnorm, [_normal(1, (3, 32768), BF16), _weight(2, 32768, BF16)]),
        (
            layernorm,
            [_normal(3, (3, 20480), BF16), _weight(4, 20480, BF16), _normal(5, (20480,), BF16)],
        ),
        (softmax, [_normal(18, (2, 24576), F32)]),
    ],
    ids=["softmax-32768-bf16", "rmsnorm-32768-bf16", "layernorm-20480-bf16", "softmax-24576-f32"],
)
def test_the_widest_norms_and_softmax_run_in_chunks(
    kernel: sk.Kernel[..., Any], args: list[jax.Array]
) -> None:
    plan = kernel.plan(*args)
    frame = _frame(plan)
    width = args[0].shape[1]
    assert frame.chunks > 1 and frame.chunk_width * frame.chunks == width
    assert f"in {frame.chunks} chunks of {frame.chunk_width} columns" in str(plan)
    want = kernel.spec.reference(*args)  # type: ignore[misc]
    dtype = args[0].dtype
    assert_close(kernel(*args), want, tolerance_for(dtype, terms=width, scale=4.0))


def test_rows_up_to_16384_columns_are_held_whole() -> None:
    x = jax.ShapeDtypeStruct((64, 16384), F32)
    assert _frame(softmax.plan(x)).chunks == 1


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((2, 32000), BF16), ((1, 50000), F32)],  # vocabularies: masked past their edge
)
def test_a_ragged_wide_row_masks_each_chunk_past_its_edge(
    shape: tuple[int, int], dtype: Any
) -> None:
    x = _normal(6, shape, dtype)
    frame = _frame(softmax.plan(x))
    assert frame.chunks > 1 and frame.width > shape[1]  # padded to whole chunks
    assert_close(softmax(x), softmax_reference(x), tolerance_for(dtype, terms=shape[1]))
    source = softmax.emit(x)
    chunk = frame.chunk_width
    assert f"col_index = col_index + chunk * {chunk}" in source
    assert f"col_ok = col_index < {shape[1]}" in source


@sk.kernel(tile={"M": "BM"})
def _argmax_row(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, " M"]:
    return jnp.argmax(sk.load(x), axis=1).astype(jnp.int32)


def test_an_argmax_along_the_row_keeps_it_whole() -> None:
    """An argmax's position is the row's, not a chunk's: the row is held whole."""
    x = _normal(7, (2, 32768), F32)
    assert _frame(_argmax_row.plan(x)).chunks == 1
    assert (_argmax_row(x) == jnp.argmax(x, axis=1)).all()


def test_a_per_row_result_and_a_quantized_row_come_from_the_chunks() -> None:
    """norm_quant: a residual, a weight, a sum and a max over the row, an fp8 result chunk by
    chunk and the per-row scale after the passes."""
    # 30720: x, the residual, the weight and the fp8 result fit beside each other.
    x, residual = _normal(8, (3, 30720), BF16), _normal(9, (3, 30720), BF16)
    weight = _weight(10, 30720, BF16)
    assert _frame(norm_quant.plan(x, residual, weight)).chunks > 1
    q, scale = norm_quant(x, residual, weight)
    q_ref, scale_ref = norm_quant_reference(x, residual, weight)
    assert_close(scale, scale_ref, tolerance_for(F32, terms=30720, scale=4.0))
    # One fp8 step (an eighth of the value) where rounding near a boundary differs.
    assert_close(q, q_ref, tolerance_for(jnp.float8_e4m3fn, ulps=1, scale=448.0))


def test_a_backward_with_per_row_statistics_runs_in_chunks() -> None:
    """Four reductions over three passes (a mean, the variance about it, two means of the
    gradient), the row's gradient and its mean and rstd."""
    x, dy = _normal(11, (2, 32768), BF16), _normal(12, (2, 32768), BF16)
    weight = _weight(13, 32768, BF16)
    assert _frame(layernorm_backward_rows.plan(x, weight, dy)).chunks > 1
    got = layernorm_backward_rows(x, weight, dy)
    want = layernorm_backward_rows.spec.reference(x, weight, dy)  # type: ignore[misc]
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, tolerance_for(g.dtype, terms=32768, scale=4.0))


def test_the_module_walks_the_chunks_in_passes() -> None:
    x = jax.ShapeDtypeStruct((4096, 32768), BF16)
    w = jax.ShapeDtypeStruct((32768,), BF16)
    source = rmsnorm.emit(x, w)
    assert source.count("for chunk in range(4):") == 2  # the sum of squares, the results
    assert "x_smem.at[slot, r, pl.ds(chunk * 8192, 8192)]" in source
    assert "weight_smem.at[pl.ds(chunk * 8192, 8192)]" in source
    lowered = rmsnorm.lower(x, w)  # cross-lowered for Mosaic GPU on CUDA
    assert "mosaic_gpu" in lowered.as_text()


def test_a_chunked_row_has_no_race() -> None:
    x = _normal(14, (2, 32768), BF16)
    report = sk.testing.detect_races(softmax, x)
    assert not report.races_found and report.result is not None
    assert_close(report.result, softmax_reference(x), tolerance_for(BF16, terms=32768))


def test_rmsnorm_and_layernorm_references_agree_at_the_chunked_width() -> None:
    x = _normal(15, (2, 32768), BF16)
    w = _weight(16, 32768, BF16)
    b = _normal(17, (32768,), BF16)
    assert_close(rmsnorm(x, w), rmsnorm_reference(x, w), tolerance_for(BF16, terms=32768))
    assert_close(layernorm(x, w, b), layernorm_reference(x, w, b), tolerance_for(BF16, terms=32768))


@sk.kernel(tile={"M": "BM"})
def _position_weighted(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    v = sk.load(x)
    columns = sk.position("N")[None, :].astype(jnp.float32)
    return v * columns / sk.sum(v * columns, axis=1, keepdims=True)


def test_a_column_position_is_each_chunks_own() -> None:
    """The positions of a row taken in chunks are offset by each chunk's first column."""
    x = 1.0 + jnp.abs(_normal(19, (2, 32768), F32))
    assert _frame(_position_weighted.plan(x)).chunks > 1
    columns = jnp.arange(32768, dtype=jnp.float32)[None, :]
    want = x * columns / jnp.sum(x * columns, axis=1, keepdims=True)
    assert_close(_position_weighted(x), want, tolerance_for(F32, terms=32768, scale=4.0))
