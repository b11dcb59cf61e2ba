"""Ragged groups (`ragged={"M": "group_sizes"}`) at the declaration: every refusal is the error
class the docs give, raised at the decorator's line, naming the operand and the dim it is
about, with what was expected, what was found and a fix; the bodies the warp-specialized
matmul does not compute are a RaggedGroupsError; and the spec of a declaration it takes.

Every kernel here is built by `declare`, from the gallery's grouped matmul with one thing
changed; its decorator carries the `# @declared` marker that the refusals' lines are checked
against.
"""

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, BFloat16, Float32, Int8, Int16, Int32, UInt8

import statickernel as sk
from grouped_matmul import grouped_matmul
from markers import line_finder
from statickernel._compiler.mosaic_gpu.plan.warpspec import WarpSpecialized

_FILE = pathlib.Path(__file__)

line_of = line_finder(__file__)

_DEFAULT = object()


def declare(
    *,
    x: str = "M K",
    w: str = "G K N",
    sizes: str = " G",
    sizes_type: Any = Int32,
    result: str = "M N",
    tile: Any = _DEFAULT,
    loop: Any = _DEFAULT,
    ragged: Any = _DEFAULT,
    batch: Any = None,
    body: str = "fold",
) -> sk.Kernel[..., Any]:
    """The gallery's grouped matmul with the layouts, the maps and the body given. Bodies:
    "fold" (acc + sk.dot(x, w)), "scaled-fold" (acc + sk.dot(x, w) * 2), "max-fold"
    (jnp.maximum(acc, sk.dot(x, w))), "two-dots" (acc + sk.dot(x, w) + sk.dot(x, v)),
    "no-loop" (x, w and v unread: twice the tile operand c) and "tile-epilogue" (the fold,
    plus the tile operand c)."""
    x_type, w_type = BFloat16[Array, x], BFloat16[Array, w]
    sizes_t = sizes_type[Array, sizes]
    result_type = Float32[Array, result]
    options: dict[str, Any] = {
        "tile": {"M": "BM", "N": "BN"} if tile is _DEFAULT else tile,
        "loop": {"K": "BK"} if loop is _DEFAULT else loop,
        "ragged": {"M": "group_sizes"} if ragged is _DEFAULT else ragged,
    }
    if batch is not None:
        options["batch"] = batch
    with_c = body in ("no-loop", "tile-epilogue")
    with_v = body == "two-dots"

    def fold(acc: jax.Array, x: Any, w: Any, v: Any) -> jax.Array:
        if body == "scaled-fold":
            return acc + sk.dot(x, w) * 2
        if body == "max-fold":
            return jnp.maximum(acc, sk.dot(x, w))
        if body == "two-dots":
            return acc + sk.dot(x, w) + sk.dot(x, v)
        return acc + sk.dot(x, w)

    if with_c:

        @sk.kernel(**options)  # @declared-c
        def k_c(
            x: x_type,  # pyright: ignore[reportInvalidTypeForm]
            w: w_type,  # pyright: ignore[reportInvalidTypeForm]
            group_sizes: sizes_t,  # pyright: ignore[reportInvalidTypeForm]
            c: Float32[Array, "M N"],
            *,
            BM: sk.Const[int] = 128,
            BN: sk.Const[int] = 128,
            BK: sk.Const[int] = 64,
        ) -> result_type:  # pyright: ignore[reportInvalidTypeForm]
            if body == "no-loop":
                return sk.load(c) * 2
            init = jnp.zeros((BM, BN), jnp.float32)
            acc = sk.loop("K", lambda acc: fold(acc, x, w, None), init=init)
            return acc + sk.load(c)

        return k_c

    if with_v:

        @sk.kernel(**options)  # @declared-v
        def k_v(
            x: x_type,  # pyright: ignore[reportInvalidTypeForm]
            w: w_type,  # pyright: ignore[reportInvalidTypeForm]
            v: w_type,  # pyright: ignore[reportInvalidTypeForm]
            group_sizes: sizes_t,  # pyright: ignore[reportInvalidTypeForm]
            *,
            BM: sk.Const[int] = 128,
            BN: sk.Const[int] = 128,
            BK: sk.Const[int] = 64,
        ) -> result_type:  # pyright: ignore[reportInvalidTypeForm]
            init = jnp.zeros((BM, BN), jnp.float32)
            return sk.loop("K", lambda acc: fold(acc, x, w, v), init=init)

        return k_v

    @sk.kernel(**options)  # @declared
    def k(
        x: x_type,  # pyright: ignore[reportInvalidTypeForm]
        w: w_type,  # pyright: ignore[reportInvalidTypeForm]
        group_sizes: sizes_t,  # pyright: ignore[reportInvalidTypeForm]
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 128,
        BK: sk.Const[int] = 64,
    ) -> result_type:  # pyright: ignore[reportInvalidTypeForm]
        return sk.loop(
            "K", lambda acc: fold(acc, x, w, None), init=jnp.zeros((BM, BN), jnp.float32)
        )

    return k


def check(
    exc: sk.StaticKernelError,
    *,
    error: type[sk.StaticKernelError] = sk.AnnotationError,
    operand: str | None,
    dim: str | None,
    tag: str = "declared",
    mentions: tuple[str, ...] = (),
) -> None:
    """The facts every refusal carries: its exact class, the decorator's line, the kernel,
    the operand and the dim (None where the rule is about neither), what was expected and
    found, a fix, and `mentions` in its text."""
    assert type(exc) is error, repr(exc)
    assert exc.where is not None and exc.where.endswith(f"{_FILE.name}:{line_of(tag)}"), (
        exc.where,
        str(exc),
    )
    assert exc.kernel in ("k", "k_c", "k_v"), str(exc)
    assert exc.operand == operand, str(exc)
    assert exc.dim == dim, str(exc)
    assert exc.expected and exc.actual, str(exc)
    assert exc.fix and exc.fix.strip(), str(exc)
    text = str(exc)
    for word in mentions:
        assert word in text, (word, text)


def refused(**changes: Any) -> sk.StaticKernelError:
    with pytest.raises(sk.StaticKernelError) as info:
        declare(**changes)
    return info.value


# --- the spec of what is taken --------------------------------------------------------------


def test_the_spec_of_the_gallery_kernel() -> None:
    spec = grouped_matmul.spec
    assert spec.ragged == (("M", "group_sizes"),)
    assert spec.ragged_groups == {"G": "M"}
    assert spec.group_sizes == ("group_sizes",)
    w = next(op for op in spec.operands if op.name == "w")
    assert w.block_dims == ("K", "N") and w.groups == ("G",)
    x = next(op for op in spec.operands if op.name == "x")
    assert x.groups == ()


def test_a_kernel_built_here_has_the_same_spec() -> None:
    spec = declare().spec
    assert spec.ragged == (("M", "group_sizes"),) and spec.ragged_groups == {"G": "M"}


@pytest.mark.parametrize("annotation", [Int16, Int8, UInt8], ids=["int16", "int8", "uint8"])
def test_sizes_of_any_index_dtype_are_taken(annotation: Any) -> None:
    assert declare(sizes_type=annotation).spec.ragged == (("M", "group_sizes"),)


def test_a_group_dim_of_another_name_is_taken() -> None:
    spec = declare(w="E K N", sizes=" E").spec
    assert spec.ragged_groups == {"E": "M"}


def test_empty_ragged_is_no_ragged() -> None:
    spec = declare(w="K N", ragged={}).spec
    assert spec.ragged == () and spec.ragged_groups == {}


# --- ragged= itself -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ragged",
    ["M", [("M", "group_sizes")], {"M": 3}, {1: "group_sizes"}, ("M", "group_sizes")],
    ids=["a-str", "a-list-of-pairs", "an-int-operand", "an-int-dim", "a-tuple"],
)
def test_ragged_that_is_not_a_dict_of_names(ragged: Any) -> None:
    exc = refused(ragged=ragged)
    check(exc, operand=None, dim=None, mentions=('ragged={"M": "group_sizes"}',))
    assert "ragged=" in exc.what
    assert exc.actual == repr(ragged)


def test_two_dims_split_into_groups() -> None:
    exc = refused(ragged={"M": "group_sizes", "N": "group_sizes"})
    check(exc, operand=None, dim=None, mentions=("splits 2 dims",))
    assert "'M'" in exc.actual and "'N'" in exc.actual


def test_sizes_that_no_operand_is_called() -> None:
    exc = refused(ragged={"M": "counts"})
    check(exc, operand="counts", dim="M", mentions=("`counts`",))
    assert "x, w, group_sizes" in exc.actual
    assert exc.fix and "counts" in exc.fix


@pytest.mark.parametrize("sizes", ["G H", "G M"], ids=["G-H", "G-M"])
def test_sizes_not_along_one_dim(sizes: str) -> None:
    exc = refused(sizes=sizes)
    check(exc, operand="group_sizes", dim=None, mentions=(f"'{sizes}'", "rank 2"))


def test_sizes_that_are_not_integers() -> None:
    exc = refused(sizes_type=Float32)
    check(exc, operand="group_sizes", dim=None, mentions=("not integers", "int32"))
    assert "float32" in exc.actual


# --- the split dim ----------------------------------------------------------------------------


def test_a_split_dim_that_is_not_tiled() -> None:
    exc = refused(tile={"N": "BN"})
    check(exc, operand=None, dim="M", mentions=("M is not tiled",))
    assert exc.actual == "tiled dims: N"


def test_a_looped_dim_split_into_groups() -> None:
    exc = refused(ragged={"K": "group_sizes"})
    check(exc, operand=None, dim="K", mentions=("K is not tiled",))


def test_a_split_dim_that_is_not_the_rows() -> None:
    """N is tiled and no operand with G runs along it, but the blocks' rows are M."""
    exc = refused(ragged={"N": "group_sizes"}, x="N K", w="G K M")
    check(exc, operand="group_sizes", dim="N", mentions=("the rows of the kernel's blocks are M",))
    assert exc.expected == "ragged={'M': 'group_sizes'}: the rows split into groups"


# --- the group dim ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"tile": {"M": "BM", "N": "BN", "G": "BG"}},
        {"loop": {"K": "BK", "G": "BG"}},
        {"batch": "G"},
    ],
    ids=["tiled", "looped", "batched"],
)
def test_a_group_dim_declared_elsewhere_too(changes: dict[str, Any]) -> None:
    exc = refused(**changes)
    check(exc, operand="group_sizes", dim="G", mentions=("a dim of the kernel's blocks",))


@pytest.mark.parametrize("dim", ["M", "K"])
def test_sizes_along_a_dim_of_the_blocks(dim: str) -> None:
    exc = refused(sizes=f" {dim}")
    check(exc, operand="group_sizes", dim=dim)


def test_no_operand_with_the_group_dim() -> None:
    exc = refused(w="K N")
    check(exc, operand=None, dim="G", mentions=("no operand has the group dim G",))
    assert exc.actual == "only the sizes have G"


@pytest.mark.parametrize("result", ["G N", "M G"])
def test_a_result_with_the_group_dim(result: str) -> None:
    exc = refused(result=result)
    check(exc, operand="result", dim="G", mentions=("result `result` has the group dim G",))
    assert exc.actual == f"'{result}'"


def test_an_operand_with_g_along_the_split_dim() -> None:
    exc = refused(w="G M N")
    check(exc, operand="w", dim="M", mentions=("'G K N'",))
    assert exc.actual == "'G M N'"
    assert exc.fix and "drop M from `w`" in exc.fix


@pytest.mark.parametrize(
    ("changes", "layout"),
    [({"batch": "B", "x": "B M K", "w": "B G K N", "result": "B M N"}, "B G K N")],
    ids=["with-batch-dims"],
)
def test_an_operand_with_g_not_laid_out_g_k_n(changes: dict[str, Any], layout: str) -> None:
    exc = refused(**changes)
    check(exc, operand="w", dim="G", mentions=("'G K N'",))
    assert exc.actual == f"'{layout}'"
    assert exc.fix and "lay `w` out as 'G K N'" in exc.fix


@pytest.mark.parametrize("layout", ["K G N", "K N G"])
def test_an_operand_with_g_not_first(layout: str) -> None:
    exc = refused(w=layout)
    check(exc, operand="w", dim="G", mentions=("'G K N'",))


# --- bodies the warp-specialized matmul does not compute ----------------------------------


@pytest.mark.parametrize(
    ("body", "tag", "actual"),
    [
        ("scaled-fold", "declared", "a step that does more than add sk.dot(x, w)"),
        ("max-fold", "declared", "a step that does more than add sk.dot(x, w)"),
        ("two-dots", "declared-v", "a step that does more than add sk.dot(x, w)"),
        ("tile-epilogue", "declared-c", "an epilogue that reads an operand other than a vector"),
        ("no-loop", "declared-c", "a body without a loop"),
    ],
)
def test_bodies_refused_as_ragged_groups_errors(body: str, tag: str, actual: str) -> None:
    exc = refused(body=body)
    check(
        exc,
        error=sk.RaggedGroupsError,
        operand="group_sizes",
        dim="M",
        tag=tag,
        mentions=("split into groups (ragged=)", "warp-specialized matmul"),
    )
    assert exc.actual.startswith(actual), exc.actual
    assert exc.fix and "acc + sk.dot(x, w)" in exc.fix
    assert isinstance(exc, sk.BodyError) and exc.code == "SK111"


def test_the_gallery_body_is_taken_with_an_epilogue_of_vectors() -> None:
    """An elementwise epilogue of a column vector is the warp-specialized matmul's."""

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, ragged={"M": "group_sizes"})
    def k(
        x: BFloat16[Array, "M K"],
        w: BFloat16[Array, "G K N"],
        group_sizes: Int32[Array, " G"],
        bias: Float32[Array, " N"],
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 128,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        acc = sk.loop("K", lambda acc: acc + sk.dot(x, w), init=jnp.zeros((BM, BN), jnp.float32))
        return jax.nn.relu(acc + sk.load(bias)[None, :])

    S = jax.ShapeDtypeStruct
    plan = k.plan(
        S((300, 64), jnp.bfloat16),
        S((3, 64, 260), jnp.bfloat16),
        S((3,), jnp.int32),
        S((260,), jnp.float32),
    )
    assert isinstance(plan.warp_specialized, WarpSpecialized)
    assert plan.warp_specialized.ragged is not None
