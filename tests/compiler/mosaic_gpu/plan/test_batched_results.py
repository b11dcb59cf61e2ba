"""A batch entry's 2-D result whose blocks span its whole rows, and whose rows are ragged:
its last block stores the rows inside the entry alone (`OperandPlan.last_block_rows`,
`emit/boxes.py`), or, where the form's store cannot (the row form), it is written padded to
whole blocks and sliced back (`plan/arrays.py`).

On a GPU, Mosaic GPU stores a block that is contiguous in global memory (whole rows of an
entry) by a plain bulk copy, clipped only at the end of the whole array: the last block's rows
past one entry's edge would land in the next entry's first rows. The interpreter clips each
dim, so it cannot show that; these tests check the arrays and copies the plan and the module
give, and that the results stay exact in the interpreter.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float32

import statickernel as sk
from attention import attention
from paged_attention import paged_attention_heads


@sk.kernel(batch="B", tile={"M": "BM"})
def doubled_rows(x: Float32[Array, "B M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "B M N"]:
    """Each batch entry's rows, doubled: blocks of whole rows."""
    return sk.load(x) * 2.0


@sk.kernel(batch="B", tile={"M": "BM", "N": "BN"})
def doubled_tiles(
    x: Float32[Array, "B M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Float32[Array, "B M N"]:
    """The same, in blocks narrower than a row where N > BN."""
    return sk.load(x) * 2.0


@sk.kernel(tile={"M": "BM"})
def doubled_unbatched(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
    return sk.load(x) * 2.0


def struct(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def test_the_last_block_of_a_batch_entry_stores_its_rows_alone() -> None:
    plan = doubled_rows.plan(struct(3, 100, 64))
    (result,) = plan.results
    assert tuple(result.gmem_shape) == (3, 100, 64) and result.last_block_rows == 36
    assert not any("sliced back" in note for note in plan.notes)
    source = doubled_rows.emit(struct(3, 100, 64))
    # The first block whole, under pl.when; the last one's 36 rows from its buffer's first.
    assert "@pl.when(block_M < 1)" in source and "@pl.when(block_M == 1)" in source
    assert "result_smem.at[pl.ds(0, 36)], result_gmem.at[pl.ds(64, 36), :]" in source
    assert "return result\n" in source  # nothing sliced back


def test_one_block_an_entry_stores_its_rows_without_a_guard() -> None:
    source = doubled_rows.emit(struct(2, 5, 64))
    assert "pl.when" not in source
    assert "result_smem.at[pl.ds(0, 5)], result_gmem.at[pl.ds(0, 5), :]" in source


@pytest.mark.parametrize(
    ("kernel", "shape", "why"),
    [
        (doubled_rows, (3, 128, 64), "rows in whole blocks"),
        (doubled_tiles, (3, 100, 200), "blocks narrower than a row: each dim clipped"),
        (doubled_unbatched, (100, 64), "no next entry: clipped at the array's end"),
    ],
)
def test_other_results_are_written_as_they_are(
    kernel: sk.Kernel, shape: tuple[int, ...], why: str
) -> None:
    plan = kernel.plan(struct(*shape))
    (result,) = plan.results
    assert tuple(result.gmem_shape) == shape, why
    assert not any("sliced back" in note for note in plan.notes), why


@pytest.mark.parametrize(
    "shape", [(3, 100, 64), (2, 1, 8), (4, 65, 200), (1, 64, 64), (3, 100, 61), (2, 100, 300)]
)
def test_the_stored_rows_are_exact(shape: tuple[int, ...]) -> None:
    """Shapes with one block an entry, several, none ragged, rows padded to 16 bytes, and a
    row in two column boxes: exact, and cross-lowered."""
    x = jnp.asarray(np.random.default_rng(list(shape)).standard_normal(shape), jnp.float32)
    np.testing.assert_array_equal(np.asarray(doubled_rows(x)), 2 * np.asarray(x))
    doubled_rows.lower(x)


def test_attention_and_decoding_heads_store_their_last_rows_alone() -> None:
    """attention at Sq = 4095 (its last block of queries would write row 0 of the next head)
    and paged decoding of 4 query heads a key head (a block of 64 rows for 4)."""
    q = jax.ShapeDtypeStruct((1, 16, 4095, 128), jnp.bfloat16)
    (out,) = attention.plan(q, q, q).results
    assert tuple(out.gmem_shape) == (1, 16, 4095, 128) and out.last_block_rows == 63
    heads = paged_attention_heads.plan(
        jax.ShapeDtypeStruct((32, 8, 4, 128), jnp.bfloat16),
        jax.ShapeDtypeStruct((8, 8192, 16, 128), jnp.bfloat16),
        jax.ShapeDtypeStruct((8, 8192, 16, 128), jnp.bfloat16),
        jax.ShapeDtypeStruct((32, 256), jnp.int32),
        jax.ShapeDtypeStruct((32,), jnp.int32),
    )
    assert tuple(heads.results[0].gmem_shape) == (32, 8, 4, 128)
    assert heads.results[0].last_block_rows == 4
