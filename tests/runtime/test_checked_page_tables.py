"""`sk.checked_indices()` over page tables (`pages={"P": "tables"}`): an entry outside [0, P)
is an OperandError naming the kernel, the table, the dim, the position (b, i), the value and the
pool it is outside of; -1, which pads a row past its sequence's pages, passes; calls under
jax.jit and outside the block are not checked."""

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float32, Int32, UInt8

import statickernel as sk
from markers import line_finder
from paged_attention import paged_attention

_FILE = pathlib.Path(__file__)

line_of = line_finder(__file__)


@sk.kernel(batch="B", tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def page_sums(
    pages: Float32[Array, "P S D"],
    tables: Int32[Array, "B Pages"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float32[Array, "B D"]:
    def step(acc: jax.Array) -> jax.Array:
        return acc + sk.sum(sk.load(pages), axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32))


@sk.kernel(tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "table"})
def one_sequence(
    pages: Float32[Array, "P S D"],
    table: UInt8[Array, " Pages"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float32[Array, " D"]:
    def step(acc: jax.Array) -> jax.Array:
        return acc + sk.sum(sk.load(pages), axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32))


@sk.kernel(batch=("B", "H"), tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def head_sums(
    tables: Int32[Array, "B Pages"],
    pages: Float32[Array, "H P S D"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float32[Array, "B H D"]:
    def step(acc: jax.Array) -> jax.Array:
        return acc + sk.sum(sk.load(pages), axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32))


POOL = jnp.arange(10 * 16 * 32, dtype=jnp.float32).reshape(10, 16, 32) / 1000


def expected_sums(tables: Any) -> np.ndarray:
    pool = np.asarray(POOL, np.float64)
    tables = np.asarray(tables)
    inside = (tables >= 0) & (tables < pool.shape[0])
    rows = np.where(inside[..., None, None], pool[np.where(inside, tables, 0)], 0.0)
    return rows.sum(axis=(1, 2))


def test_an_entry_past_the_pool_names_its_position_and_value() -> None:
    tables = jnp.array([[0, 1, -1, -1], [9, 10, 3, 12]], jnp.int32)
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        page_sums(POOL, tables)  # @past
    error = info.value
    assert type(error) is sk.OperandError
    assert error.kernel == "page_sums" and error.operand == "tables" and error.dim == "P"
    assert "position (1, 1)" in error.what and ": 10" in error.what
    assert error.expected == "indices in [0, 10) (P of `pages`), or -1 for padding"
    assert error.actual == "tables[1, 1] = 10, and 1 more outside"
    assert error.fix and "a page of zeros" in error.fix
    assert error.where and error.where.endswith(f"{_FILE.name}:{line_of('past')}")


@pytest.mark.parametrize(
    ("value", "position"),
    [(-2, (0, 3)), (-(2**31), (1, 0)), (2**31 - 1, (1, 2))],
    ids=["-2", "int32-min", "int32-max"],
)
def test_entries_outside_the_pool_are_refused(value: int, position: tuple[int, int]) -> None:
    tables = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    tables[position] = value
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        page_sums(POOL, jnp.asarray(tables, jnp.int32))
    assert f"position {position}: {value}" in info.value.what
    assert (
        info.value.actual == f"tables[{position[0]}, {position[1]}] = {value}, and 0 more outside"
    )


def test_minus_one_pads_a_row_and_passes() -> None:
    tables = jnp.array([[9, -1, -1, -1], [-1, -1, -1, -1], [0, 1, 2, 9]], jnp.int32)
    with sk.checked_indices():
        got = page_sums(POOL, tables)
    np.testing.assert_allclose(np.asarray(got), expected_sums(tables), rtol=1e-5)


def test_an_entry_past_the_sequence_is_still_checked() -> None:
    """The check reads the whole table, not the lengths: a row past its sequence's pages is
    padded with -1, not with stale page numbers."""
    tables = jnp.array([[0, 1, 99, 99]], jnp.int32)
    with sk.checked_indices(), pytest.raises(sk.OperandError, match=r"position \(0, 2\): 99"):
        page_sums(POOL, tables)


def test_a_table_of_one_sequence_names_a_single_position() -> None:
    """A uint8 table: 255 is outside a pool of 10 pages."""
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        one_sequence(POOL, jnp.array([3, 4, 255, 1], jnp.uint8))
    assert "position 2: 255" in info.value.what
    assert info.value.actual == "table[2] = 255, and 0 more outside"
    with sk.checked_indices():
        got = one_sequence(POOL, jnp.array([3, 4, 9, 0], jnp.uint8))
    np.testing.assert_allclose(np.asarray(got), expected_sums([[3, 4, 9, 0]])[0], rtol=1e-5)


def test_the_pool_of_a_pool_per_head_is_its_second_dim() -> None:
    heads = jnp.stack([POOL, -POOL, 2 * POOL])  # (3, 10, 16, 32): 3 heads, 10 pages
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        head_sums(jnp.array([[0, 1, 2, 3], [4, 5, 6, 10]], jnp.int32), heads)
    assert info.value.expected == "indices in [0, 10) (P of `pages`), or -1 for padding"
    assert "position (1, 3): 10" in info.value.what


def test_outside_the_block_and_under_jit_nothing_is_checked() -> None:
    tables = jnp.array([[0, 10, 1, 3], [4, 5, 6, 7]], jnp.int32)
    want = expected_sums(tables)
    np.testing.assert_allclose(np.asarray(page_sums(POOL, tables)), want, rtol=1e-5)
    with sk.checked_indices():
        np.testing.assert_allclose(np.asarray(jax.jit(page_sums)(POOL, tables)), want, rtol=1e-5)
        with sk.checked_indices(False):
            np.testing.assert_allclose(np.asarray(page_sums(POOL, tables)), want, rtol=1e-5)


def test_the_gallery_wrapper_pads_its_split_tables_with_minus_one() -> None:
    """Three splits of 5 pages pad each table to 6 with -1: the checked mode passes them, and
    still refuses a page outside the pool."""
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((1, 4, 64), np.float32), jnp.bfloat16)
    k_pages = jnp.asarray(rng.standard_normal((1, 8, 16, 64), np.float32), jnp.bfloat16)
    v_pages = jnp.asarray(rng.standard_normal((1, 8, 16, 64), np.float32), jnp.bfloat16)
    lengths = jnp.array([70], jnp.int32)
    with sk.checked_indices():
        out = paged_attention(
            q, k_pages, v_pages, jnp.array([[7, 0, 3, 5, 1]], jnp.int32), lengths, splits=3
        )
        assert np.isfinite(np.asarray(out, np.float32)).all()
        with pytest.raises(sk.OperandError) as info:
            paged_attention(
                q, k_pages, v_pages, jnp.array([[7, 0, 8, 5, 1]], jnp.int32), lengths, splits=3
            )
    assert info.value.kernel == "paged_attention_heads" and info.value.operand == "block_tables"
    assert ": 8" in info.value.what
