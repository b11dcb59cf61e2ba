"""jnp.argmax and jnp.argmin in a body: over the columns of a block whose columns are whole
(a per-row index) and over the rows of a block whose rows are whole (a per-column index),
written as a user would, run in the interpreter on ragged shapes and compared with jnp on the
whole array, exactly: the elements past the edge never win, the first of equal elements wins,
a row's first NaN wins, and integer and 16-bit float inputs are ordered as jnp orders them.
Each kernel is also cross-lowered for the GPU. Over a tiled dim, or in a loop's step, the
index is the block's own (test_arg_reductions.py); a result of it that lacks the tiled dim is
refused, as no sum, max or min combines blocks' indices."""

from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jaxtyping import Array, Float, Int, Int32

import statickernel as sk

SIZES = (1, 7, 64, 100, 129, 200)
ARG_OPS: dict[str, Callable[..., Any]] = {"argmax": jnp.argmax, "argmin": jnp.argmin}


def _per_row(op: Callable[..., Any]) -> sk.Kernel:
    @sk.kernel(tile={"M": "BM"})
    def per_row(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, " M"]:
        return op(sk.load(x), axis=1)

    return per_row


def _per_column(op: Callable[..., Any]) -> sk.Kernel:
    # Over the rows of a block, the rows are whole only when one block holds them all.
    @sk.kernel(tile={"N": "BN"})
    def per_column(x: Float[Array, "M N"], *, BN: sk.Const[int] = 128) -> Int32[Array, " N"]:
        return op(sk.load(x), axis=0)

    return per_column


PER_ROW = {name: _per_row(op) for name, op in ARG_OPS.items()}
PER_COLUMN = {name: _per_column(op) for name, op in ARG_OPS.items()}


def _with_ties(shape: tuple[int, int], seed: int) -> np.ndarray:
    """Few distinct values, so most rows and columns hold their extreme more than once."""
    rng = np.random.default_rng(seed)
    return rng.integers(-3, 4, size=shape).astype(np.float32)


def _with_specials(shape: tuple[int, int], seed: int) -> np.ndarray:
    """Ties, a NaN in some rows (two in one), a row of -inf, a row of +inf, and a row of NaN."""
    x = _with_ties(shape, seed)
    rng = np.random.default_rng(seed + 1)
    m, n = shape
    for row in rng.choice(m, size=max(1, m // 5), replace=False):
        x[row, rng.integers(0, n)] = np.nan
    x[rng.integers(0, m), :] = -np.inf
    if m > 2:
        x[1, :] = np.inf
        x[2, :] = np.nan
    if m > 3 and n > 2:
        x[3, n - 1] = np.nan
        x[3, n // 2] = np.nan
    return x


def _assert_equal(got: Any, want: Any, what: str) -> None:
    assert got.dtype == want.dtype == jnp.int32, what
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=what)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("m", (1, 7, 129, 200))
@pytest.mark.parametrize("op", list(ARG_OPS))
def test_over_the_columns_matches_jnp_on_ragged_shapes(op: str, m: int, n: int) -> None:
    x = jnp.asarray(_with_specials((m, n), seed=m * 1000 + n))
    _assert_equal(PER_ROW[op](x), ARG_OPS[op](x, axis=1), f"{op} {m}x{n}")


@pytest.mark.parametrize("m", SIZES)
@pytest.mark.parametrize("n", (1, 100, 129))
@pytest.mark.parametrize("op", list(ARG_OPS))
def test_over_the_rows_matches_jnp_on_ragged_shapes(op: str, m: int, n: int) -> None:
    x = jnp.asarray(_with_specials((n, m), seed=m + 7 * n)).T  # NaN and inf columns
    _assert_equal(PER_COLUMN[op](x), ARG_OPS[op](x, axis=0), f"{op} {m}x{n}")


@pytest.mark.parametrize("op", list(ARG_OPS))
def test_what_lies_past_the_edge_never_wins(op: str) -> None:
    """The load's fill beats every element inside the edge, and ties an all-fill row."""
    fill = jnp.inf if op == "argmax" else -jnp.inf

    @sk.kernel(tile={"M": "BM"})
    def filled(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, " M"]:
        return ARG_OPS[op](sk.load(x, fill=fill), axis=1)

    x = np.asarray(_with_ties((129, 100), seed=3))
    x[5, :] = fill  # a whole row of what the edge holds: its first element wins
    x[6, :] = -fill
    x = jnp.asarray(x)
    _assert_equal(filled(x), ARG_OPS[op](x, axis=1), op)
    filled.lower(x)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("op", list(ARG_OPS))
def test_16_bit_floats_are_ordered_by_value(op: str, dtype: Any) -> None:
    x = jnp.asarray(_with_specials((129, 100), seed=4)).astype(dtype)
    x = x + jnp.asarray(np.random.default_rng(5).normal(size=(129, 100)), dtype) * 1e-2
    _assert_equal(PER_ROW[op](x), ARG_OPS[op](x, axis=1), f"{op} {dtype}")
    PER_ROW[op].lower(x)


@pytest.mark.parametrize("op", list(ARG_OPS))
def test_integers_are_ordered_as_jnp_orders_them(op: str) -> None:
    @sk.kernel(tile={"M": "BM"})
    def on_ints(x: Int[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, " M"]:
        return ARG_OPS[op](sk.load(x), axis=1)

    info = np.iinfo(np.int32)
    rng = np.random.default_rng(6)
    x = rng.integers(-5, 5, size=(129, 100)).astype(np.int32)
    x[0, :] = info.min  # ties the identity past the edge of an argmax
    x[1, :] = info.max  # and of an argmin
    x[2, 99] = info.max
    x[3, 99] = info.min
    x = jnp.asarray(x)
    _assert_equal(on_ints(x), ARG_OPS[op](x, axis=1), f"{op} int32")
    small = x.astype(jnp.int16)  # compared as int32
    _assert_equal(on_ints(small), ARG_OPS[op](small, axis=1), f"{op} int16")
    on_ints.lower(x)


@pytest.mark.parametrize("op", list(ARG_OPS))
def test_the_index_cross_lowers_for_the_gpu(op: str) -> None:
    PER_ROW[op].lower(jax.ShapeDtypeStruct((129, 100), jnp.float32))
    PER_COLUMN[op].lower(jax.ShapeDtypeStruct((33, 200), jnp.float32))


@settings(max_examples=15, deadline=None)
@given(
    op=st.sampled_from(list(ARG_OPS)),
    values=st.lists(
        st.sampled_from([-np.inf, -1.0, -0.0, 0.0, 1.0, 2.0, np.inf, np.nan]),
        min_size=3 * 37,
        max_size=3 * 37,
    ),
)
def test_drawn_rows_of_ties_and_specials_match_jnp(op: str, values: list[float]) -> None:
    x = jnp.asarray(np.asarray(values, np.float32).reshape(3, 37))
    _assert_equal(PER_ROW[op](x), ARG_OPS[op](x, axis=1), op)


def test_a_one_hot_of_the_index_inside_the_body() -> None:
    """The index is a per-row vector like a row max: it is compared with the positions of
    the block, kept with keepdims, and cast."""

    @sk.kernel(tile={"M": "BM"})
    def one_hot(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)
        best = jnp.argmax(v, axis=1, keepdims=True)
        hot = sk.position("N")[None, :] == best
        return jnp.where(hot, 1.0, 0.0) + jnp.argmin(v, axis=-1)[:, None].astype(jnp.float32)

    x = jnp.asarray(_with_specials((129, 100), seed=8))
    best = jnp.argmax(x, axis=1, keepdims=True)
    hot = jnp.arange(100)[None, :] == best
    want = jnp.where(hot, 1.0, 0.0) + jnp.argmin(x, axis=-1)[:, None].astype(jnp.float32)
    np.testing.assert_array_equal(np.asarray(one_hot(x)), np.asarray(want))
    one_hot.lower(x)


@sk.kernel(tile={"M": "BM"})
def greedy_step(
    logits: Float[Array, "M V"], *, BM: sk.Const[int] = 64, temperature: sk.Const[float] = 1.0
) -> tuple[Int32[Array, " M"], Float[Array, " M"]]:
    """One step of greedy decoding: each sequence's next token and its log-probability."""
    v = sk.load(logits).astype(jnp.float32) / temperature
    token = jnp.argmax(v, axis=1)
    best = jnp.max(v, axis=1)
    log_total = best + jnp.log(jnp.sum(jnp.exp(v - best[:, None]), axis=1))
    return token, best - log_total


@pytest.mark.parametrize("shape", [(129, 200), (7, 1000), (1, 1)], ids=str)
def test_a_greedy_decoding_step(shape: tuple[int, int]) -> None:
    logits = jnp.asarray(np.random.default_rng(9).normal(size=shape) * 4, jnp.bfloat16)
    token, log_prob = greedy_step(logits, temperature=0.7)
    v = logits.astype(jnp.float32) / 0.7
    _assert_equal(token, jnp.argmax(v, axis=1), "token")
    want = jnp.max(v, axis=1) - jax.nn.logsumexp(v, axis=1)
    np.testing.assert_allclose(np.asarray(log_prob), np.asarray(want), rtol=1e-5, atol=1e-5)
    greedy_step.lower(logits, temperature=0.7)


def test_a_result_over_a_tiled_dim_is_refused_as_no_sum_max_or_min() -> None:
    def row_best(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
    ) -> Int32[Array, " M"]:
        return jnp.argmax(sk.load(x), axis=1)

    with pytest.raises(sk.CrossBlockResultError, match="not compute it as a sum, max or min"):
        sk.kernel(tile={"M": "BM", "N": "BN"})(row_best)
