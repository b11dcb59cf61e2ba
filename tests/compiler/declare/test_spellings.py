"""Kernels declared the way they were written before statickernel had a declaration for what
they do: an embedding's table beside its ids, a grouped matmul's weights "G K N" beside the
group sizes, GPTQ's scales "G N" in a loop over K, a KV cache written at the rows an index
gives, a paged cache "P S D" beside its block tables, a convolution's taps "C W". Each is
refused with an AnnotationError whose fix names the declaration that does the job (index=,
ragged=, groups=, update=, pages=, a stack named by its size), and the kernel declared as the
fix says is planned."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, BFloat16, Float, Float32, Int8, Int32

import statickernel as sk

S = jax.ShapeDtypeStruct


def _refusal(declare: Any) -> sk.AnnotationError:
    with pytest.raises(sk.AnnotationError) as info:
        declare()
    assert type(info.value) is sk.AnnotationError
    assert info.value.fix is not None
    return info.value


def test_an_embedding_lookup_in_the_body_is_told_to_declare_index() -> None:
    def old() -> None:
        @sk.kernel(tile={"T": "BT", "D": "BD"})
        def lookup(
            table: Float[Array, "V D"],
            ids: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BD: sk.Const[int] = 128,
        ) -> Float[Array, "T D"]:
            return sk.load(table)[sk.load(ids)]

    error = _refusal(old)
    assert error.operand == "ids"
    assert 'index={"V": "ids"}' in str(error.fix) and "return sk.load(table)" in str(error.fix)

    @sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"})
    def lookup(
        table: Float[Array, "V D"],
        ids: Int32[Array, " T"],
        *,
        BT: sk.Const[int] = 64,
        BD: sk.Const[int] = 128,
    ) -> Float[Array, "T D"]:
        return sk.load(table)

    assert "indexed by ids" in str(lookup.plan(S((1000, 300), jnp.float32), S((6,), jnp.int32)))


def test_a_grouped_matmul_is_told_to_declare_ragged() -> None:
    def old() -> None:
        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def grouped(
            x: BFloat16[Array, "M K"],
            w: BFloat16[Array, "G K N"],
            group_sizes: Int32[Array, " G"],
            *,
            BM: sk.Const[int] = 128,
            BN: sk.Const[int] = 128,
            BK: sk.Const[int] = 64,
        ) -> Float[Array, "M N"]:
            return jax.lax.ragged_dot(sk.load(x), sk.load(w), sk.load(group_sizes))

    error = _refusal(old)
    assert error.operand == "w"
    assert 'ragged={"M": "group_sizes"}' in str(error.fix)

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, ragged={"M": "group_sizes"})
    def grouped(
        x: BFloat16[Array, "M K"],
        w: BFloat16[Array, "G K N"],
        group_sizes: Int32[Array, " G"],
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 128,
        BK: sk.Const[int] = 64,
    ) -> Float[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(x, w), init=jnp.zeros((BM, BN), jnp.float32))

    grouped.plan(S((200, 64), jnp.bfloat16), S((3, 64, 128), jnp.bfloat16), S((3,), jnp.int32))


def test_group_scales_in_a_loop_are_told_to_declare_groups() -> None:
    def old() -> None:
        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def linear(
            x: BFloat16[Array, "M K"],
            w: Int8[Array, "K N"],
            scales: Float[Array, "G N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
            BK: sk.Const[int] = 128,
        ) -> BFloat16[Array, "M N"]:
            def step(acc):
                dequantized = sk.load(w).astype(jnp.float32) * sk.load(scales)[0][None, :]
                return acc + sk.dot(x, dequantized.astype(jnp.bfloat16))

            return sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32)).astype(jnp.bfloat16)

    error = _refusal(old)
    assert error.operand == "scales"
    assert 'groups={"G": "K"}' in str(error.fix)

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, groups={"G": "K"})
    def linear(
        x: BFloat16[Array, "M K"],
        w: Int8[Array, "K N"],
        scales: Float[Array, "G N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
        BK: sk.Const[int] = 128,
    ) -> BFloat16[Array, "M N"]:
        def step(acc):
            dequantized = sk.load(w).astype(jnp.float32) * sk.load(scales)[None, :]
            return acc + sk.dot(x, dequantized.astype(jnp.bfloat16))

        return sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32)).astype(jnp.bfloat16)

    linear.plan(S((64, 256), jnp.bfloat16), S((256, 64), jnp.int8), S((2, 64), jnp.float32))


def test_rows_written_into_a_cache_are_told_to_declare_update_and_index() -> None:
    def old() -> None:
        @sk.kernel(tile={"T": "BT", "E": "BE"})
        def write_rows(
            cache: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            slot_mapping: Int32[Array, " T"],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> Float[Array, "Slots E"]:
            return sk.load(cache).at[sk.load(slot_mapping)].set(sk.load(new))

    error = _refusal(old)
    assert error.operand == "new"
    fix = str(error.fix)
    assert 'update="cache"' in fix and 'index={"Slots": "slot_mapping"}' in fix

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

    write_rows.plan(S((6, 4), jnp.float32), S((3, 4), jnp.float32), S((3,), jnp.int32))


def test_a_run_written_from_a_start_is_told_to_pass_its_rows_as_an_index() -> None:
    def old() -> None:
        @sk.kernel(tile={"T": "BT", "E": "BE"})
        def write_run(
            cache: Float[Array, "Slots E"],
            new: Float[Array, "T E"],
            start: Int32[Array, ""],
            *,
            BT: sk.Const[int] = 64,
            BE: sk.Const[int] = 128,
        ) -> Float[Array, "Slots E"]:
            block = jax.lax.dynamic_update_slice(sk.load(cache), sk.load(new), (sk.load(start), 0))
            return block

    fix = str(_refusal(old).fix)
    assert 'update="cache"' in fix and 'index={"Slots": "slots"}' in fix
    assert "slots = start.reshape(()) + jnp.arange(T)" in fix


def test_a_paged_cache_is_told_to_declare_pages() -> None:
    def old() -> None:
        @sk.kernel(batch=("B",), tile={"D": "BD"}, loop={"S": "BS"})
        def sequence_sums(
            k_pages: Float[Array, "P S D"],
            block_tables: Int32[Array, "B Pages"],
            *,
            BD: sk.Const[int] = 64,
            BS: sk.Const[int] = 64,
        ) -> Float32[Array, "B D"]:
            return sk.loop(
                "S",
                lambda total: total + sk.sum(sk.load(k_pages), axis=0),
                init=jnp.zeros((BD,), jnp.float32),
            )

    error = _refusal(old)
    assert error.operand == "k_pages"
    assert 'pages={"P": "block_tables"}' in str(error.fix)

    @sk.kernel(batch=("B",), tile={"D": "BD"}, loop={"S": "BS"}, pages={"P": "block_tables"})
    def sequence_sums(
        k_pages: Float[Array, "P S D"],
        block_tables: Int32[Array, "B Pages"],
        *,
        BD: sk.Const[int] = 64,
        BS: sk.Const[int] = 64,
    ) -> Float32[Array, "B D"]:
        return sk.loop(
            "S",
            lambda total: total + sk.sum(sk.load(k_pages), axis=0),
            init=jnp.zeros((BD,), jnp.float32),
        )

    sequence_sums.plan(S((10, 32, 64), jnp.float32), S((2, 4), jnp.int32))


@pytest.mark.parametrize(
    ("layout", "x_dims", "declared", "taken"),
    [("C W", "B L C", "4 C", "sk.load(w)[k]"), ("C W", "B C L", "C 4", "sk.load(w)[:, k]")],
    ids=["along-the-columns", "along-the-rows"],
)
def test_taps_under_a_dim_of_their_own_are_told_to_declare_a_stack(
    layout: str, x_dims: str, declared: str, taken: str
) -> None:
    """Mamba's convolution weight, (C, 4), first annotated with a dim name for the taps."""

    def old() -> None:
        @sk.kernel(tile={"L": "BL", "C": "BC"}, batch="B")
        def conv(
            x: Float[Array, x_dims],
            w: Float32[Array, layout],
            *,
            BL: sk.Const[int] = 64,
            BC: sk.Const[int] = 64,
        ) -> Float[Array, x_dims]:
            return sk.load(x)

    error = _refusal(old)
    assert error.operand == "w"
    fix = str(error.fix)
    assert "a stack of parameter vectors" in fix
    assert f'w: Float32[Array, "{declared}"]' in fix and taken in fix


def test_a_stack_laid_out_as_the_columns_says_how_the_body_takes_its_vectors() -> None:
    """`"C 4"` with C the blocks' columns: the fix transposes it, and the body's `[:, k]`
    becomes `[k]`."""

    def old() -> None:
        @sk.kernel(tile={"L": "BL", "C": "BC"}, batch="B")
        def conv(
            x: Float[Array, "B L C"],
            w: Float32[Array, "C 4"],
            *,
            BL: sk.Const[int] = 64,
            BC: sk.Const[int] = 64,
        ) -> Float[Array, "B L C"]:
            return sk.load(w)[:, 0][None, :] * sk.load(x)

    fix = str(_refusal(old).fix)
    assert "pass w.T and annotate it '4 C'" in fix and "sk.load(w)[k]" in fix

    @sk.kernel(tile={"L": "BL", "C": "BC"}, batch="B")
    def conv(
        x: Float[Array, "B L C"],
        w: Float32[Array, "4 C"],
        *,
        BL: sk.Const[int] = 64,
        BC: sk.Const[int] = 64,
    ) -> Float[Array, "B L C"]:
        return sk.load(w)[0][None, :] * sk.load(x)

    conv.plan(S((2, 100, 64), jnp.float32), S((4, 64), jnp.float32))
