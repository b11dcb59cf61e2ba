"""Declaration-time errors: everything `@sk.kernel(...)` rejects before any data exists.

Each test declares a kernel inside `pytest.raises` and checks the error's class and its facts:
`where` points at the decorator line (or, for body errors, at the user's line in the body), the
operand or dim is named, expected/actual carry the values, and `fix` is non-empty.

Lines are found through `# @tag` marker comments on the line they tag, so the tests do not
depend on how the formatter lays the file out.
"""

import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jaxtyping import (
    Array,
    BFloat16,
    Bool,
    Float,
    Float8e4m3fn,
    Float8e4m3fnuz,
    Float8e5m2,
    Float32,
    Float64,
    Int,
    Int32,
    Shaped,
)

import statickernel as sk
from markers import line_finder
from statickernel import _errors
from statickernel._compiler.mosaic_gpu import hardware as hw

_FILE = pathlib.Path(__file__)

line_of = line_finder(__file__)


def check(
    exc: sk.StaticKernelError,
    tag: str,
    *,
    kernel: str = "k",
    operand: str | None = None,
    dim: str | None = None,
) -> None:
    """The facts every declaration error carries."""
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


# --- annotations --------------------------------------------------------------------------------


def test_operand_annotated_jax_array():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @jax-array
        def k(x: jax.Array) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "jax-array", operand="x")
    assert "jaxtyping" in info.value.what
    assert info.value.actual == "Array"


def test_operand_annotated_int():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @int-annotation
        def k(x: int) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "int-annotation", operand="x")
    assert info.value.actual == "int"


def test_operand_without_annotation():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @no-annotation
        def k(x) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "no-annotation", operand="x")
    assert info.value.actual == "no annotation"


@pytest.mark.parametrize("dims", ["*b N", "...", "#M N", "M+1 N", "_ N"])
def test_dims_must_be_plain_names(dims: str):
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @dims
        def k(x: Float[Array, dims]) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "dims", operand="x")
    assert "not a plain name" in info.value.what
    assert repr(dims) in str(info.value.actual)


def test_rank_3_operand():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @rank-3
        def k(x: Float[Array, "B M N"]) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "rank-3", operand="x")
    assert "rank 3" in info.value.what
    assert info.value.expected == "rank 1 or 2, or 0 for a scalar operand"


def test_rank_3_result():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @rank-3-result
        def k(x: Float[Array, "M N"]) -> Float[Array, "B M N"]:
            return sk.load(x)

    check(info.value, "rank-3-result", operand="result")
    assert "rank 3" in info.value.what


def _doubling(batch: str | tuple[str, ...], x_dims: str, out_dims: str) -> Any:
    def k(  # @batch-not-leading
        x: Float[Array, x_dims], *, BM: sk.Const[int] = 64
    ) -> Float[Array, out_dims]:
        return sk.load(x) * 2

    return sk.kernel(tile={"M": "BM"}, batch=batch)(k)


_MOVEAXIS = re.compile(r"jnp\.moveaxis\((?:[^()]|\([^()]*\))*\)")


@pytest.mark.parametrize(
    ("batch", "x_dims", "out_dims", "fixed_x", "fixed_out", "dim"),
    [
        ("B", "M B N", "B M N", "B M N", "B M N", "B"),
        (("B", "H"), "B M H N", "B H M N", "B H M N", "B H M N", "H"),
        (("B", "H"), "H B M N", "B H M N", "B H M N", "B H M N", "H"),
        ("B", "B M N", "M B N", "B M N", "B M N", "B"),
    ],
    ids=["operand", "second-batch-dim", "batch-dims-swapped", "result"],
)
def test_a_batch_dim_that_does_not_lead(
    batch: Any, x_dims: str, out_dims: str, fixed_x: str, fixed_out: str, dim: str
) -> None:
    """Before, "rank 3; reshape the array to 2-D". The fix's jnp.moveaxis call is run here,
    on a kernel annotated as it says."""
    with pytest.raises(sk.AnnotationError) as info:
        _doubling(batch, x_dims, out_dims)
    check(info.value, "batch-not-leading", dim=dim)
    assert "batch dims" in info.value.what
    assert "reshape" not in str(info.value.fix)
    assert f"'{fixed_x if info.value.operand == 'x' else fixed_out}'" in str(info.value.fix)
    (call,) = _MOVEAXIS.findall(str(info.value.fix))
    sizes = {"B": 2, "H": 3, "M": 70, "N": 16}
    x = jnp.asarray(
        np.random.default_rng(0).standard_normal([sizes[d] for d in x_dims.split()]), jnp.float32
    )
    fixed = _doubling(batch, fixed_x, fixed_out).with_backend("interpret")
    if info.value.operand == "x":
        out = fixed(eval(call, {"jnp": jnp, "x": x}))
    else:
        out = eval(call, {"jnp": jnp, "out": fixed(x)})
    assert out.shape == tuple(sizes[d] for d in out_dims.split())
    want = jnp.einsum(f"{x_dims.replace(' ', '')}->{out_dims.replace(' ', '')}", x) * 2
    np.testing.assert_array_equal(out, want)


def test_repeated_dim_name():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @repeated-dim
        def k(x: Float[Array, "M M"]) -> Float[Array, "M M"]:
            return sk.load(x)

    check(info.value, "repeated-dim", operand="x")
    assert "'M M'" in str(info.value.actual)


def test_missing_result_annotation():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @no-result
        def k(x: Float[Array, "M N"]):
            return sk.load(x)

    check(info.value, "no-result")
    assert "result" in info.value.what


def test_result_not_an_array_type():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @result-int
        def k(x: Float[Array, "M N"]) -> int:
            return 0

    check(info.value, "result-int", operand="result")
    assert info.value.actual == "int"


def test_tuple_result_with_ellipsis():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @tuple-ellipsis
        def k(x: Float[Array, "M N"]) -> tuple[Float[Array, "M N"], ...]:
            return (sk.load(x),)

    check(info.value, "tuple-ellipsis")
    assert "tuple" in info.value.what


def test_result_dim_not_derivable_names_the_dim():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @result-mk-dim
        def k(x: Float[Array, "M N"]) -> Float[Array, "M K"]:
            return sk.load(x)

    check(info.value, "result-mk-dim", operand="result", dim="K")
    assert "derive" in info.value.what
    assert "transpose" not in str(info.value.fix)


def test_result_dim_not_derivable_from_1d_operand():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @result-mk-1d
        def k(x: Float[Array, " M"]) -> Float[Array, "M K"]:
            return sk.load(x)

    check(info.value, "result-mk-1d", operand="result", dim="K")
    assert "cannot be derived" in info.value.what
    assert info.value.actual == "'K'"


def test_operands_order_dims_differently():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @dim-order
        def k(x: Float[Array, "M N"], y: Float[Array, "N M"]) -> Float[Array, "M N"]:
            return sk.load(x) + sk.load(y)

    check(info.value, "dim-order", operand="y")
    assert info.value.expected == "'M N'"
    assert info.value.actual == "'N M'"


@pytest.mark.parametrize(
    ("dims", "same"),
    [("M K", "if K always has the size of N, name it N"), ("K N", "name it M"), ("K L", None)],
)
def test_2d_operands_with_other_dims(dims: str, same: str | None):
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"M": "BM"})  # @other-dims
        def k(
            x: Float[Array, "M N"], y: Float[Array, dims], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "other-dims", operand="y")
    exc = info.value
    assert "orders" not in exc.what and "transpose" not in str(exc.fix)
    assert f"'{dims}'" in exc.what and "'M N'" in exc.what
    assert exc.expected == "'M N'"
    assert exc.actual == f"'{dims}'"
    assert (same in str(exc.fix)) if same else ("name it" not in str(exc.fix))
    extra = dims.split()[0] if dims != "M K" else "K"
    assert f'loop={{"{extra}": "B{extra}"}}' in str(exc.fix) and "sk.dot" in str(exc.fix)


def test_2d_operand_with_another_dim_reduces_to_a_vector():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(
            x: Float[Array, "M N"], y: Float[Array, "M K"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x)

    # The per-row vector it proposes is an operand this kernel takes.
    assert 'Float[Array, " M"]' in str(info.value.fix)

    @sk.kernel(tile={"M": "BM"})
    def fixed(
        x: Float[Array, "M N"], y_sum: Float[Array, " M"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        return sk.load(x) + sk.load(y_sum)[:, None]

    assert fixed.spec.cols == "N"


def test_1d_operand_along_foreign_dim():
    with pytest.raises(sk.AnnotationError) as info:
        # K is also a result's dim, so `b` is no vector of parameters (a dim of its own).
        @sk.kernel  # @1d-foreign
        def k(
            x: Float[Array, "M N"], b: Float[Array, " K"]
        ) -> tuple[Float[Array, "M N"], Float[Array, " K"]]:
            return sk.load(x), sk.load(b)

    check(info.value, "1d-foreign", operand="b")
    assert "K" in info.value.what
    assert info.value.actual == "'K'"
    assert "'M'" in info.value.expected and "'N'" in info.value.expected


def test_no_2d_operand_or_result():
    # Vectors along one dim are a kernel of vectors; along two, nothing lays them out.
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @no-2d
        def k(
            x: Float[Array, " M"], y: Float[Array, " N"]
        ) -> tuple[Float[Array, " M"], Float[Array, " N"]]:
            return sk.load(x), sk.load(y)

    check(info.value, "no-2d")
    assert "2-D" in info.value.what


def test_no_operands():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @no-operands
        def k(*, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return jnp.zeros((BM, 8))

    check(info.value, "no-operands")
    assert "no operands" in info.value.what


@pytest.mark.parametrize(
    "annotation",
    [Float64[Array, "M N"], Bool[Array, "M N"]],
    ids=["float64", "bool"],
)
def test_dtype_category_without_supported_dtype(annotation: Any):
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @no-dtype
        def k(x: annotation) -> Float[Array, "M N"]:  # pyright: ignore[reportInvalidTypeForm]
            return sk.load(x)

    check(info.value, "no-dtype", operand="x")
    assert "Mosaic GPU" in info.value.what
    assert "float32" in info.value.expected
    assert info.value.actual.split(",")[0] in ("float64", "bool")


@pytest.mark.parametrize(
    "annotation",
    [Float8e4m3fn[Array, "M N"], Float8e5m2[Array, "M N"]],
    ids=["e4m3fn", "e5m2"],
)
def test_fp8_operands_are_read_only_by_sk_dot(annotation: Any):
    """An fp8 annotation is accepted for an operand (WGMMA multiplies fp8), but a load of it
    is refused at the user's line: no register path reads fp8."""
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel
        def k(x: annotation) -> Float[Array, "M N"]:  # pyright: ignore[reportInvalidTypeForm]
            return sk.load(x).astype(jnp.float32)  # @fp8

    check(info.value, "fp8", operand="x")
    exc = info.value
    assert "only sk.dot reads" in exc.what
    assert exc.actual is not None and "float8_" in exc.actual
    assert "sk.dot" in str(exc.fix) and "bfloat16" in str(exc.fix)


def test_an_annotation_of_other_fp8_formats_names_the_two_wgmma_takes():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @fp8-other
        def k(x: Float8e4m3fnuz[Array, "M N"]) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "fp8-other", operand="x")
    assert "float8_e4m3fn or float8_e5m2" in str(info.value.expected)


def test_shaped_annotation_allows_every_supported_dtype():
    @sk.kernel(tile={"M": "BM"})
    def k(x: Shaped[Array, "M N"], *, BM: sk.Const[int] = 64) -> Shaped[Array, "M N"]:
        return sk.load(x)

    # Every dtype but fp8 and int4, which only an annotation of them alone allows (only sk.dot
    # reads fp8, only a cast int4).
    narrow = (*hw.DOT_ONLY_DTYPES, *hw.SUB_BYTE_DTYPES)
    general = tuple(d for d in hw.SUPPORTED_DTYPES if d not in narrow)
    assert k.spec.operands[0].dtypes == general
    assert k.spec.results[0].dtypes == general
    for dtype in (jnp.float32, jnp.bfloat16, jnp.int8):
        plan = k.plan(jax.ShapeDtypeStruct((100, 128), dtype))
        assert plan.operand("x").dtype == jnp.dtype(dtype).name


def test_result_with_unsupported_dtype():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @result-f64
        def k(x: Float[Array, "M N"]) -> Float64[Array, "M N"]:
            return sk.load(x)

    check(info.value, "result-f64", operand="result")
    assert info.value.actual == "float64"


def test_reserved_parameter_name_backend():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @reserved
        def k(x: Float[Array, "M N"], backend: Float[Array, "M N"]) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "reserved", operand="backend")
    assert "reserve" in info.value.what


def test_var_positional_parameter():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @star-args
        def k(x: Float[Array, "M N"], *args: Float[Array, "M N"]) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "star-args", operand="args")
    assert "*args" in info.value.what


def test_var_keyword_parameter():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @star-kwargs
        def k(x: Float[Array, "M N"], **kwargs: int) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "star-kwargs", operand="kwargs")
    assert "**kwargs" in info.value.what


def test_operand_with_default():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @operand-default
        def k(x: Float[Array, "M N"] = None) -> Float[Array, "M N"]:  # pyright: ignore[reportArgumentType]
            return sk.load(x)

    check(info.value, "operand-default", operand="x")
    assert "default" in info.value.what


def test_unresolvable_annotation():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel  # @unresolvable
        def k(x: "Undefined") -> Float[Array, "M N"]:  # noqa: F821  # pyright: ignore[reportUndefinedVariable]
            return sk.load(x)

    check(info.value, "unresolvable")
    assert "Undefined" in info.value.what


# --- names the generated module uses ------------------------------------------------------------

# One name of each kind the generated module gives its own objects: imports, the interpreter
# switch and the launch at module level; masks, offsets and scoped stores in the block function;
# and the families of traced values, loop pipelines and results.
_GENERATED_NAMES = [
    *("jax", "jnp", "lax", "pl", "plgpu", "np", "INTERPRET", "_launch"),
    *("edge_start", "row_ok", "col_ok", "row_index", "col_ok_vec", "store_results"),
    *("v0", "v12", "v3_block", "v2_acc", "loop0", "loop1_step", "loop0_index"),
    *("result", "result0"),
]


def _declare_operand(name: str) -> sk.Kernel:
    """A kernel whose one operand is called `name`, declared in a generated file `named.py`."""
    source = (
        '@sk.kernel(tile={"M": "BM"}, backend="interpret")\n'
        f'def k({name}: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> '
        'Float32[Array, "M N"]:\n'
        f"    return sk.load({name}, fill=1.0) * 2\n"
    )
    namespace: dict[str, Any] = {"sk": sk, "Float32": Float32, "Array": Array}
    exec(compile(source, "named.py", "exec"), namespace)
    return namespace["k"]


@pytest.mark.parametrize("name", _GENERATED_NAMES)
def test_operand_named_like_a_generated_name(name: str):
    with pytest.raises(sk.AnnotationError) as info:
        _declare_operand(name)
    exc = info.value
    assert exc.where == "named.py:1"
    assert exc.operand == name
    assert "generated" in exc.what
    assert exc.actual.startswith(f"`{name}`: ")
    suggested = str(exc.fix).split("e.g. to `")[1].rstrip("`")
    assert name in suggested
    assert _declare_operand(suggested).spec.operands[0].name == suggested


@pytest.mark.parametrize("name", ["v", "value", "loop", "results", "x_s", "block", "pl_x"])
def test_names_near_generated_ones_are_fine(name: str):
    assert _declare_operand(name).spec.operands[0].name == name


def test_the_suggested_rename_runs():
    k = _declare_operand("jnp_")
    x = jnp.arange(100 * 40, dtype=jnp.float32).reshape(100, 40)  # ragged: the masks are used
    np.testing.assert_array_equal(k(x), 2 * x)


def test_operand_named_like_another_operands_buffer():
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"M": "BM"})  # @derived-smem
        def k(
            x: Float[Array, "M N"], x_smem: Float[Array, "M N"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x) + sk.load(x_smem)

    check(info.value, "derived-smem", operand="x_smem")
    assert "shared-memory block of `x`" in info.value.what
    assert "`x_smem_`" in str(info.value.fix)


@pytest.mark.parametrize(
    ("name", "what"),
    [("block_M", "block index along dim M"), ("result_gmem", "`result` in global memory")],
)
def test_operand_named_like_a_derived_name(name: str, what: str):
    with pytest.raises(sk.AnnotationError) as info:
        _declare_operand(name)
    assert info.value.operand == name
    assert what in info.value.what


def test_constants_may_use_generated_names():
    # Constants are inlined into the generated module as values, so their names never appear.
    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def k(
        x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, pl: sk.Const[float] = 3.0
    ) -> Float32[Array, "M N"]:
        return sk.load(x, fill=1.0) * pl

    x = jnp.ones((100, 40), jnp.float32)
    np.testing.assert_array_equal(k(x), 3 * x)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("jnp", "jax.numpy"),
        ("_launch", "launch"),
        ("my-kernel", "not a Python identifier"),
        ("class", "keyword"),
    ],
)
def test_kernel_name_the_generated_module_cannot_use(name: str, why: str):
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(name=name)  # @kernel-name
        def k(x: Float[Array, "M N"]) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "kernel-name", kernel=name)
    assert why in info.value.what
    assert "name=" in str(info.value.fix)


@pytest.mark.parametrize("target", [42, "softmax", jax.jit(jnp.exp)], ids=["int", "str", "jit"])
def test_kernel_applied_to_a_non_function(target: Any):
    with pytest.raises(sk.AnnotationError) as info:
        sk.kernel(tile={"M": "BM"})(target)  # @non-function
    exc = info.value
    assert exc.where is not None and exc.where.endswith(f"{_FILE.name}:{line_of('non-function')}")
    assert "decorates a function" in exc.what
    assert type(target).__name__ in exc.actual
    assert "def" in str(exc.fix)


def test_bare_kernel_applied_to_a_non_function():
    with pytest.raises(sk.AnnotationError) as info:
        sk.kernel(42)  # @bare-non-function  # pyright: ignore[reportArgumentType]
    assert info.value.where is not None
    assert info.value.where.endswith(f"{_FILE.name}:{line_of('bare-non-function')}")
    assert info.value.actual == "int: 42"


# --- tiling -------------------------------------------------------------------------------------


def test_tile_unknown_dim():
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"Q": "BM"})  # @tile-unknown-dim
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "tile-unknown-dim", dim="Q")
    assert info.value.actual == "'Q'"
    assert "M" in info.value.expected and "N" in info.value.expected


def test_tile_unknown_constant():
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"M": "BX"})  # @tile-unknown-const
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "tile-unknown-const", dim="M")
    assert info.value.actual == "'BX'"
    assert "BM" in info.value.expected
    assert "BX" in str(info.value.fix)


def test_tile_constant_without_any_constants():
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"M": "BM"})  # @tile-no-consts
        def k(x: Float[Array, "M N"]) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "tile-no-consts", dim="M")
    assert "no constants" in info.value.expected


def test_tile_by_float_constant():
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"M": "BM"})  # @tile-float
        def k(x: Float[Array, "M N"], *, BM: sk.Const[float] = 64.0) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "tile-float", dim="M")
    assert info.value.expected == "sk.Const[int]"
    assert info.value.actual == "sk.Const[float]"


def test_tile_by_optional_int_constant():
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"M": "BM"})  # @tile-optional
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int | None] = 64) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "tile-optional", dim="M")
    assert info.value.expected == "sk.Const[int]"


@sk.kernel(tile={"M": "BM"})
def scaled(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, scale: sk.Const[float | None] = None
) -> Float[Array, "M N"]:
    # None stands for a default computed from the shapes: here, 1 / N.
    return sk.load(x) * (1 / sk.dim("N") if scale is None else scale)


def test_optional_constant_takes_none_or_its_type():
    x = jnp.ones((70, 40), jnp.float32)
    np.testing.assert_allclose(np.asarray(scaled(x)), 1 / 40)
    np.testing.assert_allclose(np.asarray(scaled(x, scale=0.5)), 0.5)
    np.testing.assert_allclose(np.asarray(scaled(x, scale=None)), 1 / 40)
    assert "scale=None" in str(scaled.plan(x))
    with pytest.raises(sk.OverrideError) as info:
        scaled(x, scale="half")  # pyright: ignore[reportArgumentType]
    assert info.value.expected == "float or None"
    assert info.value.constant == "scale"


def test_result_lacking_a_tiled_dim_must_be_a_reduction_over_it():
    with pytest.raises(sk.CrossBlockResultError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
            return jnp.exp(sk.sum(sk.load(x), axis=0))  # @not-last

    check(info.value, "not-last", operand="result", dim="M")
    assert "`exp`" in str(info.value.actual)
    assert "sum, max or min" in str(info.value.fix) or "reduction" in str(info.value.fix)


def test_result_lacking_a_tiled_dim_refuses_a_mean_over_the_block():
    with pytest.raises(sk.CrossBlockResultError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
            return jnp.mean(sk.load(x), axis=0)  # @mean

    check(info.value, "mean", operand="result", dim="M")
    assert "sk.dim('M')" in str(info.value.fix)


def test_result_lacking_a_tiled_dim_refuses_a_scaled_max():
    with pytest.raises(sk.CrossBlockResultError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
            return sk.max(sk.load(x), axis=0) * 2.0  # @scaled-max

    check(info.value, "scaled-max", operand="result", dim="M")


def test_tile_not_a_mapping():
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile=["M"])  # @tile-list  # pyright: ignore[reportArgumentType]
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "tile-list")


def test_tile_by_int_literal():
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"M": 64})  # @tile-int  # pyright: ignore[reportArgumentType]
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "tile-int")
    assert "64" in info.value.actual


def test_tile_by_int_literal_fix_is_valid_python():
    with pytest.raises(sk.TilingError) as info:

        @sk.kernel(tile={"M": 64})  # @tile-int-fix  # pyright: ignore[reportArgumentType]
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x)

    assert info.value.fix is not None
    assert "`64:" not in str(info.value.fix)


# --- constants ----------------------------------------------------------------------------------


def test_keyword_only_parameter_not_const():
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel(tile={"M": "BM"})  # @plain-int-const
        def k(x: Float[Array, "M N"], *, BM: int = 64) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "plain-int-const", operand="BM")
    assert "sk.Const[int]" in info.value.expected
    assert info.value.actual == "int"


def test_keyword_only_parameter_unannotated():
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel(tile={"M": "BM"})  # @unannotated-const
        def k(x: Float[Array, "M N"], *, BM=64) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "unannotated-const", operand="BM")
    assert info.value.actual == "no annotation"


def test_const_of_str():
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel  # @const-str
        def k(x: Float[Array, "M N"], *, mode: sk.Const[str] = "fast") -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "const-str", operand="mode")
    assert "int, float or bool" in info.value.what


def test_const_of_str_names_the_type():
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel  # @const-str-actual
        def k(x: Float[Array, "M N"], *, mode: sk.Const[str] = "fast") -> Float[Array, "M N"]:
            return sk.load(x)

    assert "str" in str(info.value.actual)


def test_const_without_default():
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel(tile={"M": "BM"})  # @const-no-default
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int]) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "const-no-default", operand="BM")
    assert "no default" in info.value.what


@pytest.mark.parametrize("value", [0, -64])
def test_const_not_positive(value: int):
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel(tile={"M": "BM"})  # @const-nonpositive
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = value) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "const-nonpositive", operand="BM")
    assert "positive" in info.value.what
    assert info.value.actual == value
    assert info.value.expected == "> 0"


def test_an_optional_int_default_may_be_zero_and_not_negative():
    @sk.kernel(tile={"M": "BM"})
    def ok(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, pad: sk.Const[int | None] = 0
    ) -> Float[Array, "M N"]:
        return sk.load(x)

    assert ok.spec.consts[-1].default == 0
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel(tile={"M": "BM"})  # @const-negative
        def k(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, pad: sk.Const[int | None] = -1
        ) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "const-negative", operand="pad")
    assert info.value.expected == ">= 0, or None"


def test_an_optional_stage_count_default_may_not_be_zero():
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})  # @const-zero-stages
        def k(
            x: Float[Array, "M N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
            stages: sk.Const[int | None] = 0,
        ) -> Float[Array, " M"]:
            return sk.loop("N", lambda acc: acc + sk.sum(sk.load(x), axis=1), init=jnp.zeros((BM,)))

    check(info.value, "const-zero-stages", operand="stages")
    assert "stage count" in info.value.what


@pytest.mark.parametrize("value", [64.0, True, "64", np.float64(64.0), np.bool_(True)], ids=repr)
def test_int_const_default_of_wrong_type(value: Any):
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel(tile={"M": "BM"})  # @const-wrong-type
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = value) -> Float[Array, "M N"]:
            return sk.load(x)

    check(info.value, "const-wrong-type", operand="BM")
    assert info.value.expected == "int"
    assert repr(value) in info.value.actual


@pytest.mark.parametrize(
    ("value", "python"),
    [(np.int64(64), 64), (np.int32(128), 128), (np.uint8(64), 64)],
    ids=repr,
)
def test_numpy_int_const_default_becomes_a_python_int(value: Any, python: int):
    @sk.kernel(tile={"M": "BM"})
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = value) -> Float[Array, "M N"]:
        return sk.load(x)

    assert k.consts == {"BM": python} and type(k.consts["BM"]) is int
    assert type(k.spec.const_defaults["BM"]) is int


def test_numpy_float_and_bool_const_defaults_become_python_values():
    half, two, yes = np.float32(0.5), np.int64(2), np.bool_(True)

    @sk.kernel
    def k(
        x: Float[Array, "M N"],
        *,
        s: sk.Const[float] = half,  # pyright: ignore[reportArgumentType]
        t: sk.Const[float] = two,  # pyright: ignore[reportArgumentType]
        flag: sk.Const[bool] = yes,  # pyright: ignore[reportArgumentType]
    ) -> Float[Array, "M N"]:
        return sk.load(x) * s * t if flag else sk.load(x)

    assert k.consts == {"s": 0.5, "t": 2, "flag": True}
    assert [type(v) for v in k.consts.values()] == [float, int, bool]


def test_float_const_default_of_wrong_type():
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel  # @float-const-str
        def k(x: Float[Array, "M N"], *, s: sk.Const[float] = "2") -> Float[Array, "M N"]:  # pyright: ignore[reportArgumentType]
            return sk.load(x) * s

    check(info.value, "float-const-str", operand="s")
    assert info.value.expected == "float"


def test_bool_const_default_of_wrong_type():
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel  # @bool-const-int
        def k(x: Float[Array, "M N"], *, flag: sk.Const[bool] = 1) -> Float[Array, "M N"]:  # pyright: ignore[reportArgumentType]
            return sk.load(x)

    check(info.value, "bool-const-int", operand="flag")
    assert info.value.expected == "bool"


def test_float_const_accepts_int_default():
    @sk.kernel
    def k(x: Float[Array, "M N"], *, s: sk.Const[float] = 2) -> Float[Array, "M N"]:
        return sk.load(x) * s

    assert k.consts == {"s": 2}


# --- hardware -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bm", [100, 32, 96])
def test_row_block_not_multiple_of_64(bm: int):
    with pytest.raises(sk.BlockAlignmentError) as info:

        @sk.kernel(tile={"M": "BM"})  # @bm-not-64
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = bm) -> Float32[Array, "M N"]:
            return sk.load(x)

    assert info.value.phase is sk.Phase.DECLARATION
    check(info.value, "bm-not-64", operand="x", dim="M")
    assert "multiple of 64" in info.value.expected
    assert str(bm) in info.value.actual
    assert "BM" in str(info.value.fix)


def test_row_block_over_tma_box():
    with pytest.raises(sk.TmaBoxError) as info:

        @sk.kernel(tile={"M": "BM"})  # @bm-512
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 512) -> Float32[Array, "M N"]:
            return sk.load(x)

    check(info.value, "bm-512", dim="M")
    assert "256" in info.value.expected
    assert info.value.actual == "512"
    assert "BM" in str(info.value.fix) and "256" in str(info.value.fix)


def test_column_block_too_narrow():
    with pytest.raises(sk.BlockAlignmentError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"})  # @bn-4
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 4
        ) -> Float32[Array, "M N"]:
            return sk.load(x)

    check(info.value, "bn-4", operand="x", dim="N")
    assert "multiple of 8" in info.value.expected
    assert info.value.actual.startswith("4 (16 B")
    assert "BN to 8" in str(info.value.fix)


def test_column_block_too_narrow_for_int8():
    # `Int` allows int8, whose 16-byte TMA rows need 16 elements.
    with pytest.raises(sk.BlockAlignmentError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"})  # @bn-int8
        def k(
            x: Int[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 8
        ) -> Int[Array, "M N"]:
            return sk.load(x)

    check(info.value, "bn-int8", dim="N")
    assert "multiple of 16" in info.value.expected
    assert "int8" in info.value.expected


def test_1d_block_needs_128_bytes():
    with pytest.raises(sk.BlockAlignmentError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"})  # @bias-bn-8
        def k(
            x: Float32[Array, "M N"],
            b: Float32[Array, " N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 8,
        ) -> Float32[Array, "M N"]:
            return sk.load(x) + sk.load(b)

    check(info.value, "bias-bn-8", operand="b", dim="N")
    assert "multiple of 32" in info.value.expected


def test_shared_memory_overflow():
    with pytest.raises(sk.SharedMemoryError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"})  # @smem
        def k(
            a: Float32[Array, "M N"],
            b: Float32[Array, "M N"],
            c: Float32[Array, "M N"],
            *,
            BM: sk.Const[int] = 256,
            BN: sk.Const[int] = 256,
        ) -> Float32[Array, "M N"]:
            return sk.load(a) + sk.load(b) + sk.load(c)

    assert isinstance(info.value, sk.HardwareLimitError)
    check(info.value, "smem")
    assert "232,448" in str(info.value)
    # 4 blocks of 256 x 256 x 4 B, 3 barriers, and the 2 KiB Mosaic GPU reserves.
    assert "1,050,648" in info.value.actual
    assert "BM=256" in info.value.actual and "BN=256" in info.value.actual


# --- the body -----------------------------------------------------------------------------------


def test_result_wrong_rank():
    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM"})  # @wrong-rank
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            return sk.sum(sk.load(x), axis=1)

    check(info.value, "wrong-rank", operand="result")
    assert "shape" in info.value.what
    assert info.value.actual == "[64]"
    assert info.value.expected.startswith("[64, ")


def test_result_wrong_dtype():
    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM"})  # @wrong-dtype
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x).astype(jnp.int32)

    check(info.value, "wrong-dtype", operand="result")
    assert "dtype" in info.value.what
    assert info.value.actual == "int32"
    assert "float32" in info.value.expected


def test_result_wrong_count():
    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM"})  # @wrong-count
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            v = sk.load(x)
            return v, v  # pyright: ignore[reportReturnType]

    check(info.value, "wrong-count")
    assert info.value.expected == "1 result(s)"
    assert info.value.actual == "2 value(s)"


def test_result_missing():
    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM"})  # @returns-none
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:  # pyright: ignore[reportReturnType]
            sk.load(x)

    check(info.value, "returns-none")
    assert info.value.actual == "0 value(s)"


def test_result_too_few_for_tuple():
    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM"})  # @tuple-short
        def k(
            x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64
        ) -> tuple[Float32[Array, "M N"], Float32[Array, " M"]]:
            return sk.load(x)  # pyright: ignore[reportReturnType]

    check(info.value, "tuple-short")
    assert info.value.expected == "2 result(s)"


# Each unsupported op sits on its own tagged line; the kernel below calls it on a square
# 64 x 64 float32 block so that only the op itself is wrong.


def _op_dot(v: jax.Array) -> jax.Array:
    return jnp.dot(v, v)  # @op-dot


def _op_matmul(v: jax.Array) -> jax.Array:
    return v @ v  # @op-matmul


def _op_cumsum(v: jax.Array) -> jax.Array:
    return jnp.cumsum(v, axis=1)  # @op-cumsum


def _op_strided_slice(v: jax.Array) -> jax.Array:
    return jnp.concatenate([v[:, ::2], v[:, 1::2]], axis=1)  # @op-strided-slice


def _op_transpose(v: jax.Array) -> jax.Array:
    return v.T  # @op-transpose


def _op_floor(v: jax.Array) -> jax.Array:
    return jnp.floor(v)  # @op-floor


def _op_float_pow(v: jax.Array) -> jax.Array:
    return v**1.5  # @op-pow


def _op_log1p(v: jax.Array) -> jax.Array:
    return jnp.log1p(v)  # @op-log1p


def _op_sort(v: jax.Array) -> jax.Array:
    return jnp.sort(v, axis=1)  # @op-sort


def _op_iota(v: jax.Array) -> jax.Array:
    return v + jnp.arange(v.shape[1], dtype=v.dtype)  # @op-iota


def _op_reshape(v: jax.Array) -> jax.Array:
    return v.reshape(32, 128).reshape(64, 64)  # @op-reshape


def _op_round(v: jax.Array) -> jax.Array:
    return jnp.round(v)  # @op-round


def _op_row_plus_col(v: jax.Array) -> jax.Array:
    # Equal-length 1-D vectors, one per row and one per column: jnp pairs them elementwise,
    # which no register layout holds. (As (rows, 1) and (1, cols) they make a block instead.)
    return v + (sk.sum(v, axis=1) + sk.sum(v, axis=0))  # @op-row-col


def _declare_with(op: Any) -> sk.Kernel:
    @sk.kernel(tile={"M": "BM", "N": "BN"})  # @op-kernel
    def k(
        x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
    ) -> Float32[Array, "M N"]:
        return op(sk.load(x))

    return k


def test_square_block_kernel_is_valid():
    # The harness itself is fine: an elementwise op declares without error.
    k = _declare_with(jnp.exp)
    assert k.spec.tile_map == {"M": "BM", "N": "BN"}


@pytest.mark.parametrize(
    ("op", "tag", "names"),
    [
        pytest.param(_op_dot, "op-dot", ["jnp.dot", "dot_general"], id="dot"),
        pytest.param(_op_matmul, "op-matmul", ["@", "dot_general"], id="matmul"),
        pytest.param(_op_cumsum, "op-cumsum", ["jnp.cumsum", "cumsum"], id="cumsum"),
        pytest.param(
            _op_strided_slice, "op-strided-slice", ["with a step", "slice"], id="strided-slice"
        ),
        pytest.param(_op_transpose, "op-transpose", [".T", "transpose"], id="transpose"),
        pytest.param(_op_float_pow, "op-pow", ["**", "float exponent", "pow"], id="float-pow"),
        pytest.param(_op_sort, "op-sort", ["jnp.sort", "sort"], id="sort"),
        pytest.param(_op_iota, "op-iota", ["jnp.arange", "iota"], id="iota"),
        pytest.param(_op_reshape, "op-reshape", ["reshape"], id="reshape"),
        pytest.param(_op_row_plus_col, "op-row-col", ["per-row", "per-column"], id="row-col"),
    ],
)
def test_unsupported_op(op: Any, tag: str, names: list[str]):
    with pytest.raises(sk.UnsupportedOpError) as info:
        _declare_with(op)
    check(info.value, tag)
    text = str(info.value)
    for name in names:
        assert name in text
    assert "Mosaic GPU" in info.value.expected or "Mosaic GPU" in info.value.what


@pytest.mark.parametrize(
    ("op", "names"),
    [
        (_op_cumsum, ["jnp.cumsum", "cumsum"]),
        (_op_sort, ["jnp.sort", "sort"]),
    ],
    ids=["cumsum", "sort"],
)
def test_unsupported_jit_wrapped_op_is_named(op: Any, names: list[str]):
    # The class and the op's name are right even where the line is not (see the xfail above).
    with pytest.raises(sk.UnsupportedOpError) as info:
        _declare_with(op)
    assert info.value.kernel == "k"
    assert info.value.fix
    for name in names:
        assert name in str(info.value)


# The fixes that UnsupportedOpError suggests must themselves declare.


@pytest.mark.parametrize(
    ("op", "replacement"),
    [
        pytest.param(_op_float_pow, lambda v: jnp.exp(1.5 * jnp.log(v)), id="float-pow"),
    ],
)
def test_suggested_fix_declares(op: Any, replacement: Any):
    with pytest.raises(sk.UnsupportedOpError) as info:
        _declare_with(op)
    assert info.value.fix
    k = _declare_with(replacement)
    assert k.spec.name == "k"


@pytest.mark.parametrize(
    "op",
    [_op_floor, _op_log1p, jnp.expm1, lambda v: v % 2.0, lambda v: lax.rem(v, 2.0)],
    ids=["floor", "log1p", "expm1", "float-remainder", "lax-rem"],
)
def test_ops_written_with_others_declare(op: Any):
    """Ops Mosaic GPU has no rule for, written with those it has (`lower/composites.py`)."""
    assert _declare_with(op).spec.name == "k"


def test_body_python_error():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            v = sk.load(x)
            return v.foo()  # @body-foo  # pyright: ignore[reportAttributeAccessIssue]

    assert type(info.value) is sk.BodyError
    check(info.value, "body-foo")
    assert "AttributeError" in info.value.what and "foo" in info.value.what
    assert "float32[64, 8]" in info.value.actual


def test_body_raises_value_error():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            raise ValueError("boom")  # @body-raise

    check(info.value, "body-raise")
    assert "ValueError: boom" in info.value.what


def test_body_python_branch_on_tile():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            v = sk.load(x)
            if sk.max(v, axis=1)[0] > 0:  # @body-branch
                return v
            return -v

    check(info.value, "body-branch")
    assert "TracerBoolConversionError" in info.value.what


def test_body_returns_the_tile_object():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})  # @returns-tile
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            return x

    assert "Tile" in info.value.what
    assert info.value.kernel == "k"
    assert info.value.fix


def test_reduction_without_axis():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            v = sk.load(x)
            return v * sk.max(v)  # @max-no-axis  # pyright: ignore[reportCallIssue]

    check(info.value, "max-no-axis")
    assert "axis" in info.value.what


_CAPTURED = jnp.ones((64, 8), jnp.float32)
_CAPTURED_NP = np.ones((64, 8), np.float32)
_CAPTURED_SCALAR = jnp.float32(2.0)


@pytest.mark.parametrize("captured", [_CAPTURED, _CAPTURED_NP], ids=["jax", "numpy"])
def test_body_captures_array(captured: Any):
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})  # @captures
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            v = sk.load(x)
            return v + captured

    assert info.value.kernel == "k"
    assert info.value.fix and "operand" in str(info.value.fix)
    assert "(64, 8)" in info.value.what
    assert info.value.actual == "float32[64, 8]"


def test_body_captures_array_points_at_use():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            v = sk.load(x)
            return v + _CAPTURED  # @captures-use

    check(info.value, "captures-use")


def test_body_captures_scalar_is_fine():
    @sk.kernel(tile={"M": "BM"})
    def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
        return sk.load(x) * _CAPTURED_SCALAR

    assert k.spec.name == "k"


def test_fill_not_a_number():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            return sk.load(x, fill="a")  # @fill-str  # pyright: ignore[reportArgumentType]

    check(info.value, "fill-str", operand="x")
    assert "not a number" in info.value.what
    assert info.value.actual == "'a'"


def test_fill_not_a_number_through_the_tile_method():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            return x.load(fill="a")  # @fill-str-method  # pyright: ignore[reportAttributeAccessIssue]

    check(info.value, "fill-str-method", operand="x")
    assert "not a number" in info.value.what


def test_load_of_a_non_operand():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            v = sk.load(x)
            return sk.load(v)  # @load-non-operand

    check(info.value, "load-non-operand")
    assert "not an operand" in info.value.what


def test_load_outside_a_body():
    with pytest.raises(sk.BodyError) as info:
        sk.load(jnp.ones((64, 8)))
    assert info.value.fix


def test_fill_array():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            return sk.load(x, fill=np.zeros(3))  # @fill-array  # pyright: ignore[reportArgumentType]

    check(info.value, "fill-array", operand="x")
    assert "scalar" in info.value.what
    assert "(3,)" in info.value.actual


def test_fill_traced():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(
            x: Float32[Array, "M N"], y: Float32[Array, "M N"], *, BM: sk.Const[int] = 64
        ) -> Float32[Array, "M N"]:
            w = sk.load(y)
            v = sk.load(x, fill=w[0, 0])  # @fill-traced  # pyright: ignore[reportArgumentType]
            return v + w

    check(info.value, "fill-traced", operand="x")
    assert "traced" in info.value.what


def test_loaded_twice_with_different_fills():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            a = sk.load(x, fill=0.0)
            b = sk.load(x, fill=-jnp.inf)  # @fill-twice
            return a + b

    check(info.value, "fill-twice", operand="x")
    assert info.value.expected == "0.0"
    assert info.value.actual == "-inf"


def test_loaded_twice_with_same_fill_is_fine():
    @sk.kernel(tile={"M": "BM"})
    def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
        return sk.load(x, fill=jnp.nan) + sk.load(x, fill=jnp.nan)

    assert k.spec.name == "k"


@pytest.mark.parametrize("fill", [-jnp.inf, 0.5, 2.0**40], ids=["-inf", "0.5", "2**40"])
def test_int_operand_fill_not_representable(fill: float):
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Int[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int[Array, "M N"]:
            return sk.load(x, fill=fill)  # @fill-int

    check(info.value, "fill-int", operand="x")
    assert "int32" in info.value.what
    assert info.value.actual == repr(fill)
    assert "-2147483648" in info.value.expected


@pytest.mark.parametrize(
    "make_fill",
    [
        lambda: np.float32(0.0),
        lambda: jnp.finfo(jnp.float32).min,
        pytest.param(
            lambda: jnp.float32(-jnp.inf),
            marks=pytest.mark.xfail(
                reason="a jnp scalar built inside the body is a tracer, so its value is unknown",
                raises=sk.BodyError,
                strict=True,
            ),
        ),
    ],
    ids=["np.float32", "finfo.min", "jnp.float32"],
)
def test_scalar_fill_of_numpy_or_jax_type(make_fill: Any):
    @sk.kernel(tile={"M": "BM"})
    def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
        return sk.load(x, fill=make_fill())

    assert k.spec.name == "k"


def test_dim_unknown_inside_body():
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            return sk.load(x) * sk.dim("Q")  # @dim-q

    check(info.value, "dim-q", dim="Q")
    assert info.value.actual == "'Q'"
    assert "M" in info.value.expected and "N" in info.value.expected


def test_dot_operand_error_names_distinct_dims():
    # With the loop dim called N, the expected layouts must not read 'N N'.
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            a: BFloat16[Array, "M N"],
            b: BFloat16[Array, " N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
        ) -> Float32[Array, " M"]:
            def step(acc: jax.Array) -> jax.Array:
                return acc + sk.dot(a, b)  # @dot-1d

            return sk.sum(sk.loop("N", step, init=jnp.zeros((BM, BN), jnp.float32)), axis=1)

    check(info.value, "dot-1d", operand="b", dim="N")
    assert info.value.expected == "'N P' or 'P N' for b"


def test_dim_outside_body():
    with pytest.raises(sk.BodyError) as info:
        sk.dim("M")
    assert "outside" in info.value.what
    assert info.value.fix


def test_dim_known_inside_body_is_fine():
    @sk.kernel(tile={"M": "BM"})
    def k(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
        return sk.load(x) / sk.dim("N")

    assert k.spec.dim_names() == ("M", "N")


# --- the hierarchy ------------------------------------------------------------------------------

_DECLARATION_ERRORS = [
    sk.AnnotationError,
    sk.TilingError,
    sk.ConstantError,
    sk.HardwareLimitError,
    sk.BodyError,
    sk.ResultMismatchError,
    sk.UnsupportedOpError,
    sk.SliceError,
    sk.JoinedColumnsError,
    sk.ShiftError,
    sk.RaggedGroupsError,
    sk.CrossBlockResultError,
    sk.VjpError,
]
_CALL_ERRORS = [
    sk.OperandError,
    sk.ShapeError,
    sk.DtypeError,
    sk.SymbolicDimError,
    sk.PlanError,
    sk.OverrideError,
    sk.BackendError,
    sk.NotDifferentiableError,
    sk.BackwardError,
    sk.CompileError,
    sk.CompileTargetError,
    sk.ToolchainError,
    sk.TuneError,
    sk.NoCandidateError,
    sk.BenchError,
]
# One class per hardware rule, raised by the declaration and by a call alike.
_RULE_ERRORS = [
    sk.HardwareRuleError,
    sk.TmaBoxError,
    sk.BlockAlignmentError,
    sk.SharedMemoryError,
    sk.Int32LimitError,
    sk.GridLimitError,
    sk.DotShapeError,
    sk.DotDtypeError,
    sk.DotLayoutError,
    sk.LoopOperandError,
    sk.TensorCoreTargetError,
]


@pytest.mark.parametrize("cls", _DECLARATION_ERRORS, ids=lambda c: c.__name__)
def test_declaration_errors_are_static_kernel_errors(cls: type):
    assert issubclass(cls, sk.DeclarationError)
    assert issubclass(cls, sk.StaticKernelError)
    assert not issubclass(cls, sk.CallError)


@pytest.mark.parametrize("cls", _CALL_ERRORS, ids=lambda c: c.__name__)
def test_call_errors_are_static_kernel_errors(cls: type):
    assert issubclass(cls, sk.CallError)
    assert issubclass(cls, sk.StaticKernelError)
    assert not issubclass(cls, sk.DeclarationError)


@pytest.mark.parametrize("cls", _RULE_ERRORS, ids=lambda c: c.__name__)
def test_rule_errors_are_caught_by_the_deprecated_phase_classes(cls: type):
    assert issubclass(cls, sk.HardwareRuleError)
    # For one release: what `except HardwareLimitError` and `except PlanError` caught.
    assert issubclass(cls, sk.HardwareLimitError) and issubclass(cls, sk.DeclarationError)
    assert issubclass(cls, sk.PlanError) and issubclass(cls, sk.CallError)


def test_subclass_relations():
    assert issubclass(sk.SharedMemoryError, sk.HardwareLimitError)
    assert issubclass(sk.ResultMismatchError, sk.BodyError)
    assert issubclass(sk.UnsupportedOpError, sk.BodyError)
    assert issubclass(sk.StaticKernelError, Exception)


def test_every_error_class_is_exported():
    classes = [getattr(_errors, n) for n in _errors.__all__]
    errors = [c for c in classes if isinstance(c, type) and issubclass(c, BaseException)]
    for cls in classes:
        assert getattr(sk, cls.__name__) is cls, cls.__name__
        assert cls.__name__ in sk.__all__, cls.__name__
    assert all(issubclass(cls, sk.StaticKernelError) for cls in errors)
    assert set(classes) - set(errors) == {sk.Phase}
    listed = set(_DECLARATION_ERRORS) | set(_CALL_ERRORS) | set(_RULE_ERRORS)
    listed |= {sk.StaticKernelError, sk.DeclarationError, sk.CallError}
    assert set(errors) == listed


def test_error_renders_every_fact():
    exc = sk.ShapeError(
        "dim N differs",
        kernel="add",
        where="f.py:3",
        operand="y",
        dim="N",
        expected="N=128",
        actual="N=64",
        bindings={"M": 64, "N": 128},
        fix="make them match",
    )
    text = str(exc)
    assert text.splitlines()[0] == "kernel `add`: dim N differs"
    for piece in (
        "f.py:3",
        "operand `y`",
        "dim N",
        "N=128",
        "N=64",
        "M=64, N=128",
        "make them match",
    ):
        assert piece in text
    assert exc.bindings == {"M": 64, "N": 128}


def test_declaration_error_is_catchable_as_root():
    with pytest.raises(sk.StaticKernelError):

        @sk.kernel(tile={"Q": "BM"})
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x)


def test_valid_declarations_raise_nothing():
    @sk.kernel(tile={"M": "BM", "N": "BN"})
    def k(
        x: Float[Array, "M N"],
        b: Float[Array, " N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 128,
        scale: sk.Const[float] = 2.0,
    ) -> Float[Array, "M N"]:
        return sk.load(x) * scale + sk.load(b)

    @sk.kernel(tile={"M": "BM"})
    def two(
        x: Int32[Array, "M N"], *, BM: sk.Const[int] = 128
    ) -> tuple[Int32[Array, "M N"], Int32[Array, " M"]]:
        v = sk.load(x, fill=0)
        return v, sk.sum(v, axis=1)

    assert k.consts == {"BM": 64, "BN": 128, "scale": 2.0}
    assert two.spec.result_is_tuple


def test_round_is_supported():
    k = _declare_with(_op_round)
    assert k.spec.name == "k"
