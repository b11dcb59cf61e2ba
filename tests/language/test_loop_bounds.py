"""Where a loop begins and what runs along it: `sk.loop(..., start=)` and vectors along a loop
dim outside the blocks, against numpy references written here.

A start skips the blocks wholly before it (a causal backward's queries, a sliding window's
keys); the step still sees every position of the blocks it walks and masks them itself. The
references below sum the same window directly, so a block skipped that held a position inside
the window, or one walked twice, shows. A vector along the loop dim (`ids: " K"` beside
`x: "M K"` with K looped) is copied one block a step and read as a per-column vector of the
step's (rows, loop block) values: segment ids per key, a log-sum-exp per query.

Covered: starts before the dim, at a block boundary, inside a block, past the dim, past the
stop (no block walked: the loop returns its first carry), int and int32 scalars of the
block, with and without a stop; blocks of 64 and 128;
ragged loop dims; the emitted module and the plan; cross-lowering; the declaration errors.
Vectors of int32, float32 and bfloat16, ragged (host-padded to 16-byte rows), with fills
other than zero, batched with fewer batch dims than the blocks' operands, with jit.
"""

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float32, Int8, Int32

import statickernel as sk
from markers import line_finder

line_of = line_finder(__file__)
_FILE = pathlib.Path(__file__)


def normal(shape: tuple[int, ...], seed: int = 0, dtype: Any = jnp.float32) -> jax.Array:
    rng = np.random.default_rng([seed, *shape])
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32), dtype)


# --- start= -----------------------------------------------------------------------------------


@sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
def window_sum(
    x: Float32[Array, "M K"],
    *,
    W: sk.Const[int] = 5,
    ahead: sk.Const[int | None] = None,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, " M"]:
    """Row i sums x[i, i - W : i + ahead + 1] (to i alone without `ahead`), walking only the
    blocks of K from the first row's window on."""
    rows = sk.position("M")
    right = 0 if ahead is None else ahead

    def step(acc: jax.Array) -> jax.Array:
        cols = sk.position("K")[None, :]
        inside = (cols >= rows[:, None] - W) & (cols <= rows[:, None] + right)
        return acc + sk.sum(jnp.where(inside, sk.load(x), 0.0), axis=1)

    init = jnp.zeros((BM,), jnp.float32)
    stop = rows.max() + right + 1
    return sk.loop("K", step, init=init, start=rows.min() - W, stop=stop)


def window_reference(x: jax.Array, w: int, ahead: int = 0) -> np.ndarray:
    m, k = x.shape
    rows, cols = np.arange(m)[:, None], np.arange(k)[None, :]
    inside = (cols >= rows - w) & (cols <= rows + ahead)
    return np.where(inside, np.asarray(x, np.float64), 0.0).sum(axis=1)


@sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
def sum_from(
    x: Float32[Array, "M K"],
    *,
    first: sk.Const[int] = 1,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, " M"]:
    """Each row's sum from column `first` on: a start that is an int, no stop."""

    def step(acc: jax.Array) -> jax.Array:
        kept = sk.position("K")[None, :] >= first
        return acc + sk.sum(jnp.where(kept, sk.load(x), 0.0), axis=1)

    return sk.loop("K", step, init=jnp.zeros((BM,), jnp.float32), start=first)


@sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
def counted_blocks(
    x: Float32[Array, "M K"],
    *,
    first: sk.Const[int] = 1,
    last: sk.Const[int] = 1,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, " M"]:
    """How many blocks the loop walks, whatever the start and stop (each step adds 1)."""

    def step(acc: jax.Array) -> jax.Array:
        return acc + 1.0 + 0.0 * sk.sum(sk.load(x), axis=1)

    return sk.loop("K", step, init=jnp.zeros((BM,), jnp.float32), start=first, stop=last)


@pytest.mark.parametrize(
    ("m", "k", "w", "ahead"),
    [
        (300, 300, 5, None),  # ragged; windows inside a block and across one boundary
        (130, 200, 70, None),  # a window longer than a block: two or three blocks a row block
        (64, 64, 1, None),  # one block
        (1000, 1000, 130, 7),  # a window ahead too: blocks past the row block's own
        (17, 300, 3, None),  # one row block of a few rows, most of K never walked
        (200, 37, 500, None),  # a window wider than K: the start is before the dim
        (129, 129, 64, 64),  # windows on block boundaries
    ],
)
def test_a_start_walks_the_window_and_no_block_before_it(
    m: int, k: int, w: int, ahead: int | None
) -> None:
    x = normal((m, k), seed=m)
    out = window_sum(x, W=w, ahead=ahead)
    np.testing.assert_allclose(
        np.asarray(out), window_reference(x, w, ahead or 0), rtol=1e-5, atol=1e-5
    )


def test_a_start_at_128_wide_blocks() -> None:
    x = normal((300, 500), seed=1)
    out = window_sum(x, W=150, BM=128, BK=128)
    np.testing.assert_allclose(np.asarray(out), window_reference(x, 150), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("first", [1, 63, 64, 65, 199, 200, 10_000])
def test_an_int_start_without_a_stop(first: int) -> None:
    x = normal((70, 200), seed=2)
    want = np.where(np.arange(200)[None, :] >= first, np.asarray(x, np.float64), 0.0).sum(1)
    np.testing.assert_allclose(np.asarray(sum_from(x, first=first)), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("first", "last", "blocks"),
    [
        (1, 10_000, 5),  # from the first block to the last of 5
        (64, 10_000, 4),  # a start on a boundary skips the block before it
        (100, 200, 3),  # blocks 1, 2, 3 (200 is one past 199, in block 3)
        (130, 129, 0),  # a start past the stop walks none
        (130, 130, 0),  # an empty range walks none
        (250, 260, 2),  # a window across a boundary: blocks 3 and 4
        (260, 290, 1),  # the last block alone, ragged (K = 300)
        (10_000, 10_000, 0),  # a start past the dim walks none
        (299, 10_000, 1),  # the last position alone: the last block
        (300, 10_000, 0),  # a start at the dim's end walks none
    ],
)
def test_a_start_and_a_stop_walk_the_blocks_between(first: int, last: int, blocks: int) -> None:
    x = normal((64, 300), seed=3)
    out = counted_blocks(x, first=first, last=last)
    np.testing.assert_array_equal(np.asarray(out), np.full((64,), blocks, np.float32))


@sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
def counted_blocks_before(
    x: Float32[Array, "M K"],
    *,
    back: sk.Const[int] = 1,
    stop_back: sk.Const[int] = 1,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, " M"]:
    """The blocks walked from `back` before the rows' first position to `stop_back - 1`
    before it: ranges that begin, and may end, before the dim (each step adds 1)."""
    first = jnp.min(sk.position("M"))

    def step(acc: jax.Array) -> jax.Array:
        return acc + 1.0 + 0.0 * sk.sum(sk.load(x), axis=1)

    init = jnp.zeros((BM,), jnp.float32)
    return sk.loop("K", step, init=init, start=first - back, stop=first + 1 - stop_back)


@pytest.mark.parametrize(
    ("back", "stop_back", "blocks"),
    [
        (70, 6, 0),  # [-70, -5): wholly before the dim
        (70, 1, 0),  # [-70, 0): a stop at 0
        (1, 1, 0),  # [-1, 0)
        (70, 70, 0),  # [-70, -69)
    ],
)
def test_a_range_before_the_dim_walks_no_block(back: int, stop_back: int, blocks: int) -> None:
    """A loop of no block returns its first carry: a causal loop's rows before every key."""
    x = normal((64, 300), seed=3)
    out = counted_blocks_before(x, back=back, stop_back=stop_back)
    np.testing.assert_array_equal(np.asarray(out), np.full((64,), blocks, np.float32))


@sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
def sum_before_row_block(
    x: Float32[Array, "M K"], *, BM: sk.Const[int] = 64, BK: sk.Const[int] = 64
) -> Float32[Array, " M"]:
    """Each row's sum over the blocks of K wholly before its block of rows, unmasked: the
    off-diagonal blocks of a causal loop, none for the first block of rows."""
    first = jnp.min(sk.position("M"))

    def step(acc: jax.Array) -> jax.Array:
        return acc + sk.sum(sk.load(x), axis=1)

    return sk.loop("K", step, init=jnp.zeros((BM,), jnp.float32), stop=first)


@pytest.mark.parametrize(("m", "k"), [(64, 64), (300, 300), (130, 1000), (65, 10)])
def test_the_blocks_before_the_diagonal_alone_are_walked(m: int, k: int) -> None:
    x = normal((m, k), seed=6)
    starts = (np.arange(m) // 64) * 64  # each row's block's first row
    kept = np.arange(k)[None, :] < starts[:, None]
    want = np.where(kept, np.asarray(x, np.float64), 0.0).sum(axis=1)
    np.testing.assert_allclose(np.asarray(sum_before_row_block(x)), want, rtol=1e-5, atol=1e-5)


@settings(max_examples=5, deadline=None)
@given(
    m=st.integers(1, 200), k=st.integers(1, 300), w=st.integers(1, 300), ahead=st.integers(1, 80)
)
def test_a_window_at_any_shape(m: int, k: int, w: int, ahead: int) -> None:
    x = normal((m, k), seed=4)
    out = window_sum(x, W=w, ahead=ahead)
    np.testing.assert_allclose(np.asarray(out), window_reference(x, w, ahead), rtol=1e-5, atol=1e-5)


def test_a_start_inside_jit() -> None:
    x = normal((300, 300), seed=5)
    out = jax.jit(lambda x: window_sum(x, W=9))(x)
    np.testing.assert_allclose(np.asarray(out), window_reference(x, 9), rtol=1e-5, atol=1e-5)


def test_the_emitted_module_walks_from_the_start_block() -> None:
    x = jax.ShapeDtypeStruct((300, 300), jnp.float32)
    source = window_sum.emit(x, W=3)
    assert "loop0_first = lax.min(" in source
    assert "lambda step: (0, loop0_first + step)" in source
    assert "loop0_index = loop0_first + loop0_index" in source
    assert "grid=(loop0_steps,)" in source
    plan = window_sum.plan(x, W=3)
    assert "at most 5 step(s)" in str(plan)


def test_a_loop_with_a_start_cross_lowers_for_mosaic_gpu() -> None:
    x = jax.ShapeDtypeStruct((300, 300), jnp.float32)
    assert "mosaic_gpu" in window_sum.lower(x, W=3).as_text()


def test_a_start_that_is_not_an_integer_is_refused_at_its_line() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
        def bad(
            x: Float32[Array, "M K"], *, BM: sk.Const[int] = 64, BK: sk.Const[int] = 64
        ) -> Float32[Array, " M"]:
            step = lambda acc: acc + sk.sum(sk.load(x), axis=1)  # noqa: E731
            init = jnp.zeros((BM,), jnp.float32)
            return sk.loop("K", step, init=init, start=1.5)  # @float-start

    err = info.value
    assert "the start of sk.loop('K') is not an integer scalar" in str(err)
    assert err.where is not None and err.where.endswith(f"{_FILE.name}:{line_of('float-start')}")
    assert err.expected is not None and "sk.position" in err.expected


def test_a_start_with_reverse_is_refused() -> None:
    with pytest.raises(sk.BodyError, match=r"both reverse=True and start="):

        @sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
        def bad(
            x: Float32[Array, "M K"], *, BM: sk.Const[int] = 64, BK: sk.Const[int] = 64
        ) -> Float32[Array, " M"]:
            step = lambda acc: acc + sk.sum(sk.load(x), axis=1)  # noqa: E731
            init = jnp.zeros((BM,), jnp.float32)
            return sk.loop("K", step, init=init, start=1, reverse=True)


def test_a_start_that_is_a_vector_is_refused() -> None:
    with pytest.raises(sk.StaticKernelError, match=r"the start of sk.loop\('K'\) is not"):

        @sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
        def bad(
            x: Float32[Array, "M K"], *, BM: sk.Const[int] = 64, BK: sk.Const[int] = 64
        ) -> Float32[Array, " M"]:
            step = lambda acc: acc + sk.sum(sk.load(x), axis=1)  # noqa: E731
            init = jnp.zeros((BM,), jnp.float32)
            return sk.loop("K", step, init=init, start=sk.position("M"))


def test_a_start_on_a_paged_loop_is_refused() -> None:
    with pytest.raises(sk.BodyError, match=r"start=\.\.\.\) walks S, which is stored in pages"):

        @sk.kernel(batch="B", tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
        def paged_from(
            pages: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            def step(acc: jax.Array) -> jax.Array:
                return acc + sk.sum(sk.load(pages).astype(jnp.float32), axis=0)

            return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32), start=64)


# --- vectors along a loop dim outside the blocks ----------------------------------------------
#
# Each kernel below has blocks over (M, D) and walks K, a dim outside them: the step's scores
# sk.dot(q, k) are (M rows, K block), and a vector along K runs along their columns.


@sk.kernel(batch="B", tile={"M": "BM"}, loop={"K": "BK"})
def segment_products(
    q: BFloat16[Array, "B M D"],
    k: BFloat16[Array, "B K D"],
    v: BFloat16[Array, "B K D"],
    row_ids: Int32[Array, "B M"],
    col_ids: Int32[Array, "B K"],
    *,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "B M D"]:
    """Each row's sum of (q . k) v over the keys of its own segment: packed sequences' mask
    on attention without its softmax."""
    mine = sk.load(row_ids)

    def step(acc: jax.Array) -> jax.Array:
        same = mine[:, None] == sk.load(col_ids)[None, :]
        s = jnp.where(same, sk.dot(q, k), 0.0)
        return acc + sk.dot(s.astype(jnp.bfloat16), v)

    return sk.loop("K", step, init=jnp.zeros((BM, sk.dim("D")), jnp.float32))


def f64(x: Any) -> np.ndarray:
    return np.asarray(x, np.float64)


def segment_reference(q: Any, k: Any, v: Any, row_ids: Any, col_ids: Any) -> np.ndarray:
    s = np.einsum("bmd,bkd->bmk", f64(q), f64(k))
    same = np.asarray(row_ids)[:, :, None] == np.asarray(col_ids)[:, None, :]
    # The kernel multiplies p in bfloat16: round the masked scores as it does.
    s = f64(jnp.asarray(np.where(same, s, 0.0), jnp.float32).astype(jnp.bfloat16))
    return np.einsum("bmk,bkd->bmd", s, f64(v))


def segments(batch: int, n: int, seed: int) -> jax.Array:
    """Sorted segment ids, as packed sequences have them: a few runs a row."""
    rng = np.random.default_rng([seed, batch, n])
    return jnp.asarray(np.sort(rng.integers(0, 4, (batch, n)), axis=1), jnp.int32)


def assert_segments(b: int, m: int, kk: int, d: int, seed: int = 0) -> None:
    q = normal((b, m, d), seed, jnp.bfloat16)
    k, v = normal((b, kk, d), seed + 1, jnp.bfloat16), normal((b, kk, d), seed + 2, jnp.bfloat16)
    ids = segments(b, max(m, kk), seed)
    out = segment_products(q, k, v, ids[:, :m], ids[:, :kk])
    want = segment_reference(q, k, v, ids[:, :m], ids[:, :kk])
    # Each product of bf16 values is exact in float32; sums differ by their order.
    np.testing.assert_allclose(np.asarray(out), want, rtol=2e-3, atol=2e-3 * np.sqrt(kk))


@pytest.mark.parametrize(
    ("b", "m", "kk", "d"),
    [(1, 64, 64, 64), (2, 100, 300, 64), (1, 1, 1, 64), (3, 17, 101, 128), (1, 130, 1000, 64)],
)
def test_a_vector_along_the_loop_runs_along_each_steps_columns(
    b: int, m: int, kk: int, d: int
) -> None:
    assert_segments(b, m, kk, d)


@settings(max_examples=4, deadline=None)
@given(b=st.integers(1, 2), m=st.integers(1, 150), kk=st.integers(1, 300))
def test_a_vector_along_the_loop_at_any_shape(b: int, m: int, kk: int) -> None:
    assert_segments(b, m, kk, 64, seed=3)


def test_a_vector_along_the_loop_is_copied_a_block_a_step() -> None:
    structs = (
        jax.ShapeDtypeStruct((2, 100, 64), jnp.bfloat16),
        jax.ShapeDtypeStruct((2, 101, 64), jnp.bfloat16),
        jax.ShapeDtypeStruct((2, 101, 64), jnp.bfloat16),
        jax.ShapeDtypeStruct((2, 100), jnp.int32),
        jax.ShapeDtypeStruct((2, 101), jnp.int32),
    )
    source = segment_products.emit(*structs)
    # 101 int32 ids are 404 bytes, not whole 16-byte rows: padded on the host.
    assert "col_ids = jnp.pad(col_ids, ((0, 0), (0, 3)))" in source
    assert "loop0_col_ids_spec = plgpu.BlockSpec((64,), lambda step: (step,))" in source
    assert "plgpu.load(col_ids_smem, layout=plgpu.Layout.WGMMA.reduce(0)" in source
    plan = str(segment_products.plan(*structs))
    assert "pipelines col_ids (fill 0), k (fill 0), v (fill 0)" in plan
    assert "mosaic_gpu" in segment_products.lower(*structs).as_text()


@sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
def best_score(
    q: BFloat16[Array, "M D"],
    k: BFloat16[Array, "K D"],
    bias: Float[Array, " K"],
    *,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "M D"]:
    """Each row's best q . k + bias over the keys, bias read past K as -inf (no key past it
    wins), spread over D."""

    def step(best: jax.Array) -> jax.Array:
        s = sk.dot(q, k) + sk.load(bias, fill=-jnp.inf).astype(jnp.float32)[None, :]
        return jnp.maximum(best, sk.max(s, axis=1))

    best = sk.loop("K", step, init=jnp.full((BM,), -jnp.inf, jnp.float32))
    return jnp.zeros((BM, sk.dim("D")), jnp.float32) + best[:, None]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("kk", [64, 100, 130, 1])
def test_a_vector_along_the_loop_reads_its_fill_past_the_edge(dtype: Any, kk: int) -> None:
    # Every score is below -1000: a key past K read with a bias of 0 would win.
    q = normal((70, 64), 1, jnp.bfloat16)
    k = normal((kk, 64), 2, jnp.bfloat16)
    bias = (-1000.0 + normal((kk,), 3)).astype(dtype)
    out = best_score(q, k, bias)
    s = f64(q) @ f64(k).T + f64(bias)[None, :]
    np.testing.assert_allclose(np.asarray(out)[:, 0], s.max(axis=1), rtol=1e-5)
    if kk % 64:  # the last step reads past K
        assert "jnp.where(loop_ok_vec, bias," in best_score.emit(q, k, bias)


@sk.kernel(batch="B", tile={"M": "BM"}, loop={"K": "BK"})
def windowed_products(
    q: BFloat16[Array, "B M D"],
    k: BFloat16[Array, "B K D"],
    v: BFloat16[Array, "B K D"],
    scale: Float32[Array, "B K"],
    *,
    W: sk.Const[int] = 16,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Float32[Array, "B M D"]:
    """(q . k) * scale[k] v summed over the keys in [row - W, row]: a start, a stop and a
    vector along the loop together."""
    rows = sk.position("M")

    def step(acc: jax.Array) -> jax.Array:
        keys = sk.position("K")[None, :]
        inside = (keys >= rows[:, None] - W) & (keys <= rows[:, None])
        s = jnp.where(inside, sk.dot(q, k) * sk.load(scale)[None, :], 0.0)
        return acc + sk.dot(s.astype(jnp.bfloat16), v)

    init = jnp.zeros((BM, sk.dim("D")), jnp.float32)
    return sk.loop("K", step, init=init, start=rows.min() - W, stop=rows.max() + 1)


@pytest.mark.parametrize(("m", "kk", "w"), [(300, 300, 16), (130, 200, 100), (65, 65, 1)])
def test_a_vector_along_a_loop_with_a_start_reads_the_blocks_walked(
    m: int, kk: int, w: int
) -> None:
    q, k, v = (normal((2, n, 64), i, jnp.bfloat16) for i, n in enumerate((m, kk, kk)))
    scale = normal((2, kk), 5)
    out = windowed_products(q, k, v, scale, W=w)
    s = np.einsum("bmd,bkd->bmk", f64(q), f64(k)) * f64(scale)[:, None, :]
    rows, keys = np.arange(m)[:, None], np.arange(kk)[None, :]
    s = np.where((keys >= rows - w) & (keys <= rows), s, 0.0)
    s = f64(jnp.asarray(s, jnp.float32).astype(jnp.bfloat16))
    want = np.einsum("bmk,bkd->bmd", s, f64(v))
    # A score a float32 ulp from a bf16 rounding boundary rounds either way: an ulp of s
    # (up to ~0.06 here) times v, over the window's keys.
    np.testing.assert_allclose(np.asarray(out), want, rtol=2e-2, atol=0.25)


def test_a_vector_along_a_dim_no_loop_walks_is_still_refused() -> None:
    with pytest.raises(sk.AnnotationError, match=r"runs along dim L, which is neither the row"):

        @sk.kernel(tile={"M": "BM"})
        def bad(
            x: Float32[Array, "M N"],
            y: Float32[Array, " L"],
            z: Float32[Array, "L N"],
            *,
            BM: sk.Const[int] = 64,
        ) -> Float32[Array, "M N"]:
            return sk.load(x)


def test_a_vector_along_the_loop_loaded_outside_its_loop_is_refused() -> None:
    with pytest.raises(sk.BodyError, match=r"`ids`"):

        @sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
        def bad(
            q: BFloat16[Array, "M D"],
            k: BFloat16[Array, "K D"],
            ids: Int32[Array, " K"],
            *,
            BM: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "M D"]:
            outside = sk.load(ids)

            def step(best: jax.Array) -> jax.Array:
                return jnp.maximum(best, sk.max(sk.dot(q, k), axis=1))

            best = sk.loop("K", step, init=jnp.full((BM,), -jnp.inf, jnp.float32))
            return jnp.zeros((BM, sk.dim("D")), jnp.float32) + best[:, None] + outside[0]


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_no_races_in_a_loop_from_a_start(stages: int) -> None:
    """The pipeline's slots hold the blocks from the start's on; the detector checks every
    refill comes after the step that read the slot."""
    q, k, v = (normal((1, n, 64), i, jnp.bfloat16) for i, n in enumerate((200, 300, 300)))
    scale = normal((1, 300), 5)
    report = sk.testing.detect_races(windowed_products, q, k, v, scale, W=100, stages=stages)
    assert not report.races_found
    assert report.result is not None
    expected = windowed_products(q, k, v, scale, W=100, stages=stages)
    np.testing.assert_allclose(np.asarray(report.result), np.asarray(expected), rtol=1e-6)


def test_a_batched_8_bit_vector_along_the_loop_takes_blocks_of_128() -> None:
    """Each block of a batch entry's vector is one copy, of a multiple of 128 bytes on the
    GPU: 64 int8 keys are refused at the declaration, as an unbatched vector's are."""
    with pytest.raises(sk.BlockAlignmentError, match=r"along K is 64 elements") as info:

        @sk.kernel(batch="B", tile={"M": "BM"}, loop={"K": "BK"})
        def masked(
            q: BFloat16[Array, "B M D"],
            k: BFloat16[Array, "B K D"],
            keep: Int8[Array, "B K"],
            *,
            BM: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "B M"]:
            def step(acc: jax.Array) -> jax.Array:
                s = jnp.where(sk.load(keep)[None, :] != 0, sk.dot(q, k), 0.0)
                return acc + sk.sum(s, axis=1)

            return sk.loop("K", step, init=jnp.zeros((BM,), jnp.float32))

    assert info.value.operand == "keep" and info.value.fix == "set BK to 128"


def test_a_result_along_a_loop_dim_outside_the_blocks_is_refused_as_such() -> None:
    with pytest.raises(sk.AnnotationError, match=r"1-D `result` runs along dim K"):

        @sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
        def bad(
            x: Float32[Array, "M D"],
            k: Float32[Array, "K D"],
            *,
            BM: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, " K"]:
            def step(acc: jax.Array) -> jax.Array:
                return acc + sk.sum(sk.dot(x, k), axis=1)

            return sk.loop("K", step, init=jnp.zeros((BM,), jnp.float32))
