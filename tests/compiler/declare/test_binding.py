"""Call-time errors: what a call, `plan`, `emit`, `lower` or `bind` rejects once shapes are known.

Each error must be a `sk.CallError` subclass that names the operand and dim at fault, carries
both values, points `where` at the user's call line, and offers a fix. Lines are found through
`# @tag` marker comments on the line they tag.
"""

import dataclasses
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Float32

import statickernel as sk
from markers import line_finder
from statickernel._compiler.declare.binding import bind, check_arguments
from statickernel._targets import TARGETS

# The limits of the target a call compiles for by default (H100 and H200).
HOPPER = TARGETS["sm_90a"].limits

_FILE = pathlib.Path(__file__)
S = jax.ShapeDtypeStruct

line_of = line_finder(__file__)


def check(
    exc: sk.StaticKernelError,
    tag: str,
    *,
    kernel: str = "softmax",
    operand: str | None = None,
    dim: str | None = None,
) -> None:
    """The facts every call-time error carries."""
    assert isinstance(exc, sk.CallError)
    assert exc.where is not None, str(exc)
    assert exc.where.endswith(f"{_FILE.name}:{line_of(tag)}"), (exc.where, str(exc))
    assert exc.kernel == kernel
    assert exc.fix, str(exc)
    if operand is not None:
        assert exc.operand == operand, str(exc)
    if dim is not None:
        assert exc.dim == dim, str(exc)
    text = str(exc)
    assert exc.where in text
    assert exc.fix in text


@sk.kernel(tile={"M": "BM"}, backend="interpret")  # @softmax
def softmax(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
    v = sk.load(x, fill=-jnp.inf)
    e = jnp.exp(v - sk.max(v, axis=1, keepdims=True))
    return e / sk.sum(e, axis=1, keepdims=True)


@sk.kernel(tile={"M": "BM"}, backend="interpret")
def add(
    x: Float[Array, "M N"], y: Float[Array, "M N"], *, BM: sk.Const[int] = 64
) -> Float[Array, "M N"]:
    return sk.load(x) + sk.load(y)


@sk.kernel(tile={"M": "BM", "N": "BN"}, backend="interpret")
def scale(
    x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Float32[Array, "M N"]:
    return sk.load(x) * 2.0


X = jnp.ones((64, 128), jnp.float32)


def test_valid_call_runs():
    x = jax.random.normal(jax.random.key(0), (100, 40), jnp.float32)
    out = softmax(x)
    np.testing.assert_allclose(out, jax.nn.softmax(x, axis=-1), rtol=1e-5, atol=1e-6)


# --- operands -----------------------------------------------------------------------------------


def test_too_few_operands():
    with pytest.raises(sk.OperandError) as info:
        softmax()  # @call-none  # pyright: ignore[reportCallIssue]
    check(info.value, "call-none")
    assert info.value.actual == 0
    assert info.value.expected == "1: x"


def test_too_many_operands():
    with pytest.raises(sk.OperandError) as info:
        add(X, X, X)  # @call-three  # pyright: ignore[reportCallIssue]
    check(info.value, "call-three", kernel="add")
    assert info.value.actual == 3
    assert info.value.expected == "2: x, y"


def test_constant_passed_positionally():
    with pytest.raises(sk.OperandError) as info:
        softmax(X, 64)  # @call-positional-const  # pyright: ignore[reportCallIssue]
    check(info.value, "call-positional-const")
    assert "keyword" in str(info.value.fix)


def test_operand_passed_by_keyword():
    with pytest.raises(sk.OperandError) as info:
        softmax(x=X)  # @call-keyword-operand
    check(info.value, "call-keyword-operand")
    assert info.value.actual == 0


@pytest.mark.parametrize(
    "arg", [[[1.0, 2.0]], 1.5, 3, "abc", None], ids=["list", "float", "int", "str", "None"]
)
def test_non_array_operand(arg: Any):
    with pytest.raises(sk.OperandError) as info:
        softmax(arg)  # @call-non-array
    check(info.value, "call-non-array", operand="x")
    assert "not an array" in info.value.what
    assert type(arg).__name__ in info.value.actual
    assert "'M N'" in info.value.expected


class _Duck:
    """Has the `.shape` and `.dtype` of an array, and nothing else of one."""

    def __init__(self, shape: tuple[int, ...], dtype: Any = jnp.float32):
        self.shape, self.dtype = shape, jnp.dtype(dtype)


@pytest.mark.parametrize("method", ["call", "plan", "emit", "lower"])
def test_duck_typed_operand(method: str):
    run = softmax if method == "call" else getattr(softmax, method)
    # A shape no other test uses, so that no cached specialization answers first.
    with pytest.raises(sk.OperandError) as info:
        run(_Duck((192, 72)))  # @call-duck  # pyright: ignore[reportArgumentType]
    check(info.value, "call-duck", operand="x")
    assert "_Duck" in info.value.what and "not an array" in info.value.what
    assert "jnp.asarray(x)" in str(info.value.fix)


def test_numpy_and_jax_arrays_and_shape_structs_are_operands():
    x = np.ones((64, 40), np.float32)
    np.testing.assert_allclose(softmax(x), np.full((64, 40), 1 / 40), rtol=1e-6)  # pyright: ignore[reportArgumentType]
    assert softmax.plan(S((64, 40), jnp.float32)).grid == (1,)
    assert softmax.plan(jnp.asarray(x)).grid == (1,)


def test_shape_struct_is_refused_where_a_call_needs_data():
    structs = (S((64, 128), jnp.float32),)
    with pytest.raises(sk.OperandError) as info:
        bind(softmax.spec, structs, softmax.consts, {}, limits=HOPPER, call=True)  # @bind-struct
    check(info.value, "bind-struct", operand="x")
    assert "ShapeDtypeStruct" in info.value.what
    assert info.value.actual == "ShapeDtypeStruct(shape=(64, 128), dtype=float32)"
    assert "kernel.plan" in str(info.value.fix)
    # plan, emit and lower take one.
    assert bind(softmax.spec, structs, softmax.consts, {}, limits=HOPPER).size_map == {
        "M": 64,
        "N": 128,
    }


def test_cached_arguments_get_the_same_check():
    # For arguments that meet a cached specialization, which bind never sees.
    check_arguments(softmax.spec, (X,), call=True)
    check_arguments(softmax.spec, (S((64, 128), jnp.float32),), call=False)
    with pytest.raises(sk.OperandError) as info:
        check_arguments(softmax.spec, (_Duck((64, 128)),), call=False)  # @check-cached
    check(info.value, "check-cached", operand="x")
    with pytest.raises(sk.OperandError, match="ShapeDtypeStruct"):
        check_arguments(softmax.spec, (S((64, 128), jnp.float32),), call=True)


@pytest.mark.parametrize(
    "arg", [S((64, 128), jnp.float32), _Duck((64, 128))], ids=["struct", "duck"]
)
def test_call_with_a_cached_shape_refuses_what_is_not_an_array(arg: Any):
    softmax.plan(S((64, 128), jnp.float32))
    with pytest.raises(sk.OperandError) as info:
        softmax(arg)
    assert info.value.operand == "x" and info.value.__suppress_context__


@pytest.mark.parametrize(
    "arg", [S((64, 128), jnp.float32), _Duck((64, 128))], ids=["struct", "duck"]
)
def test_a_first_call_with_what_is_not_an_array_is_refused(arg: Any):
    with pytest.raises(sk.OperandError, match="x"):
        softmax.bind()(arg)


def test_plan_with_a_cached_shape_refuses_a_duck():
    softmax.plan(S((64, 128), jnp.float32))
    with pytest.raises(sk.OperandError, match="not an array"):
        softmax.plan(_Duck((64, 128)))


@pytest.mark.parametrize("shape", [(), (64,), (2, 64, 128)], ids=["rank0", "rank1", "rank3"])
def test_wrong_rank(shape: tuple[int, ...]):
    with pytest.raises(sk.ShapeError) as info:
        softmax(jnp.ones(shape, jnp.float32))  # @call-rank
    check(info.value, "call-rank", operand="x")
    assert f"rank {len(shape)}" in info.value.what
    assert info.value.expected == "rank 2 ('M N')"
    assert info.value.actual == f"shape {shape}"


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.int32], ids=str)
def test_dtype_not_allowed_by_annotation(dtype: Any):
    with pytest.raises(sk.DtypeError) as info:
        softmax(X.astype(dtype))  # @call-dtype
    check(info.value, "call-dtype", operand="x")
    assert "annotation" in info.value.what
    assert info.value.expected == "float32"
    assert info.value.actual == jnp.dtype(dtype).name
    assert "float32" in str(info.value.fix)


@pytest.mark.parametrize(
    ("arg", "dtype"),
    [
        (S((64, 128), jnp.float64), "float64"),
        (np.ones((64, 128), np.float64), "float64"),
        (jnp.ones((64, 128), jnp.bool_), "bool"),
        (np.ones((64, 128), np.int64), "int64"),
    ],
    ids=["float64-struct", "float64-numpy", "bool", "int64-numpy"],
)
def test_dtype_mosaic_gpu_cannot_handle(arg: Any, dtype: str):
    with pytest.raises(sk.DtypeError) as info:
        softmax.plan(arg)  # @call-unsupported-dtype
    check(info.value, "call-unsupported-dtype", operand="x")
    assert "Mosaic GPU" in info.value.what
    assert info.value.actual == dtype


def test_float64_numpy_array_in_a_call():
    with pytest.raises(sk.DtypeError) as info:
        softmax(np.ones((64, 128), np.float64))  # @call-float64  # pyright: ignore[reportArgumentType]
    check(info.value, "call-float64", operand="x")
    assert "Mosaic GPU" in info.value.what
    assert "float32" in str(info.value.fix)


def test_dim_bound_inconsistently():
    x, y = jnp.ones((64, 128)), jnp.ones((64, 96))
    with pytest.raises(sk.ShapeError) as info:
        add(x, y)  # @call-n-mismatch
    check(info.value, "call-n-mismatch", kernel="add", operand="y", dim="N")
    text = str(info.value)
    assert "128" in text and "96" in text
    assert "`x`" in text and "`y`" in text
    assert info.value.expected == "N=128 (bound by `x`)"
    assert info.value.actual.startswith("N=96 (axis 1 of `y`")
    assert info.value.bindings == {"M": 64, "N": 128}


def test_row_dim_bound_inconsistently():
    with pytest.raises(sk.ShapeError) as info:
        add(jnp.ones((64, 128)), jnp.ones((128, 128)))  # @call-m-mismatch
    check(info.value, "call-m-mismatch", kernel="add", operand="y", dim="M")
    assert "M=64" in info.value.expected and "M=128" in info.value.actual


@pytest.mark.parametrize(("shape", "dim"), [((0, 128), "M"), ((64, 0), "N")], ids=["M", "N"])
def test_zero_size_dim(shape: tuple[int, int], dim: str):
    with pytest.raises(sk.ShapeError) as info:
        softmax(jnp.ones(shape, jnp.float32))  # @call-zero
    check(info.value, "call-zero", operand="x", dim=dim)
    assert "zero" in info.value.what
    assert info.value.actual == 0


@pytest.mark.parametrize(("shape", "dim"), [((-3, 128), "M"), ((64, -1), "N")], ids=["M", "N"])
def test_negative_dim_in_a_shape_struct(shape: tuple[int, int], dim: str):
    with pytest.raises(sk.ShapeError) as info:
        softmax.plan(S(shape, jnp.float32))  # @call-negative
    check(info.value, "call-negative", operand="x", dim=dim)
    assert "negative" in info.value.what
    assert str(min(shape)) in info.value.actual


@pytest.mark.parametrize("method", ["plan", "emit", "lower"])
@pytest.mark.parametrize(
    ("shape", "dim"),
    [((2**31 + 5, 128), "M"), ((2**40, 128), "M"), ((64, 2**31), "N")],
    ids=["M=2**31+5", "M=2**40", "N=2**31"],
)
def test_dim_past_int32(method: str, shape: tuple[int, int], dim: str):
    with pytest.raises(sk.Int32LimitError) as info:
        getattr(softmax, method)(S(shape, jnp.float32))  # @call-int32
    check(info.value, "call-int32", operand="x", dim=dim)
    assert "int32" in info.value.what
    assert "2,147,483,647 (2**31 - 1)" in info.value.expected
    assert f"{max(shape):,}" in info.value.actual


# --- constant overrides -------------------------------------------------------------------------


def test_override_unknown_constant():
    with pytest.raises(sk.OverrideError) as info:
        softmax(X, FOO=1)  # @call-foo  # pyright: ignore[reportCallIssue]
    check(info.value, "call-foo", operand="FOO")
    assert info.value.actual == "'FOO'"
    assert "BM" in info.value.expected


@pytest.mark.parametrize(
    ("value", "shown"),
    [(True, "True (bool)"), (1.5, "1.5 (float)"), ([64], "[64] (list)"), ("64", "'64' (str)")],
    ids=["bool", "float", "list", "str"],
)
def test_override_of_wrong_type(value: Any, shown: str):
    with pytest.raises(sk.OverrideError) as info:
        softmax(X, BM=value)  # @call-bm-type
    check(info.value, "call-bm-type", operand="BM")
    assert info.value.expected == "int"
    assert info.value.actual == shown


@pytest.mark.parametrize("value", [0, -64])
def test_override_not_positive(value: int):
    with pytest.raises(sk.OverrideError) as info:
        softmax(X, BM=value)  # @call-bm-nonpositive
    check(info.value, "call-bm-nonpositive", operand="BM")
    assert info.value.actual == value


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, backend="interpret")
def shifted_sum(
    x: Float32[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
    shift: sk.Const[int | None] = None,
    stages: sk.Const[int | None] = None,
) -> Float32[Array, " M"]:
    """An optional int constant beside an optional stage count."""
    total = sk.loop("N", lambda acc: acc + sk.sum(sk.load(x), axis=1), init=jnp.zeros((BM,)))
    return total if shift is None else total + shift


def test_an_optional_int_override_may_be_zero() -> None:
    """None is an optional int's "none", and 0 one of its values (a window of no keys, as
    jax's local_window_size=(W, 0)); before, it had to be positive."""
    x = jnp.ones((70, 100), jnp.float32)
    np.testing.assert_array_equal(shifted_sum(x, shift=0), jnp.full((70,), 100.0))


def test_an_optional_int_override_may_not_be_negative() -> None:
    with pytest.raises(sk.OverrideError) as info:
        shifted_sum.plan(S((70, 100), jnp.float32), shift=-1)  # @call-negative-shift
    check(info.value, "call-negative-shift", kernel="shifted_sum", operand="shift")
    assert "negative" in info.value.what
    assert info.value.expected == ">= 0, or None" and info.value.actual == -1


def test_an_optional_stage_count_may_not_be_zero() -> None:
    with pytest.raises(sk.OverrideError) as info:
        shifted_sum.plan(S((70, 100), jnp.float32), stages=0)  # @call-zero-stages
    check(info.value, "call-zero-stages", kernel="shifted_sum", operand="stages")
    assert "stage count" in info.value.what
    assert shifted_sum.plan(S((70, 100), jnp.float32), stages=None).loops


@pytest.mark.parametrize("value", [np.int64(128), np.int32(128), np.uint16(128)], ids=repr)
def test_override_of_a_numpy_int_becomes_a_python_int(value: Any):
    plan = softmax.plan(S((300, 32), jnp.float32), BM=value)
    assert plan.grid == (3,)
    assert dict(plan.constants) == {"BM": 128} and type(dict(plan.constants)["BM"]) is int
    bound = softmax.bind(BM=value)
    assert bound.consts == {"BM": 128} and type(bound.consts["BM"]) is int


def test_override_of_a_numpy_float_for_an_int_is_refused():
    with pytest.raises(sk.OverrideError) as info:
        softmax.plan(S((300, 128), jnp.float32), BM=np.float64(128.0))  # @call-bm-np-float
    check(info.value, "call-bm-np-float", operand="BM")
    assert info.value.actual == "np.float64(128.0) (float64)"


def test_override_concrete_jax_array():
    with pytest.raises(sk.OverrideError) as info:
        softmax(X, BM=jnp.int32(64))  # @call-bm-array
    check(info.value, "call-bm-array", operand="BM")
    assert "jax array" in info.value.what


def test_override_traced():
    with pytest.raises(sk.OverrideError) as info:
        jax.jit(lambda x, b: softmax(x, BM=b))(X, 64)  # @call-bm-traced
    check(info.value, "call-bm-traced", operand="BM")
    assert "traced" in info.value.what
    assert "static_argnames" in str(info.value.fix)


def test_override_static_under_jit_is_fine():
    f = jax.jit(lambda x, b: softmax(x, BM=b), static_argnames="b")
    assert f.eval_shape(X, b=128).shape == (64, 128)


@pytest.mark.parametrize("bm", [100, 32])
def test_override_breaks_row_layout(bm: int):
    with pytest.raises(sk.BlockAlignmentError) as info:
        softmax(X, BM=bm)
    exc = info.value
    assert exc.phase is sk.Phase.CALL
    assert exc.kernel == "softmax"
    assert exc.dim == "M" and exc.operand == "x"
    assert "multiple of 64" in exc.expected
    assert str(bm) in exc.actual
    assert exc.bindings == {"M": 64, "N": 128}
    assert "BM" in str(exc.fix)


def test_override_over_tma_box():
    with pytest.raises(sk.TmaBoxError) as info:
        softmax(X, BM=512)
    assert info.value.dim == "M"
    assert "256" in info.value.expected
    assert info.value.actual == "512"


def test_whole_dim_too_wide():
    # A whole dim is in every block; one row of 262,144 float32 columns (1 MiB) cannot be held
    # in shared memory (232,448 B), even a row at a time.
    with pytest.raises(sk.SharedMemoryError) as info:
        softmax(jnp.ones((2, 262_144), jnp.float32))
    exc = info.value
    assert exc.kernel == "softmax"
    assert "dim N" in str(exc)
    assert "one row" in str(exc)
    assert exc.bindings == {"M": 2, "N": 262_144}
    assert exc.fix


def test_grid_over_cuda_limit():
    with pytest.raises(sk.GridLimitError) as info:
        scale.plan(S((64 * 70_000, 128), jnp.float32))
    exc = info.value
    assert exc.kernel == "scale"
    assert exc.dim == "M"
    assert exc.actual == 70_000
    assert "65535" in exc.expected
    assert "BM" in str(exc.fix)


@pytest.mark.parametrize(
    ("shape", "overrides"),
    [((64, 128), {"BM": 100}), ((2, 262_144), {})],
    ids=["BM=100", "N=262144"],
)
def test_plan_error_points_at_the_call(shape: tuple[int, int], overrides: dict[str, Any]):
    with pytest.raises(sk.PlanError) as info:
        softmax(jnp.ones(shape, jnp.float32), **overrides)  # @call-plan-error
    check(info.value, "call-plan-error")


def test_failed_call_is_not_cached():
    for _ in range(2):
        with pytest.raises(sk.PlanError):
            softmax.plan(S((64, 128), jnp.float32), BM=100)
    assert softmax.plan(S((64, 32), jnp.float32), BM=128).dim("M").block == 128


# --- symbolic dims ------------------------------------------------------------------------------


@pytest.mark.parametrize("platform", ["cuda", "cpu"])
@pytest.mark.parametrize(("shape", "dim"), [("b, 128", "M"), ("64, n", "N")], ids=["M", "N"])
def test_symbolic_dim_in_export(platform: str, shape: str, dim: str):
    arg = S(jax.export.symbolic_shape(shape), jnp.float32)
    export = jax.export.export(jax.jit(softmax), platforms=[platform])
    with pytest.raises(sk.SymbolicDimError) as info:
        export(arg)  # @export
    check(info.value, "export", operand="x", dim=dim)
    assert "static" in str(info.value)
    assert shape.split(", ")[0 if dim == "M" else 1] in info.value.actual


def test_symbolic_dims_name_the_first_one():
    arg = S(jax.export.symbolic_shape("b, n"), jnp.float32)
    with pytest.raises(sk.SymbolicDimError) as info:
        jax.export.export(jax.jit(softmax), platforms=["cuda"])(arg)
    assert info.value.dim == "M"


@pytest.mark.parametrize("method", ["plan", "emit", "lower"])
def test_symbolic_dim_through_methods(method: str):
    arg = S(jax.export.symbolic_shape("b, 128"), jnp.float32)
    with pytest.raises(sk.SymbolicDimError) as info:
        getattr(softmax, method)(arg)  # @symbolic-method
    check(info.value, "symbolic-method", operand="x", dim="M")
    assert "static" in str(info.value)


# --- the same errors through plan, emit and lower -----------------------------------------------

_BAD_CALLS = [
    pytest.param((S((64, 128), jnp.float32),) * 2, {}, sk.OperandError, None, None, id="count"),
    pytest.param(([1.0],), {}, sk.OperandError, "x", None, id="non-array"),
    pytest.param((S((64,), jnp.float32),), {}, sk.ShapeError, "x", None, id="rank"),
    pytest.param((S((64, 128), jnp.bfloat16),), {}, sk.DtypeError, "x", None, id="dtype"),
    pytest.param((S((64, 128), jnp.float64),), {}, sk.DtypeError, "x", None, id="float64"),
    pytest.param((S((0, 128), jnp.float32),), {}, sk.ShapeError, "x", "M", id="zero"),
    pytest.param((S((64, 128), jnp.float32),), {"FOO": 1}, sk.OverrideError, "FOO", None, id="foo"),
    pytest.param((S((64, 128), jnp.float32),), {"BM": 1.5}, sk.OverrideError, "BM", None, id="bm"),
]


@pytest.mark.parametrize("method", ["plan", "emit", "lower"])
@pytest.mark.parametrize(("args", "overrides", "cls", "operand", "dim"), _BAD_CALLS)
def test_errors_through_methods(
    method: str,
    args: tuple[Any, ...],
    overrides: dict[str, Any],
    cls: type[sk.CallError],
    operand: str | None,
    dim: str | None,
):
    with pytest.raises(cls) as info:
        getattr(softmax, method)(*args, **overrides)  # @via-method
    check(info.value, "via-method", operand=operand, dim=dim)


def test_dim_mismatch_through_methods():
    for method in (add.plan, add.emit, add.lower):
        with pytest.raises(sk.ShapeError) as info:
            method(S((64, 128), jnp.float32), S((64, 64), jnp.float32))  # @mismatch-method
        check(info.value, "mismatch-method", kernel="add", operand="y", dim="N")


@pytest.mark.parametrize("method", ["plan", "emit", "lower"])
@pytest.mark.parametrize(
    ("shape", "overrides", "dim"),
    [((64, 128), {"BM": 100}, "M"), ((2, 262_144), {}, "N")],
    ids=["BM=100", "N=262144"],
)
def test_plan_errors_through_methods(
    method: str, shape: tuple[int, int], overrides: dict[str, Any], dim: str
):
    with pytest.raises(sk.PlanError) as info:
        getattr(softmax, method)(S(shape, jnp.float32), **overrides)
    assert f"dim {dim}" in str(info.value)
    assert info.value.fix


def test_valid_plan_emit_lower():
    arg = S((100, 128), jnp.float32)
    assert softmax.plan(arg).grid == (2,)
    assert "def softmax" in softmax.emit(arg)
    assert softmax.lower(arg) is not None


# --- bind ---------------------------------------------------------------------------------------


def test_bind_good_constant():
    k = softmax.bind(BM=128)
    assert k.consts == {"BM": 128}
    assert softmax.consts == {"BM": 64}
    assert k.plan(S((300, 32), jnp.float32)).grid == (3,)


@pytest.mark.parametrize("bm", [100, 512])
def test_bind_breaks_a_hardware_rule(bm: int):
    with pytest.raises(sk.BlockAlignmentError if bm == 100 else sk.TmaBoxError) as info:
        softmax.bind(BM=bm)
    exc = info.value
    # bind checks the constants as the declaration does, on probe sizes.
    assert exc.phase is sk.Phase.DECLARATION and not exc.bindings
    assert exc.kernel == "softmax"
    assert exc.dim == "M"
    assert str(bm) in exc.actual
    assert exc.fix


def test_bind_unknown_constant():
    with pytest.raises(sk.OverrideError) as info:
        softmax.bind(FOO=1)
    assert info.value.operand == "FOO"
    assert info.value.kernel == "softmax"
    assert info.value.fix


def test_bind_constant_of_wrong_type():
    with pytest.raises(sk.OverrideError) as info:
        softmax.bind(BM=1.5)
    assert info.value.operand == "BM"
    assert info.value.actual == "1.5 (float)"


@pytest.mark.parametrize(
    ("overrides", "cls"),
    [({"FOO": 1}, sk.OverrideError), ({"BM": 100}, sk.PlanError)],
    ids=["FOO", "BM=100"],
)
def test_bind_error_points_at_the_bind_call(overrides: dict[str, Any], cls: type):
    with pytest.raises(cls) as info:
        softmax.bind(**overrides)  # @bind-call
    check(info.value, "bind-call")


# --- backends -----------------------------------------------------------------------------------


def test_unknown_backend_in_a_call():
    with pytest.raises(sk.BackendError) as info:
        softmax(X, backend="cuda")  # pyright: ignore[reportCallIssue]
    assert info.value.actual == "'cuda'"
    assert "interpret" in info.value.expected


def test_unknown_backend_names_kernel_and_call():
    with pytest.raises(sk.BackendError) as info:
        softmax(X, backend="cuda")  # @backend-call  # pyright: ignore[reportCallIssue]
    check(info.value, "backend-call")


# --- transformations ----------------------------------------------------------------------------


def test_grad_through_a_kernel_is_a_static_kernel_error():
    with pytest.raises(sk.StaticKernelError) as info:
        jax.grad(lambda x: softmax(x).sum())(X)
    assert isinstance(info.value, sk.NotDifferentiableError)
    assert info.value.fix


def test_bind_checks_the_index_limit_of_the_target_it_is_given():
    # The front reads the bound from the target's limits: a target indexing in int16 refuses
    # a dim that Mosaic GPU's int32 takes.
    narrow = dataclasses.replace(HOPPER, index_bits=16)
    x = (S((64, 40000), jnp.float32),)
    assert bind(softmax.spec, x, softmax.consts, {}, limits=HOPPER).size_map["N"] == 40000
    with pytest.raises(sk.Int32LimitError) as info:
        bind(softmax.spec, x, softmax.consts, {}, limits=narrow)
    assert info.value.what == (
        "dim N has 40,000 elements, more than Mosaic GPU's int16 index math can address"
    )
    assert info.value.expected == "at most 32,767 (2**15 - 1) elements along every dim"
