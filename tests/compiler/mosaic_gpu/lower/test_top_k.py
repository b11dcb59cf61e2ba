"""`jax.lax.top_k` in a body, with results whose K columns a constant sizes: against jax's own
top_k on whole arrays (values bit for bit, NaN, signed zeros, ties and integers included), on
ragged and padded shapes, the declaration's rules for a dim a constant sizes, the refusals, and
cross-lowered for Mosaic GPU."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, Float, Int32, Shaped

import statickernel as sk


@sk.kernel(tile={"T": "BT"})
def top_values(
    x: Shaped[Array, "T E"], *, BT: sk.Const[int] = 64, K: sk.Const[int] = 4
) -> tuple[Shaped[Array, "T K"], Int32[Array, "T K"]]:
    return jax.lax.top_k(sk.load(x), K)


@sk.kernel(tile={"T": "BT"})
def renormalized(
    x: Float[Array, "T E"], *, BT: sk.Const[int] = 64, K: sk.Const[int] = 3
) -> tuple[Float[Array, "T K"], Float[Array, "T K"], Float[Array, " T"]]:
    """Reductions over the K columns, which registers pad to 8: sum, max and a softmax."""
    top, _ = jax.lax.top_k(sk.load(x).astype(jnp.float32), K)
    share = top / jnp.sum(top, axis=1, keepdims=True)
    return share, jax.nn.softmax(top, axis=1), jnp.min(top, axis=1)


def _bits(a: jax.Array) -> np.ndarray:
    """The elements' bits, so that NaN and -0.0 compare as they are."""
    arr = np.asarray(a)
    return arr.view(np.dtype(f"uint{arr.dtype.itemsize * 8}"))


def _check_top_k(x: jax.Array, k: int) -> None:
    values, indices = top_values(x, K=k)
    want_values, want_indices = jax.lax.top_k(x, k)
    np.testing.assert_array_equal(np.asarray(indices), np.asarray(want_indices))
    np.testing.assert_array_equal(_bits(values), _bits(want_values))


def _special_floats(shape: tuple[int, int], dtype: Any, seed: int = 0) -> jax.Array:
    """Normal values with ties, NaN, both infinities and both zeros mixed in."""
    rng = np.random.default_rng(seed)
    pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1.0, -1.0], np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    special = rng.random(shape) < 0.3
    x[special] = rng.choice(pool, size=int(special.sum()))
    return jnp.asarray(x, dtype)


@pytest.mark.parametrize(
    ("shape", "k"),
    [((100, 60), 4), ((1, 8), 8), ((130, 64), 1), ((65, 37), 37), ((7, 256), 8), ((200, 5), 3)],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_top_k_is_jaxs_bit_for_bit(shape: tuple[int, int], k: int, dtype: Any) -> None:
    _check_top_k(_special_floats(shape, dtype), k)


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int16, jnp.int8])
def test_top_k_of_integers_with_ties_and_the_extremes(dtype: Any) -> None:
    info = np.iinfo(np.dtype(dtype))
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, size=(90, 40)).astype(np.int64)
    x[rng.random(x.shape) < 0.2] = info.min
    x[rng.random(x.shape) < 0.1] = info.max
    x[5, :] = info.min  # a row of the smallest value only: every pick a tie
    _check_top_k(jnp.asarray(x, dtype), 6)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 150),
    cols=st.integers(1, 140),
    k=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_top_k_matches_jax_on_any_shape(rows: int, cols: int, k: int, seed: int) -> None:
    _check_top_k(_special_floats((rows, cols), jnp.float32, seed), min(k, cols))


@pytest.mark.parametrize(("shape", "k"), [((100, 60), 3), ((64, 8), 8), ((3, 300), 16)])
def test_reductions_over_the_k_columns_skip_their_padding(shape: tuple[int, int], k: int) -> None:
    x = jax.random.normal(jax.random.key(2), shape, jnp.float32)
    share, soft, smallest = renormalized(x, K=k)
    top, _ = jax.lax.top_k(x, k)
    np.testing.assert_allclose(share, top / jnp.sum(top, axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(soft, jax.nn.softmax(top, axis=1), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(smallest, jnp.min(top, axis=1))


def test_the_plan_names_the_constant_that_sizes_a_dim() -> None:
    x = jax.ShapeDtypeStruct((100, 60), jnp.float32)
    plan = str(top_values.plan(x, K=2))
    assert "K=2" in plan and "the constant K" in plan
    assert "result0: float32[100, 2]" in plan and "result1: int32[100, 2]" in plan


def test_k_past_the_columns_is_reported_with_the_bindings() -> None:
    with pytest.raises(sk.BodyError, match=r"k=8") as info:
        top_values(jnp.ones((10, 5)), K=8)
    assert "E=5" in str(info.value) and "K=8" in str(info.value)


def test_a_dim_a_constant_sizes_is_the_columns_of_a_result_over_the_rows() -> None:
    with pytest.raises(sk.AnnotationError, match="not as the columns") as info:

        @sk.kernel(tile={"T": "BT"})
        def transposed(
            x: Float[Array, "T E"], *, BT: sk.Const[int] = 64, K: sk.Const[int] = 2
        ) -> Float[Array, "K T"]:
            return jax.lax.top_k(sk.load(x), K)[0].T

    assert "'T K'" in str(info.value)


def test_a_result_dim_neither_operand_nor_constant_names_the_fix() -> None:
    with pytest.raises(sk.AnnotationError, match="cannot be derived") as info:

        @sk.kernel(tile={"T": "BT"})
        def unsized(x: Float[Array, "T E"], *, BT: sk.Const[int] = 64) -> Float[Array, "T K"]:
            return jax.lax.top_k(sk.load(x), 2)[0]

    assert "sk.Const[int]" in str(info.value)


def test_top_k_over_tiled_columns_is_refused_with_a_fix() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="tiled") as info:

        @sk.kernel(tile={"T": "BT", "E": "BE"})
        def tiled(
            x: Float[Array, "T E"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 64,
            K: sk.Const[int] = 2,
        ) -> Float[Array, "T E"]:
            v = sk.load(x)
            return v - jax.lax.top_k(v, K)[0][:, :1]

    assert "drop it from tile=" in str(info.value)


def test_top_k_of_a_slice_ranks_its_own_columns() -> None:
    """A block of its own width (a slice, or two top-K's joined) is ranked over its logical
    columns alone: a streamed top-K merges that way (tests/compiler/mosaic_gpu/lower/test_streamed_top_k.py)."""

    @sk.kernel(tile={"T": "BT"})
    def sliced(
        x: Float[Array, "T E"], *, BT: sk.Const[int] = 64, K: sk.Const[int] = 2
    ) -> Int32[Array, "T K"]:
        return jax.lax.top_k(sk.load(x)[:, :64], K)[1]

    x = jax.random.normal(jax.random.key(3), (100, 128), jnp.float32)
    np.testing.assert_array_equal(sliced(x), jax.lax.top_k(x[:, :64], 2)[1])


@pytest.mark.parametrize(
    ("dtype", "k"), [("float32", 8), ("bfloat16", 2), ("int32", 3), ("float16", 16)]
)
def test_top_k_cross_lowers_for_the_gpu(dtype: str, k: int) -> None:
    x = jax.ShapeDtypeStruct((1000, 128), jnp.dtype(dtype))
    text = top_values.lower(x, K=k).as_text()
    assert "mosaic_gpu" in text


@sk.kernel(tile={"T": "BT"})
def ranked_constant(
    x: Float[Array, "T E"], *, BT: sk.Const[int] = 64, K: sk.Const[int] = 3
) -> tuple[Float[Array, "T K"], Int32[Array, "T K"]]:
    return jax.lax.top_k(jnp.full_like(sk.load(x), 2.5), K)


def test_top_k_of_a_constant_block_held_as_its_scalar() -> None:
    """A block of one value (jnp.full_like) is held as a scalar: top_k spreads it first."""
    values, indices = ranked_constant(jnp.ones((70, 5)))
    want_values, want_indices = jax.lax.top_k(jnp.full((70, 5), 2.5), 3)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
