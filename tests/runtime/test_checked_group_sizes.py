"""`sk.checked_indices()` over the sizes of ragged groups (`ragged={"M": "group_sizes"}`): a
negative size, or sizes summing past the rows they split, is an OperandError naming the kernel,
the sizes, the dim, the first bad position and its value or the sum and the group that passes
the rows; valid sizes, an empty group and sizes summing under the rows included, pass; calls
under jax.jit and outside the block are not checked (a negative size then counts as 0, and the
groups are cut at the last row)."""

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float32, Int8

import statickernel as sk
from grouped_matmul import grouped_matmul
from markers import line_finder

_FILE = pathlib.Path(__file__)

line_of = line_finder(__file__)


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, ragged={"M": "counts"})
def int8_counts(
    x: BFloat16[Array, "M K"],
    w: BFloat16[Array, "E K N"],
    counts: Int8[Array, " E"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:
    """Sizes of another name, dim and dtype."""
    return sk.loop("K", lambda acc: acc + sk.dot(x, w), init=jnp.zeros((BM, BN), jnp.float32))


# Integers: every product and sum is exact in float32.
X = jnp.asarray(np.random.default_rng(0).integers(-3, 4, (100, 64)), jnp.bfloat16)
W = jnp.asarray(np.random.default_rng(1).integers(-3, 4, (3, 64, 128)), jnp.bfloat16)


def expected(sizes: Any, w: Any = W) -> np.ndarray:
    """Each group's rows times its weight, a negative size counted as 0, cut at M."""
    x64, w64 = np.asarray(X, np.float64), np.asarray(w, np.float64)
    out, start = np.zeros((x64.shape[0], w64.shape[-1])), 0
    for g, size in enumerate(np.asarray(sizes).tolist()):
        end = min(start + max(size, 0), x64.shape[0])
        out[start:end] = x64[start:end] @ w64[g]
        start = end
    return out


def i32(values: Any) -> jax.Array:
    return jnp.asarray(values, jnp.int32)


def test_a_negative_size_names_its_position_and_value() -> None:
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        grouped_matmul(X, W, i32([10, -3, 5]))  # @negative
    error = info.value
    assert type(error) is sk.OperandError
    assert error.kernel == "grouped_matmul"
    assert error.operand == "group_sizes" and error.dim == "G"
    assert error.what == "`group_sizes` holds a negative group size at position 1: -3"
    assert error.expected == "sizes >= 0, the rows of each group in order"
    assert error.actual == "group_sizes[1] = -3, and 0 more negative"
    assert error.fix and "count a negative size as 0" in error.fix
    assert error.where and error.where.endswith(f"{_FILE.name}:{line_of('negative')}")
    assert error.where in str(error)


@pytest.mark.parametrize(
    ("sizes", "position", "more"),
    [([-1, -2, -3], 0, 2), ([0, 0, -(2**31)], 2, 0), ([50, -1, 120], 1, 0)],
    ids=["all-negative", "int32-min-last", "negative-and-past-M"],
)
def test_the_first_negative_size_is_named(sizes: list[int], position: int, more: int) -> None:
    """A negative size is named before a sum past M is."""
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        grouped_matmul(X, W, i32(sizes))
    value = sizes[position]
    assert info.value.what.endswith(f"at position {position}: {value}")
    assert info.value.actual == f"group_sizes[{position}] = {value}, and {more} more negative"


def test_sizes_summing_past_the_rows_name_the_sum_and_the_group() -> None:
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        grouped_matmul(X, W, i32([50, 40, 20]))  # @past
    error = info.value
    assert error.kernel == "grouped_matmul"
    assert error.operand == "group_sizes" and error.dim == "M"
    assert error.what == "the group sizes `group_sizes` sum to 110, past the 100 rows of M"
    assert error.expected == "sum(group_sizes) <= 100 (M of `x`); rows past the sum are zeros"
    assert error.actual == "sum = 110; group 2 ends at row 110"
    assert error.fix and "cut the groups at row 100" in error.fix
    assert error.where and error.where.endswith(f"{_FILE.name}:{line_of('past')}")


@pytest.mark.parametrize(
    ("sizes", "total", "group", "end"),
    [
        ([100, 1, 0], 101, 1, 101),
        ([101, 0, 0], 101, 0, 101),
        ([2**31 - 1, 2**31 - 1, 5], 2**32 + 3, 0, 2**31 - 1),
    ],
    ids=["one-past", "the-first-group-past", "past-int32"],
)
def test_the_first_group_past_the_rows_is_named(
    sizes: list[int], total: int, group: int, end: int
) -> None:
    """The sum is taken in 64 bits: sizes whose int32 sum wraps are still past M."""
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        grouped_matmul(X, W, i32(sizes))
    assert f"sum to {total}," in info.value.what
    assert info.value.actual == f"sum = {total}; group {group} ends at row {end}"


@pytest.mark.parametrize(
    "sizes",
    [[30, 0, 70], [100, 0, 0], [0, 0, 0], [10, 20, 30], [0, 0, 100], [1, 98, 1]],
    ids=["an-empty-group", "one-group", "all-empty", "sum-below-M", "the-last", "sum-M"],
)
def test_valid_sizes_pass(sizes: list[int]) -> None:
    with sk.checked_indices():
        got = grouped_matmul(X, W, i32(sizes))
    np.testing.assert_array_equal(np.asarray(got), expected(sizes))


def test_sizes_of_another_name_dim_and_dtype() -> None:
    w = W[:2]
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        int8_counts(X, w, jnp.asarray([-128, 5], jnp.int8))
    assert info.value.operand == "counts" and info.value.dim == "E"
    assert info.value.kernel == "int8_counts"
    assert info.value.actual == "counts[0] = -128, and 0 more negative"
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        int8_counts(X, w, jnp.asarray([127, 0], jnp.int8))
    assert info.value.operand == "counts" and info.value.dim == "M"
    assert info.value.actual == "sum = 127; group 0 ends at row 127"
    with sk.checked_indices():
        got = int8_counts(X, w, jnp.asarray([60, 40], jnp.int8))
    np.testing.assert_array_equal(np.asarray(got), expected([60, 40], w))


def test_outside_the_block_and_under_jit_nothing_is_checked() -> None:
    """A negative size counts as 0 and the groups are cut at row M, unchecked."""
    negative, past = [10, -3, 95], [50, 40, 20]
    np.testing.assert_array_equal(
        np.asarray(grouped_matmul(X, W, i32(negative))), expected(negative)
    )
    jitted = jax.jit(grouped_matmul)
    with sk.checked_indices():
        for sizes in (negative, past):
            np.testing.assert_array_equal(np.asarray(jitted(X, W, i32(sizes))), expected(sizes))
        with sk.checked_indices(False):
            np.testing.assert_array_equal(
                np.asarray(grouped_matmul(X, W, i32(past))), expected(past)
            )
