"""`kernel.plan(*args)`: the frozen LaunchPlan a specialization launches with.

Plans are made from `jax.ShapeDtypeStruct`s here: planning needs shapes and dtypes, no data.
"""

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float32

import statickernel as sk
from add import add
from layernorm import layernorm
from rmsnorm import rmsnorm
from row_sum import row_sum
from scale_bias import scale_bias
from softmax import softmax

F32 = jnp.dtype(jnp.float32)
BF16 = jnp.dtype(jnp.bfloat16)
SMEM_BYTES = 232448  # 227 KiB, the shared memory of one Hopper block

KERNELS: dict[str, sk.Kernel[..., Any]] = {
    "add": add,
    "scale_bias": scale_bias,
    "softmax": softmax,
    "rmsnorm": rmsnorm,
    "layernorm": layernorm,
    "row_sum": row_sum,
}
TILED_N = ("add", "scale_bias")


def specs(name: str, m: int, n: int, dtype: Any = F32) -> tuple[jax.ShapeDtypeStruct, ...]:
    x = jax.ShapeDtypeStruct((m, n), dtype)
    v = jax.ShapeDtypeStruct((n,), dtype)
    return {
        "add": (x, x),
        "scale_bias": (x, v),
        "softmax": (x,),
        "rmsnorm": (x, v),
        "layernorm": (x, v, v),
        "row_sum": (x,),
    }[name]


def plan_of(name: str, m: int, n: int, dtype: Any = F32, **overrides: Any) -> sk.LaunchPlan:
    return KERNELS[name].plan(*specs(name, m, n, dtype), **overrides)


SHAPES = [(64, 128), (128, 256), (1000, 100), (1000, 130), (1000, 777), (65, 129), (1, 1), (7, 300)]


def _cases() -> list[Any]:
    return [
        pytest.param(name, shape, dtype, id=f"{name}-{dtype.name}-{shape[0]}x{shape[1]}")
        for name in KERNELS
        for shape in SHAPES
        for dtype in (F32, BF16)
        # Whole-N blocks of 777 f32 or bf16 columns overflow shared memory.
        if name in TILED_N or shape[1] <= 300
    ]


# --- the plan as a value -----------------------------------------------------------------------


def test_plan_is_frozen() -> None:
    plan = plan_of("softmax", 1000, 100)
    assert isinstance(plan, sk.LaunchPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.grid = (1,)  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.dims[0].size = 1  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.operands[0].fill = 0  # pyright: ignore[reportAttributeAccessIssue]
    assert isinstance(plan.dims, tuple)
    assert isinstance(plan.operands, tuple)
    assert isinstance(plan.results, tuple)
    assert isinstance(plan.dims[0], sk.DimPlan)
    assert isinstance(plan.operands[0], sk.OperandPlan)
    hash(plan.grid)


def test_plan_is_shared_by_arrays_and_shape_structs() -> None:
    """plan, emit and calls share one cached specialization per shape and dtype."""
    x = jnp.zeros((1000, 100), jnp.float32)
    assert softmax.plan(x) is softmax.plan(jax.ShapeDtypeStruct((1000, 100), jnp.float32))


@pytest.mark.parametrize(("name", "shape", "dtype"), _cases())
def test_grid_is_cdiv_of_each_tiled_dim(name: str, shape: tuple[int, int], dtype: Any) -> None:
    m, n = shape
    plan = plan_of(name, m, n, dtype)
    if name in TILED_N:
        expected = (math.ceil(m / 64), math.ceil(n / 128))
        assert plan.grid_names == ("M", "N")
    else:
        # Whole rows too wide for 64-row blocks take the row form, with fewer rows a block.
        block = plan.dim("M").block
        assert block == 64 if plan.form is sk.Form.BLOCK else 1 <= block <= 64
        expected = (math.ceil(m / block),)
        assert plan.grid_names == ("M",)
    assert plan.grid == expected
    assert all(type(g) is int for g in plan.grid)
    assert plan.bindings == {"M": m, "N": n}
    for d in plan.dims:
        for value in (d.size, d.block, d.extent):
            assert type(value) is int
    plan.check_invariants()


@pytest.mark.parametrize(("name", "shape", "dtype"), _cases())
def test_blocks_and_shared_memory(name: str, shape: tuple[int, int], dtype: Any) -> None:
    plan = plan_of(name, *shape, dtype)
    for op in plan.operands + plan.results:
        assert op.block_shape == tuple(plan.dim(d).extent for d in op.dims)
        assert len(op.block_shape) == len(op.shape)
    assert 0 < plan.smem_bytes <= SMEM_BYTES
    assert plan.smem_bytes >= sum(op.smem_bytes for op in plan.operands + plan.results)


def test_grid_follows_constant_overrides() -> None:
    plan = plan_of("add", 1000, 777, BM=128, BN=64)
    assert plan.grid == (8, 13)
    assert plan.dim("M").block == 128
    assert plan.dim("N").block == 64
    assert dict(plan.constants) == {"BM": 128, "BN": 64}
    assert plan.operands[0].block_shape == (128, 64)


def test_grid_dims_are_python_ints_for_numpy_sizes() -> None:
    import numpy as np

    x = jax.ShapeDtypeStruct((np.int64(1000), np.int32(100)), jnp.float32)
    plan = softmax.plan(x)
    assert plan.grid == (16,)
    assert all(type(g) is int for g in plan.grid)
    assert all(type(d.size) is int for d in plan.dims)


# --- dims --------------------------------------------------------------------------------------


def test_tiled_ragged_dim() -> None:
    m = plan_of("softmax", 1000, 100).dim("M")
    assert m.tiled_by == "BM"
    assert m.block == 64
    assert m.extent == 64
    assert m.grid_axis == 0
    assert m.ragged
    assert m.status == "ragged (1000 % 64 = 40)"


def test_tiled_divisible_dim() -> None:
    m = plan_of("softmax", 128, 128).dim("M")
    assert not m.ragged
    assert m.status == "divisible (128 % 64 = 0)"


def test_whole_padded_dim() -> None:
    n = plan_of("softmax", 1000, 100).dim("N")
    assert n.tiled_by is None
    assert n.grid_axis is None
    assert n.block == 100
    assert n.extent == 104  # 8 f32 columns for the register layout and 16-byte TMA rows
    assert n.ragged
    assert n.status == "whole, padded 100 -> 104"


def test_whole_exact_dim() -> None:
    n = plan_of("softmax", 128, 128).dim("N")
    assert not n.ragged
    assert n.extent == 128
    assert n.status == "whole"


def test_whole_dim_padded_for_a_1d_operand() -> None:
    """A 1-D f32 block is a multiple of 128 bytes, so N=130 pads to 160 for the weight."""
    plan = plan_of("layernorm", 1000, 130)
    assert plan.dim("N").extent == 160
    assert plan.dim("N").status == "whole, padded 130 -> 160"
    weight = next(op for op in plan.operands if op.name == "weight")
    assert weight.block_shape == (160,)
    assert weight.kind == "col"


def test_row_vector_result() -> None:
    plan = plan_of("row_sum", 1000, 100)
    (result,) = plan.results
    assert result.shape == (1000,)
    assert result.block_shape == (64,)
    assert result.kind == "row"
    assert result.role == "output"
    assert result.fill is None


# --- fills -------------------------------------------------------------------------------------


def test_softmax_fill_is_minus_inf() -> None:
    plan = plan_of("softmax", 1000, 100)
    (x,) = plan.operands
    assert x.loaded
    assert isinstance(x.fill, float)
    assert math.isinf(x.fill)
    assert x.fill < 0


@pytest.mark.parametrize("name", ["add", "scale_bias", "rmsnorm", "layernorm", "row_sum"])
def test_default_fill_is_zero(name: str) -> None:
    plan = plan_of(name, 1000, 100)
    for op in plan.operands:
        assert op.role == "input"
        assert op.loaded
        assert op.fill == 0
    for op in plan.results:
        assert op.fill is None


# --- TMA-unaddressable rows --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shape", "dtype", "padded"),
    [
        pytest.param("add", (1000, 777), F32, 780, id="add-f32-777"),
        pytest.param("softmax", (1000, 130), F32, 132, id="softmax-f32-130"),
        pytest.param("softmax", (1000, 100), BF16, 104, id="softmax-bf16-100"),
        pytest.param("rmsnorm", (517, 100), BF16, 104, id="rmsnorm-bf16-100"),
    ],
)
def test_unaddressable_rows_fall_back_to_host_padding(
    name: str, shape: tuple[int, int], dtype: Any, padded: int
) -> None:
    plan = plan_of(name, *shape, dtype)
    fallbacks = [note for note in plan.notes if "fallback" in note]
    assert fallbacks
    two_d = [op for op in plan.operands + plan.results if len(op.shape) == 2]
    assert two_d
    for op in two_d:
        assert op.host_padded
        assert op.shape == shape
        assert op.gmem_shape == (shape[0], padded)
        assert any(f"`{op.name}`" in note for note in fallbacks)
    for op in plan.operands:
        if len(op.shape) == 1:
            assert not op.host_padded  # a 1-D array has no row stride to align
    assert "host-padded" in str(plan)
    plan.check_invariants()


@pytest.mark.parametrize(("m", "n", "dtype"), [(1000, 128, F32), (1000, 100, F32), (64, 104, BF16)])
def test_addressable_rows_are_not_padded(m: int, n: int, dtype: Any) -> None:
    plan = plan_of("softmax", m, n, dtype)
    assert not any("fallback" in note for note in plan.notes)
    assert not any(op.host_padded for op in plan.operands + plan.results)
    assert all(op.gmem_shape == op.shape for op in plan.operands + plan.results)


# --- the report --------------------------------------------------------------------------------


def test_str_is_a_readable_report() -> None:
    plan = plan_of("softmax", 1000, 100)
    text = str(plan)
    assert text.startswith("LaunchPlan for `softmax`")
    assert "backend interpret" in text
    assert "grid: (16,) over (M)" in text
    assert "M=1000" in text
    assert "N=100" in text
    assert "tiled by BM=64" in text
    assert "ragged (1000 % 64 = 40)" in text
    assert "whole, padded 100 -> 104" in text
    assert "fill -inf" in text
    assert "x: float32[1000, 100]" in text
    assert "block [64, 104]" in text
    assert f"of {SMEM_BYTES:,} B" in text
    assert f"{plan.smem_bytes:,} B" in text


def test_str_of_a_two_axis_grid() -> None:
    text = str(plan_of("add", 1000, 777))
    assert "grid: (16, 7) over (M, N)" in text
    assert "ragged (777 % 128 = 9)" in text
    assert "fallback" in text


def test_str_of_a_divisible_plan_says_no_mask() -> None:
    text = str(plan_of("add", 128, 256))
    assert "divisible (128 % 64 = 0)" in text
    assert "divisible (256 % 128 = 0)" in text
    assert "no mask" in text
    assert "fallback" not in text


def test_masked_reductions_are_noted() -> None:
    plan = plan_of("layernorm", 1000, 130)
    assert any("reductions over N are masked" in note for note in plan.notes)
    aligned = plan_of("layernorm", 1000, 128)
    assert not any("masked" in note for note in aligned.notes)


# --- backends and constants --------------------------------------------------------------------


def test_plan_records_backend_and_constants() -> None:
    args = specs("layernorm", 1000, 130)
    plan = layernorm.plan(*args, backend="mosaic_gpu", BM=128, eps=1e-3)
    assert plan.backend == "mosaic_gpu"
    assert dict(plan.constants) == {"BM": 128, "eps": 1e-3}
    assert plan.kernel == "layernorm"
    assert "layernorm.py:" in plan.location
    assert plan.rows == "M"
    assert plan.cols == "N"
    assert not plan.tuple_result


# --- invariants and planning errors ------------------------------------------------------------


def test_check_invariants_catches_a_broken_plan() -> None:
    plan = plan_of("add", 1000, 777)
    plan.check_invariants()
    with pytest.raises(AssertionError):
        dataclasses.replace(plan, grid=(1, 1)).check_invariants()
    with pytest.raises(AssertionError):
        dataclasses.replace(plan, smem_bytes=SMEM_BYTES + 1).check_invariants()


def test_grid_over_cuda_y_limit() -> None:
    """Every grid axis but the last maps onto CUDA y/z, which stop at 65535 blocks."""
    m = 64 * 65535 + 1
    with pytest.raises(sk.GridLimitError) as info:
        plan_of("add", m, 128)
    assert info.value.dim == "M"
    assert "65535" in str(info.value.expected)
    assert info.value.fix
    # A bigger block brings the grid back under the limit.
    assert plan_of("add", m, 128, BM=128).grid == (32768, 1)


@sk.kernel(tile={"M": "BM", "N": "BN"}, batch="B")
def batched_scale(
    x: Float32[Array, "B M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Float32[Array, "B M N"]:
    return sk.load(x) * 2.0


@sk.kernel(tile={"M": "BM", "N": "BN"}, batch=("B", "H"))
def heads_scale(
    x: Float32[Array, "B H M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Float32[Array, "B H M N"]:
    return sk.load(x) * 2.0


def _struct(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def test_grid_y_is_the_second_to_last_axis() -> None:
    """(B, M, N) launches as CUDA (x, y, z) = (N blocks, M blocks, B): M is on y."""
    with pytest.raises(sk.GridLimitError) as info:
        batched_scale.plan(_struct(2, 64 * 65536, 64))
    exc = info.value
    assert exc.dim == "M" and exc.actual == 65536
    assert "grid y" in exc.what and "65,535" in exc.what
    assert exc.fix == "set BM=128 (the smallest BM that fits M=4,194,304 in 65535 blocks)"
    assert batched_scale.plan(_struct(2, 64 * 65536, 64), BM=128).grid == (2, 32768, 1)


def test_grid_z_is_the_third_to_last_axis() -> None:
    with pytest.raises(sk.GridLimitError) as info:
        batched_scale.plan(_struct(65536, 64, 64))
    exc = info.value
    assert exc.dim == "B" and exc.actual == 65536
    assert "grid z" in exc.what
    assert "batch dim B" in str(exc.fix)
    assert batched_scale.plan(_struct(65535, 64, 64)).grid == (65535, 1, 1)


def test_more_than_three_grid_axes_fold_into_grid_z() -> None:
    # 300 x 300 = 90,000 blocks on z, though each axis alone is under 65535.
    with pytest.raises(sk.GridLimitError) as info:
        heads_scale.plan(_struct(300, 300, 64, 64))
    exc = info.value
    assert exc.dim == "B"
    assert "(B, H)" in exc.what and "grid z" in exc.what and "90,000" in exc.what
    assert exc.actual == "300 x 300 = 90,000"
    assert heads_scale.plan(_struct(200, 300, 64, 64)).grid == (200, 300, 1, 1)


def test_grid_x_takes_far_more_than_65535_blocks() -> None:
    # The last grid axis is CUDA x: 2**31 - 1 blocks.
    plan = plan_of("row_sum", 64 * 2**20, 64)
    assert plan.grid == (2**20,)


def test_last_block_past_int32() -> None:
    # 2**31 - 1 rows fit int32, but 192-row blocks end 65 rows past it.
    with pytest.raises(sk.Int32LimitError) as info:
        plan_of("row_sum", 2**31 - 1, 64, BM=192)
    exc = info.value
    assert exc.dim == "M"
    assert "int32" in exc.what and "2,147,483,711" in exc.what
    assert str(exc.fix).startswith("set BM=128")
    assert plan_of("row_sum", 2**31 - 1, 64, BM=128).grid == (2**24,)


def test_dims_up_to_int32_plan_and_lower() -> None:
    plan = plan_of("softmax", 2**31 - 1, 64)
    assert plan.grid == (2**25,)
    assert softmax.lower(*specs("softmax", 2**31 - 1, 64)) is not None


def test_whole_row_over_shared_memory_proposes_a_loop_dim() -> None:
    """Past what one row can hold on chip (20,000 f32 columns fit, a row at a time), the fix
    is the loop rewrite."""
    assert plan_of("softmax", 64, 20_000).form is sk.Form.ROWS
    with pytest.raises(sk.SharedMemoryError) as info:
        plan_of("softmax", 64, 100_000)
    fix = str(info.value.fix)
    assert 'loop={"N": "BN"}' in fix and "`BN: sk.Const[int] = 256`" in fix
    assert 'sk.loop("N", step, init)' in fix and 'sk.map_blocks("N", fn)' in fix
    assert "examples/softmax_online.py" in fix
    assert "outside the kernel" not in fix


def test_blocks_over_shared_memory() -> None:
    with pytest.raises(sk.SharedMemoryError) as info:
        plan_of("add", 1000, 1000, BM=256, BN=256)
    err = info.value
    assert "shared memory" in err.what
    assert err.fix and "BM=64" in err.fix
    assert err.bindings == {"M": 1000, "N": 1000}


@pytest.mark.parametrize("bm", [128, 192, 256])
def test_bigger_row_blocks(bm: int) -> None:
    plan = plan_of("row_sum", 1000, 64, BM=bm)
    assert plan.grid == (math.ceil(1000 / bm),)
    assert plan.dim("M").extent == bm
    plan.check_invariants()
