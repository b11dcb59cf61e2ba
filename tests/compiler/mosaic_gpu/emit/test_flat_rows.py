"""Rows whose bytes are not a multiple of 16, addressed flat by the row form (no host padding):
the plan's arrays and cost, the emitted copies, and the kernels against their references in
the interpreter, under the race detector and cross-lowered. (Registers and spills at 16384 x
4095 are in tests/aot/test_compile.py.)"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import statickernel as sk
import statickernel._compiler.mosaic_gpu.plan.schedule
from layernorm import layernorm, layernorm_reference
from rmsnorm import rmsnorm, rmsnorm_reference
from softmax import softmax, softmax_reference
from statickernel._compiler.mosaic_gpu.emit.flat_rows import flat_box
from tolerances import assert_close, tolerance_for

F32, BF16 = jnp.float32, jnp.bfloat16


def _normal(key: int, shape: tuple[int, ...], dtype: Any, scale: float = 1.0) -> jax.Array:
    return (scale * jax.random.normal(jax.random.key(key), shape, F32)).astype(dtype)


def _args(kernel: sk.Kernel[..., Any], m: int, n: int, dtype: Any, key: int = 0) -> list[Any]:
    x = _normal(key, (m, n), dtype)
    if kernel is softmax:
        return [x]
    weight = (1.0 + _normal(key + 1, (n,), F32, 0.1)).astype(dtype)
    if kernel is rmsnorm:
        return [x, weight]
    return [x, weight, _normal(key + 2, (n,), dtype)]


def _structs(kernel: sk.Kernel[..., Any], m: int, n: int, dtype: Any) -> list[Any]:
    vectors = {softmax: 0, rmsnorm: 1, layernorm: 2}[kernel]
    x = jax.ShapeDtypeStruct((m, n), dtype)
    return [x] + [jax.ShapeDtypeStruct((n,), dtype)] * vectors


REFERENCES = {
    softmax: softmax_reference,
    rmsnorm: rmsnorm_reference,
    layernorm: layernorm_reference,
}
KERNELS = pytest.mark.parametrize(
    "kernel", [softmax, rmsnorm, layernorm], ids=["softmax", "rmsnorm", "layernorm"]
)


@KERNELS
@pytest.mark.parametrize(("m", "dtype"), [(16384, F32), (16383, BF16)], ids=["f32", "bf16"])
def test_unaligned_rows_move_each_byte_once(
    kernel: sk.Kernel[..., Any], m: int, dtype: Any
) -> None:
    """At 4095 columns (16,380 and 8,190-byte rows) the plan pads nothing on the host: x and
    the result are addressed flat, and the HBM bytes are one read and one write."""
    args = _structs(kernel, m, 4095, dtype)
    plan = kernel.plan(*args)
    x, result = plan.operands[0], plan.results[0]
    assert x.flat and result.flat and not x.host_padded and not result.host_padded
    assert x.launched_shape == (m * 4095,)
    assert "form: rows" in str(plan)
    ideal = sum(math.prod(a.shape) * a.dtype.itemsize for a in args) + m * 4095 * dtype(0).itemsize
    assert plan.cost is not None and plan.cost.hbm_bytes <= 1.05 * ideal
    assert not any("padded on the host" in note for note in plan.notes if "`x`" in note)


def test_the_module_copies_boxes_and_stores_pieces() -> None:
    x = jax.ShapeDtypeStruct((16384, 4095), F32)
    source = softmax.emit(x)
    assert "jnp.pad" not in source
    assert "x = jnp.reshape(x, (-1,))" in source
    assert "return jnp.reshape(result, (16384, 4095))" in source
    assert "x_gmem.at[pl.ds(row * 4095 + box * 256, 256)]" in source
    assert "oob_mode=plgpu.OOBFillMode.ZEROS" in source
    assert "layout=plgpu.Layout.WG_STRIDED((128,), 1)" in source  # the overlapping last piece
    assert "result_gmem.at[pl.ds(row * 4095 + 3967, 128)][...] = piece_values" in source
    assert "jax.ShapeDtypeStruct((67092480,), jnp.float32)" in source
    # Every thread reads its pieces from the slot, then the warpgroup syncs (and fences the
    # async proxy) before the slot is refilled: the interpreter runs a warpgroup in lockstep
    # and cannot see this race, so the module is read for the fence.
    last_piece = source.index("[pl.ds(row * 4095 + 3967, 128)][...] = piece_values")
    fence = source.index("plgpu.commit_smem()", last_piece)
    assert fence < source.index("def refill", last_piece)
    lowered = softmax.lower(x)  # cross-lowered for Mosaic GPU on CUDA
    assert "mosaic_gpu" in lowered.as_text()


def test_a_per_column_vector_is_copied_by_boxes_zero_filled_past_its_end() -> None:
    """rmsnorm's weight of 4095 bfloat16 (8,190 bytes): 1-D boxes whose last reads zeros past
    the vector's end, so the module pads nothing and launches nothing but the kernel."""
    x, weight = jax.ShapeDtypeStruct((16383, 4095), BF16), jax.ShapeDtypeStruct((4095,), BF16)
    plan = rmsnorm.plan(x, weight)
    assert plan.operands[1].flat and not plan.operands[1].host_padded
    assert plan.operands[1].launched_shape == (4095,)
    source = rmsnorm.emit(x, weight)
    assert "jnp.pad" not in source
    assert "weight_gmem.at[pl.ds(box * 256, 256)]" in source


@pytest.mark.parametrize(
    ("width", "dtype", "box"), [(4096, F32, 256), (1024, BF16, 256), (51200, BF16, 256)]
)
def test_a_box_divides_the_row_in_16_byte_multiples(width: int, dtype: Any, box: int) -> None:
    got = flat_box(width, jnp.dtype(dtype).name)
    assert got == box and width % got == 0 and got * jnp.dtype(dtype).itemsize % 16 == 0


@KERNELS
@pytest.mark.parametrize(
    ("m", "n", "dtype"),
    [(7, 4095, F32), (17, 4095, BF16), (1, 1001, F32), (5, 2049, BF16), (3, 4097, F32)],
    ids=["7x4095-f32", "17x4095-bf16", "1x1001-f32", "5x2049-bf16", "3x4097-f32"],
)
def test_flat_rows_match_the_reference(
    kernel: sk.Kernel[..., Any], m: int, n: int, dtype: Any
) -> None:
    args = _args(kernel, m, n, dtype)
    plan = kernel.plan(*args)
    assert plan.operands[0].flat and plan.results[0].flat
    want = REFERENCES[kernel](*args)
    assert_close(kernel(*args), want, tolerance_for(dtype, terms=n, scale=4.0))


@settings(max_examples=8, deadline=None)
@given(
    m=st.integers(1, 20),
    n=st.sampled_from([1001, 1531, 2047, 3001, 4095]),
    dtype=st.sampled_from([F32, BF16]),
)
def test_any_unaligned_width_is_exact(m: int, n: int, dtype: Any) -> None:
    x = _normal(m * n, (m, n), dtype)
    assert softmax.plan(x).operands[0].flat
    assert_close(softmax(x), softmax_reference(x), tolerance_for(dtype, terms=n))


def test_a_wide_unaligned_row_in_chunks() -> None:
    """A vocabulary of 50257 bfloat16 (100,514-byte rows): 1-D boxes over a row in chunks."""
    x = _normal(3, (2, 50257), BF16)
    plan = softmax.plan(x)
    assert plan.operands[0].flat and plan.row_frame is not None and plan.row_frame.chunks > 1
    assert_close(softmax(x), softmax_reference(x), tolerance_for(BF16, terms=50257))


def test_persistent_blocks_refill_their_slots_without_a_race(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Few SMs, so each CTA walks several blocks and refills its slots, the boxes of the
    CTAs' rows reading past their ends into each other's rows; the ragged last block stores
    none of its rows past the edge."""
    monkeypatch.setattr(statickernel._compiler.mosaic_gpu.plan.schedule, "SMS", 2)
    kernel = softmax.bind()
    x = _normal(9, (23, 4095), F32)
    plan = kernel.plan(x)
    assert "persistent" in str(plan) and plan.operands[0].flat, str(plan)
    report = sk.testing.detect_races(kernel, x)
    assert not report.races_found and report.result is not None
    assert_close(report.result, softmax_reference(x), tolerance_for(F32, terms=4095))
