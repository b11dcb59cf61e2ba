"""Rows gathered by an index operand (`index={"V": "ids"}`), against jnp.

The reference is written here, independently of the gallery's: `jnp.take` of the table's
rows at the ids clipped into [0, V), and a row of zeros wherever an id is outside [0, V)
(negative ids too: they do not count from the end). Copies and casts are compared bit for
bit; arithmetic within the tolerances of `tolerances`.

Covered: edge shapes (T of 1, below a block, prime, a block exactly; V of 1 and prime; D of
1, rows host-padded for TMA, wider than a block and ragged, whole), float32 and bfloat16
tables, every index dtype, ids all outside, padded with -1, repeated, at 0 and V-1, the
extremes of their dtype; bodies that scale, cast, load the ids themselves, reduce each row,
add two tables; T whole; drawn shapes and block sizes; the plan's text and cost; the
cross-lowering for Mosaic GPU; the emitted module; and the gallery's `embedding` through
sk.testing.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float32, Int, Int16, Int32, UInt8, UInt16

import statickernel as sk
from embedding import embedding
from jax_support import needs_mosaic_gpu
from tolerances import assert_close, tolerance_for

# --- the reference --------------------------------------------------------------------------


def gathered(table: jax.Array, ids: Any) -> jax.Array:
    """Row t is table[ids[t]] for ids[t] in [0, V), a row of zeros otherwise."""
    ids = jnp.asarray(ids).astype(jnp.int32)
    rows = table.shape[0]
    inside = (ids >= 0) & (ids < rows)
    picked = jnp.take(table, jnp.clip(ids, 0, rows - 1), axis=0)
    return jnp.where(inside[:, None], picked, jnp.zeros((), table.dtype))


def table_of(rows: int, cols: int, dtype: Any, seed: int = 0) -> jax.Array:
    """Values of magnitude 0.5 or more: a zero row where a row was due shows."""
    values = jax.random.normal(jax.random.key(seed), (rows, cols), jnp.float32)
    return (values + jnp.where(values >= 0, 0.5, -0.5)).astype(dtype)


def mixed_ids(size: int, rows: int, seed: int = 0, dtype: Any = jnp.int32) -> jax.Array:
    """Both ends of the table, just outside it on either side, then drawn ids (repeats and
    misses among them)."""
    rng = np.random.default_rng(seed)
    head = np.array([0, rows - 1, -1, rows, rows - 1, 0, -2, rows + 1])
    drawn = rng.integers(-2, rows + 2, max(size, 0))
    return jnp.asarray(np.concatenate([head, drawn])[:size], dtype)


def assert_same(got: jax.Array, want: jax.Array) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


# --- the kernels ----------------------------------------------------------------------------


@sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
def gather(
    table: Float[Array, "V D"],
    ids: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BD: sk.Const[int] = 128,
) -> Float[Array, "T D"]:
    return sk.load(table)


@sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
def gather_fill(
    table: Float[Array, "V D"],
    ids: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BD: sk.Const[int] = 128,
) -> Float[Array, "T D"]:
    return sk.load(table, fill=5.0)


@sk.kernel(tile={"T": "BT"}, index={"V": "ids"})
def gather_whole_d(
    table: Float[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
) -> Float[Array, "T D"]:
    return sk.load(table)


@sk.kernel(tile={"D": "BD"}, index={"V": "ids"})
def gather_whole_t(
    table: BFloat16[Array, "V D"], ids: Int32[Array, " T"], *, BD: sk.Const[int] = 128
) -> Float32[Array, "T D"]:
    return sk.load(table).astype(jnp.float32)


@sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
def gather_int16(
    table: Float[Array, "V D"],
    ids: Int16[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BD: sk.Const[int] = 128,
) -> Float[Array, "T D"]:
    return sk.load(table)


@sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
def gather_uint16(
    table: Float[Array, "V D"],
    ids: UInt16[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BD: sk.Const[int] = 128,
) -> Float[Array, "T D"]:
    return sk.load(table)


@sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
def gather_uint8(
    table: Float[Array, "V D"],
    ids: UInt8[Array, " T"],
    *,
    BT: sk.Const[int] = 128,
    BD: sk.Const[int] = 128,
) -> Float[Array, "T D"]:
    return sk.load(table)


@sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
def padding_id_zero(
    table: Float[Array, "V D"],
    ids: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BD: sk.Const[int] = 128,
) -> Float[Array, "T D"]:
    """torch's padding_idx=0: the body reads the ids itself and zeroes the rows of id 0."""
    return jnp.where((sk.load(ids) == 0)[:, None], 0.0, sk.load(table))


@sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
def padding_id_zero_any_int(
    table: Float[Array, "V D"],
    ids: Int[Array, " T"],
    *,
    BT: sk.Const[int] = 128,
    BD: sk.Const[int] = 128,
) -> Float[Array, "T D"]:
    """The same, with int32, int16 or int8 ids (an 8-bit block is loaded in 128-row blocks);
    the rows of id 0 read -1."""
    return jnp.where((sk.load(ids) == 0)[:, None], -1.0, sk.load(table))


@sk.kernel(tile={"T": "BT"}, index={"V": "ids"})
def ids_added(
    table: BFloat16[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
) -> Float32[Array, "T D"]:
    """The table's row, widened, plus the id it was read at."""
    return sk.load(table).astype(jnp.float32) + sk.load(ids).astype(jnp.float32)[:, None]


@sk.kernel(tile={"T": "BT"}, index={"V": "ids"})
def rms_embedding(
    table: Float[Array, "V D"],
    ids: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-6,
) -> Float[Array, "T D"]:
    """Each gathered row divided by its root mean square over the whole of D."""
    x = sk.load(table).astype(jnp.float32)
    mean_square = sk.sum(x * x, axis=1, keepdims=True) / x.shape[1]
    return (x * jax.lax.rsqrt(mean_square + eps)).astype(table.dtype)


@sk.kernel(tile={"T": "BT"}, index={"V": "ids"})
def row_max(
    table: Float[Array, "V D"], ids: Int32[Array, " T"], *, BT: sk.Const[int] = 64
) -> Float[Array, " T"]:
    return sk.max(sk.load(table, fill=-jnp.inf), axis=1)


@sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids", "P": "pos"})
def token_and_position(
    wte: Float[Array, "V D"],
    wpe: Float[Array, "P D"],
    x: Float[Array, "T D"],
    ids: Int32[Array, " T"],
    pos: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BD: sk.Const[int] = 128,
) -> Float[Array, "T D"]:
    """GPT-2's token and position embeddings added to a residual."""
    return sk.load(x) + sk.load(wte) + sk.load(wpe)


@sk.kernel(tile={"T": "BT"}, index={"V": "ids"})
def two_tables(
    table: Float[Array, "V D"],
    other: Float[Array, "V D"],
    ids: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
) -> Float[Array, "T D"]:
    """Two tables with the dim V: both gathered by the one index."""
    return sk.load(table) - sk.load(other)


@sk.kernel(tile={"T": "BT"}, batch="B", index={"V": "ids"})
def batched_residual(
    x: Float[Array, "B T D"],
    table: Float[Array, "V D"],
    ids: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
) -> Float[Array, "B T D"]:
    """One table's rows, the same for every batch entry, added to each entry's rows."""
    return sk.load(x) + sk.load(table)


# --- edge shapes ----------------------------------------------------------------------------

EDGE_SHAPES = [
    pytest.param(1, 10, 16, jnp.float32, id="T=1"),
    pytest.param(5, 37, 300, jnp.float32, id="T-below-a-block,D-ragged-over-3-blocks"),
    pytest.param(131, 97, 130, jnp.bfloat16, id="T=131,V=97-primes"),
    pytest.param(64, 64, 128, jnp.float32, id="T-and-D-one-block-exactly"),
    pytest.param(128, 200, 256, jnp.bfloat16, id="T-and-D-two-blocks-exactly"),
    pytest.param(9, 1, 16, jnp.float32, id="V=1"),
    pytest.param(20, 10, 1, jnp.float32, id="D=1-host-padded"),
    pytest.param(70, 13, 5, jnp.float32, id="f32-D=5-host-padded"),
    pytest.param(70, 13, 7, jnp.bfloat16, id="bf16-D=7-host-padded"),
    pytest.param(67, 31, 257, jnp.float32, id="D=257-ragged-and-host-padded"),
]


@pytest.mark.parametrize(("T", "V", "D", "dtype"), EDGE_SHAPES)
def test_rows_at_edge_shapes(T: int, V: int, D: int, dtype: Any) -> None:
    table = table_of(V, D, dtype)
    ids = mixed_ids(T, V)
    assert_same(gather(table, ids), gathered(table, ids))


@pytest.mark.parametrize("ids", [[0], [-1], [1], [2**31 - 1]], ids=["0", "-1", "V", "int32-max"])
def test_a_single_row_in_and_out_of_a_one_row_table(ids: list[int]) -> None:
    table = table_of(1, 16, jnp.float32)
    ids_array = jnp.asarray(ids, jnp.int32)
    assert_same(gather(table, ids_array), gathered(table, ids_array))


PATTERN_T, PATTERN_V, PATTERN_D = 70, 50, 40

PATTERNS = {
    "all-outside": np.resize([50, 51, -1, -2, 2**31 - 1, -(2**31), 1000, -50], PATTERN_T),
    "padded-with--1": np.concatenate([np.arange(1, 11), np.full(PATTERN_T - 10, -1)]),
    "one-id-repeated": np.full(PATTERN_T, 17),
    "0-and-V-1": np.resize([0, 49], PATTERN_T),
    "reversed-table": np.arange(PATTERN_T)[::-1] % PATTERN_V,
}


def test_id_patterns() -> None:
    table = table_of(PATTERN_V, PATTERN_D, jnp.bfloat16)
    for name, values in PATTERNS.items():
        ids = jnp.asarray(values, jnp.int32)
        got = gather(table, ids)
        assert_same(got, gathered(table, ids))
        if name == "all-outside":
            assert not np.any(np.asarray(got, np.float32)), "an id outside read a non-zero row"


def test_ids_outside_read_zeros_whatever_the_fill() -> None:
    """`sk.load(table, fill=5.0)`: the rows of ids outside the table are zeros, not 5."""
    table = table_of(10, 20, jnp.float32)
    ids = jnp.asarray([0, -1, 10, 9, -(2**31), 3], jnp.int32)
    got = gather_fill(table, ids)
    assert_same(got, gathered(table, ids))
    assert not np.any(np.asarray(got)[[1, 2, 4]])


def test_whole_d() -> None:
    """300 float32 columns: wider than one TMA box, so each row is copied in two."""
    table = table_of(30, 300, jnp.float32)
    ids = mixed_ids(70, 30)
    assert_same(gather_whole_d(table, ids), gathered(table, ids))


@pytest.mark.parametrize(("T", "V", "D"), [(1, 50, 40), (131, 53, 130), (64, 7, 8)])
def test_whole_t_cast_to_float32(T: int, V: int, D: int) -> None:
    table = table_of(V, D, jnp.bfloat16)
    ids = mixed_ids(T, V)
    assert_same(gather_whole_t(table, ids), gathered(table, ids).astype(jnp.float32))


# --- index dtypes ---------------------------------------------------------------------------


def test_int16_ids() -> None:
    """Negative int16 ids read zeros; the largest int16 is a row of a table that has it."""
    small = table_of(300, 16, jnp.float32)
    ids = jnp.asarray([0, 299, 300, -1, -(2**15), 2**15 - 1, 5, 5], jnp.int16)
    assert_same(gather_int16(small, ids), gathered(small, ids))
    large = table_of(40000, 8, jnp.float32, seed=1)
    ids = jnp.asarray([2**15 - 1, 0, -(2**15), 12345, -1, 7231], jnp.int16)
    assert_same(gather_int16(large, ids), gathered(large, ids))


def test_uint16_ids_above_the_int16_range() -> None:
    """uint16 ids of 32768 and more are rows, not negative ids."""
    table = table_of(70000, 8, jnp.float32)
    ids = jnp.asarray([65535, 32768, 40000, 0, 32767, 65534], jnp.uint16)
    got = gather_uint16(table, ids)
    assert_same(got, gathered(table, ids))
    assert np.all(np.asarray(got) != 0)


@pytest.mark.parametrize("V", [300, 100], ids=["V=300", "V=100"])
def test_uint8_ids(V: int) -> None:
    """255 is a row of a table of 300 rows and outside one of 100."""
    table = table_of(V, 16, jnp.float32)
    ids = jnp.asarray([0, 255, 128, 200, 99, 100, 7, 7, 254], jnp.uint8)
    assert_same(gather_uint8(table, ids), gathered(table, ids))


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        (jnp.int32, [0, 299, 300, -1, 7, 0, 2**31 - 1]),
        (jnp.int16, [0, 299, 300, -1, 7, 0, -(2**15)]),
        (jnp.int8, [0, 127, -128, -1, 7, 0, 100]),
    ],
    ids=["int32", "int16", "int8"],
)
def test_the_body_reads_ids_of_each_dtype(dtype: Any, values: list[int]) -> None:
    table = table_of(300, 24, jnp.float32)
    ids = jnp.asarray(values * 20, dtype)  # 140 rows: two blocks of 128
    got = padding_id_zero_any_int(table, ids)
    want = jnp.where((ids == 0)[:, None], -1.0, gathered(table, ids))
    assert_same(got, want)


# --- bodies ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "scale"),
    [(jnp.float32, 1000**0.5), (jnp.bfloat16, 1000**0.5)],
    ids=["float32-sqrt-D", "bfloat16-sqrt-D"],
)
def test_the_gallery_embedding_scales(dtype: Any, scale: float) -> None:
    table = table_of(97, 300, dtype)
    ids = mixed_ids(131, 97)
    got = embedding(table, ids, scale=scale)
    inside = ((ids >= 0) & (ids < 97))[:, None]
    want = jnp.where(inside, gathered(table, ids).astype(jnp.float32) * scale, 0.0)
    assert got.dtype == dtype
    assert_close(got, want.astype(dtype), tolerance_for(dtype, scale=scale))


def test_padding_id_read_by_the_body() -> None:
    table = table_of(50, 100, jnp.float32)
    ids = jnp.asarray(np.resize([0, 49, -1, 50, 7, 0, 3], 70), jnp.int32)
    got = padding_id_zero(table, ids)
    assert_same(got, jnp.where((ids == 0)[:, None], 0.0, gathered(table, ids)))


def test_ids_as_values_beside_their_rows() -> None:
    """The body adds each id to its row: the ids it loads line up with the rows gathered, and
    past the end of T neither is stored."""
    table = table_of(20, 24, jnp.bfloat16)
    ids = mixed_ids(67, 20)
    got = ids_added(table, ids)
    want = gathered(table, ids).astype(jnp.float32) + ids.astype(jnp.float32)[:, None]
    assert_close(got, want, tolerance_for(jnp.float32))


@pytest.mark.parametrize(
    ("T", "V", "D", "dtype"),
    [
        (70, 40, 200, jnp.float32),
        (131, 97, 5, jnp.float32),
        (64, 13, 7, jnp.bfloat16),
        (1, 3, 96, jnp.bfloat16),
    ],
    ids=["f32-D=200", "f32-D=5-host-padded", "bf16-D=7-host-padded", "bf16-T=1"],
)
def test_rms_normalized_rows(T: int, V: int, D: int, dtype: Any) -> None:
    table = table_of(V, D, dtype)
    ids = mixed_ids(T, V)
    rows = gathered(table, ids).astype(jnp.float32)
    want = rows * jax.lax.rsqrt(jnp.mean(rows * rows, axis=1, keepdims=True) + 1e-6)
    got = rms_embedding(table, ids)
    assert got.dtype == dtype
    # A zero row (an id outside) stays zero: 0 * rsqrt(eps).
    outside = np.asarray((ids < 0) | (ids >= V))
    assert not np.any(np.asarray(got, np.float32)[outside])
    assert_close(got, want.astype(dtype), tolerance_for(dtype, terms=D))


def test_row_max_of_gathered_rows() -> None:
    """fill=-inf past D's edge; a row outside the table is zeros, so its max is 0, not -inf."""
    table = table_of(30, 100, jnp.float32)
    ids = mixed_ids(70, 30)
    got = row_max(table, ids)
    assert_same(got, jnp.max(gathered(table, ids), axis=1))


def test_token_and_position_embeddings() -> None:
    wte, wpe = table_of(50, 96, jnp.float32), table_of(16, 96, jnp.float32, seed=1)
    x = table_of(40, 96, jnp.float32, seed=2)
    ids = mixed_ids(40, 50)
    pos = jnp.asarray(np.arange(40) % 18 - 1, jnp.int32)  # -1 and 16 are outside wpe
    got = token_and_position(wte, wpe, x, ids, pos)
    want = x + gathered(wte, ids) + gathered(wpe, pos)
    assert_close(got, want, tolerance_for(jnp.float32, terms=3, scale=4.0))


def test_two_tables_share_one_index() -> None:
    table, other = table_of(40, 72, jnp.float32), table_of(40, 72, jnp.float32, seed=1)
    ids = mixed_ids(50, 40)
    got = two_tables(table, other, ids)
    assert_close(got, gathered(table, ids) - gathered(other, ids), tolerance_for(jnp.float32))


def test_rows_shared_by_batch_entries() -> None:
    x = table_of(3 * 70, 24, jnp.float32, seed=1).reshape(3, 70, 24)
    table = table_of(10, 24, jnp.float32)
    ids = mixed_ids(70, 10)
    got = batched_residual(x, table, ids)
    assert_close(got, x + gathered(table, ids)[None], tolerance_for(jnp.float32))


def test_under_jit() -> None:
    table = table_of(37, 48, jnp.bfloat16)
    ids = mixed_ids(90, 37)
    got = jax.jit(lambda t, i: gather(t, i))(table, ids)
    assert_same(got, gathered(table, ids))


# --- drawn shapes ---------------------------------------------------------------------------


@settings(max_examples=10, deadline=None)
@given(
    T=st.integers(1, 140),
    V=st.integers(1, 300),
    D=st.integers(1, 160),
    BT=st.sampled_from([64, 128]),
    BD=st.sampled_from([64, 128]),
    bf16=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_drawn_shapes_and_blocks(
    T: int, V: int, D: int, BT: int, BD: int, bf16: bool, seed: int
) -> None:
    dtype = jnp.bfloat16 if bf16 else jnp.float32
    table = table_of(V, D, dtype, seed=seed % 7)
    ids = jnp.asarray(np.random.default_rng(seed).integers(-3, V + 3, T), jnp.int32)
    assert_same(gather(table, ids, BT=BT, BD=BD), gathered(table, ids))


# --- what is refused ------------------------------------------------------------------------


def test_ids_of_another_dtype_than_annotated() -> None:
    with pytest.raises(sk.DtypeError) as info:
        gather(table_of(10, 16, jnp.float32), jnp.asarray([0, 1], jnp.int16))
    assert info.value.operand == "ids"
    assert info.value.fix and "astype(jnp.int32)" in info.value.fix


def test_no_ids() -> None:
    with pytest.raises(sk.ShapeError) as info:
        gather(table_of(10, 16, jnp.float32), jnp.zeros((0,), jnp.int32))
    assert info.value.operand == "ids" and info.value.dim == "T"


@pytest.mark.xfail(
    strict=True,
    raises=sk.SharedMemoryError,
    reason="an RMS-normalized embedding over a whole D of 1000 float32 (or 2048 bf16) is "
    "refused: SharedMemoryError 'the blocks need 526,344 B of shared memory, over the "
    "232,448 B a block has': gathered operands decline the row form that takes whole rows at "
    "model widths, and 64-row blocks of such rows do not fit",
)
def test_rms_normalized_rows_at_a_model_width() -> None:
    table = table_of(40, 1000, jnp.float32)
    ids = mixed_ids(70, 40)
    rows = gathered(table, ids)
    want = rows * jax.lax.rsqrt(jnp.mean(rows * rows, axis=1, keepdims=True) + 1e-6)
    assert_close(rms_embedding(table, ids), want, tolerance_for(jnp.float32, terms=1000))


def test_the_shared_memory_fix_for_gathered_rows_is_one_index_takes() -> None:
    table = table_of(40, 1000, jnp.float32)
    with pytest.raises(sk.SharedMemoryError) as info:
        rms_embedding(table, mixed_ids(70, 40))
    assert info.value.fix and "loop=" not in info.value.fix, info.value.fix
    assert "tile" in info.value.fix and "next" in info.value.fix


# --- the plan, the cost, the lowering and the emitted module ---------------------------------


def _structs(T: int, V: int, D: int, dtype: Any = jnp.float32) -> tuple[Any, Any]:
    return jax.ShapeDtypeStruct((V, D), dtype), jax.ShapeDtypeStruct((T,), jnp.int32)


def hbm_bytes(kernel: sk.Kernel[..., Any], *structs: Any) -> int:
    cost = kernel.plan(*structs).cost
    assert isinstance(cost, sk.Cost)
    cost.check_invariants()
    return cost.hbm_bytes


def test_the_plan_says_how_rows_are_read() -> None:
    text = str(gather.plan(*_structs(300, 1000, 256)))
    assert "V=1000" in text and "indexed by ids" in text
    assert "rows gathered by ids" in text
    assert "an index outside [0, 1000) reads zeros" in text
    assert "read from global memory by the copies of the rows it picks" in text


def test_the_plan_of_ids_the_body_loads() -> None:
    text = str(padding_id_zero.plan(*_structs(300, 1000, 256)))
    assert "indexed by ids" in text and "rows gathered by ids" in text


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_the_cost_counts_gathered_rows_not_the_table(dtype: Any) -> None:
    T, D = 300, 256
    small = hbm_bytes(gather, *_structs(T, 1000, D, dtype))
    large = hbm_bytes(gather, *_structs(T, 100_000, D, dtype))
    assert small == large
    item = jnp.dtype(dtype).itemsize
    # The rows read, the ids and the result written.
    assert small == T * D * item + T * 4 + T * D * item


def test_a_host_padded_table_is_counted_whole() -> None:
    """Rows of 20 B are padded on the host for TMA: the pad reads the whole table and writes it
    padded, which the cost counts."""
    T, D = 300, 5
    assert any("padded on the host" in note for note in gather.plan(*_structs(T, 1000, D)).notes)
    small = hbm_bytes(gather, *_structs(T, 1000, D))
    large = hbm_bytes(gather, *_structs(T, 100_000, D))
    assert large - small == 99_000 * (5 + 8) * 4


LOWERED = {
    "gather-f32-host-padded": (gather, _structs(131, 97, 5)),
    "gather-bf16": (gather, _structs(300, 32000, 1000, jnp.bfloat16)),
    "whole-T": (gather_whole_t, _structs(100, 50, 256, jnp.bfloat16)),
    "whole-D-rms": (rms_embedding, _structs(300, 1000, 128)),
    "uint8": (
        gather_uint8,
        (jax.ShapeDtypeStruct((300, 64), jnp.float32), jax.ShapeDtypeStruct((77,), jnp.uint8)),
    ),
    "body-loads-ids": (padding_id_zero, _structs(65, 10, 256)),
    "int16": (
        gather_int16,
        (jax.ShapeDtypeStruct((500, 64), jnp.float32), jax.ShapeDtypeStruct((77,), jnp.int16)),
    ),
    "gpt2-token-and-position": (
        token_and_position,
        (
            jax.ShapeDtypeStruct((50257, 768), jnp.float32),
            jax.ShapeDtypeStruct((1024, 768), jnp.float32),
            jax.ShapeDtypeStruct((1000, 768), jnp.float32),
            jax.ShapeDtypeStruct((1000,), jnp.int32),
            jax.ShapeDtypeStruct((1000,), jnp.int32),
        ),
    ),
}


@pytest.mark.parametrize("name", LOWERED)
def test_cross_lowers_for_mosaic_gpu(name: str) -> None:
    kernel, structs = LOWERED[name]
    assert "mosaic_gpu" in kernel.lower(*structs).as_text()


@needs_mosaic_gpu
def test_the_emitted_module_runs() -> None:
    """bf16 rows of 14 B, padded on the host by the emitted wrapper, and ids the body loads."""
    table = table_of(20, 7, jnp.bfloat16)
    ids = mixed_ids(67, 20)
    source = ids_added.emit(table, ids)
    assert "def gather_table(" in source
    namespace: dict[str, Any] = {"__name__": "emitted"}
    exec(compile(source, "<emitted ids_added>", "exec"), namespace)
    assert_same(namespace["ids_added"](table, ids), ids_added(table, ids))


# --- sk.testing -----------------------------------------------------------------------------


def test_the_gallery_embedding_passes_its_checks() -> None:
    results = sk.testing.check_kernel(embedding)
    assert results and all(r.passed for r in results)
    assert {r.dtypes[0] for r in results} == {"float32", "bfloat16"}


def test_probes_draw_ids_mostly_inside_the_table() -> None:
    cases = sk.testing.probe_cases(embedding)
    assert cases
    for case in cases:
        _, ids = sk.testing.random_operands(case, seed=0)
        V = case.shapes[0][0]
        ids = np.asarray(ids)
        inside = (ids >= 0) & (ids < V)
        assert inside.mean() > 0.5, case.label
        if ids.size >= 64:
            assert (ids < 0).any() and (ids >= V).any(), case.label
