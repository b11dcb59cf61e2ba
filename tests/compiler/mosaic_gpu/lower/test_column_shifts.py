"""Loads shifted along the columns (`sk.load(x, offset={"L": -3})` of a block laid out
`"C L"`, Mamba's convolution layout): each kernel in the interpreter against jnp on whole
arrays (padded with the fill, then sliced `k` columns further), on ragged rows and columns,
tiled and whole columns, offsets to one block back and past the array, nonzero fills, batch
dims, integers and hypothesis; the generated copies (a TMA copy a window, at a negative column
on the device, the first block's guarded for the interpreter); the refusals; the plan; and the
cross-lowering for Mosaic GPU."""

import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from jaxtyping import Array, Float32, Shaped

import statickernel as sk
from shifted_arrays import integers, moved, sum_of_taps, weighted_taps

# One row; under a block of 64; one past; several blocks.
ROWS = (1, 5, 65, 130)
# Under a block of 64 columns; a block; ragged past one block; ragged past three.
COLS = (8, 64, 72, 200)


@functools.cache
def _taps(offsets: tuple[int, ...], fill: float = 0, whole: bool = False) -> sk.Kernel:
    """The weighted taps at column offsets, the columns split by blocks of 64 or held whole."""
    if whole:

        @sk.kernel(tile={"C": "BC"})
        def whole_columns(
            x: Shaped[Array, "C L"], *, BC: sk.Const[int] = 64
        ) -> Shaped[Array, "C L"]:
            return sum_of_taps(x, offsets, fill)

        return whole_columns

    @sk.kernel(tile={"C": "BC", "L": "BL"})
    def column_taps(
        x: Shaped[Array, "C L"], *, BC: sk.Const[int] = 64, BL: sk.Const[int] = 64
    ) -> Shaped[Array, "C L"]:
        return sum_of_taps(x, offsets, fill)

    return column_taps


def _want(x: jax.Array, offsets: tuple[int, ...], fill: float = 0) -> np.ndarray:
    return np.asarray(weighted_taps(x, offsets, fill, axis=1))


CAUSAL = (0, -3, -2, -1)  # a causal convolution's taps
BOTH_WAYS = (0, -3, 2)


@pytest.mark.parametrize("whole", [False, True], ids=["tiled", "whole"])
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("rows", ROWS)
def test_column_taps_match_jnp_on_ragged_shapes(rows: int, cols: int, whole: bool) -> None:
    x = integers((rows, cols))
    # Whole columns of 200 float32 hold 256 a row: four such buffers exceed shared memory.
    for offsets in (BOTH_WAYS,) if whole else (CAUSAL, BOTH_WAYS):
        got = _taps(offsets, whole=whole)(x)
        np.testing.assert_array_equal(np.asarray(got), _want(x, offsets))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.int32], ids=["bf16", "i32"])
def test_column_taps_of_other_dtypes_are_exact(dtype: Any) -> None:
    # Sums of at most 60 in magnitude: exact in bfloat16's 8 bits.
    x = jnp.round(integers((65, 200)) / 8).astype(dtype)
    got = _taps(CAUSAL)(x)
    np.testing.assert_array_equal(np.asarray(got, np.float32), _want(x, CAUSAL).astype(np.float32))


@pytest.mark.parametrize("cols", [5 * 8, 64, 130, 257])
@pytest.mark.parametrize("offsets", [(-64,), (64,), (70,), (-1, 256)], ids=str)
def test_offsets_of_a_block_and_past_the_array(offsets: tuple[int, ...], cols: int) -> None:
    x = integers((65, cols))
    np.testing.assert_array_equal(np.asarray(_taps(offsets)(x)), _want(x, offsets))


@pytest.mark.parametrize("cols", [8, 72, 200])
def test_columns_outside_the_array_read_a_nonzero_fill(cols: int) -> None:
    x = integers((65, cols))
    got = _taps(BOTH_WAYS, fill=7.0)(x)
    np.testing.assert_array_equal(np.asarray(got), _want(x, BOTH_WAYS, fill=7.0))
    got = _taps(BOTH_WAYS, fill=7.0, whole=True)(x)
    np.testing.assert_array_equal(np.asarray(got), _want(x, BOTH_WAYS, fill=7.0))


@sk.kernel(tile={"C": "BC", "L": "BL"}, batch="B")
def batched_conv(
    x: Float32[Array, "B C L"],
    w: Float32[Array, "C 4"],
    *,
    BC: sk.Const[int] = 64,
    BL: sk.Const[int] = 64,
) -> Float32[Array, "B C L"]:
    """A depthwise causal convolution per batch entry, Mamba's layout: taps along L."""
    taps = sk.load(w)
    total = taps[:, 3][:, None] * sk.load(x)
    for k in range(3):
        total = total + taps[:, k][:, None] * sk.load(x, offset={"L": k - 3})
    return total


@pytest.mark.parametrize("shape", [(3, 65, 72), (2, 5, 8), (2, 130, 200)])
def test_a_batch_dim_shifts_each_entry_alone(shape: tuple[int, int, int]) -> None:
    x = integers(shape)
    w = integers((shape[1], 4), seed=1)
    want = sum(w[None, :, k, None] * moved(x, k - 3, axis=2) for k in range(4))
    np.testing.assert_array_equal(np.asarray(batched_conv(x, w)), np.asarray(want))


@settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    rows=st.integers(1, 140),
    cols=st.integers(1, 300),
    offsets=st.lists(st.integers(-64, 80), min_size=1, max_size=3, unique=True),
)
def test_column_taps_match_jnp_on_drawn_shapes(rows: int, cols: int, offsets: list[int]) -> None:
    x = integers((rows, cols), seed=rows * 1000 + cols)
    key = tuple(offsets)
    np.testing.assert_array_equal(np.asarray(_taps(key)(x)), _want(x, key))


# --- the generated copies -------------------------------------------------------------------------


def test_the_device_copies_each_window_from_its_shifted_columns() -> None:
    """On the device each window is one TMA copy from `block start + offset`: the first
    block's starts before the array, where TMA's signed coordinates read zeros."""
    x = jax.ShapeDtypeStruct((4, 320, 4096), jnp.float32)
    w = jax.ShapeDtypeStruct((320, 4), jnp.float32)
    source = batched_conv.emit(x, w, backend="mosaic_gpu")
    for k in (3, 2, 1):
        assert f"pl.ds(block_L * 64 - {k}, 64)" in source
    assert "pl.when" not in source
    assert re.search(r"plgpu.Barrier\(num_arrivals=4\)", source)


def test_the_interpreter_copies_the_first_blocks_columns_inside_the_array() -> None:
    """The interpreter zero-fills a box that starts before the array whole: its first block
    copies the columns inside alone, into the window's last columns."""
    x = integers((65, 200))
    source = _taps(CAUSAL).emit(x)
    assert "def x_window_m3_first" in source and "def x_window_m3_rest" in source
    assert "pl.ds(block_L * 64, 61)" in source and "pl.ds(3, 61)" in source


# --- refusals ------------------------------------------------------------------------------------


def _declared(body: Any, **decorator: Any) -> None:
    """Declares a kernel of `x` ('C L') and a per-column `w` ('L') with `body(x, w)`."""

    @sk.kernel(**(decorator or {"tile": {"C": "BC", "L": "BL"}}))
    def refused(
        x: Float32[Array, "C L"],
        w: Float32[Array, " L"],
        *,
        BC: sk.Const[int] = 64,
        BL: sk.Const[int] = 64,
    ) -> Float32[Array, "C L"]:
        return body(x, w)


def test_a_per_column_vector_shifted_along_the_columns_is_refused_with_a_fix() -> None:
    with pytest.raises(sk.ShiftError) as info:
        _declared(lambda x, w: sk.load(x) * sk.load(w, offset={"L": -1})[None, :])
    error = info.value
    assert error.kernel == "refused" and error.dim == "L" and error.operand == "w"
    assert "per-column vector `w`" in error.what and error.fix and "jnp.pad" in error.fix


@pytest.mark.parametrize(
    ("offset", "fill"), [(-1, 0.0), (2, -jnp.inf)], ids=["back-zeros", "ahead-inf"]
)
def test_the_fix_for_a_shifted_vector_gives_the_shifted_load(offset: int, fill: float) -> None:
    """The fix's `w_shifted = ...`, passed as an operand of its own, is the vector the refused
    load would have read: element j is w[j + offset], the fill outside the array."""
    with pytest.raises(sk.ShiftError) as info:
        _declared(
            lambda x, w: jnp.maximum(
                sk.load(x), sk.load(w, offset={"L": offset}, fill=fill)[None, :]
            )
        )
    match = re.search(r"w_shifted = (jnp\.pad\(.*?\)\[[-:0-9]*\])", info.value.fix or "")
    assert match is not None, info.value.fix

    @sk.kernel(tile={"C": "BC", "L": "BL"})
    def fixed(
        x: Float32[Array, "C L"],
        w_shifted: Float32[Array, " L"],
        *,
        BC: sk.Const[int] = 64,
        BL: sk.Const[int] = 64,
    ) -> Float32[Array, "C L"]:
        return jnp.maximum(sk.load(x), sk.load(w_shifted)[None, :])

    x, w = integers((5, 70)), integers((70,), seed=1)
    w_shifted = eval(match.group(1), {"jnp": jnp, "w": w})
    outside = jnp.full((abs(offset),), fill, jnp.float32)
    want_w = jnp.concatenate([outside, w[:offset]] if offset < 0 else [w[offset:], outside])
    assert bool(jnp.all(fixed(x, w_shifted) == jnp.maximum(x, want_w[None, :])))


def test_a_shift_further_back_than_a_block_of_columns_is_refused() -> None:
    with pytest.raises(sk.ShiftError) as info:
        _declared(lambda x, w: sk.load(x, offset={"L": -65}))
    assert info.value.dim == "L" and "further than one block" in info.value.what


def test_a_shift_along_both_the_rows_and_the_columns_is_refused() -> None:
    with pytest.raises(sk.ShiftError) as info:
        _declared(lambda x, w: sk.load(x, offset={"C": -1}) + sk.load(x, offset={"L": -1}))
    assert "both its rows C and its columns L" in info.value.what


def test_whole_columns_in_several_boxes_are_refused() -> None:
    @sk.kernel(tile={"C": "BC"})
    def wide(x: Float32[Array, "C L"], *, BC: sk.Const[int] = 64) -> Float32[Array, "C L"]:
        return sk.load(x, offset={"L": -1})

    with pytest.raises(sk.ShiftError) as info:
        wide(integers((64, 300)))
    assert "2 TMA boxes" in info.value.what and info.value.phase is sk.Phase.CALL


# --- the plan and the cross-lowering ---------------------------------------------------------------


def test_the_plan_shows_and_counts_the_windows() -> None:
    x = jax.ShapeDtypeStruct((130, 200), jnp.float32)
    with_windows = _taps(CAUSAL).plan(x)
    without = _taps((0,)).plan(x)
    assert "window at column offset(s) -3, -2, -1 along L" in str(with_windows)
    assert with_windows.smem_bytes - without.smem_bytes >= 3 * 64 * 64 * 4


@pytest.mark.parametrize(
    ("kernel", "shapes"),
    [
        (lambda: _taps(CAUSAL), [((1000, 4096), jnp.bfloat16)]),
        (lambda: _taps(BOTH_WAYS, fill=-1.0), [((1000, 200), jnp.float32)]),
        (lambda: _taps(BOTH_WAYS, whole=True), [((1000, 200), jnp.float32)]),
        (lambda: batched_conv, [((4, 320, 4096), jnp.float32), ((320, 4), jnp.float32)]),
    ],
    ids=["causal", "both ways, a fill", "whole columns", "batch"],
)
def test_column_shifts_cross_lower_for_the_gpu(
    kernel: Any, shapes: list[tuple[tuple[int, ...], Any]]
) -> None:
    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes]
    assert "mosaic_gpu" in kernel().lower(*args).as_text()


@sk.kernel(tile={"L": "BL"})
def whole_rows(x: Float32[Array, "C L"], *, BL: sk.Const[int] = 64) -> Float32[Array, "C L"]:
    """Column windows of a block whose rows are whole: each copies all the rows."""
    return sk.load(x) + 2 * sk.load(x, offset={"L": -3}) + 3 * sk.load(x, offset={"L": 5})


@pytest.mark.parametrize(("rows", "cols"), [(100, 200), (5, 70), (64, 64), (130, 8)])
def test_windows_of_whole_rows(rows: int, cols: int) -> None:
    x = integers((rows, cols))
    want = x + 2 * moved(x, -3, axis=1) + 3 * moved(x, 5, axis=1)
    np.testing.assert_array_equal(np.asarray(whole_rows(x)), np.asarray(want))
    assert "mosaic_gpu" in whole_rows.lower(jax.ShapeDtypeStruct((rows, 4096), x.dtype)).as_text()
