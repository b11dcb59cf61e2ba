"""The row form and the schedule: which form a specialization takes, what its plan says, and
the source it runs.

The numbers themselves are checked against the references in tests/gallery/test_gallery.py (model
widths, and a hypothesis strategy over the row form's widths); here the plans are read at the
shapes of an H200 run, which need no data.
"""

import math
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from add import add
from layernorm import layernorm
from rmsnorm import rmsnorm
from row_sum import row_sum
from scale_bias import scale_bias
from softmax import softmax

F32, BF16 = jnp.float32, jnp.bfloat16
KIB = 1024


def _structs(*specs: tuple[tuple[int, ...], Any]) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in specs]


# The GPU check's shapes, as an H200 run takes them.
H200_SHAPES: dict[str, tuple[sk.Kernel[..., Any], list[jax.ShapeDtypeStruct]]] = {
    "add-8192x8192": (add, _structs(((8192, 8192), F32), ((8192, 8192), F32))),
    "softmax-16384x1024": (softmax, _structs(((16384, 1024), F32))),
    "softmax-16384x8192": (softmax, _structs(((16384, 8192), F32))),
    "rmsnorm-16384x4096-bf16": (rmsnorm, _structs(((16384, 4096), BF16), ((4096,), BF16))),
    "layernorm-16384x1024": (
        layernorm,
        _structs(((16384, 1024), F32), ((1024,), F32), ((1024,), F32)),
    ),
    "row_sum-16384x1024": (row_sum, _structs(((16384, 1024), F32))),
}


@pytest.mark.parametrize(("kernel", "args"), H200_SHAPES.values(), ids=list(H200_SHAPES))
def test_memory_bound_kernels_keep_64_kib_of_loads_in_flight_per_sm(
    kernel: sk.Kernel[..., Any], args: list[jax.ShapeDtypeStruct]
) -> None:
    plan = kernel.plan(*args)
    schedule = plan.schedule
    assert schedule is not None
    schedule.check_invariants()
    assert schedule.bytes_in_flight_per_sm >= 64 * KIB, str(schedule)
    if schedule.kind is sk.ScheduleKind.PERSISTENT:
        # Each SM's CTAs walk the blocks, two or three blocks' loads in flight each.
        assert schedule.ctas == schedule.ctas_per_sm * 132 < math.prod(plan.grid)
        assert schedule.stages in (2, 3)
    else:
        assert schedule.ctas == math.prod(plan.grid)
    # Several CTAs an SM, or one persistent CTA with several blocks in flight.
    assert schedule.ctas_per_sm >= 2 or schedule.stages >= 2, str(schedule)
    assert f"schedule: {schedule}" in str(plan)


@pytest.mark.parametrize(
    ("kernel", "args", "rows"),
    [
        (softmax, _structs(((16384, 1024), F32)), 8),
        (rmsnorm, _structs(((16384, 4096), BF16), ((4096,), BF16)), 4),
        (layernorm, _structs(((16384, 1024), F32), ((1024,), F32), ((1024,), F32)), 8),
        (row_sum, _structs(((16384, 1024), F32)), 8),
        # Fewer rows than SMs would fill: one row a block, one block an SM.
        (softmax, _structs(((1, 16384), F32)), 1),
        (softmax, _structs(((1000, 777), F32)), 4),
    ],
)
def test_wide_rows_take_the_row_form(
    kernel: sk.Kernel[..., Any], args: list[jax.ShapeDtypeStruct], rows: int
) -> None:
    plan = kernel.plan(*args)
    assert plan.form is sk.Form.ROWS
    assert plan.row_frame is not None
    plan.row_frame.check_invariants()
    m, n = args[0].shape
    assert plan.dim("M").block == rows
    assert plan.grid == (-(-m // rows),)
    assert plan.row_frame.width >= n and plan.row_frame.width % (128 * plan.row_frame.vector) == 0
    # 16 bytes of the narrowest dtype a thread.
    narrowest = min(jnp.dtype(a.dtype).itemsize for a in args)
    assert plan.row_frame.vector == 16 // narrowest
    assert "form: rows" in str(plan)
    assert any("take the row form" in note for note in plan.notes)
    assert plan.smem_bytes <= 232_448


def test_narrow_rows_keep_the_block_form() -> None:
    plan = softmax.plan(*_structs(((1000, 100), F32)))
    assert plan.form is sk.Form.BLOCK
    assert plan.row_frame is None
    assert plan.dim("M").block == 64
    assert "form: rows" not in str(plan)


def test_a_result_of_its_operands_shape_and_dtype_shares_its_block() -> None:
    plan = softmax.plan(*_structs(((16384, 1024), F32)))
    assert plan.results[0].shares_smem_with == "x"
    assert plan.results[0].smem_bytes == 0
    # bf16 in, f32 out: no operand to share with.
    plan = row_sum.plan(*_structs(((64, 4096), BF16)))
    assert plan.results[0].shares_smem_with is None


def test_a_per_row_result_goes_out_an_element_a_row() -> None:
    """Each row's scalar is written to its element of the array from registers: no shared
    memory, no array of slots and no slice after the launch."""
    plan = row_sum.plan(*_structs(((5, 16384), F32)))
    result = plan.results[0]
    assert plan.dim("M").block == 1
    assert result.shape == result.gmem_shape == (5,)
    assert result.in_place and result.smem_bytes == 0 and not result.host_padded
    source = row_sum.emit(*_structs(((5, 16384), F32)))
    assert "result_gmem[row] = " in source
    assert "result_smem" not in source
    assert source.rstrip().endswith("return result")


@pytest.mark.parametrize("m", [1, 7, 37])
def test_per_row_results_of_ragged_blocks_match_the_reference(m: int) -> None:
    """Rows past a ragged edge compute the last row again and write its element again, with
    the same value: every element is the row's sum."""
    x = jax.random.normal(jax.random.key(m), (m, 16384), F32)
    kernel = row_sum.bind()
    plan = kernel.plan(x)
    assert plan.row_frame is not None
    got = kernel(x)
    assert got.shape == (m,)
    assert jnp.allclose(got, x.sum(axis=1), rtol=1e-5, atol=1e-3)


def test_the_row_forms_copies_stay_inside_the_array() -> None:
    """Every copy is a bulk copy promised in bounds: rows past the edge read the last row
    again and are never stored; a row that is not whole 128-byte pieces ends with one that
    overlaps the piece before it."""
    source = softmax.emit(*_structs(((1001, 1000), F32)))
    assert softmax.plan(*_structs(((1001, 1000), F32))).dim("M").block == 4
    assert "row = jnp.minimum(row_start + r, 1000)" in source
    assert "@pl.when(row < 1001)" in source
    assert "x_gmem.at[row, pl.ds(0, 992)]" in source
    assert "x_gmem.at[row, pl.ds(968, 32)]" in source
    assert source.count("oob_mode=plgpu.OOBFillMode.PROMISE_IN_BOUNDS") == 2
    assert "wait_smem_to_gmem(0, wait_read_only=True)" in source
    assert "plgpu.Layout.WG_STRIDED((1024,), 4)" in source
    # Whole blocks need neither the clamp nor the guard.
    whole = softmax.emit(*_structs(((16, 1024), F32)))
    assert "jnp.minimum" not in whole and "pl.when" not in whole


@sk.kernel(tile={"M": "BM"})
def _centered(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    v = sk.load(x)
    return v - jnp.mean(v, axis=0, keepdims=True)


def test_a_body_that_mixes_rows_keeps_the_block_form() -> None:
    """A reduction over the rows cannot be taken a row at a time: the block form's limit
    stands, with its error, never a wrong number."""
    assert _centered.plan(*_structs(((64, 128), F32))).form is sk.Form.BLOCK
    with pytest.raises(sk.SharedMemoryError):
        _centered.plan(*_structs(((64, 4096), F32)))


def test_the_schedule_of_a_loop_kernel_counts_its_stages() -> None:
    from softmax_online import softmax_online

    plan = softmax_online.plan(*_structs(((4096, 100_000), F32)))
    schedule = plan.schedule
    assert schedule is not None
    assert schedule.kind is sk.ScheduleKind.PIPELINED_LOOPS
    assert schedule.stages == 2
    step = 64 * 256 * 4  # one (BM, BN) f32 block of x
    assert schedule.load_bytes_per_cta == 2 * step
    assert schedule.bytes_in_flight_per_sm == schedule.ctas_per_sm * 2 * step


def test_a_grid_smaller_than_the_gpu_is_limited_by_the_grid() -> None:
    schedule = softmax.plan(*_structs(((1, 1024), F32))).schedule
    assert schedule is not None
    assert schedule.ctas == 1 and schedule.ctas_per_sm == 1
    assert schedule.limited_by is sk.OccupancyLimit.GRID
    assert "limited by the grid" in str(schedule)


def test_registers_fold_into_the_schedule() -> None:
    schedule = softmax.plan(*_structs(((16384, 1024), F32))).schedule
    assert schedule is not None
    heavy = schedule.with_registers(255)  # 255 x 128 threads: two CTAs' worth of registers
    assert heavy.ctas_per_sm == 2
    assert heavy.limited_by is sk.OccupancyLimit.REGISTERS
    assert heavy.bytes_in_flight_per_sm == 2 * schedule.load_bytes_per_cta


# --- the strided block: elementwise bodies ------------------------------------------------------


@sk.kernel(tile={"M": "BM", "N": "BN"})
def _relu_affine(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, "M N"]:
    v = sk.load(x).astype(jnp.float32)
    return jnp.where(v > 0, 2 * v + 1, 0.0).astype(x.dtype)


@sk.kernel(tile={"M": "BM", "N": "BN"})
def _clamp_low(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, "M N"]:
    return jnp.maximum(sk.load(x, fill=-jnp.inf), -1.0)


def test_an_elementwise_body_takes_the_strided_block() -> None:
    plan = add.plan(*_structs(((1000, 777), F32), ((1000, 777), F32)))
    assert plan.form is sk.Form.STRIDED
    assert plan.flat_frame is not None and plan.flat_frame.shape == (64, 128)
    assert "form: strided" in str(plan)
    source = add.emit(*_structs(((1000, 777), F32), ((1000, 777), F32)))
    assert "plgpu.load(x_smem, layout=plgpu.Layout.WG_STRIDED((64, 128), 4), optimized=True)" in (
        source
    )
    assert "Layout.WGMMA" not in source


@pytest.mark.parametrize(
    ("shape", "dtype"), [((1000, 777), F32), ((127, 250), BF16), ((1, 1), F32)]
)
def test_strided_constants_and_selects_match_jnp(shape: tuple[int, int], dtype: Any) -> None:
    x = jax.random.normal(jax.random.key(3), shape, jnp.float32).astype(dtype)
    assert _relu_affine.plan(x).form is sk.Form.STRIDED
    v = x.astype(jnp.float32)
    want = jnp.where(v > 0, 2 * v + 1, 0.0).astype(dtype)
    assert jnp.array_equal(_relu_affine(x), want)
    # bf16 blocks are 8 elements a thread: 16 bytes.
    frame = _relu_affine.plan(x).flat_frame
    assert frame is not None and frame.vector == 16 // jnp.dtype(dtype).itemsize


def test_a_fill_past_a_ragged_edge_keeps_the_wgmma_block() -> None:
    """A fill other than +0 needs a mask, built in the WGMMA layout; where no edge is ragged
    there is nothing to mask, and the block is strided."""
    assert _clamp_low.plan(*_structs(((100, 300), F32))).form is sk.Form.BLOCK
    assert _clamp_low.plan(*_structs(((128, 256), F32))).form is sk.Form.STRIDED
    x = -5 * jnp.ones((100, 300), jnp.float32)
    assert jnp.array_equal(_clamp_low(x), jnp.full((100, 300), -1.0))


def test_reductions_keep_the_wgmma_block() -> None:
    assert softmax.plan(*_structs(((1000, 100), F32))).form is sk.Form.BLOCK


# --- the persistent schedule ---------------------------------------------------------------------


def test_many_blocks_take_the_persistent_schedule() -> None:
    """With blocks for at least two a CTA, each SM's CTAs walk them, three in flight."""
    plan = softmax.plan(*_structs(((16384, 1024), F32)))
    schedule = plan.schedule
    assert schedule is not None and schedule.kind is sk.ScheduleKind.PERSISTENT
    assert (schedule.ctas, schedule.stages, schedule.ctas_per_sm) == (264, 3, 2)
    block = 8 * 1024 * 4
    assert schedule.load_bytes_per_cta == 3 * block
    assert plan.smem_bytes <= 232_448 // 2
    source = softmax.emit(*_structs(((16384, 1024), F32)))
    assert "grid=(264,)" in source
    assert "plgpu.SMEM((3, 8, 1024), jnp.float32)" in source
    assert "plgpu.Barrier(num_arrivals=8, num_barriers=3)" in source
    assert "trips = (2311 - cta) // 264" in source
    assert "slot = lax.rem(i, 3)" in source
    # A slot is refilled only once its stores have read it.
    wait = source.index("plgpu.wait_smem_to_gmem(0, wait_read_only=True)")
    assert wait < source.index("load_block(i + 3, slot)")


def test_few_blocks_keep_one_block_per_cta() -> None:
    schedule = softmax.plan(*_structs(((1000, 1024), F32))).schedule
    assert schedule is not None and schedule.kind is sk.ScheduleKind.ONE_BLOCK_PER_CTA


@pytest.fixture
def four_sms(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A GPU of four SMs, so that a persistent launch runs in the interpreter at a small size;
    the specializations planned for it are dropped afterwards."""
    import statickernel._compiler.mosaic_gpu.plan.schedule as schedule

    kernels = (softmax, rmsnorm, layernorm, row_sum, add, scale_bias)
    monkeypatch.setattr(schedule, "SMS", 4)
    _forget(kernels)  # plans made for the real GPU
    yield
    _forget(kernels)


def _forget(kernels: tuple[sk.Kernel[..., Any], ...]) -> None:
    """Drops the kernels' specializations, so that the next calls plan afresh."""
    for kernel in kernels:
        kernel._cache.clear()  # pyright: ignore[reportPrivateUsage]
        kernel._by_consts.clear()  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize(
    ("name", "shape", "dtype"),
    [
        ("softmax", (400, 1024), F32),
        ("softmax", (397, 1000), F32),  # ragged rows and columns, host padding
        ("rmsnorm", (397, 1000), F32),
        ("layernorm", (400, 2048), BF16),
        ("row_sum", (397, 1000), F32),
    ],
)
def test_the_persistent_pipeline_matches_the_reference(
    four_sms: None, name: str, shape: tuple[int, int], dtype: Any
) -> None:
    from gallery_checks import check_against_reference, make_args

    kernel = {"softmax": softmax, "rmsnorm": rmsnorm, "layernorm": layernorm, "row_sum": row_sum}
    args = make_args(name, *shape, dtype)
    schedule = kernel[name].plan(*args).schedule
    assert schedule is not None and schedule.kind is sk.ScheduleKind.PERSISTENT
    assert schedule.ctas < math.ceil(shape[0] / kernel[name].plan(*args).dim("M").block)
    check_against_reference(name, args)


def test_many_blocks_of_an_elementwise_kernel_run_persistent() -> None:
    x = _structs(((8192, 8192), F32))[0]
    plan = add.plan(x, x)
    schedule = plan.schedule
    assert schedule is not None and schedule.kind is sk.ScheduleKind.PERSISTENT
    # Three stages of two 32 KiB blocks and one result block fill one CTA's shared memory.
    assert (schedule.ctas, schedule.stages, schedule.ctas_per_sm) == (132, 3, 1)
    assert schedule.bytes_in_flight_per_sm == 3 * 2 * 64 * 128 * 4
    source = add.emit(x, x)
    assert 'grid_names=("cta",)' in source and "grid=(132,)" in source
    assert "plgpu.SMEM((3, 64, 128), jnp.float32)" in source
    assert "plgpu.Barrier(num_barriers=3)" in source
    assert "block_M = block // 64" in source and "block_N = lax.rem(block, 64)" in source
    # The results' buffer is reused once the last block's stores have read it (jax 0.12
    # stores through plgpu.store, 0.11 by assignment).
    stored = [source.find(s) for s in ("result_smem[...] = v0", "plgpu.store(result_smem, v0")]
    first_store = max(stored)
    assert first_store > 0
    assert source.index("wait_smem_to_gmem(0, wait_read_only=True)") < first_store
    # A body on the WGMMA block (a per-column bias, reductions) keeps one block a CTA and
    # its co-resident CTAs: a persistent CTA would compute alone on its SM.
    bias = scale_bias.plan(*_structs(((8192, 4096), F32), ((4096,), F32))).schedule
    assert bias is not None and (bias.kind, bias.ctas_per_sm) == (
        sk.ScheduleKind.ONE_BLOCK_PER_CTA,
        3,
    )


@pytest.mark.parametrize(
    ("name", "shape", "dtype"),
    [("add", (1000, 777), F32), ("add", (512, 1024), BF16), ("add", (300, 1000), F32)],
)
def test_the_persistent_block_pipeline_matches_the_reference(
    four_sms: None, name: str, shape: tuple[int, int], dtype: Any
) -> None:
    from gallery_checks import check_against_reference, make_args

    kernel = {"add": add}[name]
    args = make_args(name, *shape, dtype)
    schedule = kernel.plan(*args).schedule
    assert schedule is not None and schedule.kind is sk.ScheduleKind.PERSISTENT
    check_against_reference(name, args)


@sk.kernel(tile={"M": "BM"})
def dyt(
    x: Float[Array, "M N"],
    alpha: Float[Array, ""],
    w: Float[Array, " N"],
    b: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
) -> Float[Array, "M N"]:
    """Dynamic tanh (DyT), a norm's replacement with a learned scalar."""
    return jnp.tanh(sk.load(alpha) * sk.load(x)) * sk.load(w) + sk.load(b)


def _dyt_args(m: int, n: int, dtype: Any) -> list[jax.Array]:
    keys = jax.random.split(jax.random.key(m * 100_003 + n), 4)
    x = jax.random.normal(keys[0], (m, n), dtype)
    alpha = jax.random.uniform(keys[1], (), dtype, 0.5, 2.0)
    w = jax.random.normal(keys[2], (n,), dtype)
    b = jax.random.normal(keys[3], (n,), dtype)
    return [x, alpha, w, b]


def test_a_scalar_operand_keeps_whole_rows() -> None:
    """A 0-d operand is read from global memory, as in the block form: whole rows too wide
    for 64-row blocks still take the row form (at 8192 rows, its persistent launch)."""
    for m, kind in ((64, sk.ScheduleKind.ONE_BLOCK_PER_CTA), (8192, sk.ScheduleKind.PERSISTENT)):
        args = _structs(((m, 4096), F32), ((), F32), ((4096,), F32), ((4096,), F32))
        plan = dyt.plan(*args)
        assert plan.form is sk.Form.ROWS
        assert plan.schedule is not None and plan.schedule.kind is kind
        source = dyt.emit(*args)
        assert "alpha = alpha_gmem[...]  # a scalar, from global memory" in source
        assert "alpha_smem" not in source and "alpha_barrier" not in source


# (129, 4099): ragged rows (a last block of one row) and a width off the 16-byte rows.
@pytest.mark.parametrize("shape", [(64, 4096), (1, 8192), (129, 4099), (5, 16384)])
def test_a_scalar_operand_in_the_row_form_matches_jnp(shape: tuple[int, int]) -> None:
    from tolerances import assert_close, tolerance_for

    args = _dyt_args(*shape, F32)
    assert dyt.plan(*args).form is sk.Form.ROWS
    x, alpha, w, b = args
    want = jnp.tanh(alpha * x) * w + b
    assert_close(dyt(*args), want, tolerance_for(F32, scale=4.0))
    dyt.lower(*args)  # cross-lowers for CUDA


def test_a_scalar_operand_in_the_persistent_row_form_matches_jnp(four_sms: None) -> None:
    from tolerances import assert_close, tolerance_for

    args = _dyt_args(397, 4100, F32)
    _forget((dyt,))
    schedule = dyt.plan(*args).schedule
    assert schedule is not None and schedule.kind is sk.ScheduleKind.PERSISTENT
    x, alpha, w, b = args
    assert_close(dyt(*args), jnp.tanh(alpha * x) * w + b, tolerance_for(F32, scale=4.0))
    _forget((dyt,))
