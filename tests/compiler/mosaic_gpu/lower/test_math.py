"""The elementwise math a body may call beyond +, -, *, /: the ops Mosaic GPU lowers itself,
the ones statickernel writes with those (log1p, expm1, sinh, cosh, cbrt, erfc, arctan,
isfinite, floor, ceil), the jax.nn functions made of them, jnp.any / jnp.all, and integer
arithmetic. Each is written in a kernel as a user would, run in the interpreter on ragged
shapes over its interesting range, compared with jnp on the whole array, and cross-lowered."""

from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jaxtyping import Array, Float, Float32, Int32

import statickernel as sk
from tolerances import Tolerance, assert_close, tolerance_for

SHAPES = ((1000, 100), (1, 7), (129, 33))
F32 = tolerance_for(jnp.float32)  # one rounding either side of jnp's
# 4 ulp: sinh and cosh square exp(x / 2) and cbrt takes a Newton step, each a rounding more.
F32_4ULP = tolerance_for(jnp.float32, ulps=4)
# jnp's sinh and cosh shift their argument by log(1/2) before exp, which costs up to |x| eps
# relative (24 ulp at |x| = 89): the kernel is compared with that, and with float64 at 4 ulp.
JNP_SINH = Tolerance(rtol=30 * float(jnp.finfo(jnp.float32).eps), atol=F32.atol)
# 1 - erf(x) is good to 3e-7 absolute (erf's own rounding near 1), not relative where
# erfc(x) is small.
ERFC = Tolerance(rtol=F32.rtol, atol=3e-7)
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-7, -1e-7], np.float32)


def _data(shape: tuple[int, int], scale: float, seed: int = 0) -> jax.Array:
    """Normal values times `scale`, with values near 0 of every magnitude down to 1e-30 and
    the specials (±0, ±inf, nan) spread through the array."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(np.float32) * scale
    tiny = rng.choice([-1, 1], size=shape) * 10.0 ** rng.uniform(-30, 0, size=shape)
    x = np.where(rng.random(shape) < 0.3, tiny.astype(np.float32), x)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, 2 * SPECIAL.size), replace=False)
    flat[picks] = np.resize(SPECIAL, picks.size)
    return jnp.asarray(x)


def _elementwise(fn: Callable[[Any], Any]) -> sk.Kernel:
    @sk.kernel(tile={"M": "BM"})
    def apply(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return fn(sk.load(x)).astype(jnp.float32)

    return apply


def _isfinite(v: Any) -> Any:
    return jnp.where(jnp.isfinite(v), v, 7.0)


# op: (the body's function, the scale of its data, the tolerance)
FLOAT_OPS: dict[str, tuple[Callable[[Any], Any], float, Tolerance]] = {
    "log1p": (jnp.log1p, 3.0, F32),
    "expm1": (jnp.expm1, 10.0, F32),
    "softplus": (jax.nn.softplus, 30.0, F32),
    "log2": (jnp.log2, 100.0, F32),
    "sinh": (jnp.sinh, 40.0, JNP_SINH),
    "cosh": (jnp.cosh, 40.0, JNP_SINH),
    "cbrt": (jnp.cbrt, 1e6, F32_4ULP),
    "erfc": (jax.lax.erfc, 2.0, ERFC),
    "arctan": (jnp.arctan, 10.0, F32),
    "isfinite": (_isfinite, 1e30, F32),
    "floor": (jnp.floor, 5.0, F32),
    "ceil": (jnp.ceil, 5.0, F32),
    "round": (jnp.round, 5.0, F32),
    "sign": (jnp.sign, 1.0, F32),
    "clip": (lambda v: jnp.clip(v, -1.0, 2.0), 3.0, F32),
}
KERNELS = {op: _elementwise(fn) for op, (fn, _, _) in FLOAT_OPS.items()}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", list(FLOAT_OPS))
def test_a_float_op_matches_jnp_over_its_range(op: str, shape: tuple[int, int]) -> None:
    fn, scale, tolerance = FLOAT_OPS[op]
    x = _data(shape, scale)
    assert_close(KERNELS[op](x), fn(x).astype(jnp.float32), tolerance, err_msg=op)


@pytest.mark.parametrize("op", list(FLOAT_OPS))
def test_a_float_op_cross_lowers_for_the_gpu(op: str) -> None:
    KERNELS[op].lower(jax.ShapeDtypeStruct((129, 33), jnp.float32))


# The composites against float64 numpy, rounded: how close each is to the true value.
TRUTH: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Tolerance]] = {
    "log1p": (np.log1p, F32),
    "expm1": (np.expm1, F32),
    "sinh": (np.sinh, F32_4ULP),
    "cosh": (np.cosh, F32_4ULP),
    "cbrt": (np.cbrt, F32),
    "arctan": (np.arctan, F32),
    "softplus": (lambda v: np.logaddexp(v, 0.0), F32_4ULP),
}


@pytest.mark.parametrize("op", list(TRUTH))
def test_a_composite_is_within_a_few_ulp_of_the_true_value(op: str) -> None:
    fn, tolerance = TRUTH[op]
    x = _data((1000, 100), FLOAT_OPS[op][1], seed=5)
    with np.errstate(over="ignore", invalid="ignore"):
        want = fn(np.asarray(x, np.float64)).astype(np.float32)
    assert_close(KERNELS[op](x), want, tolerance, err_msg=op)


@settings(max_examples=15, deadline=None)
@given(
    op=st.sampled_from(["log1p", "expm1", "sinh", "cbrt", "floor"]),
    values=st.lists(
        st.floats(-80.0, 80.0, allow_subnormal=False, width=32), min_size=7, max_size=7
    ),
)
def test_a_composite_matches_jnp_on_drawn_values(op: str, values: list[float]) -> None:
    fn, _, tolerance = FLOAT_OPS[op]
    x = jnp.asarray([values], jnp.float32)
    assert_close(KERNELS[op](x), fn(x), tolerance, err_msg=op)


@pytest.mark.parametrize("op", ["expm1", "log1p", "sinh", "cbrt", "arctan", "erfc"])
def test_a_composite_on_bfloat16_is_rounded_once(op: str) -> None:
    """A 16-bit float is computed in float32 and rounded to bfloat16 once, as XLA computes
    jnp's own: a sum of 247 sinh values rounded at each of the series' steps was off by 5."""
    fn, scale, _ = FLOAT_OPS[op]
    kernel = _elementwise_keeping_dtype(fn)
    x = _data((129, 33), min(scale, 4.0)).astype(jnp.bfloat16)
    got = kernel(x)
    assert got.dtype == jnp.bfloat16
    want = fn(x.astype(jnp.float32)).astype(jnp.bfloat16)
    # One rounding of float32 values that may differ by an ulp of float32 from jnp's (erfc's
    # by 3e-7 absolute where it is small).
    bf16 = tolerance_for(jnp.bfloat16, ulps=1)
    tolerance = Tolerance(rtol=bf16.rtol, atol=ERFC.atol) if op == "erfc" else bf16
    assert_close(got, want, tolerance, err_msg=op)


def _elementwise_keeping_dtype(fn: Callable[[Any], Any]) -> sk.Kernel:
    @sk.kernel(tile={"M": "BM"})
    def apply(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return fn(sk.load(x))

    return apply


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_logsumexp_over_an_axis_matches_jax(shape: tuple[int, int], axis: int) -> None:
    @sk.kernel(tile={"M": "BM"})
    def shifted(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)
        return v - jax.nn.logsumexp(v, axis=1, keepdims=True)

    # Over the rows of a block, the rows are whole only when one block holds them all.
    @sk.kernel(tile={"N": "BN"})
    def shifted_columns(x: Float[Array, "M N"], *, BN: sk.Const[int] = 128) -> Float[Array, "M N"]:
        v = sk.load(x)
        return v - jax.nn.logsumexp(v, axis=0, keepdims=True)

    rows = min(shape[0], 64) if axis == 0 else shape[0]
    x = jnp.asarray(np.random.default_rng(1).normal(size=(rows, shape[1])) * 20, jnp.float32)
    kernel = shifted if axis == 1 else shifted_columns
    want = x - jax.nn.logsumexp(x, axis=axis, keepdims=True)
    assert_close(kernel(x), want, tolerance_for(jnp.float32, shape[1 - axis], scale=60.0))
    kernel.lower(x)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_any_and_all_over_a_row_ignore_what_lies_past_the_edge(shape: tuple[int, int]) -> None:
    @sk.kernel(tile={"M": "BM"})
    def flags(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)  # reads 0 past the edge: a test of == 0 there would see it
        some_zero = jnp.any(v == 0.0, axis=1, keepdims=True)
        none_zero = jnp.all(v != 0.0, axis=1, keepdims=True)
        return jnp.where(some_zero, 1.0, 0.0) + jnp.where(none_zero, 2.0, 0.0) + 0.0 * v

    rng = np.random.default_rng(2)
    x = np.where(rng.random(shape) < 0.02, 0.0, 1.0 + rng.random(shape)).astype(np.float32)
    x[::2] = 1.0  # half the rows hold no zero
    x = jnp.asarray(x)
    some_zero = jnp.any(x == 0.0, axis=1, keepdims=True)
    none_zero = jnp.all(x != 0.0, axis=1, keepdims=True)
    want = jnp.where(some_zero, 1.0, 0.0) + jnp.where(none_zero, 2.0, 0.0) + 0.0 * x
    np.testing.assert_array_equal(np.asarray(flags(x)), np.asarray(want))  # 0, 1, 2: exact
    flags.lower(x)


def test_any_over_the_rows_ignores_the_rows_past_the_edge() -> None:
    @sk.kernel(tile={"N": "BN"})
    def flags(x: Float[Array, "M N"], *, BN: sk.Const[int] = 128) -> Float[Array, "M N"]:
        v = sk.load(x)
        return jnp.where(jnp.any(v == 0.0, axis=0, keepdims=True), v, -v)

    x = jnp.asarray(np.random.default_rng(3).random((33, 200)) + 1.0, jnp.float32)
    x = x.at[5, 7].set(0.0)
    want = jnp.where(jnp.any(x == 0.0, axis=0, keepdims=True), x, -x)
    np.testing.assert_array_equal(np.asarray(flags(x)), np.asarray(want))  # a sign: exact
    flags.lower(x)


INT_OPS: dict[str, Callable[[Any], Any]] = {
    "and": lambda v: v & 0x5A,
    "or": lambda v: v | 8,
    "xor": lambda v: v ^ -3,
    "not": lambda v: ~v,
    "shift left": lambda v: v << 3,
    "shift right": lambda v: v >> 2,
    "floor division": lambda v: v // 7,
    "floor division by a negative": lambda v: v // -3,
    "%": lambda v: v % 5,
    "remainder": lambda v: jnp.remainder(v, -4),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", list(INT_OPS))
def test_an_integer_op_matches_jnp(op: str, shape: tuple[int, int]) -> None:
    fn = INT_OPS[op]

    @sk.kernel(tile={"M": "BM"})
    def apply(x: Int32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, "M N"]:
        return fn(sk.load(x))

    x = jnp.asarray(np.random.default_rng(4).integers(-(2**20), 2**20, size=shape), jnp.int32)
    np.testing.assert_array_equal(np.asarray(apply(x)), np.asarray(fn(x)), err_msg=op)
    apply.lower(x)


def _floats_of_any_magnitude(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Normal float32 values of every exponent, of both signs. (XLA:CPU flushes subnormals to
    zero, so jnp is no oracle for them: see the test of subnormals.)"""
    bits = rng.integers(0x00800000, 0x7F800000, size=shape, dtype=np.int64).astype(np.int32)
    values = bits.view(np.float32).copy()
    return np.where(rng.random(shape) < 0.5, -values, values).astype(np.float32)


FLOAT_REMAINDERS: dict[str, Callable[[Any, Any], Any]] = {
    "%": lambda x, y: x % y,
    "jnp.fmod": jnp.fmod,
    "lax.rem": jax.lax.rem,
    "jnp.remainder": jnp.remainder,
}


def _same_floats(got: Any, want: Any) -> None:
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    same = (got == want) & (np.signbit(got) == np.signbit(want))
    same |= np.isnan(got) & np.isnan(want)
    bad = np.argwhere(~same)
    assert not bad.size, (
        f"{len(bad)} differ, first at {bad[0]}: {got[tuple(bad[0])]} vs {want[tuple(bad[0])]}"
    )


@pytest.mark.parametrize("op", list(FLOAT_REMAINDERS))
def test_a_float_remainder_is_exact_at_every_magnitude(op: str) -> None:
    fn = FLOAT_REMAINDERS[op]

    @sk.kernel(tile={"M": "BM"})
    def remainder(
        x: Float32[Array, "M N"], y: Float32[Array, "M N"], *, BM: sk.Const[int] = 64
    ) -> Float32[Array, "M N"]:
        return fn(sk.load(x), sk.load(y))

    rng = np.random.default_rng(8)
    x, y = _floats_of_any_magnitude(rng, (130, 40)), _floats_of_any_magnitude(rng, (130, 40))
    # Quotients from below 1 to 2**253, and the special values.
    x[0, :10] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 5.0, -5.0, 1.2e-38, 3.4e38, 7.0]
    y[0, :10] = [1.0, 2.0, 3.0, 1.0, 1.0, 0.0, np.inf, 1.2e-38, 1.2e-38, np.nan]
    x[1, :4] = [-0.0, 6.0, -6.0, 1.5]
    y[1, :4] = [-np.inf, -0.0, 4.0, -np.inf]
    with np.errstate(invalid="ignore"):
        _same_floats(remainder(jnp.asarray(x), jnp.asarray(y)), fn(jnp.asarray(x), jnp.asarray(y)))
    remainder.lower(jnp.asarray(x), jnp.asarray(y))


def test_a_float_remainder_keeps_subnormals_as_ieee_754_does() -> None:
    # numpy's fmod is IEEE 754's, exact on subnormals; XLA:CPU flushes them to zero.
    @sk.kernel(tile={"M": "BM"})
    def fmod(
        x: Float32[Array, "M N"], y: Float32[Array, "M N"], *, BM: sk.Const[int] = 64
    ) -> Float32[Array, "M N"]:
        return jax.lax.rem(sk.load(x), sk.load(y))

    rng = np.random.default_rng(12)
    tiny = rng.integers(1, 0x00800000, size=(2, 64), dtype=np.int64).astype(np.int32)
    subnormal = tiny.view(np.float32) * np.where(rng.random((2, 64)) < 0.5, -1, 1)
    x = np.concatenate([subnormal[:1], _floats_of_any_magnitude(rng, (1, 64))]).astype(np.float32)
    y = np.concatenate([subnormal[1:], subnormal[1:]]).astype(np.float32)
    _same_floats(fmod(jnp.asarray(x), jnp.asarray(y)), np.fmod(x, y))


def _normal_or_special(value: float) -> bool:
    return not (0 < abs(value) < np.finfo(np.float32).tiny)


@settings(max_examples=25, deadline=None)
@given(
    x=st.lists(
        st.floats(width=32, allow_nan=True).filter(_normal_or_special), min_size=1, max_size=64
    ),
    divisor=st.floats(width=32, allow_nan=True).filter(_normal_or_special),
)
def test_a_float_remainder_by_a_constant_matches_jnp(x: list[float], divisor: float) -> None:
    @sk.kernel(tile={"M": "BM"})
    def wrap(v: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
        return jnp.remainder(sk.load(v), divisor)

    values = jnp.asarray(np.asarray(x, np.float32)[None, :])
    _same_floats(wrap(values), jnp.remainder(values, jnp.float32(divisor)))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
def test_a_16_bit_float_remainder_is_exact(dtype: Any) -> None:
    @sk.kernel(tile={"M": "BM"})
    def remainder(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return sk.load(x) % 0.7

    rng = np.random.default_rng(9)
    x = jnp.asarray(rng.normal(size=(65, 33)) * 300, dtype)
    _same_floats(remainder(x), x % jnp.asarray(0.7, dtype))


def test_a_float_remainder_in_whole_rows_and_in_a_loop() -> None:
    @sk.kernel(tile={"M": "BM"})
    def wide(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
        return sk.load(x) % (2 * np.pi)

    x = jnp.asarray(np.random.default_rng(10).normal(size=(3, 8192)) * 1e4, jnp.float32)
    assert wide.plan(x).row_frame is not None  # whole rows of 8192 float32: the row form
    _same_floats(wide(x), x % jnp.float32(2 * np.pi))

    @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
    def phase_sum(
        x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
    ) -> Float32[Array, " M"]:
        def step(total: Any) -> Any:
            return total + jnp.sum(jnp.fmod(sk.load(x), 1.0), axis=1)

        return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32))

    y = jnp.asarray(np.random.default_rng(11).normal(size=(70, 300)) * 50, jnp.float32)
    assert_close(phase_sum(y), jnp.sum(jnp.fmod(y, 1.0), axis=1), tolerance_for(jnp.float32, 300))


@pytest.mark.parametrize("shape", [(129, 333), (1, 7)], ids=str)
def test_composites_and_any_in_the_step_of_a_loop(shape: tuple[int, int]) -> None:
    @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
    def row_stats(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
    ) -> Float[Array, " M"]:
        def step(total: Any) -> Any:
            v = sk.load(x)
            big = jnp.any(v > 2.0, axis=1)
            return total + sk.sum(jnp.log1p(jnp.abs(v)), axis=1) + jnp.where(big, 100.0, 0.0)

        return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32))

    x = jnp.asarray(np.random.default_rng(7).normal(size=shape), jnp.float32)
    n_blocks = -(-shape[1] // 64)
    blocks = [x[:, i * 64 : (i + 1) * 64] for i in range(n_blocks)]
    want = jnp.sum(jnp.log1p(jnp.abs(x)), axis=1) + sum(
        jnp.where(jnp.any(b > 2.0, axis=1), 100.0, 0.0) for b in blocks
    )
    assert_close(row_stats(x), want, tolerance_for(jnp.float32, shape[1], scale=100.0))
    row_stats.lower(x)


def test_all_of_a_whole_block_is_the_blocks_own() -> None:
    """`jnp.all` to a scalar: true where every element of the block inside the edge is."""

    @sk.kernel(tile={"M": "BM"})
    def everywhere(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)
        return jnp.where(jnp.all(v > 0), v, -v)

    x = jnp.abs(_data((130, 100), 1.0)) + 0.5
    x = x.at[70, 3].set(-1.0)  # the second block has a negative element, the first none
    blocks = [x[i : i + 64] for i in range(0, 130, 64)]
    want = jnp.concatenate([jnp.where(jnp.all(b > 0), b, -b) for b in blocks])
    assert_close(everywhere(x), want, tolerance_for(jnp.float32))
