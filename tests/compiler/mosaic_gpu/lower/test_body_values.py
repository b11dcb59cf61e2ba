"""Values a body computes without loading them: constant blocks, scalar branches of jnp.where,
and the literals of fills. Each kernel runs in the interpreter against the same body run by jnp
on the whole array, and cross-lowers for CUDA."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from statickernel._compiler.mosaic_gpu.lower.translate import literal_source

Body = Callable[[Any], Any]
SHAPES = [(1, 1), (1, 37), (63, 5), (64, 128), (100, 37), (130, 300)]


def row_kernel(body: Body, result: str, fill: float = 0.0) -> sk.Kernel[..., Any]:
    """A whole-row kernel over float32 `x: "M N"` whose body is `body(sk.load(x, fill=fill))`."""

    @sk.kernel(tile={"M": "BM"})
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, result]:
        return body(sk.load(x, fill=fill))

    return k


def data(m: int, n: int, dtype: Any = jnp.float32) -> jax.Array:
    rng = np.random.default_rng([m, n])
    return jnp.asarray(rng.standard_normal((m, n), dtype=np.float32), dtype)


def check_against_jnp(body: Body, result: str, fill: float = 0.0, dtype: Any = jnp.float32):
    k = row_kernel(body, result, fill)
    for m, n in SHAPES:
        x = data(m, n, dtype)
        want = np.asarray(body(x), np.float32).reshape(m, -1)
        got = np.asarray(k(x), np.float32).reshape(m, -1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"at M={m}, N={n}")
    k.lower(data(*SHAPES[-1], dtype))


# --- constant blocks keep their extent ---------------------------------------------------------

CONSTANT_BLOCKS: dict[str, tuple[Body, str]] = {
    "sum_of_ones_like": (lambda v: sk.sum(jnp.ones_like(v), axis=1), "M"),
    "sum_of_full_like": (lambda v: sk.sum(jnp.full_like(v, 2.0), axis=1), "M"),
    "mean_of_ones_like": (lambda v: jnp.mean(jnp.ones_like(v), axis=1), "M"),
    "keepdims_sum_of_ones": (lambda v: v / sk.sum(jnp.ones_like(v), axis=1, keepdims=True), "M N"),
    "max_of_full_like": (lambda v: sk.max(jnp.full_like(v, 3.0), axis=1, keepdims=True) + v, "M N"),
    "min_of_zeros_like": (lambda v: sk.min(jnp.zeros_like(v), axis=1), "M"),
    "row_times_ones": (
        lambda v: sk.sum(sk.sum(v, axis=1, keepdims=True) * jnp.ones_like(v), axis=1),
        "M",
    ),
    "row_plus_zeros_is_a_block": (
        lambda v: sk.max(v, axis=1, keepdims=True) + jnp.zeros_like(v),
        "M N",
    ),
    "count_from_ones_in_a_variance": (
        lambda v: (
            sk.sum(
                (
                    v
                    - sk.sum(v, axis=1, keepdims=True)
                    / sk.sum(jnp.ones_like(v), axis=1, keepdims=True)
                )
                ** 2,
                axis=1,
            )
            / sk.sum(jnp.ones_like(v), axis=1)
        ),
        "M",
    ),
}


@pytest.mark.parametrize("case", sorted(CONSTANT_BLOCKS))
def test_constant_block_reductions_count_every_element(case: str) -> None:
    body, result = CONSTANT_BLOCKS[case]
    check_against_jnp(body, result)


def test_sum_of_ones_like_is_the_row_width() -> None:
    k = row_kernel(lambda v: sk.sum(jnp.ones_like(v), axis=1), "M")
    np.testing.assert_array_equal(np.asarray(k(data(70, 37))), np.full(70, 37.0, np.float32))


# --- jnp.where with scalar and constant branches ------------------------------------------------

SELECTS: dict[str, tuple[Body, str]] = {
    "relu_with_a_scalar_branch": (lambda v: jnp.where(v > 0, v, 0.0), "M N"),
    "minus_inf_branch_then_max": (lambda v: sk.max(jnp.where(v > 0, v, -jnp.inf), axis=1), "M"),
    "zeros_like_branch": (lambda v: jnp.where(v > 0, v, jnp.zeros_like(v)), "M N"),
    "scalar_first_branch": (lambda v: jnp.where(v < 0, 0.5, v), "M N"),
    "two_scalar_branches": (lambda v: jnp.where(v > 0, 1.0, -1.0), "M N"),
    "row_predicate": (lambda v: jnp.where(sk.sum(v, axis=1, keepdims=True) > 0, v, 0.0), "M N"),
    "row_branch_and_scalar": (
        lambda v: jnp.where(v > 0, sk.max(v, axis=1, keepdims=True), 0.0),
        "M N",
    ),
    "jax_nn_softmax_stops_gradients": (lambda v: jax.nn.softmax(v, axis=1), "M N"),
    "select_of_vectors": (lambda v: jnp.where(sk.sum(v, axis=1) > 0, 1.0, sk.min(v, axis=1)), "M"),
}


@pytest.mark.parametrize("case", sorted(SELECTS))
def test_where_with_scalar_branches(case: str) -> None:
    body, result = SELECTS[case]
    check_against_jnp(body, result)


# --- fills of every special value ---------------------------------------------------------------

SPECIAL_FILLS = [float("nan"), float("inf"), float("-inf"), -0.0, 1e-30]


@pytest.mark.parametrize("fill", SPECIAL_FILLS, ids=repr)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=lambda d: jnp.dtype(d).name)
def test_special_fills_run_and_never_reach_the_result(fill: float, dtype: Any) -> None:
    @sk.kernel(tile={"M": "BM"})
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x, fill=fill)
        return v * 2 + sk.max(v, axis=1, keepdims=True)

    x = data(70, 37, dtype)
    want = np.asarray(x * 2 + jnp.max(x, axis=1, keepdims=True), np.float32)
    np.testing.assert_allclose(np.asarray(k(x), np.float32), want, rtol=1e-2, atol=1e-2)
    k.lower(x)


def test_a_nan_fill_is_printed_as_jnp_nan() -> None:
    k = row_kernel(lambda v: sk.max(v, axis=1), "M", fill=float("nan"))
    assert "jnp.float32(jnp.nan)" in k.emit(data(70, 37))


# --- the one literal printer ---------------------------------------------------------------------

FLOAT_DTYPES = ["float32", "float16", "bfloat16"]
SPECIAL_VALUES = [
    float("nan"),
    float("inf"),
    float("-inf"),
    -0.0,
    0.0,
    0.1,
    -3.5,
    65504.0,
    3e38,
    1.0,
]


def _evaluate(source: str) -> Any:
    return eval(source, {"jnp": jnp})


def _bits(value: Any, dtype: str) -> int:
    array = np.asarray(value, dtype=ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    return int(array.view(np.uint16 if array.itemsize == 2 else np.uint32))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("value", SPECIAL_VALUES, ids=repr)
def test_float_literals_parse_back_to_the_same_bits(value: float, dtype: str) -> None:
    typed = _evaluate(literal_source(value, dtype, weak_type=False))
    assert jnp.asarray(typed).dtype == jnp.dtype(dtype)
    with np.errstate(over="ignore"):  # past float16's range: its infinity
        expected = np.asarray(value, ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    if np.isnan(expected):
        assert np.isnan(np.asarray(typed, np.float32))
    else:
        assert _bits(typed, dtype) == _bits(expected, dtype)
    weak = _evaluate(literal_source(value, dtype, weak_type=True))
    assert (np.isnan(weak) and np.isnan(value)) or (
        weak == value and np.copysign(1, weak) == np.copysign(1, value)
    )


@pytest.mark.parametrize(
    ("value", "dtype", "source"),
    [
        (7, "int32", "jnp.int32(7)"),
        (-128, "int8", "jnp.int8(-128)"),
        (True, "bool", "True"),
        (float("nan"), "float32", "jnp.float32(jnp.nan)"),
        (float("-inf"), "bfloat16", "jnp.bfloat16(-jnp.inf)"),
        (-0.0, "float32", "jnp.float32(-0.0)"),
    ],
)
def test_literal_sources(value: object, dtype: str, source: str) -> None:
    assert literal_source(value, dtype, weak_type=False) == source
