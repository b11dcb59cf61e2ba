"""Shifted loads (`sk.load(x, offset={"L": k})`): each kernel in the interpreter against jnp on
whole arrays (the array padded with the fill, then sliced `k` rows further), on ragged rows and
columns, offsets within a block, past a block and past the array, nonzero fills, a whole row
dim, a per-row vector, a batch dim, reductions over the shifted rows, integers and
hypothesis; the refusals (in a loop's step, a malformed offset), the plan (block form, no
persistent or warp-specialized launch, the halo's rows in its text and its shared memory),
and the cross-lowering for Mosaic GPU. Shifts along the columns: test_column_shifts.py."""

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float32, Shaped

import statickernel as sk
from shifted_arrays import integers, moved, sum_of_taps, weighted_taps
from statickernel._compiler.mosaic_gpu.plan.schedule import ScheduleKind
from tolerances import assert_close, tolerance_for

# One row; under a block of 64; a block, one row short of it and one past; several blocks.
ROWS = (1, 5, 63, 64, 65, 130, 257)
# Under a block of 64 columns; ragged past one block; ragged past three.
COLS = (8, 72, 200)


# --- the references: whole arrays, padded and sliced -------------------------------------------


def _assert_taps_close(got: jax.Array, x: jax.Array, offsets: tuple[int, ...]) -> None:
    """`got` within a few roundings of `x`'s dtype of the weighted taps: each element's error
    is bounded by the magnitude of its terms, as rounding the partial sums allows."""
    want = np.asarray(weighted_taps(x, offsets))
    magnitude = np.asarray(weighted_taps(jnp.abs(x.astype(jnp.float32)), offsets))
    bound = 4 * float(jnp.finfo(x.dtype).eps) * magnitude
    error = np.abs(np.asarray(got, np.float32) - want)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), (
        f"at {worst}: got {np.asarray(got, np.float32)[worst]}, want {want[worst]} "
        f"(within {bound[worst]})"
    )


# --- the kernels ---------------------------------------------------------------------------------


@functools.cache
def _taps(offsets: tuple[int, ...], fill: float = 0, tiled: str = "L C") -> sk.Kernel:
    """A causal-convolution-like kernel of the weighted taps at `offsets`, with the dims in
    `tiled` split by blocks of 64 and the others held whole in each block."""
    if tiled == "C":

        @sk.kernel(tile={"C": "BC"})
        def whole_rows(x: Shaped[Array, "L C"], *, BC: sk.Const[int] = 64) -> Shaped[Array, "L C"]:
            return sum_of_taps(x, offsets, fill)

        return whole_rows
    if tiled == "L":

        @sk.kernel(tile={"L": "BL"})
        def whole_columns(
            x: Shaped[Array, "L C"], *, BL: sk.Const[int] = 64
        ) -> Shaped[Array, "L C"]:
            return sum_of_taps(x, offsets, fill)

        return whole_columns
    assert tiled == "L C"

    @sk.kernel(tile={"L": "BL", "C": "BC"})
    def taps(
        x: Shaped[Array, "L C"], *, BL: sk.Const[int] = 64, BC: sk.Const[int] = 64
    ) -> Shaped[Array, "L C"]:
        return sum_of_taps(x, offsets, fill)

    return taps


EXAMPLE = (0, -3, 2)  # x + 2 * (x 3 rows earlier) + 3 * (x 2 rows later)


@sk.kernel(tile={"L": "BL", "C": "BC"})
def causal_max(
    x: Float[Array, "L C"], *, BL: sk.Const[int] = 64, BC: sk.Const[int] = 64
) -> Float[Array, "L C"]:
    """A max over taps: rows outside the array read -inf, which the max ignores."""
    taps = [sk.load(x, fill=-jnp.inf, offset={"L": k}) for k in (-1, -2, 3)]
    return jnp.maximum(jnp.maximum(sk.load(x, fill=-jnp.inf), taps[0]), jnp.maximum(*taps[1:]))


@functools.cache
def _row_vector_added(offset: int) -> sk.Kernel:
    """A per-row vector read `offset` rows further, spelled as the operand's method."""

    @sk.kernel(tile={"L": "BL", "C": "BC"})
    def row_vector_added(
        x: Float32[Array, "L C"],
        v: Float32[Array, " L"],
        *,
        BL: sk.Const[int] = 64,
        BC: sk.Const[int] = 64,
    ) -> Float32[Array, "L C"]:
        return sk.load(x) + v.load(offset={"L": offset})[:, None]  # pyright: ignore[reportAttributeAccessIssue]

    return row_vector_added


@sk.kernel(tile={"L": "BL", "C": "BC"}, batch="B")
def batched_taps(
    x: Float32[Array, "B L C"],
    w: Float32[Array, " C"],
    *,
    BL: sk.Const[int] = 64,
    BC: sk.Const[int] = 64,
) -> Float32[Array, "B L C"]:
    """A depthwise causal convolution per batch entry: a weight per column, taps along L."""
    return (
        sk.load(x) * sk.load(w)[None, :]
        + sk.load(x, offset={"L": -2})
        - sk.load(x, offset={"L": 1})
    )


def _column_sums_body(x: Any) -> jax.Array:
    return jnp.sum(sk.load(x, offset={"L": -3}) + 2 * sk.load(x, offset={"L": 2}), axis=0)


@sk.kernel(tile={"C": "BC"})
def column_sums_whole(x: Float32[Array, "L C"], *, BC: sk.Const[int] = 64) -> Float32[Array, " C"]:
    return _column_sums_body(x)


@sk.kernel(tile={"L": "BL"})
def column_sums_tiled(x: Float32[Array, "L C"], *, BL: sk.Const[int] = 64) -> Float32[Array, " C"]:
    """Summed over L across the blocks: each block's partial, combined after the launch."""
    return _column_sums_body(x)


# --- against jnp ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("rows", ROWS)
def test_taps_match_jnp_on_ragged_shapes(rows: int, cols: int, dtype: Any) -> None:
    x = jax.random.normal(jax.random.key(rows * 1000 + cols), (rows, cols), dtype)
    _assert_taps_close(_taps(EXAMPLE)(x), x, EXAMPLE)


@pytest.mark.parametrize("rows", [5, 65, 130])
@pytest.mark.parametrize("offset", [-3, -64, 2, 64])
def test_one_shifted_load_is_the_array_moved_exactly(offset: int, rows: int) -> None:
    """A body of one shifted load, no arithmetic: bit for bit, bf16 included."""
    x = jax.random.normal(jax.random.key(rows), (rows, 72), jnp.bfloat16)
    np.testing.assert_array_equal(_taps((offset,))(x), moved(x, offset))


@pytest.mark.parametrize("rows", [5, 65, 130, 257])
@pytest.mark.parametrize("offset", [-64, 70, 256])
def test_offsets_past_a_block_and_past_the_array(offset: int, rows: int) -> None:
    """A block back, and ahead past the block of 64 rows up to and past the array's rows: the
    copy below reaches blocks away, and rows read from before the first or past the last are
    the fill."""
    x = integers((rows, 72))
    offsets = (-1, offset) if offset > 0 else (1, offset)  # both halos copied
    np.testing.assert_array_equal(_taps(offsets)(x), weighted_taps(x, offsets))


@pytest.mark.parametrize("offset", [-65, -200, -256])
def test_an_offset_further_back_than_a_block_is_refused(offset: int) -> None:
    """The rows above a block are copied from its start less the offset: past one block, that
    lies before the array for later blocks too. A whole row dim takes any offset."""
    with pytest.raises(sk.ShiftError, match="further than one block") as info:
        _taps((-1, offset))
    assert info.value.operand == "x" and info.value.dim == "L" and info.value.fix


@pytest.mark.parametrize("rows", [1, 5, 65, 130])
def test_rows_outside_the_array_read_a_nonzero_fill(rows: int) -> None:
    x = integers((rows, 72))
    offsets = (-2, 5)
    np.testing.assert_array_equal(
        _taps(offsets, fill=-1.0)(x), weighted_taps(x, offsets, fill=-1.0)
    )


@pytest.mark.parametrize("rows", [1, 5, 65, 130])
def test_a_max_over_taps_reads_minus_infinity_outside(rows: int) -> None:
    x = jax.random.normal(jax.random.key(rows), (rows, 72), jnp.float32)
    taps = [moved(x, k, -jnp.inf) for k in (0, -1, -2, 3)]
    want = jnp.maximum(jnp.maximum(taps[0], taps[1]), jnp.maximum(taps[2], taps[3]))
    np.testing.assert_array_equal(causal_max(x), want)


@pytest.mark.parametrize("rows", [1, 5, 63, 65, 130, 257])
@pytest.mark.parametrize(
    ("offsets", "fill"), [((-3, 2), 0), ((2,), 0), ((-70, 70), 0), ((-3, 2), -1.0)]
)
def test_a_whole_row_dim_is_shifted_within_its_block(
    offsets: tuple[int, ...], fill: float, rows: int
) -> None:
    """L whole in every block (257 rows take two boxes): no neighbours to copy, the rows past
    either end of the array read the fill."""
    x = integers((rows, 72))
    got = _taps(offsets, fill=fill, tiled="C")(x, BC=32)  # 257 rows and 140 more fit
    np.testing.assert_array_equal(got, weighted_taps(x, offsets, fill))


@pytest.mark.parametrize("rows", [1, 5, 65, 130])
@pytest.mark.parametrize("offset", [-1, 1])
def test_a_per_row_vector_is_shifted(offset: int, rows: int) -> None:
    x = jax.random.normal(jax.random.key(rows), (rows, 72), jnp.float32)
    v = jax.random.normal(jax.random.key(rows + 1), (rows,), jnp.float32)
    want = x + moved(v, offset)[:, None]
    np.testing.assert_array_equal(_row_vector_added(offset)(x, v), want)


@pytest.mark.parametrize("shape", [(3, 65, 72), (2, 5, 8), (2, 130, 200)])
def test_a_batch_dim_shifts_each_entry_alone(shape: tuple[int, int, int]) -> None:
    """Rows never cross from one batch entry into the next."""
    x = jax.random.normal(jax.random.key(shape[1]), shape, jnp.float32)
    w = jax.random.normal(jax.random.key(7), shape[2:], jnp.float32)
    want = x * w + moved(x, -2, axis=1) - moved(x, 1, axis=1)
    assert_close(batched_taps(x, w), want, tolerance_for(jnp.float32, terms=3, scale=4.0))


@pytest.mark.parametrize("kernel", [column_sums_whole, column_sums_tiled], ids=["whole", "tiled"])
@pytest.mark.parametrize("rows", [1, 5, 63, 65, 130, 257])
def test_a_sum_over_shifted_rows_leaves_out_rows_past_the_edge(
    kernel: sk.Kernel, rows: int
) -> None:
    """The block's rows past the array's last read rows inside it (three rows earlier): a sum
    over L must not count them."""
    x = jax.random.normal(jax.random.key(rows), (rows, 72), jnp.float32)
    want = jnp.sum(moved(x, -3) + 2 * moved(x, 2), axis=0)
    assert_close(kernel(x), want, tolerance_for(jnp.float32, terms=2 * rows, scale=3.0))


@pytest.mark.parametrize("rows", [5, 65, 130])
def test_integer_taps_are_exact(rows: int) -> None:
    x = jnp.asarray(np.random.default_rng(rows).integers(-1000, 1000, (rows, 72)), jnp.int32)
    offsets = (0, -4, 1)
    np.testing.assert_array_equal(_taps(offsets)(x), weighted_taps(x, offsets))
    np.testing.assert_array_equal(_taps(offsets, fill=-7)(x), weighted_taps(x, offsets, -7))


def test_a_zero_offset_is_the_block_itself() -> None:
    x = integers((100, 72))
    kernel = _taps((0,))
    plan = kernel.plan(x)
    assert plan.operand("x").halo.rows == 0 and "shifted" not in str(plan)
    np.testing.assert_array_equal(kernel(x), x)


@settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.generate])  # no shrinking
@given(
    rows=st.integers(1, 300),
    cols=st.integers(1, 200),
    offset=st.integers(-64, 256),
    seed=st.integers(0, 2**16),
)
def test_taps_match_jnp_on_drawn_shapes_and_offsets(
    rows: int, cols: int, offset: int, seed: int
) -> None:
    x = integers((rows, cols), seed=seed)
    offsets = (-1, offset)
    np.testing.assert_array_equal(_taps(offsets)(x), weighted_taps(x, offsets))


@functools.cache
def _scaled_matmul(shift: bool) -> sk.Kernel:
    """A matrix product whose rows are scaled by a per-row vector, read a row earlier when
    `shift`."""

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def scaled_matmul(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        s: Float32[Array, " M"],
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 128,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
        return acc * sk.load(s, offset={"M": -1} if shift else None)[:, None]

    return scaled_matmul


def test_a_shifted_scale_after_a_matmul_loop() -> None:
    """A shifted operand beside a loop: loaded once, outside it, with its halo."""
    ka, kb, ks = jax.random.split(jax.random.key(0), 3)
    a = jax.random.normal(ka, (130, 100), jnp.bfloat16)
    b = jax.random.normal(kb, (100, 200), jnp.bfloat16)
    s = jax.random.normal(ks, (130,), jnp.float32)
    want = jnp.dot(a, b, preferred_element_type=jnp.float32) * moved(s, -1)[:, None]
    assert_close(
        _scaled_matmul(shift=True)(a, b, s),
        want,
        tolerance_for(jnp.float32, terms=100, scale=float(jnp.max(jnp.abs(s)))),
    )


# --- refusals ------------------------------------------------------------------------------------


def _declared(body: Any, **decorator: Any) -> None:
    """Declares a kernel of `x` ('L C') and a per-column `w` ('C') with `body(x, w)`."""

    @sk.kernel(**(decorator or {"tile": {"L": "BL", "C": "BC"}}))
    def refused(
        x: Float32[Array, "L C"],
        w: Float32[Array, " C"],
        *,
        BL: sk.Const[int] = 64,
        BC: sk.Const[int] = 64,
    ) -> Float32[Array, "L C"]:
        return body(x, w)


@pytest.mark.parametrize("looped", [True, False], ids=["looped operand", "per-row vector"])
def test_a_shift_in_a_loops_step_is_refused_with_a_fix(looped: bool) -> None:
    with pytest.raises(sk.ShiftError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def streamed(
            x: Float32[Array, "M N"],
            v: Float32[Array, " M"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
        ) -> Float32[Array, " M"]:
            def step(total: jax.Array) -> jax.Array:
                if looped:
                    return total + jnp.sum(sk.load(x, offset={"M": -1}), axis=1)
                return total + jnp.sum(sk.load(x), axis=1) * sk.load(v, offset={"M": -1})

            return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32))

    error = info.value
    assert error.kernel == "streamed" and error.dim == "M"
    assert "inside a loop's step" in error.what
    assert f"`{'x' if looped else 'v'}` shifted" in error.what
    assert error.fix and "outside any loop" in error.fix


def test_blocks_too_large_with_a_shifted_load_propose_a_tile_not_a_loop() -> None:
    """A shifted load runs outside loops: the fix for blocks too wide tiles the whole dim."""
    x = jax.ShapeDtypeStruct((1000, 8192), jnp.float32)
    with pytest.raises(sk.SharedMemoryError) as info:
        column_sums_tiled.plan(x)
    fix = info.value.fix or ""
    assert 'tile={"C": "BC"}' in fix and "read at an offset" in fix
    assert "loop=" not in fix


@pytest.mark.parametrize(
    ("offset", "dim", "said"),
    [
        ([("L", -1)], None, "must name one dim"),
        (-1, None, "must name one dim"),
        ({}, None, "must name one dim"),
        ({"L": -1, "C": 1}, None, "must name one dim"),
        ({"T": 1}, "T", "names 'T', which `x` does not have"),
        ({"L": 1.0}, "L", "not a Python int"),
        ({"L": True}, "L", "not a Python int"),
        ({"L": jnp.int32(2)}, "L", "not a Python int"),
        ({"L": 257}, "L", "257 elements away"),
        ({"L": -257}, "L", "257 elements away"),
    ],
    ids=[
        "list",
        "int",
        "empty",
        "two dims",
        "unknown dim",
        "float",
        "bool",
        "jax scalar",
        "past 256",
        "past -256",
    ],
)
def test_a_malformed_offset_is_refused(offset: Any, dim: str | None, said: str) -> None:
    with pytest.raises(sk.BodyError) as info:
        _declared(lambda x, w: sk.load(x) + sk.load(x, offset=offset))
    error = info.value
    assert error.kernel == "refused" and error.operand == "x" and error.dim == dim
    assert said in error.what and error.fix


def test_a_shift_along_a_batch_dim_is_refused() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"L": "BL"}, batch="B")
        def across_entries(
            x: Float32[Array, "B L C"], *, BL: sk.Const[int] = 64
        ) -> Float32[Array, "B L C"]:
            return sk.load(x, offset={"B": 1})

    assert info.value.operand == "x" and info.value.dim == "B" and info.value.fix


def test_a_shifted_load_with_another_fill_is_refused() -> None:
    """An operand has one copy, so one fill: its shifted loads read the block's."""
    with pytest.raises(sk.BodyError, match="different fills") as info:
        _declared(lambda x, w: sk.load(x, fill=-1.0) + sk.load(x, offset={"L": -1}))
    assert info.value.operand == "x" and info.value.fix


def test_a_numpy_integer_offset_is_taken() -> None:
    @sk.kernel(tile={"L": "BL", "C": "BC"})
    def numpy_offset(
        x: Float32[Array, "L C"], *, BL: sk.Const[int] = 64, BC: sk.Const[int] = 64
    ) -> Float32[Array, "L C"]:
        return sk.load(x, offset={"L": np.int64(-2)})  # pyright: ignore[reportArgumentType]

    x = integers((70, 72))
    np.testing.assert_array_equal(numpy_offset(x), moved(x, -2))


# --- the plan ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tile", "unshifted"),
    [({"L": "BL", "C": "BC"}, sk.Form.STRIDED), ({"L": "BL"}, sk.Form.ROWS)],
    ids=["strided", "rows"],
)
def test_a_shifted_load_takes_the_block_form(tile: dict[str, str], unshifted: sk.Form) -> None:
    """The same elementwise body takes the strided or the row form unshifted."""

    def kernel(offset: int) -> sk.Kernel:
        @sk.kernel(tile=tile)
        def formed(
            x: Float32[Array, "L C"], *, BL: sk.Const[int] = 64, BC: sk.Const[int] = 128
        ) -> Float32[Array, "L C"]:
            return sk.load(x) + sk.load(x, offset={"L": offset} if offset else None)

        return formed

    x = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    assert kernel(0).plan(x).form is unshifted
    assert kernel(-1).plan(x).form is sk.Form.BLOCK


def test_a_shifted_load_is_not_launched_persistent() -> None:
    """A large grid of blocks is walked by persistent CTAs, whose stages copy blocks without
    their neighbours' rows: a shifted load takes one block a CTA."""
    x = jax.ShapeDtypeStruct((8192, 8192), jnp.float32)
    schedule = _taps((0, 0)).plan(x).schedule
    assert schedule is not None and schedule.kind is ScheduleKind.PERSISTENT
    shifted = _taps((0, -1)).plan(x)
    assert shifted.schedule is not None
    assert shifted.schedule.kind is ScheduleKind.ONE_BLOCK_PER_CTA
    assert not shifted.schedule.walks_blocks


def test_a_shifted_load_beside_a_matmul_is_not_warp_specialized() -> None:
    S = jax.ShapeDtypeStruct
    args = (S((4096, 4096), jnp.bfloat16), S((4096, 4096), jnp.bfloat16), S((4096,), jnp.float32))
    plan = _scaled_matmul(shift=False).plan(*args)
    assert plan.schedule is not None and plan.schedule.kind is ScheduleKind.WARP_SPECIALIZED
    shifted = _scaled_matmul(shift=True).plan(*args)
    assert shifted.warp_specialized is None and shifted.schedule is not None
    assert shifted.schedule.kind is ScheduleKind.PIPELINED_LOOPS


def test_the_plan_shows_and_counts_the_rows_around_the_block() -> None:
    """3 rows above and 1 below a block of 64 float32 columns: 4 rows of 256 B, 1,024 B more
    shared memory (a multiple of the buffers' 1,024 B alignment, so no rounding hides it)."""
    x = jax.ShapeDtypeStruct((1000, 200), jnp.float32)
    plain = _taps((0,)).plan(x)
    plan = _taps((0, -3, 1)).plan(x)
    operand = plan.operand("x")
    assert (operand.halo.before, operand.halo.after) == (3, 1)
    assert operand.smem_block_shape == (68, 64) and operand.block_shape == (64, 64)
    assert "+ 3 row(s) above and 1 row(s) below along L for shifted loads (copied with it)" in str(
        plan
    )
    assert plan.smem_bytes - plain.smem_bytes == 4 * 64 * 4


def test_the_plan_of_a_whole_row_dim_says_the_margin_reads_the_fill() -> None:
    plan = _taps((-3, 2), tiled="C").plan(jax.ShapeDtypeStruct((100, 200), jnp.float32))
    text = str(plan)
    assert "+ 3 row(s) above and 2 row(s) below along L" in text
    assert "past the whole dim, read as the fill" in text


@pytest.mark.parametrize(
    ("kernel", "args", "operand", "needed"),
    [
        (
            lambda: _taps((-3, 1), tiled="L"),
            (jax.ShapeDtypeStruct((100, 8), jnp.bfloat16),),
            "x",
            3,
        ),
        (
            lambda: _row_vector_added(-1),
            (
                jax.ShapeDtypeStruct((100, 72), jnp.float32),
                jax.ShapeDtypeStruct((100,), jnp.float32),
            ),
            "v",
            1,
        ),
    ],
    ids=["8 bf16 columns", "per-row vector"],
)
def test_the_rows_above_keep_the_blocks_copy_aligned(
    kernel: Callable[[], sk.Kernel], args: tuple[Any, ...], operand: str, needed: int
) -> None:
    """Rows of 16 B and of 4 B: the rows above are rounded up so that the block's copy lands
    on a 128-byte boundary of the buffer, and no further."""
    op = kernel().plan(*args).operand(operand)
    row_bytes = math.prod(op.block_shape[1:]) * np.dtype(op.dtype).itemsize
    assert row_bytes < 128  # else any count of rows is aligned, and this checks nothing
    assert op.halo.before * row_bytes % 128 == 0
    assert 0 <= (op.halo.before - needed) * row_bytes < 128


# --- cross-lowered for Mosaic GPU ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "shapes"),
    [
        (lambda: _taps(EXAMPLE), [((1000, 200), jnp.float32)]),
        (lambda: _taps(EXAMPLE), [((1000, 200), jnp.bfloat16)]),
        (lambda: _taps((2,)), [((1000, 200), jnp.float32)]),
        (lambda: _taps((-64, 70)), [((1000, 200), jnp.float32)]),
        (lambda: _taps((-3, 2), tiled="C"), [((100, 200), jnp.float32)]),
        (lambda: batched_taps, [((4, 1000, 200), jnp.float32), ((200,), jnp.float32)]),
    ],
    ids=["both ways", "bf16", "ahead only", "past a block", "whole rows", "batch"],
)
def test_shifted_loads_cross_lower_for_the_gpu(
    kernel: Callable[[], sk.Kernel], shapes: list[tuple[tuple[int, ...], Any]]
) -> None:
    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes]
    assert "mosaic_gpu" in kernel().lower(*args).as_text()


@pytest.mark.parametrize(("columns", "dtype"), [(320, jnp.bfloat16), (264, jnp.float32)])
def test_the_boxes_of_several_columns_start_aligned(columns: int, dtype: Any) -> None:
    """Whole columns copied in two boxes, a buffer each one after the other: the rows below
    the block are rounded too, so that every box's copy starts on a 128-byte boundary."""
    kernel = _taps((0, 1), tiled="L")
    x = integers((130, columns), dtype)
    np.testing.assert_array_equal(kernel(x), weighted_taps(x, (0, 1)))
    source = kernel.emit(x)
    (shape,) = re.findall(r"plgpu.SMEM\(\((2, \d+, \d+)\), jnp\.\w+\)", source)[:1]
    boxes, rows, width = (int(v) for v in shape.split(", "))
    row_bytes = width * jnp.dtype(dtype).itemsize
    assert boxes == 2 and rows * row_bytes % 128 == 0
