"""Paged operands (`pages={"P": "tables"}`) run in the interpreter, against references written
here in numpy, independently of the gallery's.

The reference gathers each sequence from its pages in the order its table row lists them: token
t is row t % S of page tables[b, t // S], and a page outside [0, P) (-1 included) reads zeros.
It then computes in float64 over the first `length` tokens. Maxima and gathered values are
compared exactly; sums and products within tolerances, as the kernel adds in its own order.

Covered: lengths 0, 1, at page and block boundaries (S - 1, S, S + 1), the whole table and past
it; table entries -1, past the pool, at the extremes of their dtype, repeated; blocks of several
pages, of one, of part of one; a table whose pages do not fill whole blocks (a ragged last
block); stage counts; int16, uint16, int8 and uint8 tables; float32, float16 and bfloat16 pages;
D tiled, ragged and host-padded; sk.position along the sequence; two loops over the same pages;
one sequence without a batch dim; KV heads as a batch dim; a paged q . K^T; the gallery's decode
attention at GQA group sizes 1, 4 and 8, D of 64 and 128, its log-sum-exp, sm_scale, and its
wrapper with and without splits; jax.jit; drawn tables and lengths; the race detector; the
emitted module; the cross-lowering for Mosaic GPU; the plan's text and its cost.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float32, Int8, Int16, Int32, UInt8, UInt16

import statickernel as sk
from jax_support import needs_mosaic_gpu
from paged_attention import (
    paged_attention,
    paged_attention_heads,
    paged_attention_heads_reference,
    paged_attention_reference,
)
from tolerances import assert_close, tolerance_for

# --- the reference --------------------------------------------------------------------------


def gathered(pages: Any, tables: Any) -> np.ndarray:
    """Each table row's sequence in float64: (..., Pages * S, *rest) from pages (P, S, *rest)
    and tables (..., Pages); a page outside [0, P) is a page of zeros."""
    pages = np.asarray(pages, np.float64)
    tables = np.asarray(tables).astype(np.int64)
    pool = pages.shape[0]
    inside = (tables >= 0) & (tables < pool)
    picked = pages[np.where(inside, tables, 0)]  # (..., Pages, S, *rest)
    picked = np.where(inside.reshape(*inside.shape, *[1] * (pages.ndim - 1)), picked, 0.0)
    return picked.reshape(*tables.shape[:-1], -1, *pages.shape[2:])


def within(lengths: Any, tokens: int) -> np.ndarray:
    """(B, tokens): whether each token is before its sequence's length."""
    return np.arange(tokens)[None, :] < np.asarray(lengths, np.int64)[:, None]


def sums(pages: Any, tables: Any, lengths: Any) -> np.ndarray:
    rows = gathered(pages, tables)
    return np.where(within(lengths, rows.shape[1])[..., None], rows, 0.0).sum(axis=1)


def maxima(pages: Any, tables: Any, lengths: Any) -> np.ndarray:
    rows = gathered(pages, tables)
    return np.where(within(lengths, rows.shape[1])[..., None], rows, -np.inf).max(axis=1)


def attention(
    q: Any, k_pages: Any, v_pages: Any, tables: Any, lengths: Any, scale: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """q (B, Hkv, G, D) attending to its sequence's first `lengths` tokens, with the
    log-sum-exp of its scaled scores; zeros and -inf for an empty sequence."""
    q = np.asarray(q, np.float64)
    batch, heads, group, dim = q.shape
    scale = 1 / math.sqrt(dim) if scale is None else scale
    out = np.zeros(q.shape)
    lse = np.full((batch, heads, group), -np.inf)
    for b in range(batch):
        for h in range(heads):
            keys = gathered(k_pages[h], tables[b])
            values = gathered(v_pages[h], tables[b])
            n = max(0, min(int(lengths[b]), keys.shape[0]))
            if n == 0:
                continue
            s = q[b, h] @ keys[:n].T * scale
            top = s.max(axis=1, keepdims=True)
            p = np.exp(s - top)
            out[b, h] = p @ values[:n] / p.sum(axis=1, keepdims=True)
            lse[b, h] = top[:, 0] + np.log(p.sum(axis=1))
    return out, lse


# --- data -----------------------------------------------------------------------------------


def pool_of(shape: tuple[int, ...], dtype: Any = jnp.float32, seed: int = 0) -> jax.Array:
    """Values of magnitude 0.5 or more: a page of zeros where a page was due shows."""
    values = np.random.default_rng(seed).standard_normal(shape, np.float32)
    return jnp.asarray(values + np.where(values >= 0, 0.5, -0.5), dtype)


def normal(shape: tuple[int, ...], dtype: Any, seed: int) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, np.float32), dtype)


def i32(values: Any) -> jax.Array:
    return jnp.asarray(values, jnp.int32)


def assert_sums(got: jax.Array, want: np.ndarray, terms: int) -> None:
    """float32 sums of `terms` values of magnitude up to about 4, in any order."""
    assert got.dtype == jnp.float32, got.dtype
    assert got.shape == want.shape, (got.shape, want.shape)
    assert_close(got, want, tolerance_for(jnp.float32, terms, scale=4.0))


# --- the kernels ----------------------------------------------------------------------------


@sk.kernel(batch="B", tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def paged_sum(
    pages: Float[Array, "P S D"],
    tables: Int32[Array, "B Pages"],
    lengths: Int32[Array, " B"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Float32[Array, "B D"]:
    """Each sequence's first `lengths` rows, summed."""
    length = sk.load(lengths)

    def step(acc: jax.Array) -> jax.Array:
        x = sk.load(pages).astype(jnp.float32)
        return acc + sk.sum(jnp.where(sk.position("S")[:, None] < length, x, 0.0), axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32), stop=length)


@sk.kernel(batch="B", tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def paged_max(
    pages: Float[Array, "P S D"],
    tables: Int32[Array, "B Pages"],
    lengths: Int32[Array, " B"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float[Array, "B D"]:
    """Each sequence's largest value over its first `lengths` rows; -inf for an empty one."""
    length = sk.load(lengths)

    def step(best: jax.Array) -> jax.Array:
        x = jnp.where(sk.position("S")[:, None] < length, sk.load(pages), -jnp.inf)
        return jnp.maximum(best, sk.max(x, axis=0))

    return sk.loop("S", step, init=jnp.full((BD,), -jnp.inf, pages.dtype), stop=length)


@sk.kernel(batch="B", tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def position_weighted(
    pages: Float32[Array, "P S D"],
    tables: Int32[Array, "B Pages"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float32[Array, "B D"]:
    """The whole table's rows, each times its position in the sequence plus one: no stop, so
    the pages outside the pool and the rows past the table's end count as zeros."""

    def step(acc: jax.Array) -> jax.Array:
        weight = (sk.position("S") + 1).astype(jnp.float32)
        return acc + sk.sum(sk.load(pages) * weight[:, None], axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32))


def summing(annotation: Any, name: str) -> sk.Kernel[..., Any]:
    """`paged_sum` with a table of another integer dtype."""
    table_type = annotation[Array, "B Pages"]

    @sk.kernel(batch="B", tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"}, name=name)
    def kernel(
        pages: Float32[Array, "P S D"],
        tables: table_type,  # pyright: ignore[reportInvalidTypeForm]
        lengths: Int32[Array, " B"],
        *,
        BS: sk.Const[int] = 64,
        BD: sk.Const[int] = 64,
    ) -> Float32[Array, "B D"]:
        length = sk.load(lengths)

        def step(acc: jax.Array) -> jax.Array:
            x = jnp.where(sk.position("S")[:, None] < length, sk.load(pages), 0.0)
            return acc + sk.sum(x, axis=0)

        return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32), stop=length)

    return kernel


TABLE_KERNELS = {
    "int16": summing(Int16, "paged_sum_int16"),
    "uint16": summing(UInt16, "paged_sum_uint16"),
    "int8": summing(Int8, "paged_sum_int8"),
    "uint8": summing(UInt8, "paged_sum_uint8"),
}


@sk.kernel(batch="B", tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def exp_sum(
    pages: Float32[Array, "P S D"],
    tables: Int32[Array, "B Pages"],
    lengths: Int32[Array, " B"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float32[Array, "B D"]:
    """Two loops over the same pages: the max, then the sum of exp(x - max)."""
    length = sk.load(lengths)

    def masked() -> jax.Array:
        return jnp.where(sk.position("S")[:, None] < length, sk.load(pages), -jnp.inf)

    def top(best: jax.Array) -> jax.Array:
        return jnp.maximum(best, sk.max(masked(), axis=0))

    best = sk.loop("S", top, init=jnp.full((BD,), -jnp.inf, jnp.float32), stop=length)

    def add(total: jax.Array) -> jax.Array:
        return total + sk.sum(jnp.exp(masked() - best[None, :]), axis=0)

    return sk.loop("S", add, init=jnp.zeros((BD,), jnp.float32), stop=length)


@sk.kernel(tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "table"})
def one_sequence(
    pages: Float32[Array, "P S D"],
    table: Int32[Array, " Pages"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float32[Array, " D"]:
    """One sequence, its table a vector: no batch dim at all."""

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
    """A pool per head (as a KV cache stores heads), one table per sequence for all heads."""

    def step(acc: jax.Array) -> jax.Array:
        return acc + sk.sum(sk.load(pages), axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32))


@sk.kernel(batch=("B", "H"), tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def head_sums_pool_first(
    pages: Float32[Array, "H P S D"],
    tables: Int32[Array, "B Pages"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float32[Array, "B H D"]:
    """`head_sums` with the pool before the table, as a KV cache is usually passed."""

    def step(acc: jax.Array) -> jax.Array:
        return acc + sk.sum(sk.load(pages), axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32))


@sk.kernel(batch=("B", "H"), tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def head_table_sums(
    tables: Int32[Array, "B H Pages"],
    pages: Float32[Array, "H P S D"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float32[Array, "B H D"]:
    """A table row for each sequence and head."""

    def step(acc: jax.Array) -> jax.Array:
        return acc + sk.sum(sk.load(pages), axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32))


@sk.kernel(batch=("B", "Hkv"), tile={"G": "BG"}, loop={"S": "BS"}, pages={"P": "tables"})
def max_score(
    q: BFloat16[Array, "B Hkv G D"],
    k_pages: BFloat16[Array, "Hkv P S D"],
    tables: Int32[Array, "B Pages"],
    lengths: Int32[Array, " B"],
    *,
    BG: sk.Const[int] = 64,
    BS: sk.Const[int] = 64,
) -> Float32[Array, "B Hkv G"]:
    """A paged q . K^T with sk.dot, each query's largest score over its sequence."""
    length = sk.load(lengths)

    def step(best: jax.Array) -> jax.Array:
        s = sk.dot(q, k_pages)
        s = jnp.where(sk.position("S")[None, :] < length, s, -jnp.inf)
        return jnp.maximum(best, sk.max(s, axis=1))

    return sk.loop("S", step, init=jnp.full((BG,), -jnp.inf, jnp.float32), stop=length)


# --- lengths and tables ---------------------------------------------------------------------

# Pages of 16 rows, tables of 5 pages: 80 tokens a sequence, blocks of 64 (the last ragged).
PAGE, POOL, PAGES = 16, 12, 5
EDGE_LENGTHS = [0, 1, 15, 16, 17, 63, 64, 65, 79, 80, 81, 10_000]


def edge_tables(batch: int, seed: int = 0) -> np.ndarray:
    """Distinct pages of the pool in a shuffled order for each row."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(POOL)[:PAGES] for _ in range(batch)])


def test_lengths_at_page_and_block_boundaries() -> None:
    """One sequence of each length: empty, one token, S - 1, S, S + 1 at the first page and
    at the first block, the last token, the whole table and past it."""
    pages = pool_of((POOL, PAGE, 32))
    tables = edge_tables(len(EDGE_LENGTHS))
    lengths = i32(EDGE_LENGTHS)
    got = paged_sum(pages, i32(tables), lengths)
    assert_sums(got, sums(pages, tables, lengths), PAGES * PAGE)
    assert not np.any(np.asarray(got)[0]), "an empty sequence summed a row"
    np.testing.assert_array_equal(
        np.asarray(paged_max(pages, i32(tables), lengths)), maxima(pages, tables, lengths)
    )


TABLE_PATTERNS = {
    "padded-with--1": [[3, 7, -1, -1, -1]],
    "all--1": [[-1, -1, -1, -1, -1]],
    "past-the-pool": [[POOL, 2, POOL + 5, 0, 2**31 - 1]],
    "negative": [[-2, 4, -(2**31), 5, -100]],
    "one-page-repeated": [[6, 6, 6, 6, 6]],
    "0-and-P-1": [[0, POOL - 1, 0, POOL - 1, 0]],
}


@pytest.mark.parametrize("name", TABLE_PATTERNS)
@pytest.mark.parametrize("length", [17, 80], ids=["length-17", "whole-table"])
def test_table_patterns(name: str, length: int) -> None:
    pages = pool_of((POOL, PAGE, 32))
    tables = np.asarray(TABLE_PATTERNS[name])
    lengths = i32([length])
    got = paged_sum(pages, i32(tables), lengths)
    assert_sums(got, sums(pages, tables, lengths), PAGES * PAGE)
    np.testing.assert_array_equal(
        np.asarray(paged_max(pages, i32(tables), lengths)), maxima(pages, tables, lengths)
    )
    if name == "all--1":
        assert not np.any(np.asarray(got)), "a page outside the pool read non-zeros"


def test_pages_past_the_table_and_outside_the_pool_read_zeros() -> None:
    """Without stop= the loop walks the whole table and its ragged last block: its rows past
    the table's end and the pages outside the pool add nothing, whatever their weight."""
    pages = pool_of((POOL, PAGE, 32), seed=1)
    tables = np.asarray([[3, -1, 11, 12, 0], [-5, -5, -5, -5, 9], [1, 2, 3, 4, 5]])
    got = position_weighted(pages, i32(tables))
    rows = gathered(pages, tables)
    want = (rows * (np.arange(rows.shape[1]) + 1)[None, :, None]).sum(axis=1)
    assert_close(got, want, tolerance_for(jnp.float32, PAGES * PAGE, scale=4.0 * 80))


# --- blocks and pages -----------------------------------------------------------------------

BLOCKS = [
    pytest.param(16, 64, 1, id="page-16,BS-64:a-table-of-one-page"),
    pytest.param(8, 64, 7, id="page-8,BS-64:8-pages-a-block,ragged"),
    pytest.param(16, 64, 4, id="page-16,BS-64:4-pages-a-block,exact"),
    pytest.param(64, 64, 3, id="page-64,BS-64:a-page-a-block"),
    pytest.param(128, 64, 3, id="page-128,BS-64:half-a-page-a-block"),
    pytest.param(256, 64, 2, id="page-256,BS-64:a-quarter-page-a-block"),
    pytest.param(16, 128, 5, id="page-16,BS-128:8-pages,ragged"),
    pytest.param(64, 192, 5, id="page-64,BS-192:3-pages,ragged"),
    pytest.param(128, 256, 3, id="page-128,BS-256:2-pages,ragged"),
]


@pytest.mark.parametrize(("page", "BS", "pages_a_row"), BLOCKS)
def test_blocks_of_pages_and_of_parts_of_pages(page: int, BS: int, pages_a_row: int) -> None:
    pages = pool_of((9, page, 32), seed=page)
    rng = np.random.default_rng(BS)
    tables = np.stack([rng.permutation(9)[:pages_a_row] for _ in range(3)])
    tables[1, -1] = -1
    tokens = page * pages_a_row
    lengths = i32([tokens, tokens // 2 + 1, 0 if page > 8 else 1])
    got = paged_sum(pages, i32(tables), lengths, BS=BS)
    assert_sums(got, sums(pages, tables, lengths), tokens)
    np.testing.assert_array_equal(
        np.asarray(paged_max(pages, i32(tables), lengths, BS=BS)), maxima(pages, tables, lengths)
    )


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_stages_over_many_steps(stages: int) -> None:
    """Pages of 16, 12 pages a sequence: 3 steps of 64, every slot refilled; and a sequence
    that stops after the first."""
    pages = pool_of((30, 16, 32), seed=stages)
    rng = np.random.default_rng(stages)
    tables = np.stack([rng.permutation(30)[:12] for _ in range(3)])
    lengths = i32([192, 150, 40])
    got = paged_sum(pages, i32(tables), lengths, stages=stages)
    assert_sums(got, sums(pages, tables, lengths), 192)


# --- dtypes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16], ids=["float16", "bfloat16"])
def test_16_bit_pages(dtype: Any) -> None:
    pages = pool_of((POOL, PAGE, 32), dtype)
    tables = edge_tables(4, seed=3)
    tables[2, 1] = -1
    lengths = i32([80, 33, 64, 0])
    assert_sums(paged_sum(pages, i32(tables), lengths), sums(pages, tables, lengths), 80)
    got = paged_max(pages, i32(tables), lengths)
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got, np.float64), maxima(pages, tables, lengths))


TABLE_VALUES = {
    "int16": [[0, 299, -1, 300, 5], [-(2**15), 2**15 - 1, 2, 1, 1]],
    "uint16": [[0, 65535, 1, 299, 5], [300, 32768, 2, 1, 1]],
    "int8": [[0, 127, -1, -128, 5], [100, 3, 2, 1, 1]],
    "uint8": [[0, 255, 1, 128, 5], [254, 200, 2, 1, 1]],
}


@pytest.mark.parametrize("dtype", TABLE_KERNELS)
def test_tables_of_every_index_dtype(dtype: str) -> None:
    """A pool of 300 pages: the largest entry of an int16 table is outside it, the largest of
    an 8-bit one inside; negative entries read zeros."""
    pages = pool_of((300, 16, 16))
    tables = jnp.asarray(TABLE_VALUES[dtype], jnp.dtype(dtype))
    lengths = i32([80, 70])
    got = TABLE_KERNELS[dtype](pages, tables, lengths)
    assert_sums(got, sums(pages, np.asarray(tables), lengths), 80)


# --- the dims after a page's rows ----------------------------------------------------------


@pytest.mark.parametrize(
    ("D", "BD", "dtype"),
    [
        (128, 64, jnp.float32),
        (100, 64, jnp.float32),
        (6, 64, jnp.float32),
        (7, 64, jnp.bfloat16),
        (256, 128, jnp.bfloat16),
    ],
    ids=["D-128-two-blocks", "D-100-ragged", "D-6-host-padded", "bf16-D-7-host-padded", "D-256"],
)
def test_d_tiled_ragged_and_host_padded(D: int, BD: int, dtype: Any) -> None:
    pages = pool_of((POOL, PAGE, D), dtype, seed=D)
    tables = edge_tables(3, seed=D)
    tables[0, 2] = POOL
    lengths = i32([80, 41, 1])
    got = paged_sum(pages, i32(tables), lengths, BD=BD)
    assert_sums(got, sums(pages, tables, lengths), 80)


# --- bodies ---------------------------------------------------------------------------------


def test_two_loops_over_the_same_pages() -> None:
    pages = pool_of((POOL, PAGE, 32), seed=5)
    tables = edge_tables(3, seed=5)
    tables[1, 0] = -1
    lengths = i32([80, 50, 1])
    rows = gathered(pages, tables)
    x = np.where(within(lengths, rows.shape[1])[..., None], rows, -np.inf)
    want = np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1)
    assert_close(exp_sum(pages, i32(tables), lengths), want, tolerance_for(jnp.float32, 80))


def test_one_sequence_without_a_batch_dim() -> None:
    pages = pool_of((POOL, PAGE, 128), seed=6)
    table = np.asarray([3, 1, -1, 11, 12, 4])
    got = one_sequence(pages, i32(table))
    assert got.shape == (128,)
    assert_sums(got, gathered(pages, table).sum(axis=0), 96)


def head_sums_reference(pages: Any, tables: np.ndarray) -> np.ndarray:
    return np.stack(
        [
            np.stack([gathered(pages[h], row).sum(axis=0) for h in range(pages.shape[0])])
            for row in tables
        ]
    )


def test_a_pool_per_head_and_a_table_for_all_heads() -> None:
    pages = pool_of((3, POOL, PAGE, 64), seed=7)
    tables = edge_tables(2, seed=7)
    tables[0, 4] = -1
    assert_sums(head_sums(i32(tables), pages), head_sums_reference(pages, tables), 80)


def test_a_pool_per_head_passed_before_its_table() -> None:
    pages = pool_of((3, POOL, PAGE, 64), seed=7)
    tables = edge_tables(2, seed=7)
    got = head_sums_pool_first(pages, i32(tables))
    assert_sums(got, head_sums_reference(pages, tables), 80)


def test_a_table_row_for_each_sequence_and_head() -> None:
    pages = pool_of((3, POOL, PAGE, 64), seed=8)
    rng = np.random.default_rng(8)
    tables = rng.integers(-1, POOL + 1, (2, 3, PAGES))
    got = head_table_sums(i32(tables), pages)
    want = np.stack(
        [
            np.stack([gathered(pages[h], tables[b, h]).sum(axis=0) for h in range(3)])
            for b in range(2)
        ]
    )
    assert_sums(got, want, 80)


@pytest.mark.parametrize(
    ("G", "D", "page"),
    [(1, 64, 16), (8, 128, 64), (5, 64, 128)],
    ids=["G1-D64", "G8-D128", "G5-page-128"],
)
def test_a_paged_q_k_product(G: int, D: int, page: int) -> None:
    q = normal((2, 2, G, D), jnp.bfloat16, seed=G)
    k_pages = normal((2, 9, page, D), jnp.bfloat16, seed=D)
    tables = np.asarray([[3, 1, -1, 8, 0], [9, 2, 2, 4, 5]])[:, : 320 // page]
    lengths = i32([page * tables.shape[1], page + 1])
    got = max_score(q, k_pages, i32(tables), lengths)
    qf = np.asarray(q, np.float64)
    want = np.full((2, 2, G), -np.inf)
    for b in range(2):
        for h in range(2):
            keys = gathered(k_pages[h], tables[b])[: int(lengths[b])]
            want[b, h] = (qf[b, h] @ keys.T).max(axis=1)
    # Products of bfloat16 are exact in float32; the sum of D of them is rounded.
    assert_close(got, want, tolerance_for(jnp.float32, D, scale=8.0))


# --- drawn tables and lengths ---------------------------------------------------------------


@settings(max_examples=5, deadline=None)
@given(
    data=st.data(),
    BS=st.sampled_from([64, 128]),
)
def test_drawn_tables_and_lengths(data: st.DataObject, BS: int) -> None:
    """Entries from -2 to two past the pool, repeats among them, any length up to past the
    table; two shapes of table only, so the drawn examples reuse the compiled kernels."""
    pages = pool_of((POOL, PAGE, 32), seed=11)
    entries = st.integers(-2, POOL + 1)
    tables = np.asarray(
        data.draw(
            st.lists(st.lists(entries, min_size=PAGES, max_size=PAGES), min_size=3, max_size=3)
        )
    )
    lengths = i32(data.draw(st.lists(st.integers(0, PAGES * PAGE + 20), min_size=3, max_size=3)))
    got = paged_sum(pages, i32(tables), lengths, BS=BS)
    assert_sums(got, sums(pages, tables, lengths), PAGES * PAGE)
    np.testing.assert_array_equal(
        np.asarray(paged_max(pages, i32(tables), lengths, BS=BS)), maxima(pages, tables, lengths)
    )


# --- the gallery's decode attention ---------------------------------------------------------


def attention_inputs(
    batch: int,
    kv_heads: int,
    group: int,
    dim: int,
    page: int,
    pool: int,
    dtype: Any = jnp.bfloat16,
    seed: int = 0,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    q = normal((batch, kv_heads, group, dim), dtype, seed)
    k_pages = normal((kv_heads, pool, page, dim), dtype, seed + 1)
    v_pages = normal((kv_heads, pool, page, dim), dtype, seed + 2)
    return q, k_pages, v_pages


# bfloat16 rounds the result and p before the second product; float16 has 3 more bits.
ATTENTION_TOLERANCE = {jnp.bfloat16: 2e-2, jnp.float16: 4e-3}


def assert_attention(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    tables: Any,
    lengths: Any,
    **consts: Any,
) -> None:
    tables, lengths = i32(tables), i32(lengths)
    out, lse = paged_attention_heads(q, k_pages, v_pages, tables, lengths, **consts)
    want_out, want_lse = attention(
        q, k_pages, v_pages, np.asarray(tables), np.asarray(lengths), consts.get("sm_scale")
    )
    assert out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == jnp.float32 and lse.shape == q.shape[:3]
    got = np.asarray(out, np.float32)
    assert np.isfinite(got).all(), "a key outside the sequence leaked into the result"
    tol = ATTENTION_TOLERANCE[q.dtype.type]
    np.testing.assert_allclose(got, want_out, rtol=tol, atol=tol)
    got_lse = np.asarray(lse)
    empty = np.asarray(lengths) <= 0
    assert np.all(got_lse[empty] == -np.inf), "an empty sequence has a finite log-sum-exp"
    assert not np.any(got[empty]), "an empty sequence attended to something"
    np.testing.assert_allclose(got_lse[~empty], want_lse[~empty], rtol=1e-4, atol=1e-4)


def test_attention_at_page_and_block_boundaries() -> None:
    lengths = [0, 1, 15, 16, 17, 64, 65, 80, 10_000]
    q, k_pages, v_pages = attention_inputs(len(lengths), 1, 4, 64, PAGE, POOL)
    assert_attention(q, k_pages, v_pages, edge_tables(len(lengths), seed=1), lengths)


@pytest.mark.parametrize("name", TABLE_PATTERNS)
def test_attention_over_table_patterns(name: str) -> None:
    """A page outside the pool is a page of zero keys and values, attended to like any other
    within the length."""
    q, k_pages, v_pages = attention_inputs(1, 1, 4, 64, PAGE, POOL, seed=2)
    assert_attention(q, k_pages, v_pages, TABLE_PATTERNS[name], [70])


@pytest.mark.parametrize(
    ("group", "dim", "dtype"),
    [
        (1, 128, jnp.bfloat16),
        (4, 128, jnp.bfloat16),
        (8, 128, jnp.float16),
        (8, 64, jnp.bfloat16),
    ],
    ids=["G1-D128-bf16", "G4-D128-bf16", "G8-D128-f16", "G8-D64-bf16"],
)
def test_attention_gqa_groups_and_model_widths(group: int, dim: int, dtype: Any) -> None:
    q, k_pages, v_pages = attention_inputs(2, 2, group, dim, PAGE, POOL, dtype, seed=group)
    tables = edge_tables(2, seed=group)
    tables[1, 3] = -1
    assert_attention(q, k_pages, v_pages, tables, [80, 49])


@pytest.mark.parametrize(
    ("page", "BS", "pages_a_row"),
    [(128, 64, 3), (16, 128, 6), (64, 64, 4), (8, 64, 11)],
    ids=["page-128-BS-64", "page-16-BS-128-ragged", "page-64-BS-64", "page-8-BS-64-ragged"],
)
def test_attention_blocks_of_pages(page: int, BS: int, pages_a_row: int) -> None:
    q, k_pages, v_pages = attention_inputs(2, 1, 4, 64, page, 12, seed=page)
    rng = np.random.default_rng(page)
    tables = np.stack([rng.permutation(12)[:pages_a_row] for _ in range(2)])
    tokens = page * pages_a_row
    assert_attention(q, k_pages, v_pages, tables, [tokens, tokens // 3 + 1], BS=BS)


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_attention_stages(stages: int) -> None:
    q, k_pages, v_pages = attention_inputs(2, 1, 4, 64, 16, 40, seed=stages)
    rng = np.random.default_rng(stages)
    tables = np.stack([rng.permutation(40)[:20] for _ in range(2)])  # 5 steps of 64
    assert_attention(q, k_pages, v_pages, tables, [320, 200], stages=stages)


def test_attention_with_a_scale() -> None:
    q, k_pages, v_pages = attention_inputs(2, 1, 4, 64, PAGE, POOL, seed=9)
    tables = edge_tables(2, seed=9)
    assert_attention(q, k_pages, v_pages, tables, [80, 20], sm_scale=0.3)


@settings(max_examples=6, deadline=None)
@given(
    tables=st.lists(
        st.lists(st.integers(-1, POOL), min_size=PAGES, max_size=PAGES), min_size=2, max_size=2
    ),
    lengths=st.lists(st.integers(0, PAGES * PAGE + 5), min_size=2, max_size=2),
)
def test_attention_over_drawn_tables_and_lengths(
    tables: list[list[int]], lengths: list[int]
) -> None:
    q, k_pages, v_pages = attention_inputs(2, 1, 4, 64, PAGE, POOL, seed=10)
    assert_attention(q, k_pages, v_pages, tables, lengths)


def test_an_infinite_score_is_the_log_sum_exp() -> None:
    """A head whose score of a token is +inf has a log-sum-exp of +inf, as the reference's
    jax.nn.logsumexp; before, the online softmax's NaN sum made it -inf, as an empty
    sequence's. An empty sequence keeps -inf and zeros."""
    q, k_pages, v_pages = attention_inputs(2, 1, 4, 64, PAGE, POOL, seed=4)
    k_pages = k_pages.at[..., 0].set(jnp.abs(k_pages[..., 0]) + 0.5)
    q = q.at[0, 0, 1].set(jnp.zeros(64, q.dtype).at[0].set(jnp.inf))
    tables, lengths = i32(edge_tables(2, seed=4)), i32([40, 0])
    out, lse = paged_attention_heads(q, k_pages, v_pages, tables, lengths)
    _, want = paged_attention_heads_reference(q, k_pages, v_pages, tables, lengths)
    assert float(want[0, 0, 1]) == np.inf
    np.testing.assert_allclose(np.asarray(lse), np.asarray(want), rtol=1e-4, atol=1e-4)
    assert not np.any(np.asarray(out[1], np.float32))


def test_attention_under_jit() -> None:
    q, k_pages, v_pages = attention_inputs(2, 1, 4, 64, PAGE, POOL, seed=3)
    tables, lengths = i32(edge_tables(2, seed=3)), i32([75, 16])
    eager = paged_attention_heads(q, k_pages, v_pages, tables, lengths)
    jitted = jax.jit(paged_attention_heads)(q, k_pages, v_pages, tables, lengths)
    for got, want in zip(jitted, eager, strict=True):
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


# --- the wrapper: query heads grouped by key head, sequences split ---------------------------


def wrapper_inputs(
    batch: int, heads: int, kv_heads: int, page: int, pmax: int, seed: int = 0
) -> tuple[jax.Array, ...]:
    q = normal((batch, heads, 64), jnp.bfloat16, seed)
    pool = batch * pmax + 3
    k_pages = normal((kv_heads, pool, page, 64), jnp.bfloat16, seed + 1)
    v_pages = normal((kv_heads, pool, page, 64), jnp.bfloat16, seed + 2)
    rng = np.random.default_rng(seed)
    tables = i32(rng.permutation(pool)[: batch * pmax].reshape(batch, pmax))
    return q, k_pages, v_pages, tables


def assert_wrapped(
    got: jax.Array,
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    tables: jax.Array,
    lengths: jax.Array,
) -> None:
    """Against the gallery's reference and against this file's."""
    assert got.dtype == q.dtype and got.shape == q.shape
    got32 = np.asarray(got, np.float32)
    assert np.isfinite(got32).all()
    reference = paged_attention_reference(q, k_pages, v_pages, tables, lengths)
    np.testing.assert_allclose(got32, np.asarray(reference, np.float32), rtol=2e-2, atol=2e-2)
    batch, _, dim = q.shape
    grouped = q.reshape(batch, k_pages.shape[0], -1, dim)
    want, _ = attention(grouped, k_pages, v_pages, np.asarray(tables), np.asarray(lengths))
    np.testing.assert_allclose(got32, want.reshape(q.shape), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("splits", [1, 2, 3], ids=["splits-1", "splits-2", "splits-3"])
def test_the_wrapper_with_splits(splits: int) -> None:
    """7 pages a sequence: 3 splits pad each table with -1 to 9 pages; an empty sequence, one
    shorter than a split, and one that fills its table."""
    q, k_pages, v_pages, tables = wrapper_inputs(3, 2, 1, 16, 7, seed=splits)
    lengths = i32([0, 20, 112])
    got = paged_attention(q, k_pages, v_pages, tables, lengths, splits=splits)
    assert_wrapped(got, q, k_pages, v_pages, tables, lengths)
    if splits > 1:
        # Each part is rounded to bfloat16 before the parts are combined: an error of the
        # result's magnitude, not of each element's.
        whole = paged_attention(q, k_pages, v_pages, tables, lengths, splits=1)
        np.testing.assert_allclose(
            np.asarray(got, np.float32), np.asarray(whole, np.float32), rtol=2e-2, atol=1e-2
        )


@pytest.mark.parametrize("splits", [1, 2], ids=["splits-1", "splits-2"])
def test_the_wrapper_refuses_query_heads_the_key_heads_do_not_divide(splits: int) -> None:
    """7 query heads over 2 key heads: grouped-query attention gives each key head as many
    query heads, so there is no grouping. Before, a reshape's TypeError."""
    q, k_pages, v_pages, tables = wrapper_inputs(2, 7, 2, 16, 3)
    with pytest.raises(sk.ShapeError) as info:
        paged_attention(q, k_pages, v_pages, tables, i32([5, 40]), splits=splits)
    error = info.value
    assert error.operand == "q" and error.dim == "H"
    assert "7 query heads, not a multiple of the 2 key heads" in error.what
    assert error.expected == "H a multiple of Hkv = 2"
    assert error.bindings == {"H": 7, "Hkv": 2}
    assert error.fix is not None and "6 or 8 heads" in error.fix and "(1, 7)" in error.fix


@pytest.mark.slow
def test_the_wrapper_splits_by_default_when_the_batch_is_small() -> None:
    """One sequence, one KV head, 32 pages of 16: the default splits it in 2 (512 // 256)."""
    q, k_pages, v_pages, tables = wrapper_inputs(1, 4, 1, 16, 32)
    lengths = i32([500])
    got = paged_attention(q, k_pages, v_pages, tables, lengths)
    assert_wrapped(got, q, k_pages, v_pages, tables, lengths)
    explicit = paged_attention(q, k_pages, v_pages, tables, lengths, splits=2)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(explicit, np.float32))


@pytest.mark.slow
def test_the_wrapper_under_jit() -> None:
    q, k_pages, v_pages, tables = wrapper_inputs(2, 4, 1, 16, 6, seed=4)
    lengths = i32([96, 33])
    wrapped = jax.jit(paged_attention, static_argnames=("splits",))
    got = wrapped(q, k_pages, v_pages, tables, lengths, splits=2)
    assert_wrapped(got, q, k_pages, v_pages, tables, lengths)


# --- the race detector, the emitted module and the lowering -------------------------------


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_no_races_in_the_page_pipeline(stages: int) -> None:
    """Every slot refilled while the step reading another runs: nothing unordered."""
    pages = pool_of((30, 16, 64), seed=12)
    tables = i32(np.stack([np.random.default_rng(12).permutation(30)[:12] for _ in range(2)]))
    lengths = i32([192, 100])
    report = sk.testing.detect_races(paged_sum, pages, tables, lengths, stages=stages)
    assert not report.races_found
    assert_sums(report.result, sums(pages, tables, lengths), 192)


def test_no_races_in_the_attention_pipeline() -> None:
    q, k_pages, v_pages = attention_inputs(2, 1, 4, 64, 16, 30, seed=13)
    tables = i32(np.stack([np.random.default_rng(13).permutation(30)[:12] for _ in range(2)]))
    report = sk.testing.detect_races(
        paged_attention_heads, q, k_pages, v_pages, tables, i32([192, 70])
    )
    assert not report.races_found


@needs_mosaic_gpu
def test_the_emitted_module_runs() -> None:
    pages = pool_of((POOL, PAGE, 6), seed=14)  # rows of 24 B: padded on the host
    tables, lengths = i32(edge_tables(2, seed=14)), i32([80, 30])
    source = paged_sum.emit(pages, tables, lengths)
    assert "copy_gmem_to_smem" in source and "barrier_wait" in source
    assert "\nimport statickernel" not in source and "\nfrom statickernel" not in source
    namespace: dict[str, Any] = {"__name__": "emitted"}
    exec(compile(source, "<emitted paged_sum>", "exec"), namespace)
    np.testing.assert_array_equal(
        np.asarray(namespace["paged_sum"](pages, tables, lengths)),
        np.asarray(paged_sum(pages, tables, lengths)),
    )


def vllm_structs(
    dtype: Any = jnp.bfloat16, page: int = 16, group: int = 4, pmax: int = 64
) -> tuple[jax.ShapeDtypeStruct, ...]:
    """A decode step as a server runs it: 8 KV heads of 128, a pool of 512 pages."""
    S = jax.ShapeDtypeStruct
    return (
        S((4, 8, group, 128), dtype),
        S((8, 512, page, 128), dtype),
        S((8, 512, page, 128), dtype),
        S((4, pmax), jnp.int32),
        S((4,), jnp.int32),
    )


LOWERED = {
    "attention-bf16-page-16": (paged_attention_heads, vllm_structs(), {}),
    "attention-f16-page-128-BS-64": (
        paged_attention_heads,
        vllm_structs(jnp.float16, page=128, group=8, pmax=8),
        {},
    ),
    "attention-G1-BS-128": (paged_attention_heads, vllm_structs(group=1), {"BS": 128}),
    "sum-f32": (
        paged_sum,
        (
            jax.ShapeDtypeStruct((100, 16, 256), jnp.float32),
            jax.ShapeDtypeStruct((3, 9), jnp.int32),
            jax.ShapeDtypeStruct((3,), jnp.int32),
        ),
        {"stages": 3},
    ),
}


@pytest.mark.parametrize("name", LOWERED)
def test_cross_lowers_for_mosaic_gpu(name: str) -> None:
    kernel, structs, consts = LOWERED[name]
    assert "mosaic_gpu" in kernel.lower(*structs, **consts).as_text()


# --- the plan and its cost ------------------------------------------------------------------


def test_the_plan_says_which_pages_and_how_they_are_copied() -> None:
    text = str(paged_attention_heads.plan(*vllm_structs()))
    # The pool, and the sequence: the table's 64 pages of 16 rows.
    assert "P=512" in text and "pages of S" in text
    assert "the pages block_tables lists, read by the loop over S" in text
    assert "S=1024" in text and "looped by BS=64" in text
    assert "paged: 4 page(s) of 16 a step, 64 a sequence" in text
    # Each paged operand: its table and its copies; the table read by the copies.
    for name in ("k_pages", "v_pages"):
        line = next(line for line in text.splitlines() if line.strip().startswith(f"{name}:"))
        assert "pages listed by block_tables, 4 copies of a page a step" in line, line
    table = next(line for line in text.splitlines() if line.strip().startswith("block_tables:"))
    assert "read from global memory by the copies of the pages it lists" in table
    assert "copies page by page (a pipeline of its own)" in text


def test_the_plan_of_a_block_that_is_part_of_a_page() -> None:
    text = str(paged_attention_heads.plan(*vllm_structs(page=128, pmax=8)))
    assert "S=1024" in text and "paged: a part of a page of 128 a step, 8 a sequence" in text
    assert "pages listed by block_tables, 1 copy of 64 rows of a page a step" in text


def test_the_plan_of_a_ragged_last_block() -> None:
    S = jax.ShapeDtypeStruct
    structs = (S((12, 16, 32), jnp.float32), S((2, 5), jnp.int32), S((2,), jnp.int32))
    text = str(paged_sum.plan(*structs))
    assert "S=80" in text and "paged: 4 page(s) of 16 a step, 5 a sequence" in text
    assert "the last block past its end (80 % 64)" in text


def hbm_bytes(kernel: sk.Kernel[..., Any], *structs: Any, **consts: Any) -> int:
    cost = kernel.plan(*structs, **consts).cost
    assert isinstance(cost, sk.Cost)
    cost.check_invariants()
    return cost.hbm_bytes


def test_the_cost_counts_the_pages_each_table_row_lists_not_the_pool() -> None:
    S = jax.ShapeDtypeStruct
    structs = lambda pool: (  # noqa: E731
        S((pool, 16, 256), jnp.float32),
        S((3, 8), jnp.int32),
        S((3,), jnp.int32),
    )
    small, large = hbm_bytes(paged_sum, *structs(10)), hbm_bytes(paged_sum, *structs(100_000))
    assert small == large
    # 3 sequences of 8 pages of 16 rows of 256 float32, the table, the lengths, the result.
    assert small == 3 * 8 * 16 * 256 * 4 + 3 * 8 * 4 + 3 * 4 + 3 * 256 * 4


def test_the_cost_of_the_gallery_attention() -> None:
    structs = vllm_structs()
    keys = 8 * 4 * 64 * 16 * 128 * 2  # each KV head, each sequence, its table's pages
    assert hbm_bytes(paged_attention_heads, *structs) >= 2 * keys
    assert hbm_bytes(paged_attention_heads, *structs) < 2 * keys + 1_000_000


def test_the_cost_of_a_table_row_per_head() -> None:
    S = jax.ShapeDtypeStruct
    structs = (S((2, 3, 4), jnp.int32), S((3, 10, 16, 64), jnp.float32))
    pages = 2 * 3 * 4 * 16 * 64 * 4  # each (sequence, head) row: 4 pages of 16 x 64
    assert hbm_bytes(head_table_sums, *structs) == pages + 2 * 3 * 4 * 4 + 2 * 3 * 64 * 4


# --- sk.testing ------------------------------------------------------------------------------


def test_the_probe_shapes_of_a_paged_kernel_are_shapes_it_takes() -> None:
    cases = sk.testing.probe_cases(paged_attention_heads)
    assert cases
    for case in cases:
        paged_attention_heads.plan(*case.structs())
    labels = [case.label for case in cases]
    # The edge of the paged loop: pages of half a block, a table of an odd length.
    ragged = next(c for c in cases if c.label.startswith("ragged S"))
    pages, table = ragged.structs()[1].shape, ragged.structs()[3].shape
    assert pages[2] == 32 and table[1] % 2 == 1, (labels, pages, table)


# --- the contract where the device differs from the interpreter ---------------------------


@sk.kernel(batch=("B",), tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def pool_sums(
    pages: Float[Array, "P S D"],
    tables: Int32[Array, "B Pages"],
    *,
    BD: sk.Const[int] = 64,
    BS: sk.Const[int] = 64,
) -> Float32[Array, "B D"]:
    """Each sequence's rows summed, every page of its table read."""
    return sk.loop(
        "S", lambda t: t + sk.sum(sk.load(pages), axis=0), init=jnp.zeros((BD,), jnp.float32)
    )


def test_a_page_outside_the_pool_is_sent_past_every_page_of_every_head() -> None:
    """Mosaic GPU merges a copy's leading dims (heads and pages) when the tiled copy has more
    than 5 dims: page `pool` of one head would be page 0 of the next. The emitted code sends
    a page outside the pool past the pages of every head."""
    S = jax.ShapeDtypeStruct
    source = paged_attention_heads.emit(
        S((2, 8, 4, 128), jnp.bfloat16),
        S((8, 40, 16, 128), jnp.bfloat16),
        S((8, 40, 16, 128), jnp.bfloat16),
        S((2, 8), jnp.int32),
        S((2,), jnp.int32),
    )
    assert "loop0_page0 = jnp.where(\n" in source or "loop0_page0 = jnp.where(" in source
    assert "8 * 40" not in source and "320," in source  # 8 heads x 40 pages


def test_a_pool_of_one_page_is_padded_to_two() -> None:
    """A copy drops a dim of 1, and with it the page index: a pool of one page is padded
    with a page of zeros on the host, and a page outside it still reads zeros."""
    pool = jax.random.normal(jax.random.key(0), (1, 64, 64))
    tables = jnp.array([[0, -1, 0], [3, 0, 0]], jnp.int32)
    np.testing.assert_allclose(
        pool_sums(pool, tables), np.stack([2 * pool[0].sum(0)] * 2), rtol=1e-5, atol=1e-4
    )
    text = str(pool_sums.plan(pool, tables))
    assert "a pool of one page, padded on the host" in text


def test_a_table_is_not_padded_on_the_host() -> None:
    """The table is read an element at a time by the copies, never copied by TMA: an odd
    length needs no padding."""
    pool = jax.random.normal(jax.random.key(0), (10, 64, 64))
    tables = jnp.array([[1, 2, 3], [4, 5, 6]], jnp.int32)  # 12-byte rows
    text = str(pool_sums.plan(pool, tables))
    assert "fallback: `tables`" not in text and "tables: int32[2, 3]" in text


@sk.kernel(batch=("B",), tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
def scaled_sums(
    pages: Float[Array, "P S D"],
    scales: Float[Array, "P S"],
    tables: Int32[Array, "B Pages"],
    *,
    BD: sk.Const[int] = 64,
    BS: sk.Const[int] = 64,
) -> Float32[Array, "B D"]:
    """Per-token scales, stored in pages beside the values."""

    def step(total: jax.Array) -> jax.Array:
        return total + sk.sum(sk.load(pages) * sk.load(scales)[:, None], axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32))


def test_pages_of_a_vector_move_whole_128_bytes_a_copy() -> None:
    pool = jax.random.normal(jax.random.key(0), (10, 32, 64))
    scales = jax.random.normal(jax.random.key(1), (10, 32))
    tables = jnp.array([[1, 2], [9, 0]], jnp.int32)
    want = np.einsum("bpsd,bps->bd", np.asarray(pool)[tables], np.asarray(scales)[tables])
    np.testing.assert_allclose(scaled_sums(pool, scales, tables), want, rtol=1e-4, atol=1e-3)
    with pytest.raises(sk.ShapeError) as info:
        scaled_sums(pool[:, :16], scales[:, :16], tables)  # 16 float32: 64 bytes a copy
    assert info.value.operand == "scales" and info.value.dim == "S"
    assert "64 bytes" in info.value.what and info.value.fix


def test_a_sequence_past_int32_is_refused() -> None:
    S = jax.ShapeDtypeStruct
    with pytest.raises(sk.ShapeError) as info:
        pool_sums.plan(S((10, 16, 64), jnp.float32), S((2, 2**27), jnp.int32))
    assert info.value.operand == "tables" and info.value.dim == "Pages"


def test_a_page_loaded_outside_its_loop_is_said_as_a_loop_dims_operand() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(batch=("B",), tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
        def k(
            pages: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BD: sk.Const[int] = 64,
            BS: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.sum(sk.load(pages), axis=0)

    assert "loop dim S" in info.value.what and "group dim" not in info.value.what


def test_a_length_that_stops_the_loop_is_drawn_along_the_sequence() -> None:
    """sk.testing draws `lengths`, the scalar the loop stops at, from -2 to 2 past the
    sequence (the table's pages times a page), as it draws an index along its dim: most
    sequences are neither empty nor whole."""
    for case in sk.testing.probe_cases(paged_attention_heads):
        _, pages, _, table, _ = case.shapes
        # The table's pages are drawn in the pool (and a few outside it), as an index's.
        assert case.index_bounds == (None, None, None, pages[1], table[1] * pages[2])
        lengths = np.asarray(sk.testing.random_operands(case, seed=0)[4])
        assert lengths.min() >= -2 and lengths.max() < table[1] * pages[2] + 2
