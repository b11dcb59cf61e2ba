"""`plan.cost`: the HBM bytes, the arithmetic and the roofline floor of a specialization.

The expected figures are worked out here from the shapes, independently of the counting code:
bytes are elements times the itemsize, flops the ops the body writes per element.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from add import add
from batched_matmul import batched_matmul
from gallery_cases import KERNELS, structs
from layernorm import layernorm
from layernorm_wide import layernorm_wide
from matmul import matmul
from matmul_bias_gelu import matmul_bias_gelu
from rmsnorm import rmsnorm
from row_sum import row_sum
from softmax import softmax
from softmax_online import softmax_online

F32, BF16 = jnp.float32, jnp.bfloat16
HBM = 4.3e12  # B/s, a measured H200 device-to-device copy
DOT = 790e12  # flop/s, a measured cuBLAS bf16 matmul
VECTOR = 67e12  # flop/s, CUDA-core float32


def S(*shape: int, dtype: Any = F32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


def cost_of(kernel: sk.Kernel[..., Any], *args: jax.ShapeDtypeStruct, **kw: Any) -> sk.Cost:
    cost = kernel.plan(*args, **kw).cost
    assert isinstance(cost, sk.Cost)
    cost.check_invariants()
    return cost


def assert_memory_bound(cost: sk.Cost) -> None:
    assert cost.bound is sk.Bound.MEMORY and cost.bound == "memory"
    assert cost.floor_seconds == pytest.approx(cost.hbm_bytes / HBM, rel=1e-12)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_gallery_plan_has_a_consistent_cost(name: str) -> None:
    plan = KERNELS[name].plan(*structs(name))
    assert plan.cost is not None
    plan.cost.check_invariants()
    plan.check_invariants()


@pytest.mark.parametrize(("m", "n"), [(100, 300), (8192, 8192), (1024, 768)])
def test_add_reads_two_arrays_and_writes_one(m: int, n: int) -> None:
    cost = cost_of(add, S(m, n), S(m, n))
    assert cost.hbm_bytes == 3 * m * n * 4
    assert cost.flops == m * n  # one add per element, over the true sizes, not the blocks
    assert cost.dot_flops == 0
    assert_memory_bound(cost)


def test_add_8192_squared_floor() -> None:
    cost = cost_of(add, S(8192, 8192), S(8192, 8192))
    assert cost.hbm_bytes == 805_306_368
    assert cost.floor_seconds == pytest.approx(805_306_368 / 4.3e12)
    assert cost.floor_seconds == pytest.approx(187.3e-6, rel=1e-3)


def test_a_bfloat16_add_moves_half_the_bytes() -> None:
    cost = cost_of(add, S(1024, 768, dtype=BF16), S(1024, 768, dtype=BF16))
    assert cost.hbm_bytes == 3 * 1024 * 768 * 2


@pytest.mark.parametrize(("m", "n"), [(100, 100), (1000, 100), (65536, 256)])
def test_softmax(m: int, n: int) -> None:
    cost = cost_of(softmax, S(m, n))
    assert cost.hbm_bytes == 2 * m * n * 4
    # max, subtract, exp, sum, divide: five ops per element; the broadcasts are free.
    assert cost.flops == 5 * m * n
    assert_memory_bound(cost)


def test_rmsnorm_reads_x_and_the_weight_and_writes_the_result() -> None:
    m, n = 100, 200
    cost = cost_of(rmsnorm, S(m, n, dtype=BF16), S(n, dtype=BF16))
    assert cost.hbm_bytes == m * n * 2 + n * 2 + m * n * 2
    # Per element: v * v, the sum, v * rms, * weight. Per row: / N, + eps, rsqrt. The casts
    # to and from float32 are free.
    assert cost.flops == 4 * m * n + 3 * m
    assert_memory_bound(cost)


def test_a_host_padded_operand_and_result_count_their_copies() -> None:
    # float32 rows of 777 elements are 3108 B, not a multiple of 16: padded to 780.
    m, n, padded = 1000, 777, 780
    plan = add.plan(S(m, n), S(m, n))
    assert all(op.host_padded for op in plan.operands + plan.results)
    assert plan.cost is not None
    true, pad = m * n * 4, m * padded * 4
    operand = pad + (true + pad)  # the kernel's read, and jnp.pad's read and write
    result = pad + (pad + true)  # the kernel's write, and the slice's read and write
    assert plan.cost.hbm_bytes == 2 * operand + result
    assert plan.cost.flops == m * n


def test_layernorm_pads_x_and_its_result_but_not_the_vectors() -> None:
    m, n, padded = 100, 130, 132  # 520 B rows, padded to 528
    cost = cost_of(layernorm, S(m, n), S(n), S(n))
    true, pad = m * n * 4, m * padded * 4
    assert cost.hbm_bytes == (pad + true + pad) + 2 * n * 4 + (pad + pad + true)
    # Per element: sum, v - mean, square, sum, v - mean again, * rsqrt, * w, + b. Per row: the
    # two divides, + eps, rsqrt.
    assert cost.flops == 8 * m * n + 4 * m


def test_row_sum_writes_a_vector() -> None:
    m, n = 1000, 256
    cost = cost_of(row_sum, S(m, n))
    assert cost.hbm_bytes == m * n * 4 + m * 4
    assert cost.flops == m * n


@pytest.mark.parametrize(
    ("m", "n", "reads"), [(100, 1000, 1), (130, 100_000, 2), (4096, 100_000, 2)]
)
def test_softmax_online_reads_x_once_where_its_rows_fit(m: int, n: int, reads: int) -> None:
    """Rows that fit in shared memory are read once, both loops walking them there; wider
    ones are read once by each loop's pipeline."""
    cost = cost_of(softmax_online, S(m, n))
    assert cost.hbm_bytes == reads * m * n * 4 + m * n * 4
    steps = -(-n // 256)
    # The statistics loop: max, v - max, exp, sum per element; per row and step the running
    # max, its difference, exp, * and +. Then 1 / sum per row, and the normalizing loop's
    # v - max, exp, * per element.
    assert cost.flops == 4 * m * n + 5 * m * steps + m + 3 * m * n
    assert_memory_bound(cost)


def test_layernorm_wide_reads_x_once_where_its_rows_fit() -> None:
    m, n = 100, 1000
    cost = cost_of(layernorm_wide, S(m, n), S(n), S(n))
    assert cost.hbm_bytes == m * n * 4 + 2 * n * 4 + m * n * 4
    steps = -(-n // 256)
    # Loop 0, per element: the count, the sum, -, *, and the sum of squares; per row and step,
    # the merge (the block mean's divide, and 11 ops). Between: / n, + eps and rsqrt per row.
    # Loop 1: -, *, *, +.
    assert cost.flops == (5 + 4) * m * n + 12 * m * steps + 3 * m
    assert_memory_bound(cost)


@pytest.mark.parametrize(("m", "k", "n"), [(130, 100, 260), (4096, 4096, 4096), (4095, 4095, 4095)])
def test_matmul_flops_are_2mnk_over_the_true_sizes(m: int, k: int, n: int) -> None:
    cost = cost_of(matmul, S(m, k, dtype=BF16), S(k, n, dtype=BF16))
    assert cost.dot_flops == cost.flops == 2 * m * n * k  # the accumulation is part of it


def test_matmul_4096_cubed_is_compute_bound() -> None:
    size = 4096
    cost = cost_of(matmul, S(size, size, dtype=BF16), S(size, size, dtype=BF16))
    assert cost.hbm_bytes == 2 * size * size * 2 + size * size * 4
    assert cost.bound is sk.Bound.COMPUTE
    assert cost.floor_seconds == pytest.approx(2 * size**3 / DOT)
    # a and b are read once each: the reads of every column of CTAs come from L2.


def test_a_bfloat16_result_halves_the_matmul_writes() -> None:
    size = 1024
    # The blocks pinned: left at their defaults, the plan narrows them for one and not the other.
    ab = (S(size, size, dtype=BF16), S(size, size, dtype=BF16))
    f32 = cost_of(matmul, *ab, BM=128, BN=128)
    bf16 = cost_of(matmul, *ab, BM=128, BN=128, bf16_out=True)
    assert f32.hbm_bytes - bf16.hbm_bytes == size * size * 2
    assert bf16.flops == f32.flops  # the cast is free


def test_a_ragged_matmul_counts_its_host_padding() -> None:
    # b padded to (104, 320) for WGMMA's tiles; a to (136, 128) for them, and further to 256
    # rows, the two 128-row blocks the warp-specialized matmul's consumers share.
    m, k, n = 130, 100, 260
    cost = cost_of(matmul, S(m, k, dtype=BF16), S(k, n, dtype=BF16))
    a = 256 * 128 * 2 + (m * k * 2 + 256 * 128 * 2)
    b = 104 * 320 * 2 + (k * n * 2 + 104 * 320 * 2)
    assert cost.hbm_bytes == a + b + m * n * 4


def test_batched_matmul_counts_every_batch_entry() -> None:
    b, m, k, n = 3, 256, 128, 512
    cost = cost_of(batched_matmul, S(b, m, k, dtype=BF16), S(b, k, n, dtype=BF16))
    assert cost.dot_flops == cost.flops == 2 * b * m * n * k
    assert cost.hbm_bytes == b * (m * k * 2 + k * n * 2 + m * n * 4)


def test_matmul_bias_gelu_splits_tensor_core_and_vector_flops() -> None:
    m, k, n = 4096, 4096, 4096
    cost = cost_of(matmul_bias_gelu, S(m, k, dtype=BF16), S(k, n, dtype=BF16), S(n))
    assert cost.dot_flops == 2 * m * n * k
    assert cost.flops > cost.dot_flops  # the bias and the GELU, per element of the product
    assert (cost.flops - cost.dot_flops) % (m * n) == 0
    vector = cost.flops - cost.dot_flops
    assert cost.floor_seconds == pytest.approx(cost.dot_flops / DOT + vector / VECTOR)
    assert cost.hbm_bytes == m * k * 2 + k * n * 2 + n * 4 + m * n * 2


def test_the_printed_plan_has_a_cost_line_after_the_schedule_line() -> None:
    lines = str(add.plan(S(100, 300), S(100, 300))).splitlines()
    smem = next(i for i, line in enumerate(lines) if line.startswith("  smem: "))
    assert lines[smem + 1].startswith("  schedule: ")
    assert lines[smem + 2] == (
        "  cost: 360,000 B HBM, 30,000 flop; floor 83.7 ns at 4.3 TB/s (memory-bound)"
    )


def test_the_cost_line_of_a_matmul() -> None:
    text = str(matmul.plan(S(4096, 4096, dtype=BF16), S(4096, 4096, dtype=BF16)))
    assert (
        "  cost: 134,217,728 B HBM, 137,438,953,472 flop (all sk.dot); floor 174 us at "
        "790 TFLOP/s sk.dot (compute-bound)"
    ) in text.splitlines()


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ((12_582_912, 4_194_304, 0), "floor 2.93 us at 4.3 TB/s (memory-bound)"),
        ((4_300_000_000_000, 0, 0), "floor 1 s at 4.3 TB/s (memory-bound)"),
        ((4_300_000_000, 0, 0), "floor 1 ms at 4.3 TB/s (memory-bound)"),
        ((43, 0, 0), "floor 0.01 ns at 4.3 TB/s (memory-bound)"),
        ((4_299_000_000, 0, 0), "floor 1 ms at 4.3 TB/s (memory-bound)"),  # 999.8 us rounds up
        ((8, 67_000_000, 0), "floor 1 us at 67 TFLOP/s vector (compute-bound)"),
        (
            (8, 79_000_000 + 6_700_000, 79_000_000),
            "floor 200 ns at 790 TFLOP/s sk.dot + 67 TFLOP/s vector (compute-bound)",
        ),
    ],
)
def test_cost_text(fields: tuple[int, int, int], text: str) -> None:
    cost = sk.Cost(*fields)
    cost.check_invariants()
    assert str(cost).endswith(text), str(cost)


def test_check_invariants_catches_inconsistent_counts() -> None:
    good = sk.Cost(hbm_bytes=1000, flops=10, dot_flops=5)
    good.check_invariants()
    for bad in (
        dataclasses.replace(good, dot_flops=11),  # more sk.dot flops than flops
        dataclasses.replace(good, flops=-1),
        dataclasses.replace(good, hbm_bytes=0),  # a call writes its results
    ):
        with pytest.raises(AssertionError):
            bad.check_invariants()


@sk.kernel(tile={"M": "BM", "N": "BN"})
def column_positions(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Float[Array, "M N"]:
    scaled = sk.position("N").astype(jnp.float32) * 2.0
    return sk.load(x) + scaled[None, :]


def test_a_position_vector_runs_along_its_dim_even_when_the_blocks_are_equal() -> None:
    """With BM == BN a vector's length does not say its dim; `sk.position` does."""
    m, n = 100, 640  # ragged M: 2 blocks of rows; 10 of columns
    cost = column_positions.plan(jax.ShapeDtypeStruct((m, n), jnp.float32)).cost
    assert cost is not None
    # The add over every element; the cast and the multiply over each column position, in each
    # of the 2 blocks of rows. Placed along M instead, the vector's ops would count 2 x 100 x 10.
    assert cost.flops == m * n + 2 * n * 2
