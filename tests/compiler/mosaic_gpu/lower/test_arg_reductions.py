"""`jnp.argmax` / `jnp.argmin` over an axis of a block: the interpreter against jnp on each block
of the whole array, on ragged shapes, with ties, NaN and infinities, integer and 16-bit inputs;
cross-lowered for Mosaic GPU."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float, Float32, Int32

import statickernel as sk


@sk.kernel(tile={"M": "BM"})
def greedy(
    logits: Float[Array, "M V"], *, BM: sk.Const[int] = 64
) -> tuple[Int32[Array, " M"], Float32[Array, " M"]]:
    """Greedy decoding: each row's most likely token and its logit."""
    v = sk.load(logits).astype(jnp.float32)
    return jnp.argmax(v, axis=1), jnp.max(v, axis=1)


@sk.kernel(tile={"M": "BM"})
def lowest_in_column(x: Int32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, "M N"]:
    """Each element less the row of its column's minimum in the block: an argmin over the
    ragged rows of integers."""
    v = sk.load(x)
    return v - jnp.argmin(v, axis=0)[None, :] + jnp.argmin(v, axis=1)[:, None]


def _logits(shape: tuple[int, int], dtype: Any = jnp.float32) -> jax.Array:
    x = jax.random.normal(jax.random.key(shape[0] * 1000 + shape[1]), shape) - 5.0
    return x.astype(dtype)


def _argmax_with_nan(v: np.ndarray) -> np.ndarray:
    """jnp.argmax's rule, on float64: the first NaN, else the first maximum."""
    nan = np.isnan(v)
    return np.where(nan.any(axis=1), nan.argmax(axis=1), np.nanargmax(np.where(nan, 0, v), axis=1))


@pytest.mark.parametrize("shape", [(1, 1), (7, 100), (130, 129), (64, 300), (200, 8)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_greedy_picks_the_first_largest_logit(shape: tuple[int, int], dtype: Any) -> None:
    x = _logits(shape, dtype)
    x = x.at[-1, :].set(2.0)  # a row of ties: the first index wins
    if shape[0] > 3:
        x = x.at[1, shape[1] // 2 :].set(jnp.nan)  # the first NaN wins
        x = x.at[2, :].set(-jnp.inf)  # every element -inf: index 0
        x = x.at[0, shape[1] - 1].set(jnp.inf)
    index, best = greedy(x)
    v = np.asarray(x, np.float64)
    np.testing.assert_array_equal(index, _argmax_with_nan(v))
    np.testing.assert_array_equal(np.asarray(best), v[np.arange(len(v)), np.asarray(index)])


@pytest.mark.parametrize("shape", [(1, 3), (100, 100), (130, 17), (64, 64)])
def test_argmin_over_the_rows_and_the_columns_of_integers(shape: tuple[int, int]) -> None:
    x = jax.random.randint(jax.random.key(shape[0]), shape, -20, 20)  # many ties

    def block(b: jax.Array) -> jax.Array:
        return b - jnp.argmin(b, axis=0)[None, :] + jnp.argmin(b, axis=1)[:, None]

    want = jnp.concatenate([block(x[i : i + 64]) for i in range(0, shape[0], 64)])
    np.testing.assert_array_equal(lowest_in_column(x), want)


def test_the_index_along_a_split_dim_is_the_blocks_own() -> None:
    @sk.kernel(tile={"M": "BM", "N": "BN"})
    def local_argmax(
        x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
    ) -> Float32[Array, "M N"]:
        v = sk.load(x)
        return v * 0.0 + jnp.argmax(v, axis=1)[:, None].astype(jnp.float32)

    x = _logits((100, 150))
    rows = []
    for i in range(0, 100, 64):
        blocks = [x[i : i + 64, j : j + 64] for j in range(0, 150, 64)]
        rows.append(jnp.concatenate([b * 0 + jnp.argmax(b, axis=1)[:, None] for b in blocks], 1))
    np.testing.assert_array_equal(local_argmax(x), jnp.concatenate(rows))


def _keep_the_larger(carry: Any, values: Any, dim: str) -> Any:
    """One step of a streamed argmax: the step's argmax, made global by its first position,
    kept where the step's max is larger than the best so far (the first wins a tie)."""
    best, index = carry
    m = jnp.max(values, axis=1)
    i = jnp.argmax(values, axis=1) + jnp.min(sk.position(dim))
    better = m > best
    return jnp.where(better, m, best), jnp.where(better, i, index)


def _nothing_yet(rows: int) -> Any:
    return jnp.full((rows,), -jnp.inf, jnp.float32), jnp.zeros((rows,), jnp.int32)


@sk.kernel(tile={"M": "BM"}, loop={"V": "BV"})
def greedy_streamed(
    logits: Float[Array, "M V"], *, BM: sk.Const[int] = 64, BV: sk.Const[int] = 256
) -> Int32[Array, " M"]:
    """Greedy decoding over a vocabulary too wide for one pass: each step's argmax, made
    global by the step's first position, kept where the step's max is larger."""

    def step(carry: Any) -> Any:
        v = sk.load(logits, fill=-jnp.inf).astype(jnp.float32)
        return _keep_the_larger(carry, v, "V")

    return sk.loop("V", step, init=_nothing_yet(BM))[1]


@sk.kernel(tile={"Q": "BQ"}, loop={"S": "BS"})
def nearest_key(
    q: BFloat16[Array, "Q D"],
    k: BFloat16[Array, "S D"],
    *,
    BQ: sk.Const[int] = 64,
    BS: sk.Const[int] = 64,
) -> Int32[Array, " Q"]:
    """Each query's most similar key: an argmax of scores along the loop dim."""

    def step(carry: Any) -> Any:
        scores = sk.dot(q, k)
        scores = jnp.where(sk.position("S")[None, :] < sk.dim("S"), scores, -jnp.inf)
        return _keep_the_larger(carry, scores, "S")

    return sk.loop("S", step, init=_nothing_yet(BQ))[1]


@pytest.mark.parametrize("shape", [(3, 1000), (130, 777), (64, 513)])
def test_a_streamed_greedy_step_index_is_the_steps_own(shape: tuple[int, int]) -> None:
    x = jax.random.normal(jax.random.key(shape[1]), shape).at[-1].set(1.0)
    np.testing.assert_array_equal(greedy_streamed(x), jnp.argmax(x, axis=1))


@pytest.mark.parametrize(("queries", "keys"), [(3, 100), (130, 200)])
def test_the_argmax_of_scores_along_the_loop_dim(queries: int, keys: int) -> None:
    q = jax.random.normal(jax.random.key(queries), (queries, 64), jnp.bfloat16)
    k = jax.random.normal(jax.random.key(keys), (keys, 64), jnp.bfloat16)
    scores = jnp.einsum("qd,sd->qs", q.astype(jnp.float32), k.astype(jnp.float32))
    np.testing.assert_array_equal(nearest_key(q, k), jnp.argmax(scores, axis=1))


def test_argmax_of_a_slice_is_refused_with_a_fix() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="a slice of a block"):

        @sk.kernel(tile={"M": "BM"})
        def sliced(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, " M"]:
            v = sk.load(x)
            return jnp.argmax(v[:, : v.shape[1] // 2], axis=1)


@pytest.mark.parametrize(
    ("kernel", "structs"),
    [
        (greedy, (jax.ShapeDtypeStruct((130, 129), jnp.bfloat16),)),
        (greedy, (jax.ShapeDtypeStruct((4096, 32000), jnp.bfloat16),)),
        (lowest_in_column, (jax.ShapeDtypeStruct((130, 17), jnp.int32),)),
        (greedy_streamed, (jax.ShapeDtypeStruct((4096, 128256), jnp.bfloat16),)),
        (
            nearest_key,
            (
                jax.ShapeDtypeStruct((130, 64), jnp.bfloat16),
                jax.ShapeDtypeStruct((200, 64), jnp.bfloat16),
            ),
        ),
    ],
)
def test_arg_reductions_cross_lower_for_the_gpu(kernel: Any, structs: Any) -> None:
    kernel.lower(*structs)
