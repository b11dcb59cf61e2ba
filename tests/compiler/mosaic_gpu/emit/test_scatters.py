"""Rows scattered into an operand updated in place (`index={"Slots": "slot_mapping"}` with
`update="cache"`), against jnp.

The reference is written here from the docs alone: `cache.at[slots].set(new, mode="drop")`
with every slot outside [0, Slots) sent to Slots (a negative slot does not count from the
end as jnp's indexing does); a read-modify-write body is `cache.at[slots].add(new)` with
the same drop. Copies and casts are compared bit for bit; arithmetic within the tolerances
of `tolerances`.

Covered: edge shapes (T of 1, below, at and above a block, prime; Slots of 1; E of 16,
ragged over blocks, host-padded for TMA in float32 and bfloat16, whole; T
whole), int32 and int16 slots; slots padded with -1, past the end, all outside, at both
ends, and written twice; bodies that add the cache's own rows, cast, or read the slots;
jax.jit with the cache donated; jax.vmap over a batch of caches; the refusals of update=
at the declaration and at the call, and of derivatives; the plan's text and cost; the
cross-lowering for Mosaic GPU, whose custom call aliases the cache to its result; drawn
shapes and block sizes. Expected failures (strict) keep the defects found: offsets on
an operand whose rows are gathered, a loop over the index's dim, an in-place result
read at an offset, an in-place result reduced across blocks, an in-place copy streamed by
sk.map_blocks, and fixes that name an operand the kernel lacks or a vjp= it refuses.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float32, Int16, Int32

import statickernel as sk
from jax_support import needs_mosaic_gpu
from kv_cache_update import kv_cache_update
from tolerances import assert_close, tolerance_for

# --- the reference --------------------------------------------------------------------------


def _dropped(cache: jax.Array, slots: Any) -> jax.Array:
    """The slots, int32, each one outside [0, Slots) replaced by Slots (dropped by jnp)."""
    rows = cache.shape[0]
    slots = jnp.asarray(slots).astype(jnp.int32)
    inside = (slots >= 0) & (slots < rows)
    return jnp.where(inside, slots, rows)


def scattered(cache: jax.Array, new: jax.Array, slots: Any) -> jax.Array:
    """Row slots[t] of the cache is new[t]; a slot outside [0, Slots) is skipped."""
    return cache.at[_dropped(cache, slots)].set(new.astype(cache.dtype), mode="drop")


def added(cache: jax.Array, new: jax.Array, slots: Any) -> jax.Array:
    """Row slots[t] of the cache gets new[t] added; a slot outside [0, Slots) is skipped."""
    return cache.at[_dropped(cache, slots)].add(new.astype(cache.dtype), mode="drop")


def rows_of(rows: int, cols: int, dtype: Any, seed: int = 0) -> jax.Array:
    """Values of magnitude 0.5 or more: a row left at zero, or at the cache's old value
    where a new one was due, shows."""
    values = np.random.default_rng(seed).standard_normal((rows, cols), np.float32)
    return jnp.asarray(values + np.where(values >= 0, 0.5, -0.5), dtype)


def unique_slots(T: int, slots: int, seed: int = 0, dtype: Any = jnp.int32) -> jax.Array:
    """T slots, each written once: a permutation of the cache's rows, then -1 padding where
    T is past Slots, with -1 and Slots in place of two of them when T allows."""
    rng = np.random.default_rng(seed)
    picked = rng.permutation(slots)[: min(T, slots)]
    values = np.concatenate([picked, np.full(T - len(picked), -1)])
    if T >= 8:
        values[3], values[T - 2] = -1, slots
    return jnp.asarray(values, dtype)


def assert_same(got: jax.Array, want: jax.Array) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


# --- the kernels ----------------------------------------------------------------------------


@sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"}, update="cache")
def write_rows(
    cache: Float[Array, "Slots E"],
    new: Float[Array, "T E"],
    slot_mapping: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BE: sk.Const[int] = 128,
) -> Float[Array, "Slots E"]:
    return sk.load(new)


@sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"}, update="cache")
def write_rows_int16(
    cache: Float[Array, "Slots E"],
    new: Float[Array, "T E"],
    slot_mapping: Int16[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BE: sk.Const[int] = 128,
) -> Float[Array, "Slots E"]:
    return sk.load(new)


@sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"}, update="cache")
def add_rows(
    cache: Float[Array, "Slots E"],
    new: Float[Array, "T E"],
    slot_mapping: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BE: sk.Const[int] = 128,
) -> Float[Array, "Slots E"]:
    """A read-modify-write: the cache's rows at the slots are gathered, added to, written."""
    return sk.load(cache) + sk.load(new)


@sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"}, update="cache")
def cast_rows(
    cache: BFloat16[Array, "Slots E"],
    new: Float32[Array, "T E"],
    slot_mapping: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BE: sk.Const[int] = 128,
) -> BFloat16[Array, "Slots E"]:
    return sk.load(new).astype(cache.dtype)


@sk.kernel(tile={"E": "BE"}, index={"Slots": "slot_mapping"}, update="cache")
def write_rows_whole_t(
    cache: Float[Array, "Slots E"],
    new: Float[Array, "T E"],
    slot_mapping: Int32[Array, " T"],
    *,
    BE: sk.Const[int] = 128,
) -> Float[Array, "Slots E"]:
    return sk.load(new)


@sk.kernel(tile={"T": "BT"}, index={"Slots": "slot_mapping"}, update="cache")
def write_rows_whole_e(
    cache: Float[Array, "Slots E"],
    new: Float[Array, "T E"],
    slot_mapping: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
) -> Float[Array, "Slots E"]:
    return sk.load(new)


@sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"}, update="cache")
def write_rows_and_slot(
    cache: Float[Array, "Slots E"],
    new: Float[Array, "T E"],
    slot_mapping: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BE: sk.Const[int] = 128,
) -> Float[Array, "Slots E"]:
    """The body reads the slots too: each row gets its own slot added."""
    return sk.load(new) + sk.load(slot_mapping).astype(new.dtype)[:, None]


# --- edge shapes ----------------------------------------------------------------------------

EDGE_SHAPES = [
    pytest.param(10, 1, 16, jnp.float32, id="T=1"),
    pytest.param(100, 63, 16, jnp.float32, id="T-below-a-block"),
    pytest.param(100, 64, 16, jnp.float32, id="T-a-block-exactly"),
    pytest.param(100, 65, 16, jnp.float32, id="T-a-block-and-one"),
    pytest.param(150, 131, 200, jnp.float32, id="T=131-prime,E-ragged-over-2-blocks"),
    pytest.param(1, 5, 16, jnp.float32, id="Slots=1"),
    pytest.param(50, 70, 5, jnp.float32, id="f32-E=5-host-padded"),
    pytest.param(50, 70, 7, jnp.bfloat16, id="bf16-E=7-host-padded"),
    pytest.param(40, 67, 257, jnp.float32, id="E=257-ragged-and-host-padded"),
    pytest.param(200, 128, 256, jnp.bfloat16, id="T-and-E-two-blocks-exactly"),
]


@pytest.mark.parametrize(("Slots", "T", "E", "dtype"), EDGE_SHAPES)
def test_rows_at_edge_shapes(Slots: int, T: int, E: int, dtype: Any) -> None:
    cache, new = rows_of(Slots, E, dtype), rows_of(T, E, dtype, seed=1)
    slots = unique_slots(T, Slots)
    got = write_rows(cache, new, slots)
    assert_same(got, scattered(cache, new, slots))


@pytest.mark.parametrize(
    ("kernel", "T"),
    [(write_rows_whole_t, 1), (write_rows_whole_t, 70), (write_rows_whole_e, 3)],
    ids=["T-whole-1", "T-whole-70", "E-whole"],
)
def test_t_or_e_whole(kernel: Any, T: int) -> None:
    cache, new = rows_of(80, 200, jnp.float32), rows_of(T, 200, jnp.float32, seed=1)
    slots = unique_slots(T, 80)
    assert_same(kernel(cache, new, slots), scattered(cache, new, slots))


def test_rows_nobody_writes_keep_their_values() -> None:
    cache, new = rows_of(300, 40, jnp.float32), rows_of(5, 40, jnp.float32, seed=1)
    slots = jnp.asarray([7, -1, 299, 300, 0], jnp.int32)
    got = np.asarray(write_rows(cache, new, slots))
    untouched = np.setdiff1d(np.arange(300), [7, 299, 0])
    np.testing.assert_array_equal(got[untouched], np.asarray(cache)[untouched])
    np.testing.assert_array_equal(got[[7, 299, 0]], np.asarray(new)[[0, 2, 4]])


# --- slot patterns --------------------------------------------------------------------------

PATTERN_SLOTS, PATTERN_T, PATTERN_E = 100, 70, 40

PATTERNS = {
    "padded-with--1": np.concatenate([np.arange(10, 20), np.full(PATTERN_T - 10, -1)]),
    "past-the-end": np.concatenate([np.arange(PATTERN_T - 4), [100, 101, 2**31 - 1, 1000]]),
    "all-outside": np.resize([-1, 100, -2, 2**31 - 1, -(2**31), 101, -100], PATTERN_T),
    "both-ends": np.concatenate([[0, 99], np.full(PATTERN_T - 2, -1)]),
    "negative-not-from-the-end": np.concatenate([[-1, -2, -100, 5], np.full(PATTERN_T - 4, -3)]),
    "reversed": np.arange(PATTERN_T)[::-1] + 30,
}


@pytest.mark.parametrize("pattern", PATTERNS)
def test_slot_patterns(pattern: str) -> None:
    cache = rows_of(PATTERN_SLOTS, PATTERN_E, jnp.bfloat16)
    new = rows_of(PATTERN_T, PATTERN_E, jnp.bfloat16, seed=1)
    slots = jnp.asarray(PATTERNS[pattern], jnp.int32)
    got = write_rows(cache, new, slots)
    assert_same(got, scattered(cache, new, slots))
    if pattern == "all-outside":
        assert_same(got, cache)


def test_int16_slots() -> None:
    """int16 slots: -1 and the most negative are skipped; the largest int16 is a row of a
    cache that has it, and one past a smaller cache's end."""
    small, new = rows_of(300, 8, jnp.float32), rows_of(8, 8, jnp.float32, seed=1)
    slots = jnp.asarray([0, 299, 300, -1, -(2**15), 2**15 - 1, 5, 17], jnp.int16)
    assert_same(write_rows_int16(small, new, slots), scattered(small, new, slots))
    large = rows_of(2**15, 4, jnp.float32, seed=2)
    new = rows_of(6, 4, jnp.float32, seed=3)
    slots = jnp.asarray([2**15 - 1, 0, -(2**15), 12345, -1, 7231], jnp.int16)
    got = write_rows_int16(large, new, slots)
    assert_same(got, scattered(large, new, slots))
    np.testing.assert_array_equal(np.asarray(got)[2**15 - 1], np.asarray(new)[0])


def test_a_slot_written_twice_holds_one_of_its_rows() -> None:
    """The docs: two rows written to one slot leave either of them (not a mix). Rows of 300
    float32 take three blocks of E, and each slot is written by rows of three blocks of T."""
    T, E = 150, 300
    cache = jnp.zeros((10, E), jnp.float32)
    new = jnp.broadcast_to(jnp.arange(1.0, T + 1.0)[:, None], (T, E))
    slots = jnp.asarray(np.arange(T) % 3, jnp.int32)
    got = np.asarray(write_rows(cache, new, slots))
    for slot in range(3):
        row = got[slot]
        assert np.all(row == row[0]), f"slot {slot} holds a mix of rows: {np.unique(row)}"
        assert (row[0] - 1) % 3 == slot, f"slot {slot} holds row {row[0] - 1}"
    assert not np.any(got[3:])


# --- bodies ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("Slots", "T", "E", "dtype"),
    [
        (100, 70, 200, jnp.float32),
        (50, 131, 7, jnp.bfloat16),
        (1, 1, 16, jnp.float32),
    ],
    ids=["f32-E-ragged", "bf16-E=7-host-padded-T-past-Slots", "Slots=1-T=1"],
)
def test_read_modify_write(Slots: int, T: int, E: int, dtype: Any) -> None:
    cache, new = rows_of(Slots, E, dtype), rows_of(T, E, dtype, seed=1)
    slots = unique_slots(T, Slots)
    got = add_rows(cache, new, slots)
    assert got.dtype == dtype
    assert_close(got, added(cache, new, slots), tolerance_for(dtype))


def test_read_modify_write_of_a_slot_written_twice_adds_one_row() -> None:
    """Two rows to one slot leave either of them: each gathered the slot's old row, so the
    slot holds the old row plus one new row, not plus both (jnp's .at[].add sums them)."""
    cache = jnp.full((4, 16), 100.0, jnp.float32)
    new = jnp.broadcast_to(jnp.asarray([1.0, 2.0, 4.0])[:, None], (3, 16))
    got = np.asarray(add_rows(cache, new, jnp.asarray([2, 2, 2], jnp.int32)))
    assert np.all(got[2] == got[2][0]) and got[2][0] in (101.0, 102.0, 104.0), got[2]
    np.testing.assert_array_equal(got[[0, 1, 3]], np.full((3, 16), 100.0))


@pytest.mark.parametrize(
    ("Slots", "T", "E"), [(60, 70, 256), (30, 20, 4)], ids=["E=256", "bf16-E=4-host-padded"]
)
def test_the_body_casts_new_rows_to_the_cache_dtype(Slots: int, T: int, E: int) -> None:
    """float32 rows into a bfloat16 cache; at E=4 the cache's rows are 8 B (padded on the
    host) and the new rows' 16 B (not)."""
    cache, new = rows_of(Slots, E, jnp.bfloat16), rows_of(T, E, jnp.float32, seed=1)
    slots = unique_slots(T, Slots)
    assert_same(cast_rows(cache, new, slots), scattered(cache, new, slots))


def test_the_body_reads_the_slots() -> None:
    cache, new = rows_of(90, 48, jnp.float32), rows_of(70, 48, jnp.float32, seed=1)
    slots = unique_slots(70, 90)
    want = scattered(cache, new + slots.astype(jnp.float32)[:, None], slots)
    assert_close(write_rows_and_slot(cache, new, slots), want, tolerance_for(jnp.float32))


# --- transforms -----------------------------------------------------------------------------


def test_under_jit_with_the_cache_donated() -> None:
    cache, new = rows_of(120, 64, jnp.float32), rows_of(70, 64, jnp.float32, seed=1)
    slots = unique_slots(70, 120)
    want = scattered(cache, new, slots)
    donated = cache + 0  # a buffer of its own, which the call consumes
    got = jax.jit(write_rows, donate_argnums=0)(donated, new, slots)
    assert_same(got, want)
    assert donated.is_deleted()


def test_the_gallery_kv_cache_update_under_jit_with_the_cache_donated() -> None:
    """vLLM's (Slots, Hkv, D) cache, viewed as rows, with a padding token's -1."""
    cache = rows_of(64, 2 * 16, jnp.bfloat16).reshape(64, 2, 16)
    new = rows_of(9, 2 * 16, jnp.bfloat16, seed=1).reshape(9, 2, 16)
    slots = unique_slots(9, 64).at[4].set(-1)
    want = scattered(cache.reshape(64, -1), new.reshape(9, -1), slots).reshape(64, 2, 16)
    donated = cache + 0
    got = jax.jit(kv_cache_update, donate_argnums=0)(donated, new, slots)
    assert_same(got, want)


@pytest.mark.parametrize(
    "in_axes",
    [(0, 0, 0), (0, 0, None), (None, 0, 0)],
    ids=["all-batched", "slots-shared", "cache-shared"],
)
def test_under_vmap(in_axes: tuple[int | None, ...]) -> None:
    """Each batch entry updates its own copy of the cache, as a per-entry reference does."""
    B, Slots, T, E = 3, 40, 5, 16
    caches = rows_of(B * Slots, E, jnp.float32).reshape(B, Slots, E)
    news = rows_of(B * T, E, jnp.float32, seed=1).reshape(B, T, E)
    slots = jnp.asarray([[0, 39, -1, 40, 7], [1, 2, 3, 4, 5], [38, -5, 0, 6, 20]], jnp.int32)
    args = [caches, news, slots]
    args = [a if axis is not None else a[0] for a, axis in zip(args, in_axes, strict=True)]
    got = jax.vmap(write_rows, in_axes=in_axes)(*args)
    assert_same(got, jax.vmap(scattered, in_axes=in_axes)(*args))
    jitted = jax.jit(jax.vmap(write_rows, in_axes=in_axes))(*args)
    assert_same(jitted, got)


# --- what is refused ------------------------------------------------------------------------


def test_update_naming_no_operand() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"}, update="kv")
        def refused(
            cache: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            slot_mapping: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> Float[Array, "Slots E"]:
            return sk.load(new)

    assert info.value.kernel == "refused"
    assert "'kv'" in info.value.what and "not an operand" in info.value.what
    assert info.value.expected and "cache" in info.value.expected


def test_update_of_a_tuple_result() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"}, update="cache")
        def refused(
            cache: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            slot_mapping: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> tuple[Float[Array, "Slots E"], Float[Array, "T E"]]:
            return sk.load(new), sk.load(new)

    assert info.value.operand == "cache"
    assert "a tuple of 2" in info.value.what
    assert info.value.fix and "alone" in info.value.fix


@pytest.mark.parametrize("result", ["T E", "E Slots"], ids=["the-new-rows", "transposed"])
def test_update_of_a_result_laid_out_unlike_the_operand(result: str) -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"}, update="cache")
        def refused(
            cache: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            slot_mapping: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> Float[Array, result]:
            return sk.load(new)

    assert info.value.operand == "cache"
    assert f"'{result}'" in info.value.what and "'Slots E'" in info.value.what


def test_a_result_with_the_indexed_dim_needs_update() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"})
        def refused(
            cache: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            slot_mapping: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> Float[Array, "Slots E"]:
            return sk.load(new)

    assert info.value.dim == "Slots"
    assert info.value.fix and "update=" in info.value.fix


def test_the_update_fix_names_the_operand_laid_out_as_the_result() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slots"})
        def refused(
            kv: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            slots: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> Float[Array, "Slots E"]:
            return sk.load(new)

    assert info.value.fix and 'update="kv"' in info.value.fix, info.value.fix


def _reference(cache: jax.Array, new: jax.Array, slot_mapping: jax.Array) -> jax.Array:
    return scattered(cache, new, slot_mapping)


def _backward(*args: Any) -> Any:
    return None


@pytest.mark.parametrize("vjp", ["reference", _backward], ids=["reference", "backward"])
def test_vjp_with_update_is_refused(vjp: Any) -> None:
    with pytest.raises(sk.VjpError) as info:

        @sk.kernel(
            tile={"T": "BT", "E": "BE"},
            index={"Slots": "slot_mapping"},
            update="cache",
            reference=_reference,
            vjp=vjp,
        )
        def refused(
            cache: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            slot_mapping: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> Float[Array, "Slots E"]:
            return sk.load(new)

    assert info.value.operand == "cache"
    assert info.value.fix and "drop vjp=" in info.value.fix


@pytest.mark.parametrize("argnums", [0, 1], ids=["d-cache", "d-new"])
def test_grad_through_an_in_place_kernel(argnums: int) -> None:
    cache, new = rows_of(20, 16, jnp.float32), rows_of(5, 16, jnp.float32, seed=1)
    slots = unique_slots(5, 20)

    def loss(cache: jax.Array, new: jax.Array) -> jax.Array:
        return jnp.sum(write_rows(cache, new, slots))

    with pytest.raises(sk.NotDifferentiableError) as info:
        jax.grad(loss, argnums=argnums)(cache, new)
    assert info.value.kernel == "write_rows"
    assert "in place" in info.value.what
    with pytest.raises(sk.NotDifferentiableError):
        jax.jvp(lambda c: write_rows(c, new, slots), (cache,), (cache,))
    with pytest.raises(sk.NotDifferentiableError):
        jax.jit(jax.grad(loss, argnums=argnums))(cache, new)


def test_gradients_stopped_at_the_operands_pass() -> None:
    """The refusal's fix: stop the gradient at the kernel's operands."""
    cache, new = rows_of(20, 16, jnp.float32), rows_of(5, 16, jnp.float32, seed=1)
    slots = unique_slots(5, 20)

    def loss(new: jax.Array) -> jax.Array:
        updated = write_rows(cache, jax.lax.stop_gradient(new), slots)
        return jnp.sum(updated) + jnp.sum(new * new)

    np.testing.assert_allclose(jax.grad(loss)(new), 2 * new)


def test_the_transpose_refusal_does_not_propose_vjp() -> None:
    cache, new = rows_of(20, 16, jnp.float32), rows_of(5, 16, jnp.float32, seed=1)
    slots = unique_slots(5, 20)
    with pytest.raises(sk.NotDifferentiableError) as info:
        jax.linear_transpose(lambda n: write_rows(cache, n, slots), new)(cache)
    assert info.value.fix and "vjp=" not in info.value.fix, info.value.fix


def test_a_float32_result_for_a_bfloat16_cache_is_refused_at_the_call() -> None:
    cache, new = rows_of(20, 16, jnp.bfloat16), rows_of(5, 16, jnp.float32, seed=1)
    with pytest.raises(sk.DtypeError) as info:
        write_rows(cache, new, unique_slots(5, 20))
    assert info.value.kernel == "write_rows" and info.value.operand == "cache"
    assert "float32" in info.value.what and "bfloat16" in info.value.what
    assert info.value.fix and "astype(cache.dtype)" in info.value.fix


def test_duplicate_slots_are_refused_when_checked() -> None:
    cache, new = rows_of(6, 4, jnp.float32), rows_of(3, 4, jnp.float32, seed=1)
    with sk.checked_indices():
        write_rows(cache, new, jnp.asarray([5, -1, 0], jnp.int32))
        with pytest.raises(sk.OperandError) as info:
            write_rows(cache, new, jnp.asarray([5, 5, 0], jnp.int32))
    assert info.value.operand == "slot_mapping" and "twice" in info.value.what


# --- refused, or right: shifted reads, loops over the index, cross-block results, copies ------


def test_an_offset_on_the_gathered_cache_is_shifted_or_refused() -> None:
    try:

        @sk.kernel(tile={"T": "BT", "E": "BE"}, index={"Slots": "slot_mapping"}, update="cache")
        def previous_token(
            cache: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            slot_mapping: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> Float[Array, "Slots E"]:
            return sk.load(new) + sk.load(cache, offset={"T": -1})

        cache, new = rows_of(90, 48, jnp.float32), rows_of(70, 48, jnp.float32, seed=1)
        slots = unique_slots(70, 90)
        got = previous_token(cache, new, slots)
    except sk.StaticKernelError:
        return  # refused: as good as right
    inside = ((slots >= 0) & (slots < 90))[:, None]
    rows = jnp.where(inside, cache[jnp.clip(slots, 0, 89)], 0.0)
    shifted = jnp.concatenate([jnp.zeros((1, 48)), rows[:-1]])
    assert_close(got, scattered(cache, new + shifted, slots), tolerance_for(jnp.float32))


@pytest.mark.parametrize("body", ["scaled", "read-modify-write"])
def test_a_loop_over_the_index_dim_scatters_or_is_refused(body: str) -> None:
    try:

        @sk.kernel(
            tile={"E": "BE"}, loop={"T": "BT"}, index={"Slots": "slot_mapping"}, update="cache"
        )
        def streamed(
            cache: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            slot_mapping: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> Float[Array, "Slots E"]:
            def step() -> jax.Array:
                if body == "scaled":
                    return sk.load(new) * 2.0
                return sk.load(cache) + sk.load(new)

            return sk.map_blocks("T", step)

        cache, new = rows_of(90, 200, jnp.float32), rows_of(70, 200, jnp.float32, seed=1)
        slots = unique_slots(70, 90)
        got = streamed(cache, new, slots)
    except sk.DeclarationError:
        return  # refused at the declaration: as good as right
    want = scattered(cache, 2.0 * new, slots) if body == "scaled" else added(cache, new, slots)
    assert_close(got, want, tolerance_for(jnp.float32))


def test_an_in_place_result_read_at_an_offset_is_refused_or_right() -> None:
    x = rows_of(200, 300, jnp.float32)
    try:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, update="x")
        def shift_down_in_place(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float[Array, "M N"]:
            return sk.load(x, offset={"M": -1})

        got = shift_down_in_place(x)
    except sk.StaticKernelError:
        return
    assert_same(got, jnp.concatenate([jnp.zeros((1, 300), jnp.float32), x[:-1]]))


def test_an_in_place_result_combined_across_blocks_is_refused_or_right() -> None:
    try:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, update="acc")
        def row_sums_into(
            x: Float[Array, "M N"],
            acc: Float[Array, " M"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 128,
        ) -> Float[Array, " M"]:
            return sk.sum(sk.load(x), axis=1)

        x, acc = rows_of(100, 300, jnp.float32), jnp.arange(100.0, dtype=jnp.float32)
        got = row_sums_into(x, acc)
    except sk.DeclarationError:
        return
    assert_close(got, jnp.sum(x, axis=1), tolerance_for(jnp.float32, terms=300))


def test_an_in_place_copy_streamed_by_map_blocks() -> None:
    @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, update="y")
    def copy_into(
        x: Float[Array, "M N"],
        y: Float[Array, "M N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 128,
    ) -> Float[Array, "M N"]:
        def step() -> jax.Array:
            return sk.load(x)

        return sk.map_blocks("N", step)

    x, y = rows_of(70, 300, jnp.float32), rows_of(70, 300, jnp.float32, seed=1)
    assert_same(copy_into(x, y), x)


# --- drawn shapes ---------------------------------------------------------------------------


@settings(max_examples=10, deadline=None)
@given(
    Slots=st.integers(1, 200),
    T=st.integers(1, 140),
    E=st.integers(1, 160),
    BT=st.sampled_from([64, 128]),
    bf16=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_drawn_shapes_and_blocks(
    Slots: int, T: int, E: int, BT: int, bf16: bool, seed: int
) -> None:
    dtype = jnp.bfloat16 if bf16 else jnp.float32
    cache, new = rows_of(Slots, E, dtype, seed=seed % 5), rows_of(T, E, dtype, seed=seed % 7)
    # Unique slots: a permutation of the cache's rows, a few outside it and -1 padding.
    outside = [-1, Slots, -1, Slots + 3]
    pool = np.concatenate([np.arange(Slots), outside, np.full(max(0, T - Slots - 4), -1)])
    slots = jnp.asarray(np.random.default_rng(seed).permutation(pool)[:T], jnp.int32)
    assert_same(write_rows(cache, new, slots, BT=BT), scattered(cache, new, slots))


# --- the plan, the cost and the lowering -----------------------------------------------------


def _structs(Slots: int, T: int, E: int, dtype: Any = jnp.float32) -> tuple[Any, ...]:
    return (
        jax.ShapeDtypeStruct((Slots, E), dtype),
        jax.ShapeDtypeStruct((T, E), dtype),
        jax.ShapeDtypeStruct((T,), jnp.int32),
    )


def hbm_bytes(kernel: sk.Kernel[..., Any], *structs: Any) -> int:
    cost = kernel.plan(*structs).cost
    assert isinstance(cost, sk.Cost)
    cost.check_invariants()
    return cost.hbm_bytes


def test_the_plan_says_where_rows_go() -> None:
    text = str(write_rows.plan(*_structs(4096, 100, 1024, jnp.bfloat16)))
    assert "indexed by slot_mapping" in text
    assert "rows scattered by slot_mapping" in text
    assert "an index outside [0, 4096) is skipped" in text
    assert "written into `cache`, in place" in text
    assert "updated in place by the result" in text


def test_the_plan_of_a_read_modify_write() -> None:
    text = str(add_rows.plan(*_structs(4096, 100, 1024)))
    assert "rows gathered by slot_mapping" in text and "rows scattered by slot_mapping" in text
    assert "written into `cache`, in place" in text


@pytest.mark.parametrize("kernel", [write_rows, add_rows], ids=["write", "read-modify-write"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_the_cost_counts_the_rows_moved_not_the_cache(kernel: Any, dtype: Any) -> None:
    T, E = 100, 1024
    small = hbm_bytes(kernel, *_structs(4096, T, E, dtype))
    large = hbm_bytes(kernel, *_structs(400_000, T, E, dtype))
    assert small == large
    item = jnp.dtype(dtype).itemsize
    gathered = T * E * item if kernel is add_rows else 0
    # The new rows read, the slots, the cache's rows read (a read-modify-write), rows written.
    assert small == T * E * item + T * 4 + gathered + T * E * item


def test_a_host_padded_cache_is_copied_whole() -> None:
    """Rows of 20 B are padded on the host for TMA: the pad copies the whole cache, and the
    result is sliced back from it, so the update is no longer in place; the plan says so and
    the cost counts it."""
    plan = write_rows.plan(*_structs(64, 3, 5))
    assert any("`cache`" in note and "padded on the host" in note for note in plan.notes)
    assert hbm_bytes(write_rows, *_structs(6400, 3, 5)) > hbm_bytes(write_rows, *_structs(64, 3, 5))


LOWERED = {
    "bf16-kv-cache": (write_rows, _structs(4096, 100, 1024, jnp.bfloat16)),
    "f32-host-padded": (write_rows, _structs(64, 3, 5)),
    "read-modify-write": (add_rows, _structs(4096, 131, 256)),
    "cast": (
        cast_rows,
        (
            jax.ShapeDtypeStruct((4096, 256), jnp.bfloat16),
            jax.ShapeDtypeStruct((77, 256), jnp.float32),
            jax.ShapeDtypeStruct((77,), jnp.int32),
        ),
    ),
    "int16-slots": (
        write_rows_int16,
        (
            jax.ShapeDtypeStruct((30000, 128), jnp.float32),
            jax.ShapeDtypeStruct((77, 128), jnp.float32),
            jax.ShapeDtypeStruct((77,), jnp.int16),
        ),
    ),
}


@pytest.mark.parametrize("name", LOWERED)
def test_cross_lowers_for_mosaic_gpu_with_the_cache_aliased(name: str) -> None:
    kernel, structs = LOWERED[name]
    text = kernel.lower(*structs).as_text()
    assert "mosaic_gpu" in text
    assert "output_operand_aliases" in text


@needs_mosaic_gpu
def test_the_emitted_module_runs() -> None:
    """bf16 rows of 14 B, padded on the host and sliced back by the emitted wrapper."""
    cache, new = rows_of(40, 7, jnp.bfloat16), rows_of(67, 7, jnp.bfloat16, seed=1)
    slots = unique_slots(67, 40)
    source = add_rows.emit(cache, new, slots)
    assert "def scatter_result(" in source and "jax.new_ref(cache)" in source
    assert "jax.freeze(cache)" in source
    namespace: dict[str, Any] = {"__name__": "emitted"}
    exec(compile(source, "<emitted add_rows>", "exec"), namespace)
    assert_same(namespace["add_rows"](cache, new, slots), add_rows(cache, new, slots))
