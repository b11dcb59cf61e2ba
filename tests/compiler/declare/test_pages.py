"""Paged operands (`pages={"P": "tables"}`) at the declaration and at the call: every refusal
is the error class the docs give, raised at the user's line (the decorator's for a
declaration, the call's for a call), naming the operand and the dim it is about, with what
was expected, what was found and a fix; and the declarations the docs describe are taken.

Each refused kernel is declared inside `pytest.raises`; lines are found through `# @tag`
marker comments.
"""

import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import (
    Array,
    BFloat16,
    Float,
    Float32,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
)

import statickernel as sk
from markers import line_finder
from statickernel._compiler.declare.indexing import INDEX_DTYPES

_FILE = pathlib.Path(__file__)

line_of = line_finder(__file__)

# The declaration every kernel here starts from: a batch of sequences, D tiled, S walked.
PAGED: dict[str, Any] = {"batch": "B", "tile": {"D": "BD"}, "loop": {"S": "BS"}}


def check(
    exc: sk.StaticKernelError,
    tag: str,
    *,
    error: type[sk.StaticKernelError] = sk.AnnotationError,
    kernel: str = "k",
    operand: str | None,
    dim: str | None,
    fix_mentions: tuple[str, ...] = (),
) -> None:
    """The facts every refusal carries: its exact class, the line of the tag, the kernel, the
    operand and the dim (None where the rule is about neither), what was expected and found,
    and a fix naming what to change."""
    assert type(exc) is error, repr(exc)
    assert exc.where is not None, str(exc)
    assert exc.where.endswith(f"{_FILE.name}:{line_of(tag)}"), (exc.where, str(exc))
    assert exc.kernel == kernel, str(exc)
    assert exc.operand == operand, str(exc)
    assert exc.dim == dim, str(exc)
    assert exc.expected, str(exc)
    assert exc.actual, str(exc)
    assert exc.fix and exc.fix.strip(), str(exc)
    for word in fix_mentions:
        assert word in exc.fix, (word, exc.fix)
    text = str(exc)
    assert exc.where in text and exc.fix in text


# --- pages= itself --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pages",
    ["P", {"P": 3}, {"P": ("tables",)}],
    ids=["a-str", "int-table", "tuple-table"],
)
def test_pages_that_is_not_a_dict_of_names(pages: Any) -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages=pages)  # @not-a-dict
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "not-a-dict", operand=None, dim=None, fix_mentions=('pages={"P": ',))
    assert "pages=" in info.value.what
    assert "dict" in info.value.expected
    assert info.value.actual == repr(pages)


@pytest.mark.parametrize(
    "pages",
    [[("P", "tables")], (("P", "tables"),), {1: "tables"}],
    ids=["list-of-pairs", "tuple-of-pairs", "int-dim"],
)
def test_pages_of_pairs_or_int_dims_is_refused_as_pages(pages: Any) -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages=pages)
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    assert "pages=" in info.value.what, str(info.value)
    assert info.value.actual == repr(pages)


def test_empty_pages_is_no_pages() -> None:
    @sk.kernel(tile={"M": "BM"}, pages={})
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return sk.load(x)

    assert k.spec.page_tables == {}


# --- a page dim in groups= or index= too ------------------------------------------------------


@pytest.mark.parametrize("also", ["groups", "index"])
def test_a_page_dim_also_in_groups_or_index(also: str) -> None:
    extra: dict[str, Any] = {"groups": {"P": "S"}} if also == "groups" else {}
    extra |= {"index": {"P": "tables"}} if also == "index" else {}
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"}, **extra)  # @also
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "also", operand=None, dim="P", fix_mentions=(f"drop P from {also}=",))
    assert f"{also}=" in info.value.what and "page dim P" in info.value.what
    assert info.value.actual == f"P in pages= and {also}="


def test_groups_and_index_on_one_dim_proposes_pages() -> None:
    """The desugared form written out by hand: the fix names pages= instead."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(  # @by-hand
            batch="B",
            tile={"D": "BD"},
            loop={"S": "BS"},
            groups={"P": "S"},
            index={"P": "tables"},
        )
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "by-hand", operand=None, dim="P", fix_mentions=("pages={'P': 'tables'}",))
    assert "pages={'P': 'tables'}" in info.value.expected


# --- the dim after the page dim ---------------------------------------------------------------


def test_the_dim_after_the_page_dim_is_not_a_loop_dim() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @not-loop
        def k(
            kv: Float[Array, "P D S"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "not-loop", operand=None, dim="P", fix_mentions=("'P S D'", "loop="))
    assert "`kv` 'P D S'" in info.value.actual
    assert "loop dims: S" in info.value.actual


def test_the_dim_after_the_page_dim_differs_across_operands() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @differs
        def k(
            k_pages: Float[Array, "P S D"],
            v_pages: Float[Array, "P D S"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop(
                "S", lambda c: c + sk.sum(sk.load(k_pages), axis=0), init=jnp.zeros((BD,))
            )

    check(info.value, "differs", operand=None, dim="P", fix_mentions=("'P S D'",))
    assert "`k_pages` 'P S D'" in info.value.actual
    assert "`v_pages` 'P D S'" in info.value.actual


def test_pages_of_a_dim_that_is_not_looped() -> None:
    """`loop=` walks another dim: S, after the page dim, is no loop dim."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(batch="B", loop={"D": "BD"}, pages={"P": "tables"})  # @s-not-looped
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B S"]:
            return sk.loop("D", lambda c: c + sk.sum(sk.load(kv), axis=1), init=jnp.zeros((16,)))

    check(info.value, "s-not-looped", operand=None, dim="P", fix_mentions=("loop={'S': 'BS'}",))


def test_a_page_dim_no_operand_has() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables", "X": "tables"})  # @no-holder
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "no-holder", operand=None, dim="X", fix_mentions=("'X S D'",))
    assert "operands with X: none" in info.value.actual


def test_a_page_dim_last() -> None:
    """'S D P': nothing follows P; refused at the pages' operand, whichever rule says it."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @last
        def k(
            kv: Float[Array, "S D P"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    exc = info.value
    assert type(exc) is sk.AnnotationError
    assert exc.where is not None and exc.where.endswith(f"{_FILE.name}:{line_of('last')}")
    assert exc.operand == "kv" or exc.dim == "P", str(exc)


# --- the table --------------------------------------------------------------------------------


def test_the_table_is_no_operand() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "nope"})  # @missing
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "missing", operand="nope", dim="P", fix_mentions=("nope",))
    assert "tables" in info.value.expected and "kv" in info.value.expected


@pytest.mark.parametrize(
    ("dims", "batch", "result"),
    [
        (" B", "B", "B D"),
        ("", "B", "B D"),
        ("B D", "B", "B D"),
        ("B Pages", (), " D"),
    ],
    ids=["only-the-batch-dim", "0-D", "along-a-block-dim", "B-not-a-batch-dim"],
)
def test_a_table_not_laid_out_batch_dims_then_pages(dims: str, batch: Any, result: str) -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**{**PAGED, "batch": batch}, pages={"P": "tables"})  # @layout
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, dims],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, result]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "layout", operand="tables", dim="P", fix_mentions=("`tables` Int32[Array",))
    assert "page table `tables`" in info.value.what
    assert info.value.actual == f"'{dims.strip()}'"
    assert "Pages" in info.value.expected


def test_a_table_whose_batch_dim_is_not_first() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @pages-b
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "Pages B"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "pages-b", operand="tables", dim="B", fix_mentions=("'B Pages'",))


def test_a_table_whose_pages_dim_another_operand_has() -> None:
    """A per-page scale `"B Pages"` beside the table: the table's own dim is another's."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @shared
        def k(
            kv: Float[Array, "P S D"],
            scales: Float[Array, "B Pages"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "shared", operand="scales", dim="Pages", fix_mentions=("pages too",))
    assert "page table `tables`" in info.value.what


@pytest.mark.parametrize(
    ("annotation", "actual"),
    [(Float32, "float32"), (Float, "float32, bfloat16, float16"), (UInt32, "uint32")],
    ids=["Float32", "Float", "UInt32"],
)
def test_a_table_that_is_not_an_integer_index(annotation: Any, actual: str) -> None:
    table_type = annotation[Array, "B Pages"]
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @dtype
        def k(
            kv: Float[Array, "P S D"],
            tables: table_type,  # pyright: ignore[reportInvalidTypeForm]
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(
        info.value,
        "dtype",
        operand="tables",
        dim=None,
        fix_mentions=('Int32[Array, "B Pages"]', "astype(jnp.int32)"),
    )
    assert info.value.actual == actual
    for dtype in INDEX_DTYPES:
        assert dtype in info.value.expected


def test_an_int64_table() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @int64
        def k(
            kv: Float[Array, "P S D"],
            tables: Int64[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "int64", operand="tables", dim=None, fix_mentions=("Int32",))
    assert info.value.actual == "int64"


# --- nothing but the pages runs along the paged loop dim -----------------------------------


@pytest.mark.parametrize("dims", ["B S", "S D"], ids=["B-S", "S-D"])
def test_another_operand_along_the_paged_loop_dim(dims: str) -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @operand-s
        def k(
            kv: Float[Array, "P S D"],
            mask: Float[Array, dims],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "operand-s", operand="mask", dim="S", fix_mentions=("`mask`", "pages"))
    assert info.value.actual == f"'{dims}'"
    assert "runs along S" in info.value.what


def test_a_result_along_the_paged_loop_dim() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @result-s
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B S"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=1), init=jnp.zeros((BS,)))

    check(info.value, "result-s", operand="result", dim="S")
    assert info.value.actual == "'B S'"


def test_the_table_along_the_paged_loop_dim() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @table-s
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B S"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    check(info.value, "table-s", operand="tables", dim="S")


def test_two_pools_on_one_loop_dim() -> None:
    """Keys and values in pools of their own, each with its table, along the one S: each
    step copies each pool's pages from its own table."""

    @sk.kernel(
        batch="B",
        tile={"D": "BD"},
        loop={"S": "BS"},
        pages={"P": "k_tables", "Q": "v_tables"},
    )
    def k(
        k_pages: Float[Array, "P S D"],
        v_pages: Float[Array, "Q S D"],
        k_tables: Int32[Array, "B Pages"],
        v_tables: Int32[Array, "B Pages"],
        *,
        BS: sk.Const[int] = 64,
        BD: sk.Const[int] = 64,
    ) -> Float32[Array, "B D"]:
        def step(c: jax.Array) -> jax.Array:
            return c + sk.sum(sk.load(k_pages) + sk.load(v_pages), axis=0)

        return sk.loop("S", step, init=jnp.zeros((BD,)))

    kp = jax.random.normal(jax.random.key(0), (10, 32, 64))
    vp = jax.random.normal(jax.random.key(1), (7, 32, 64))
    kt = jnp.array([[1, 2, 3, 9], [0, 0, 5, 4]], jnp.int32)
    vt = jnp.array([[6, 5, 4, 3], [2, 1, 0, 6]], jnp.int32)
    want = kp[kt].reshape(2, -1, 64).sum(1) + vp[vt].reshape(2, -1, 64).sum(1)
    np.testing.assert_allclose(k(kp, vp, kt, vt), want, rtol=1e-5, atol=1e-4)


# --- how the body walks the pages ---------------------------------------------------------


def test_a_paged_loop_walked_in_reverse() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @reverse
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            def step(c: jax.Array) -> jax.Array:
                return c + sk.sum(sk.load(kv), axis=0)

            return sk.loop("S", step, init=jnp.zeros((BD,)), reverse=True)

    check(
        info.value,
        "reverse",
        error=sk.BodyError,
        operand=None,
        dim="S",
        fix_mentions=("sk.loop('S'",),
    )
    assert info.value.actual == "sk.loop('S', ..., reverse=True)"
    assert "stored in pages" in info.value.what


def test_a_paged_loop_walked_by_map_blocks() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})  # @map
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            sk.map_blocks("S", lambda: None)
            return jnp.zeros((BD,), jnp.float32)

    check(
        info.value, "map", error=sk.BodyError, operand=None, dim="S", fix_mentions=("sk.loop('S'",)
    )
    assert info.value.actual == "sk.map_blocks('S', ...)"


def test_pages_loaded_outside_their_loop() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(**PAGED, pages={"P": "tables"})
        def k(
            kv: Float[Array, "P S D"],
            tables: Int32[Array, "B Pages"],
            *,
            BS: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.sum(sk.load(kv), axis=0)  # @outside

    check(info.value, "outside", error=sk.BodyError, operand="kv", dim="S", fix_mentions=("loop",))


# --- declarations that are taken ----------------------------------------------------------


@pytest.mark.parametrize(
    "annotation",
    [Int32, Int16, UInt16, Int8, UInt8],
    ids=["Int32", "Int16", "UInt16", "Int8", "UInt8"],
)
def test_every_index_dtype_is_a_table_dtype(annotation: Any) -> None:
    table_type = annotation[Array, "B Pages"]

    @sk.kernel(**PAGED, pages={"P": "tables"})
    def k(
        kv: Float[Array, "P S D"],
        tables: table_type,  # pyright: ignore[reportInvalidTypeForm]
        *,
        BS: sk.Const[int] = 64,
        BD: sk.Const[int] = 64,
    ) -> Float32[Array, "B D"]:
        return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    assert k.spec.page_tables == {"P": "tables"}


def test_the_gallery_layout_is_taken() -> None:
    """The docstring's example: KV heads as a batch dim of the pages, the table over B only."""

    @sk.kernel(batch=("B", "Hkv"), tile={"G": "BG"}, loop={"S": "BS"}, pages={"P": "block_tables"})
    def k(
        q: BFloat16[Array, "B Hkv G D"],
        k_pages: BFloat16[Array, "Hkv P S D"],
        v_pages: BFloat16[Array, "Hkv P S D"],
        block_tables: Int32[Array, "B Pages"],
        *,
        BG: sk.Const[int] = 64,
        BS: sk.Const[int] = 64,
    ) -> Float[Array, "B Hkv G D"]:
        def step(acc: jax.Array) -> jax.Array:
            return acc + sk.dot(sk.dot(q, k_pages).astype(q.dtype), v_pages)

        return sk.loop("S", step, init=jnp.zeros((BG, sk.dim("D")), jnp.float32)).astype(q.dtype)

    assert k.spec.page_tables == {"P": "block_tables"}


@pytest.mark.parametrize(
    ("batch", "dims", "result"),
    [((), " Pages", " D"), (("B", "H"), "B H Pages", "B H D")],
    ids=["one-sequence", "a-row-per-batch-entry-and-head"],
)
def test_tables_over_any_batch_dims(batch: Any, dims: str, result: str) -> None:
    @sk.kernel(batch=batch, tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "tables"})
    def k(
        tables: Int32[Array, dims],
        kv: Float[Array, "P S D"],
        *,
        BS: sk.Const[int] = 64,
        BD: sk.Const[int] = 64,
    ) -> Float32[Array, result]:
        return sk.loop("S", lambda c: c + sk.sum(sk.load(kv), axis=0), init=jnp.zeros((BD,)))

    assert k.spec.page_tables == {"P": "tables"}


# --- at the call: the page size and the block -------------------------------------------


@sk.kernel(**PAGED, pages={"P": "tables"})
def paged_sum(
    kv: Float[Array, "P S D"],
    tables: Int32[Array, "B Pages"],
    *,
    BS: sk.Const[int] = 64,
    BD: sk.Const[int] = 64,
) -> Float32[Array, "B D"]:
    def step(c: jax.Array) -> jax.Array:
        return c + sk.sum(sk.load(kv).astype(jnp.float32), axis=0)

    return sk.loop("S", step, init=jnp.zeros((BD,), jnp.float32))


def structs(page: int, pool: int = 10, pages: int = 4) -> tuple[Any, Any]:
    return (
        jax.ShapeDtypeStruct((pool, page, 32), jnp.float32),
        jax.ShapeDtypeStruct((2, pages), jnp.int32),
    )


@pytest.mark.parametrize(("page", "BS"), [(48, 64), (24, 64), (128, 192)])
def test_a_block_neither_whole_pages_nor_a_part_of_one(page: int, BS: int) -> None:
    kv, tables = jnp.ones((10, page, 32)), jnp.zeros((2, 4), jnp.int32)
    with pytest.raises(sk.ShapeError) as info:
        paged_sum(kv, tables, BS=BS)  # @neither
    check(
        info.value,
        "neither",
        error=sk.ShapeError,
        kernel="paged_sum",
        operand="kv",
        dim="S",
        fix_mentions=("set BS to",),
    )
    assert info.value.actual == f"BS={BS}, pages of {page}"
    assert f"page size {page}" in info.value.expected


@pytest.mark.parametrize("page", [12, 4, 20, 129])
def test_pages_not_a_multiple_of_8_rows(page: int) -> None:
    kv, tables = jnp.ones((10, page, 32)), jnp.zeros((2, 4), jnp.int32)
    with pytest.raises(sk.ShapeError) as info:
        paged_sum(kv, tables)  # @not-8
    check(
        info.value,
        "not-8",
        error=sk.ShapeError,
        kernel="paged_sum",
        operand="kv",
        dim="S",
        fix_mentions=("pages of 8",),
    )
    assert info.value.actual == f"pages of {page} rows, BS=64"
    assert "multiple of 8" in info.value.what


@pytest.mark.parametrize(("page", "BS"), [(8, 64), (16, 64), (64, 64), (128, 64), (256, 128)])
def test_whole_pages_or_an_equal_part_of_one_are_planned(page: int, BS: int) -> None:
    text = str(paged_sum.plan(*structs(page), BS=BS))
    assert "pages listed by tables" in text


def proposed_blocks(fix: str) -> list[int]:
    found = re.search(r"set BS to one of ([\d, ]+)", fix)
    assert found, fix
    return [int(b) for b in found.group(1).split(",")]


@pytest.mark.parametrize("page", [48, 24, 96])
def test_every_block_the_fix_proposes_is_taken(page: int) -> None:
    kv, tables = jnp.ones((10, page, 32)), jnp.zeros((2, 4), jnp.int32)
    with pytest.raises(sk.ShapeError) as info:
        paged_sum(kv, tables, BS=64)
    assert info.value.fix
    for block in proposed_blocks(info.value.fix):
        paged_sum.plan(*structs(page), BS=block)


def test_an_empty_table_or_pool_is_refused() -> None:
    with pytest.raises(sk.ShapeError) as info:
        paged_sum(jnp.ones((10, 16, 32)), jnp.zeros((2, 0), jnp.int32))
    assert info.value.operand == "tables" and info.value.dim == "Pages"
    with pytest.raises(sk.ShapeError) as info:
        paged_sum(jnp.ones((0, 16, 32)), jnp.zeros((2, 4), jnp.int32))
    assert info.value.operand == "kv" and info.value.dim == "P"


def test_a_table_of_another_dtype_than_annotated() -> None:
    with pytest.raises(sk.DtypeError) as info:
        paged_sum(jnp.ones((10, 16, 32)), jnp.zeros((2, 4), jnp.int16))
    assert info.value.operand == "tables"
    assert info.value.fix and "astype(jnp.int32)" in info.value.fix
