"""Index operands (`index={"V": "ids"}`) at the declaration: every refusal is an
AnnotationError raised at the decorator's line, naming the operand and the dim it is about,
with a fix that says what to write instead; and the declarations the docs describe are taken.

Each refused kernel is declared inside `pytest.raises`; lines are found through `# @tag`
marker comments on the decorator line.
"""

import pathlib
import re
from typing import Any

import jax.numpy as jnp
import pytest
from jaxtyping import (
    Array,
    BFloat16,
    Float,
    Float32,
    Int,
    Int8,
    Int16,
    Int32,
    Int64,
    Shaped,
    UInt8,
    UInt16,
    UInt32,
)

import statickernel as sk
from markers import line_finder
from statickernel._compiler.declare.indexing import INDEX_DTYPES

_FILE = pathlib.Path(__file__)

line_of = line_finder(__file__)


def check(
    exc: sk.StaticKernelError,
    tag: str,
    *,
    operand: str | None,
    dim: str | None,
    fix_mentions: tuple[str, ...] = (),
) -> None:
    """The facts every index refusal carries: the decorator's line, the kernel, the operand and
    the dim (None where the rule is about neither), and a fix naming what to change."""
    assert type(exc) is sk.AnnotationError, repr(exc)
    assert exc.where is not None, str(exc)
    assert exc.where.endswith(f"{_FILE.name}:{line_of(tag)}"), (exc.where, str(exc))
    assert exc.kernel == "k"
    assert exc.operand == operand, str(exc)
    assert exc.dim == dim, str(exc)
    assert exc.fix and exc.fix.strip(), str(exc)
    for word in fix_mentions:
        assert word in exc.fix, (word, exc.fix)
    assert exc.expected, str(exc)
    assert exc.actual, str(exc)
    text = str(exc)
    assert exc.where in text and exc.fix in text


# --- index= itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index",
    [[("V", "ids")], "V", {"V": 3}, {1: "ids"}, {"V": ("ids",)}, (("V", "ids"),)],
    ids=["list-of-pairs", "a-str", "int-operand", "int-dim", "tuple-operand", "tuple-of-pairs"],
)
def test_index_that_is_not_a_dict_of_names(index: Any) -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index=index)  # @not-a-dict
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "not-a-dict", operand=None, dim=None, fix_mentions=('index={"V": "ids"}',))
    assert "dict" in info.value.expected
    assert info.value.actual == repr(index)


def test_an_empty_index_is_no_index() -> None:
    @sk.kernel(tile={"M": "BM"}, index={})
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return sk.load(x)

    assert k.spec.index == ()


# --- the index operand ----------------------------------------------------------------------


def test_index_operand_missing() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "tokens"})  # @missing
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "missing", operand="tokens", dim="V", fix_mentions=("tokens: Int32",))
    assert "no operand" in info.value.what
    # The operands it could have meant are listed.
    assert "table" in info.value.expected and "ids" in info.value.expected


def test_index_operand_is_a_result() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "result"})  # @a-result
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "a-result", operand="result", dim="V", fix_mentions=("operand",))
    assert "a result" in info.value.what


@pytest.mark.parametrize("dims", ["T S", ""], ids=["2-D", "0-D"])
def test_index_operand_that_is_not_1d(dims: str) -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @not-1d
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, dims], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "not-1d", operand="ids", dim="V", fix_mentions=("flatten", '" T"'))
    assert info.value.actual == f"'{dims}'"


def test_index_operand_with_a_batch_dim() -> None:
    """A batch of sequences, `ids: "B T"` under batch="B": flattened outside, as the fix says."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, batch="B", index={"V": "ids"})  # @batched-ids
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, "B T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "B T D"]:
            return sk.load(table)

    check(info.value, "batched-ids", operand="ids", dim="V", fix_mentions=("flatten",))
    assert info.value.actual == "'B T'"


def test_index_operand_along_the_dim_it_indexes() -> None:
    """`ids: " V"`: a vector, but along the dim its values address."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @along-itself
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, " V"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "along-itself", operand="ids", dim="V", fix_mentions=('" T"',))
    assert "dim of its own" in info.value.what


@pytest.mark.parametrize(
    "annotation",
    [Float, Float32, BFloat16, Shaped],
    ids=["Float", "Float32", "BFloat16", "Shaped"],
)
def test_index_operand_of_float_dtype(annotation: Any) -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @float-ids
        def k(
            table: Float[Array, "V D"],
            ids: annotation[Array, " T"],  # pyright: ignore[reportInvalidTypeForm, reportUndefinedVariable]
            *,
            BT: sk.Const[int] = 64,
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(
        info.value,
        "float-ids",
        operand="ids",
        dim=None,
        fix_mentions=("Int32", "astype(jnp.int32)"),
    )
    assert "float" in info.value.what
    for dtype in INDEX_DTYPES:
        assert dtype in info.value.expected


def test_index_operand_of_int64() -> None:
    """Int64 is no dtype Mosaic GPU supports: refused by the operand's dtype check, before the
    index's, with a fix that names an annotation the index accepts."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @int64-ids
        def k(
            table: Float[Array, "V D"], ids: Int64[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "int64-ids", operand="ids", dim=None, fix_mentions=("Int32",))
    assert info.value.actual == "int64"


def test_index_operand_of_uint32() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @uint32-ids
        def k(
            table: Float[Array, "V D"], ids: UInt32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "uint32-ids", operand="ids", dim=None, fix_mentions=("astype(jnp.int32)",))
    assert info.value.actual == "uint32"
    assert "uint32" not in info.value.expected.split("(")[0]


def test_the_uint32_refusal_says_why_uint32_is_not_an_index() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})
        def k(
            table: Float[Array, "V D"], ids: UInt32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    assert "at most 32 bits" not in info.value.what
    assert re.search(r"unsigned|\bint32\b|2\*\*31", info.value.what), info.value.what


# --- the indexed dim ----------------------------------------------------------------------


def test_indexed_dim_tiled() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT", "V": "BV"}, index={"V": "ids"})  # @tiled
        def k(
            table: Float[Array, "V D"],
            ids: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BV: sk.Const[int] = 64,
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "tiled", operand=None, dim="V", fix_mentions=("tile=",))
    assert "tiled" in info.value.actual


def test_indexed_dim_looped() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, loop={"V": "BV"}, index={"V": "ids"})  # @looped
        def k(
            table: Float[Array, "V D"],
            ids: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BV: sk.Const[int] = 64,
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "looped", operand=None, dim="V", fix_mentions=("loop=",))
    assert "looped" in info.value.actual


def test_indexed_dim_batch() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, batch="V", index={"V": "ids"})  # @batch
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "batch", operand=None, dim="V", fix_mentions=("batch=",))
    assert "batch" in info.value.actual


def test_indexed_dim_a_group_dim() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(  # @group
            tile={"T": "BT"}, loop={"K": "BK"}, groups={"V": "K"}, index={"V": "ids"}
        )
        def k(
            table: Float[Array, "V D"],
            x: Float[Array, "T K"],
            ids: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "group", operand=None, dim="V", fix_mentions=("groups=",))
    assert "group" in info.value.actual


def test_indexed_dim_held_by_a_result() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @result-holds
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "V D"]:
            return sk.load(table)

    check(info.value, "result-holds", operand="result", dim="V", fix_mentions=("T",))
    assert info.value.actual == "'V D'"
    assert "'T ...'" in info.value.expected


def test_indexed_dim_held_by_a_second_result() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @second-result
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> tuple[Float[Array, "T D"], Float[Array, " V"]]:
            return sk.load(table), sk.load(table)[:, 0]

    exc = info.value
    check(exc, "second-result", operand=exc.operand, dim="V", fix_mentions=("T",))
    assert exc.operand is not None and exc.operand != "table"


def test_indexed_dim_held_by_no_operand() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"W": "ids"})  # @no-holder
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "no-holder", operand=None, dim="W", fix_mentions=("drop W from index=",))


# --- the indexed operand ------------------------------------------------------------------


def test_indexed_operand_that_does_not_lead_with_the_dim() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @not-leading
        def k(
            table: Float[Array, "D V"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "not-leading", operand="table", dim="V", fix_mentions=("V first",))
    assert info.value.actual == "'D V'"
    assert info.value.expected.startswith("'V D'")


def test_indexed_operand_that_is_1d() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @not-2d
        def k(
            table: Float[Array, " V"],
            x: Float[Array, "T D"],
            ids: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
        ) -> Float[Array, "T D"]:
            return sk.load(x)

    check(info.value, "not-2d", operand="table", dim="V", fix_mentions=("one dim after it",))
    assert info.value.actual == "'V'"


@pytest.mark.parametrize(
    ("table_dims", "ids_dims", "refused"),
    [("V D E", " T", "table"), ("D V E", " T", "table"), ("V D", "S T U", "ids")],
    ids=["table-V-D-E", "table-D-V-E", "ids-3-D"],
)
def test_rank_3_operands_are_refused_by_the_rank_rule(
    table_dims: str, ids_dims: str, refused: str
) -> None:
    """Rank 3 is refused before index= is read, by the rule every operand follows."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @rank-3
        def k(
            table: Float[Array, table_dims],
            x: Float[Array, "T D"],
            ids: Int32[Array, ids_dims],
            *,
            BT: sk.Const[int] = 64,
        ) -> Float[Array, "T D"]:
            return sk.load(x)

    check(info.value, "rank-3", operand=refused, dim=None, fix_mentions=("reshape",))
    assert "rank 3" in info.value.what


def test_indexed_operand_with_a_batch_dim() -> None:
    """A table per batch entry, `"B V D"` under batch="B": not the rows of a 2-D operand."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, batch="B", index={"V": "ids"})  # @batched-table
        def k(
            table: Float[Array, "B V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "B T D"]:
            return sk.load(table)

    check(info.value, "batched-table", operand="table", dim="V", fix_mentions=("table",))


def test_indexed_operand_whose_other_dim_is_looped() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, loop={"D": "BD"}, index={"V": "ids"})  # @columns-looped
        def k(
            table: Float[Array, "V D"],
            ids: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float[Array, " T"]:
            return sk.loop(
                "D",
                lambda acc: acc + sk.sum(sk.load(table), axis=1),
                init=jnp.zeros((BT,), jnp.float32),
            )

    check(info.value, "columns-looped", operand="table", dim="D", fix_mentions=("tile D",))
    assert "loop=" in info.value.actual


def test_indexed_operand_that_also_has_the_index_dim() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @has-index-dim
        def k(
            x: Float[Array, "T D"],
            table: Float[Array, "V T"],
            ids: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
        ) -> Float[Array, "T D"]:
            return sk.load(x)

    check(info.value, "has-index-dim", operand="ids", dim="T", fix_mentions=("differently",))
    assert info.value.actual == "`ids`: 'T', `table`: 'V T'"


def test_every_operand_with_the_dim_is_checked() -> None:
    """A second operand with V, laid out the other way, is refused even when the first is
    right."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})  # @second-holder
        def k(
            table: Float[Array, "V D"],
            other: Float[Array, "D V"],
            ids: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    check(info.value, "second-holder", operand="other", dim="V", fix_mentions=("other",))


def test_an_index_along_the_columns_is_blamed_on_the_index() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})
        def k(
            table: Float[Array, "V D"], ids: Int32[Array, " D"], *, BT: sk.Const[int] = 64
        ) -> Float[Array, "T D"]:
            return sk.load(table)

    assert info.value.operand == "ids", str(info.value)
    assert info.value.fix and "ids" in info.value.fix, str(info.value)


# --- declarations that are taken ----------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "dtype"),
    [(Int32, "int32"), (Int16, "int16"), (UInt16, "uint16"), (Int8, "int8"), (UInt8, "uint8")],
    ids=["Int32", "Int16", "UInt16", "Int8", "UInt8"],
)
def test_every_index_dtype_is_taken(annotation: Any, dtype: str) -> None:
    """An 8-bit index loaded by the body needs 128-row blocks (its 1-D block is copied in
    128-byte rows): BT=128 serves every dtype."""

    @sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
    def k(
        table: Float[Array, "V D"],
        ids: annotation[Array, " T"],  # pyright: ignore[reportInvalidTypeForm, reportUndefinedVariable]
        *,
        BT: sk.Const[int] = 128,
        BD: sk.Const[int] = 128,
    ) -> Float[Array, "T D"]:
        return sk.load(table)

    assert dtype in INDEX_DTYPES
    assert k.spec.index == (("V", "ids"),)


def test_int_annotation_is_taken() -> None:
    """`Int[Array, " T"]` allows int32, int16 and int8 (int64 is no Mosaic GPU dtype)."""

    @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})
    def k(
        table: Float[Array, "V D"], ids: Int[Array, " T"], *, BT: sk.Const[int] = 128
    ) -> Float[Array, "T D"]:
        return sk.load(table)

    assert k.spec.index == (("V", "ids"),)


@pytest.mark.xfail(
    strict=True,
    raises=sk.BlockAlignmentError,
    reason="an 8-bit index the body never loads is refused at BT=64 with BlockAlignmentError "
    "'the row block along T is 64 elements, not a multiple of 128 ... 128-byte copies for 1-D "
    "blocks' (fix: set BT to 128), although such an index is read element by element from "
    "global memory and never copied as a block",
)
@pytest.mark.parametrize("annotation", [UInt8, Int8, Int], ids=["UInt8", "Int8", "Int"])
def test_an_8_bit_index_the_body_does_not_load_takes_64_row_blocks(annotation: Any) -> None:
    @sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
    def k(
        table: Float[Array, "V D"],
        ids: annotation[Array, " T"],  # pyright: ignore[reportInvalidTypeForm, reportUndefinedVariable]
        *,
        BT: sk.Const[int] = 64,
        BD: sk.Const[int] = 128,
    ) -> Float[Array, "T D"]:
        return sk.load(table)

    assert k.spec.index == (("V", "ids"),)


def test_two_indexed_dims_and_two_indices() -> None:
    """GPT-2's token and position embeddings: two tables, each with its own index along T."""

    @sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids", "P": "pos"})
    def k(
        wte: Float[Array, "V D"],
        wpe: Float[Array, "P D"],
        ids: Int32[Array, " T"],
        pos: Int32[Array, " T"],
        *,
        BT: sk.Const[int] = 64,
        BD: sk.Const[int] = 128,
    ) -> Float[Array, "T D"]:
        return sk.load(wte) + sk.load(wpe)

    assert dict(k.spec.index) == {"V": "ids", "P": "pos"}


def test_two_tables_with_one_dim_share_the_index() -> None:
    @sk.kernel(tile={"T": "BT"}, index={"V": "ids"})
    def k(
        table: Float[Array, "V D"],
        bias: Float[Array, "V D"],
        ids: Int32[Array, " T"],
        *,
        BT: sk.Const[int] = 64,
    ) -> Float[Array, "T D"]:
        return sk.load(table) + sk.load(bias)

    assert k.spec.index == (("V", "ids"),)
