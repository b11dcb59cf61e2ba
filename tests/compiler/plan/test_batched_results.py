"""A batch entry's 2-D result whose blocks span its whole rows, and whose rows are ragged, is
written padded to whole blocks and sliced back (`plan/arrays.py`).

On a GPU, Mosaic GPU stores a block that is contiguous in global memory (whole rows of an
entry) by a plain bulk copy, clipped only at the end of the whole array: the last block's rows
past one entry's edge would land in the next entry's first rows. The interpreter clips each
dim, so it cannot show that; these tests check the arrays the plan lays out and the module
writes, and that the results stay exact in the interpreter.
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


def test_ragged_whole_rows_of_a_batch_entry_are_written_padded() -> None:
    plan = doubled_rows.plan(struct(3, 100, 64))
    (result,) = plan.results
    assert tuple(result.gmem_shape) == (3, 128, 64)
    assert any("sliced back to [3, 100, 64]" in note for note in plan.notes)
    source = doubled_rows.emit(struct(3, 100, 64))
    assert "jax.ShapeDtypeStruct((3, 128, 64), jnp.float32)" in source
    assert "return result[:3, :100, :64]" in source


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


@pytest.mark.parametrize("shape", [(3, 100, 64), (2, 1, 8), (4, 65, 200), (1, 64, 64)])
def test_padded_results_are_exact(shape: tuple[int, ...]) -> None:
    x = jnp.asarray(np.random.default_rng(list(shape)).standard_normal(shape), jnp.float32)
    np.testing.assert_array_equal(np.asarray(doubled_rows(x)), 2 * np.asarray(x))


def test_attention_and_decoding_heads_write_whole_blocks_of_their_own() -> None:
    """attention at Sq = 4095 (its last block of queries would write row 0 of the next head)
    and paged decoding of 4 query heads a key head (a block of 64 rows for 4)."""
    q = jax.ShapeDtypeStruct((1, 16, 4095, 128), jnp.bfloat16)
    (out,) = attention.plan(q, q, q).results
    assert tuple(out.gmem_shape) == (1, 16, 4096, 128)
    heads = paged_attention_heads.plan(
        jax.ShapeDtypeStruct((32, 8, 4, 128), jnp.bfloat16),
        jax.ShapeDtypeStruct((8, 8192, 16, 128), jnp.bfloat16),
        jax.ShapeDtypeStruct((8, 8192, 16, 128), jnp.bfloat16),
        jax.ShapeDtypeStruct((32, 256), jnp.int32),
        jax.ShapeDtypeStruct((32,), jnp.int32),
    )
    assert tuple(heads.results[0].gmem_shape) == (32, 8, 64, 128)
