"""jnp.mean, jnp.var, jnp.std and jnp.average over a tiled or looped dim: jnp takes their
count from the block's shape, and in the last block of a dim that ends inside it they count
only the elements that exist. Each kernel in the interpreter against the same jnp function
run on each block of the whole array, at ragged shapes (primes, one row, below one block)."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float32

import statickernel as sk
from tolerances import assert_close, tolerance_for

Statistics = Callable[[jax.Array], tuple[jax.Array, ...]]


def _column_statistics(
    v: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    zero = jnp.zeros_like(v)
    return (
        v - jnp.mean(v, axis=0, keepdims=True),
        zero + jnp.var(v, axis=0),
        zero + jnp.std(v, axis=0, ddof=1, keepdims=True),
        v - jnp.average(v, axis=0),
        v - jnp.mean(v),
    )


def _row_statistics(v: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    zero = jnp.zeros_like(v)
    return (
        v - v.mean(axis=1, keepdims=True),
        zero + jnp.var(v, axis=1, keepdims=True),
        zero + jnp.std(v, axis=1)[:, None],
        v - jnp.mean(v),
    )


@sk.kernel(tile={"M": "BM"})
def over_rows(
    x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64
) -> tuple[
    Float32[Array, "M N"],
    Float32[Array, "M N"],
    Float32[Array, "M N"],
    Float32[Array, "M N"],
    Float32[Array, "M N"],
]:
    return _column_statistics(sk.load(x))


@sk.kernel(tile={"M": "BM", "N": "BN"})
def over_columns(
    x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> tuple[
    Float32[Array, "M N"], Float32[Array, "M N"], Float32[Array, "M N"], Float32[Array, "M N"]
]:
    return _row_statistics(sk.load(x))


def _by_blocks(fn: Statistics, x: jax.Array, rows: int, cols: int) -> tuple[jax.Array, ...]:
    """`fn` run by jnp on each (rows, cols) block of `x` that exists, put back together."""
    m, n = x.shape
    grid = [
        [fn(x[i : i + rows, j : j + cols]) for j in range(0, n, cols)] for i in range(0, m, rows)
    ]
    count = len(grid[0][0])
    return tuple(
        jnp.concatenate([jnp.concatenate([b[k] for b in row], axis=1) for row in grid])
        for k in range(count)
    )


def _assert_statistics(got: tuple[jax.Array, ...], want: tuple[jax.Array, ...], terms: int) -> None:
    tolerance = tolerance_for(jnp.float32, terms, scale=4.0, ulps=8)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_close(g, w, tolerance, err_msg=f"result {i}")


@pytest.mark.parametrize("shape", [(70, 13), (61, 7), (65, 13), (5, 13), (1, 13), (128, 13)])
def test_statistics_over_the_rows_count_the_rows_that_exist(shape: tuple[int, int]) -> None:
    """Before, the last block's mean (70 rows: 6 of 64) divided its sum by 64."""
    x = jax.random.normal(jax.random.key(shape[0]), shape) + 3.0
    want = _by_blocks(_column_statistics, x, 64, shape[1])
    _assert_statistics(over_rows(x), want, shape[1] * 64)


@pytest.mark.parametrize("shape", [(13, 70), (3, 61), (2, 1), (67, 130)])
def test_statistics_over_the_columns_count_the_columns_that_exist(shape: tuple[int, int]) -> None:
    x = jax.random.normal(jax.random.key(shape[1]), shape) - 2.0
    want = _by_blocks(_row_statistics, x, 64, 64)
    _assert_statistics(over_columns(x), want, 64 * 64)


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def block_means_summed(
    x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Float32[Array, " M"]:
    """Each row's means over its blocks of columns, added up: a step's block of a loop."""

    def step(total: jax.Array) -> jax.Array:
        v = sk.load(x)
        return total + jnp.mean(v, axis=1) + jnp.var(v, axis=1)

    return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32))


@sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
def key_means_summed(
    x: Float32[Array, "M N"],
    k: Float32[Array, "M K"],
    *,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:
    """The same over a loop dim outside the frame (a step's block of keys), added to x."""

    def step(total: jax.Array) -> jax.Array:
        return total + jnp.mean(sk.load(k), axis=1)

    return sk.load(x) + sk.loop("K", step, init=jnp.zeros((BM,), jnp.float32))[:, None]


def _summed_over_blocks(fn: Callable[[jax.Array], jax.Array], x: jax.Array, cols: int) -> jax.Array:
    total = fn(x[:, :cols])
    for j in range(cols, x.shape[1], cols):
        total = total + fn(x[:, j : j + cols])
    return total


@pytest.mark.parametrize("shape", [(3, 70), (70, 131), (1, 1)])
def test_means_over_a_loops_blocks_count_the_columns_that_exist(shape: tuple[int, int]) -> None:
    x = jax.random.normal(jax.random.key(sum(shape)), shape) + 1.0

    def stats(b: jax.Array) -> jax.Array:
        return jnp.mean(b, axis=1) + jnp.var(b, axis=1)

    want = _summed_over_blocks(stats, x, 64)
    assert_close(block_means_summed(x), want, tolerance_for(jnp.float32, 64, scale=4.0, ulps=8))
    y = jax.random.normal(jax.random.key(1), (shape[0], 5))
    want = y + _summed_over_blocks(lambda b: jnp.mean(b, axis=1), x, 64)[:, None]
    assert_close(key_means_summed(y, x), want, tolerance_for(jnp.float32, 64, scale=4.0, ulps=8))


def test_a_mean_over_whole_or_undivided_dims_keeps_jnps_count() -> None:
    """Where every element of the block exists, the generated module divides by the literal
    jnp wrote, as before: no count is taken."""
    x = jax.ShapeDtypeStruct((128, 13), jnp.float32)
    assert "_count = " not in over_rows.emit(x)
    assert "_count = " in over_rows.emit(jax.ShapeDtypeStruct((70, 13), jnp.float32))


def test_a_sum_divided_by_the_block_size_is_left_as_written() -> None:
    """Only jnp's own count is taken: a division the body writes is its own (sk.dim gives a
    dim's size)."""

    @sk.kernel(tile={"M": "BM"})
    def by_block(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
        v = sk.load(x)
        return v - sk.sum(v, axis=0)[None, :] / BM

    x = jnp.ones((70, 8), jnp.float32)
    assert "_count = " not in by_block.emit(x)
    got = by_block(x)
    assert_close(got[64:], jnp.full((6, 8), 1.0 - 6 / 64), tolerance_for(jnp.float32))


@pytest.mark.parametrize("kernel", [over_rows, over_columns, block_means_summed])
def test_counted_statistics_cross_lower_for_the_gpu(kernel: sk.Kernel) -> None:
    x = jax.ShapeDtypeStruct((70, 131), jnp.float32)
    kernel.lower(x)
