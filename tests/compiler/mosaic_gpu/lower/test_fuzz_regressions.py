"""Bugs found by the fuzzer and by running the error catalog, each pinned by its smallest case.

Each test names the symptom that was seen before the fix.
"""

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float, Int, Int32

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


@pytest.mark.parametrize("op", ["+", "*"])
def test_a_column_vector_added_to_a_loop_product_is_refused_as_multiplied(op: str) -> None:
    """`sk.dot(q, k) + v[None, :]` with `v` along the kernel's columns D, whose length happens
    to equal the loop block: the product runs along the loop dim, the vector along D.

    Before: AssertionError "cannot convert col to loop_tile" inside the translator for `+`
    (fused into the product's accumulator); `*` gave this UnsupportedOpError.
    """
    with pytest.raises(sk.UnsupportedOpError) as info:

        @sk.kernel(tile={"Sq": "BQ"}, loop={"Skv": "BKV"}, backend="interpret")
        def biased(
            q: BFloat16[Array, "Sq D"],
            k: BFloat16[Array, "Skv D"],
            v: BFloat16[Array, "Skv D"],
            bias: Float[Array, " D"],
            *,
            BQ: sk.Const[int] = 64,
            BKV: sk.Const[int] = 64,
        ) -> Float[Array, "Sq D"]:
            def step(acc: jax.Array) -> jax.Array:
                bias_row = sk.load(bias)[None, :]
                s = sk.dot(q, k) + bias_row if op == "+" else sk.dot(q, k) * bias_row  # @bias
                return acc + sk.dot(s.astype(q.dtype), v)

            return sk.loop("Skv", step, init=jnp.zeros((BQ, sk.dim("D")), jnp.float32))

    assert "along the kernel's columns with one along the loop dim" in info.value.what
    assert info.value.where is not None and info.value.where.endswith(f":{_line('bias')}")
    assert info.value.actual is not None and info.value.actual.startswith(
        "`add`" if op == "+" else "`mul`"
    )


def test_a_per_row_vector_added_to_a_loop_product_runs_and_lowers() -> None:
    """The add of a per-row vector to a product along the loop dim is fused into its
    accumulator, and broadcast to the block in the interpreter."""

    @sk.kernel(tile={"Sq": "BQ"}, loop={"Skv": "BKV"}, backend="interpret")
    def biased_row_max(
        q: BFloat16[Array, "Sq D"],
        k: BFloat16[Array, "Skv D"],
        bias: Float[Array, " Sq"],
        *,
        BQ: sk.Const[int] = 64,
        BKV: sk.Const[int] = 64,
    ) -> Float[Array, " Sq"]:
        def step(running_max: jax.Array) -> jax.Array:
            s = sk.dot(q, k) + sk.load(bias)[:, None]
            return jnp.maximum(running_max, sk.max(s, axis=1))

        return sk.loop("Skv", step, init=jnp.full((BQ,), -jnp.inf, jnp.float32))

    kq, kk = jax.random.split(jax.random.key(0))
    q = jax.random.normal(kq, (100, 64), jnp.bfloat16)
    k = jax.random.normal(kk, (130, 64), jnp.bfloat16)
    bias = jnp.arange(100.0)
    scores = q.astype(jnp.float32) @ k.astype(jnp.float32).T
    # float32 sums of 64 bf16 products: a few ulps of the scores' magnitude of tens.
    np.testing.assert_allclose(
        biased_row_max(q, k, bias), (scores + bias[:, None]).max(axis=1), rtol=1e-5, atol=1e-4
    )
    biased_row_max.with_backend("mosaic_gpu").lower(q, k, bias)


def _two_operand_reference(x: jax.Array, y: jax.Array) -> jax.Array:
    return x * y


def test_a_reference_of_the_wrong_arity_is_refused_at_declaration() -> None:
    """`vjp="reference"` calls the reference with the operands, then by name the constants it
    names.

    Before: the declaration passed, and jax.grad raised TypeError "missing 1 required
    positional argument: 'y'" from inside JAX's JVP rule.
    """
    with pytest.raises(sk.VjpError) as info:

        @sk.kernel(  # @wrong-arity
            tile={"M": "BM"}, backend="interpret", reference=_two_operand_reference, vjp="reference"
        )
        def double(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x) * 2

    assert info.value.where is not None and info.value.where.endswith(f":{_line('wrong-arity')}")
    assert "_two_operand_reference(x)" in str(info.value.expected)
    assert "'y'" in str(info.value.actual)


def test_a_reference_taking_a_constant_by_name_is_accepted() -> None:
    """A reference's parameters after the operands that name constants get them by name."""

    def reference(x: jax.Array, scale: float) -> jax.Array:
        return x * scale

    @sk.kernel(tile={"M": "BM"}, backend="interpret", reference=reference, vjp="reference")
    def scaled_by(
        x: Float[Array, "M N"], *, scale: sk.Const[float] = 2.0, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        return sk.load(x) * scale

    x = jnp.ones((100, 8), jnp.float32)
    grad = jax.grad(lambda x: scaled_by(x, scale=3.0).sum())(x)
    np.testing.assert_array_equal(grad, jnp.full_like(x, 3.0))


def _double_backward(x: jax.Array, out: jax.Array, dout: jax.Array) -> tuple[jax.Array]:
    return (2 * dout,)


@pytest.mark.parametrize("vjp", [None, "reference", _double_backward], ids=["none", "ref", "bwd"])
@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_a_kernel_under_linear_transpose_is_not_differentiable(vjp: Any, jitted: bool) -> None:
    """Before: ValueError "Pure callbacks do not support transpose" (the interpreter's launch),
    or NotImplementedError "Transpose rule ... for 'custom_vjp_call' not implemented"."""

    @sk.kernel(tile={"M": "BM"}, backend="interpret", reference=lambda x: 2 * x, vjp=vjp)
    def double(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return 2 * sk.load(x)

    x = jnp.ones((100, 8), jnp.float32)
    fn = jax.jit(lambda x: double(x)) if jitted else double
    transpose = jax.linear_transpose(fn, x)
    with pytest.raises(sk.NotDifferentiableError) as info:
        transpose(x)  # @transpose
    assert info.value.kernel == "double"
    assert "jax.linear_transpose" in info.value.what
    assert info.value.where is not None and info.value.where.endswith(f":{_line('transpose')}")
    assert "jax.vjp" in str(info.value.fix)
    if vjp is not None:  # the map the fix offers, and the derivatives, still work
        _, vjp_fn = jax.vjp(fn, x)
        np.testing.assert_array_equal(vjp_fn(x)[0], 2 * x)
        np.testing.assert_array_equal(jax.grad(lambda x: fn(x).sum())(x), jnp.full_like(x, 2))
        batched = jnp.stack([x, 3 * x])
        np.testing.assert_array_equal(jax.vmap(fn)(batched), 2 * batched)


def test_a_kernel_on_the_gpu_backend_under_linear_transpose_is_not_differentiable() -> None:
    """The launch is a pallas_call inside the specialization's jit; the refusal is the same."""
    x = jax.ShapeDtypeStruct((100, 8), jnp.float32)
    transpose = jax.linear_transpose(scaled.with_backend("mosaic_gpu"), x)
    with pytest.raises(sk.NotDifferentiableError) as info:
        transpose(jnp.ones((100, 8), jnp.float32))
    assert info.value.kernel == "scaled"


@pytest.mark.parametrize("target", [["sm_90a"], 90, "sm_80"], ids=["list", "int", "unknown"])
def test_a_compile_target_that_is_not_a_targets_name_is_refused(target: Any) -> None:
    """Before: TypeError "unhashable type: 'list'" from the compile cache's key for
    `target=["sm_90a"]`; an unknown name was refused already."""
    with pytest.raises(sk.CompileTargetError) as info:
        scaled.compile(jax.ShapeDtypeStruct((100, 8), jnp.float32), target=target)  # @target
    assert info.value.kernel == "scaled"
    assert info.value.where is not None and info.value.where.endswith(f":{_line('target')}")
    assert info.value.expected == "'sm_90a' or 'sm_100a'"
    assert "target='sm_90a'" in str(info.value.fix)


@pytest.mark.parametrize(
    "function",
    ["check_kernel", "run_checks", "probe_cases", "probe_shapes", "parametrize", "cases"],
)
def test_a_plain_function_given_to_sk_testing_is_not_a_kernel(function: str) -> None:
    """Before: AttributeError "'function' object has no attribute 'reference'" (or 'spec')."""

    def plain(x: jax.Array) -> jax.Array:
        return x

    with pytest.raises(sk.NotAKernelError) as info:
        getattr(sk.testing, function)(plain)  # @not-a-kernel
    assert f"sk.testing.{function}" in info.value.what and "`plain`" in info.value.what
    assert info.value.where is not None and info.value.where.endswith(f":{_line('not-a-kernel')}")
    assert "@sk.kernel" in str(info.value.fix)


def test_a_lambda_or_a_value_given_to_check_case_is_not_a_kernel() -> None:
    case = sk.testing.probe_cases(scaled)[0]
    with pytest.raises(sk.NotAKernelError, match="plain function `<lambda>`"):
        sk.testing.check_case(lambda x: x, case)  # type: ignore[arg-type]
    with pytest.raises(sk.NotAKernelError, match="was given a value of type int"):
        sk.testing.run_case(3, case)  # type: ignore[arg-type]


@sk.kernel(batch=("B", "H"), tile={"L": "BL"}, backend="interpret")
def masked_per_head(
    x: Float[Array, "B H L D"], mask: Float[Array, "B H L"], *, BL: sk.Const[int] = 64
) -> Float[Array, "B H L D"]:
    return sk.load(x) * sk.load(mask)[:, None]


@pytest.mark.parametrize("length", [97, 1, 4096])
def test_a_batched_vector_whose_entries_are_not_16_byte_multiples_is_padded(length: int) -> None:
    """A (B, H, L) attention mask beside (B, H, L, D) values: TMA addresses the whole array,
    and its batch strides (L x 4 B) must be multiples of 16 B, so the mask is padded on the
    host. The interpreter was right; cross-lowering failed.

    Before: ValueError "async_copy requires all GMEM strides except the last one to be a
    multiple of 16 bytes" from `kernel.lower` at L = 97 and at L = 1.
    """
    kx, km = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (2, 3, length, 32), jnp.float32)
    mask = jax.random.normal(km, (2, 3, length), jnp.float32)
    np.testing.assert_array_equal(masked_per_head(x, mask), x * mask[..., None])  # one multiply
    plan = masked_per_head.plan(x, mask, backend="mosaic_gpu")
    padded = {op.name: op.gmem_shape for op in plan.operands if op.host_padded}
    x_bytes = 2 * x.size * 4  # read once, written once as the result
    assert plan.cost is not None
    if length * 4 % 16 == 0:
        assert plan.cost.hbm_bytes == x_bytes + mask.size * 4
        assert padded == {}  # unchanged: no padding, no note
        assert not any("batch entries" in note for note in plan.notes)
    else:
        width = -(-length // 4) * 4
        assert padded == {"mask": (2, 3, width)}
        note = next(n for n in plan.notes if "`mask`'s batch entries" in n)
        assert f"{6 * length * 4:,} B read and {6 * width * 4:,} B written" in note
        # The kernel reads the padded mask; the jnp.pad reads the true one and writes it.
        assert plan.cost.hbm_bytes == x_bytes + 6 * width * 4 + 6 * length * 4 + 6 * width * 4
        assert "jnp.pad" in str(masked_per_head.emit(x, mask, backend="mosaic_gpu"))
    masked_per_head.lower(x, mask)  # the check that failed


def test_a_batched_vector_result_along_a_padded_whole_dim_is_written_whole() -> None:
    """A (B, D) result of column sums, D = 97 whole (a block of 128: a batch entry's 1-D
    block is a multiple of 128 bytes): each entry is written as a bulk copy of the whole
    block.

    Before: the result was "written as [2, 97] and sliced back to [2, 97]", and
    cross-lowering failed with jax's "GMEM strides ... multiple of 16 bytes".
    """

    @sk.kernel(batch="B", backend="interpret")
    def column_sums(x: Float[Array, "B L D"]) -> Float[Array, "B D"]:
        return sk.sum(sk.load(x), axis=0)

    x = jnp.arange(2 * 5 * 97, dtype=jnp.float32).reshape(2, 5, 97) / 100
    np.testing.assert_allclose(column_sums(x), x.sum(axis=1), rtol=1e-6)  # five small sums
    plan = column_sums.plan(x, backend="mosaic_gpu")
    assert plan.results[0].gmem_shape == (2, 128)
    column_sums.lower(x)
