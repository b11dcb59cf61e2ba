"""Bugs found by the fuzzer and by running the error catalog, each pinned by its smallest case.

Each test names the symptom that was seen before the fix.
"""

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Int, Int32

import statickernel as sk

THIS_FILE = pathlib.Path(__file__).name
_LINES = pathlib.Path(__file__).read_text().splitlines()


def _line(tag: str) -> int:
    """The line of this file that carries the marker comment `# @tag`."""
    return next(n for n, text in enumerate(_LINES, 1) if text.endswith(f"# @{tag}"))


@sk.kernel(tile={"M": "BM"}, backend="interpret")
def scaled(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, flag: sk.Const[bool] = True
) -> Float[Array, "M N"]:
    v = sk.load(x)
    return 2 * v if flag else v


def test_integer_remainder_traces() -> None:
    """`%` on integers is jnp.remainder, a jitted function whose inner jaxpr holds another call.

    Before: TypeError "cannot unpack non-iterable Var object" at import, because the loop over
    a call's outputs reused the name of the (line, source) of the enclosing call.
    """

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def remainder(x: Int32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, "M N"]:
        return sk.load(x) % 5

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def clipped_remainder(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, "M N"]:
        return (jnp.clip(sk.load(x), -100, 100).astype(jnp.int32) << 1) % 5

    x = jnp.arange(100 * 16, dtype=jnp.int32).reshape(100, 16) - 700
    np.testing.assert_array_equal(remainder(x), x % 5)
    y = jnp.linspace(-150, 150, 100 * 16, dtype=jnp.float32).reshape(100, 16)
    expected = (jnp.clip(y, -100, 100).astype(jnp.int32) << 1) % 5
    np.testing.assert_array_equal(clipped_remainder(y), expected)


@pytest.mark.parametrize(
    ("valid", "invalid"),
    [({"BM": 64}, {"BM": 64.0}), ({"flag": True}, {"flag": 1}), ({}, {"BM": 64.0})],
    ids=["int-then-float", "bool-then-int", "default-then-float"],
)
def test_an_override_of_another_type_is_not_served_from_the_cache(
    valid: dict[str, Any], invalid: dict[str, Any]
) -> None:
    """Before: once `BM=64` (or the default) was cached, `BM=64.0` hit the same cache entry,
    since 64.0 == 64 and hash(64.0) == hash(64), and ran instead of raising."""
    kernel = scaled.bind()  # an empty cache
    x = jnp.ones((100, 8), jnp.float32)
    kernel(x, **valid)
    with pytest.raises(sk.OverrideError) as info:
        kernel(x, **invalid)
    assert info.value.operand == next(iter(invalid))
    np.testing.assert_array_equal(kernel(x, **valid), 2 * x)


def test_a_differentiated_kernel_points_at_the_user_line() -> None:
    """Before: `at:` named contextlib.py, a frame of JAX's tracing in the standard library."""
    x = jnp.ones((100, 8), jnp.float32)
    with pytest.raises(sk.NotDifferentiableError) as info:
        jax.grad(lambda x: scaled(x).sum())(x)
    assert info.value.where is not None
    assert info.value.where.startswith(f"tests/{THIS_FILE}:") or THIS_FILE in info.value.where


def test_a_declaration_body_error_shows_no_probe_bindings() -> None:
    """Before: `bindings: M=129, N=8`, the sizes the declaration traces with, which the user
    never bound."""
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def add_per_row(
            x: Float[Array, "M N"], b: Float[Array, " M"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x) + sk.load(b)

    assert info.value.bindings == {}
    assert "bindings:" not in str(info.value)


def test_a_per_row_and_a_per_column_vector_make_a_block() -> None:
    """`a[:, None] * b[None, :]` and `rows + cols` of two keepdims reductions: lax broadcasts
    a (rows, 1) and a (1, cols) operand to the block without a broadcast of its own.

    Before: UnsupportedOpError "the body combines a per-row and a per-column vector without
    broadcasting", for bodies jnp runs fine.
    """

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def outer(
        a: Float[Array, " M"], b: Float[Array, " N"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        return sk.load(a)[:, None] * sk.load(b)[None, :]

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def row_plus_column(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)
        return sk.sum(v, axis=1, keepdims=True) + jnp.max(v, axis=0, keepdims=True)

    a, b = jnp.arange(100.0), jnp.arange(64.0) - 7
    np.testing.assert_array_equal(outer(a, b), a[:, None] * b[None, :])
    x = jnp.arange(60.0 * 30).reshape(60, 30) - 900  # one block: column maxima are exact
    expected = x.sum(axis=1, keepdims=True) + x.max(axis=0, keepdims=True)
    np.testing.assert_allclose(row_plus_column(x), expected, rtol=1e-6)


def test_a_per_row_and_a_per_column_vector_of_one_length_stay_refused() -> None:
    """Two 1-D vectors of equal length, one per row and one per column, have no block shape:
    jnp would pair element i with element i, which the register layouts cannot do."""
    with pytest.raises(sk.UnsupportedOpError):

        @sk.kernel(backend="interpret")
        def mixed(
            x: Float[Array, "M N"], a: Float[Array, " M"], b: Float[Array, " N"]
        ) -> Float[Array, " M"]:
            return sk.load(a) + sk.load(b) + 0 * sk.sum(sk.load(x), axis=1)


def test_arithmetic_on_8_bit_integers_is_an_unsupported_op() -> None:
    """Mosaic GPU computes on 8-bit integers only with bitwise ops and ==/!=.

    Before: the interpreter ran `x + x` on int8, and `kernel.lower` (and a GPU) failed with
    NotImplementedError "Pointwise operations on 8-bit types are unsupported".
    """

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def double(x: Int[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int[Array, "M N"]:
        v = sk.load(x)
        return v + v  # @int8-add

    x = jnp.ones((100, 128), jnp.int8)
    with pytest.raises(sk.UnsupportedOpError) as info:
        double(x)  # int32, the first dtype `Int` allows, passed at import; int8 does not
    assert info.value.where is not None and info.value.where.endswith(f":{_line('int8-add')}")
    assert "int8" in info.value.what and "astype(jnp.int32)" in str(info.value.fix)
    np.testing.assert_array_equal(double(x.astype(jnp.int32)), 2 * x.astype(jnp.int32))


@pytest.mark.parametrize("shape", [(128, 256), (100, 200)], ids=["aligned", "ragged"])
def test_8_bit_fills_and_reductions_lower(shape: tuple[int, int]) -> None:
    """statickernel's own selects (a load's fill, a reduction's mask past a ragged edge) on
    8-bit integers are made in int32.

    Before: NotImplementedError from `kernel.lower` for a ragged int8 operand with a fill
    other than 0, or a max over a ragged int8 axis.
    """

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def row_max_and_copy(
        x: Int[Array, "M N"], *, BM: sk.Const[int] = 128
    ) -> tuple[Int[Array, "M N"], Int[Array, " M"]]:
        v = sk.load(x, fill=7)
        return v, sk.max(v, axis=1)

    x = (jnp.arange(shape[0] * shape[1]) % 200 - 150).astype(jnp.int8).reshape(shape)
    copy, row_max = row_max_and_copy(x)
    np.testing.assert_array_equal(copy, x)
    np.testing.assert_array_equal(row_max, x.max(axis=1))
    row_max_and_copy.lower(x)  # the check that failed


# --- silent acceptance: values the declaration, a loop or the checks took without a word ---


@pytest.mark.parametrize(
    ("annotation", "default"),
    [(sk.Const[float], 3.0), (sk.Const[bool], True), (sk.Const[float | None], None)],
    ids=["float", "bool", "optional-float"],
)
def test_a_stages_constant_that_is_not_an_int_is_refused(annotation: Any, default: Any) -> None:
    """`stages` is the pipeline's stage count when `stages=` is not given: an int constant.

    Before: `stages: sk.Const[float] = 3.0` was ignored, and the loop ran 2 stages."""
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})  # @float-stages
        def k(
            x: Float[Array, "M N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
            stages: annotation = default,  # pyright: ignore[reportInvalidTypeForm]
        ) -> Float[Array, " M"]:
            return sk.loop("N", lambda t: t + sk.sum(sk.load(x), axis=1), jnp.zeros((BM,)))

    assert info.value.where is not None and info.value.where.endswith(f":{_line('float-stages')}")
    assert info.value.constant == "stages"
    assert "sk.Const[int]" in str(info.value.fix) and "int | None" in str(info.value.expected)


@pytest.mark.parametrize(
    "stop",
    [
        pytest.param(lambda: jnp.uint32(2**32 - 1), id="uint32-max"),
        pytest.param(lambda: jnp.uint32(2**31), id="uint32-past-int32"),
        pytest.param(lambda: 2**40, id="python-int-past-int32"),
        pytest.param(lambda: 2**31 - 1, id="int32-max"),
        pytest.param(lambda: jnp.uint32(130), id="uint32-in-range"),
    ],
)
def test_a_wide_loop_stop_is_exact(stop: Any) -> None:
    """A stop at or past the loop dim walks every block; one inside it, the blocks before it.

    Before: a uint32 stop of 2**32 - 1 became the int32 -1 and walked one block; an int32 stop
    near 2**31 overflowed when rounded up to whole blocks, and a Python int past int32 raised
    OverflowError inside the trace."""

    upto = min(int(stop()), 300)  # the columns summed: the mask keeps those before it

    @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, backend="interpret")
    def prefix_sum(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
    ) -> Float[Array, " M"]:
        def step(total):
            kept = jnp.where(sk.position("N")[None, :] < upto, sk.load(x), 0.0)
            return total + sk.sum(kept, axis=1)

        return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32), stop=stop())

    x = jnp.asarray(np.random.default_rng(0).standard_normal((70, 300)), jnp.float32)
    np.testing.assert_allclose(prefix_sum(x), jnp.sum(x[:, :upto], axis=1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "returned",
    [
        pytest.param(lambda v: {"z": v, "a": 2 * v}, id="dict"),
        pytest.param(lambda v: ((v, 2 * v),), id="nested-tuple"),
    ],
)
def test_a_tuple_result_returned_as_another_structure_is_refused(returned: Any) -> None:
    """A tuple of results is matched to the declared results by position.

    Before: a dict came back sorted by key, so `{"z": v, "a": 2 * v}` gave (2 * v, v)."""
    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM"}, backend="interpret")  # @dict-result
        def k(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64
        ) -> tuple[Float[Array, "M N"], Float[Array, "M N"]]:
            return returned(sk.load(x))

    assert info.value.where is not None and info.value.where.endswith(f":{_line('dict-result')}")
    assert "a tuple of 2 tiles" in str(info.value.expected)
    assert "tuple" in str(info.value.fix)


def test_a_single_result_returned_in_a_dict_is_refused() -> None:
    """Before: `{"out": v}` for a single declared result was taken as the result."""
    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM"}, backend="interpret")
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return {"out": sk.load(x)}  # pyright: ignore[reportReturnType]

    assert "one tile" in str(info.value.expected) and "dict" in str(info.value.actual)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ({"M": 3.7, "N": 8}, "dim M is 3.7"),
        ({"M": True, "N": 8}, "dim M is True"),
        ({"M": 0, "N": 8}, "dim M is 0"),
        ({"M": -5, "N": 8}, "dim M is -5"),
        ([(3.7, 8)], "dim 0 of operand x is 3.7"),
    ],
)
def test_check_kernel_refuses_a_dim_that_is_not_a_positive_int(shape: Any, message: str) -> None:
    """Before: `shapes=[{"M": 3.7, ...}]` checked M = 3, and True checked M = 1."""
    with pytest.raises(ValueError, match="positive int") as info:
        sk.testing.check_kernel(scaled_with_reference, shapes=[shape], dtypes=["float32"])
    assert message in str(info.value)
    three: Any = np.int64(3)  # a numpy int is an int here, as elsewhere in statickernel
    ok = sk.testing.check_kernel(
        scaled_with_reference, shapes=[{"M": three, "N": 8}], dtypes=["float32"]
    )
    assert ok[0].shapes == ((3, 8),)


@sk.kernel(tile={"M": "BM"}, backend="interpret", reference=lambda x: 2 * x)
def scaled_with_reference(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return 2 * sk.load(x)


@pytest.mark.parametrize("shape", [(3, -4), (3.5, 4), (True, 4)])
def test_uniform_reference_refuses_a_dim_that_is_not_a_size(shape: Any) -> None:
    """Before: `sk.uniform_reference(1, (3, -4))` returned a (3, 0) array, and (3.5, 4) a
    (3, 4) one."""
    with pytest.raises(ValueError, match="non-negative int"):
        sk.uniform_reference(1, shape)
    with pytest.raises(ValueError, match="non-negative int"):
        sk.random_bits_reference(1, shape)
    three: Any = np.int64(3)
    assert sk.uniform_reference(1, (three, 0)).shape == (3, 0)


@pytest.mark.parametrize(
    "tolerance",
    [
        {"rtol": float("nan")},
        {"atol": float("nan")},
        {"rtol": float("inf")},
        {"atol": -1.0},
        {"rtol": -1e-3, "atol": 1e-3},
    ],
    ids=["nan-rtol", "nan-atol", "inf-rtol", "negative-atol", "negative-rtol"],
)
def test_check_kernel_refuses_a_tolerance_that_is_not_a_finite_non_negative_number(
    tolerance: dict[str, Any],
) -> None:
    """Before: a NaN (or infinite) tolerance passed any reference, and a negative one failed a
    correct kernel at every case."""
    wrong = lambda x: 3 * x  # noqa: E731
    with pytest.raises(ValueError, match="finite number >= 0") as info:
        sk.testing.check_kernel(scaled_with_reference, reference=wrong, **tolerance)
    assert next(iter(tolerance)) in str(info.value)
    case = sk.testing.probe_cases(scaled_with_reference)[0]
    with pytest.raises(ValueError, match="finite number >= 0"):
        sk.testing.run_case(scaled_with_reference, case, **tolerance)


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_check_kernel_refuses_a_seed_that_is_not_a_non_negative_int(seed: Any) -> None:
    """Before: seed=-1 failed a correct kernel at every case with numpy's "expected
    non-negative integer"."""
    with pytest.raises(ValueError, match="seed"):
        sk.testing.check_kernel(scaled_with_reference, seed=seed)
    case = sk.testing.probe_cases(scaled_with_reference)[0]
    with pytest.raises(ValueError, match="seed"):
        sk.testing.check_case(scaled_with_reference, case, seed=seed)
