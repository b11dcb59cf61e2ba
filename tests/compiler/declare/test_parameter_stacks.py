"""A stack of parameter vectors declared as a user first writes it: a 2-D operand along a dim
named by its size beside a dim of the blocks (a convolution's per-channel weights of its 4
taps, `"4 C"`; per-row weights `"M 4"`), copied with the block and taken a vector at a time
by index or unpacking. Against jnp on ragged shapes, both orientations, f32 and bf16 (whose
rows of 4 are padded on the host); what else is done to a stack is refused with a fix; a
stack along a dim off the blocks is refused at the declaration; cross-lowered."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Float32

import statickernel as sk
from tolerances import assert_close, tolerance_for


@sk.kernel(tile={"M": "BM", "N": "BN"})
def per_column_taps(
    x: Float[Array, "M N"],
    w: Float[Array, "4 N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
) -> Float[Array, "M N"]:
    v = sk.load(x).astype(jnp.float32)
    taps = sk.load(w)
    return taps[0] + taps[1] * v + taps[2] * v * v + taps[3] * v * v * v


@sk.kernel(tile={"M": "BM"})
def per_row_taps(
    x: Float[Array, "M N"], w: Float[Array, "M 4"], *, BM: sk.Const[int] = 64
) -> Float[Array, "M N"]:
    v = sk.load(x).astype(jnp.float32)
    taps = sk.load(w)
    return taps[:, 0][:, None] * v + taps[:, 3][:, None]


@sk.kernel(tile={"M": "BM", "N": "BN"})
def unpacked_taps(
    x: Float[Array, "M N"],
    w: Float[Array, "3 N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
) -> Float[Array, "M N"]:
    w0, w1, w2 = sk.load(w)
    return w0 * sk.load(x) + w1 - w2


def _per_column_want(x: jax.Array, w: jax.Array) -> jax.Array:
    v, w = x.astype(jnp.float32), w.astype(jnp.float32)
    return w[0] + w[1] * v + w[2] * v * v + w[3] * v * v * v


def _data(shape: tuple[int, ...], dtype: jnp.dtype, seed: int) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(1, 8), (65, 72), (130, 200), (7, 64)])
def test_vectors_along_the_columns_are_taken_by_index(
    shape: tuple[int, int], dtype: jnp.dtype
) -> None:
    x, w = _data(shape, dtype, 0), _data((4, shape[1]), dtype, 1)
    got = per_column_taps(x, w)
    assert_close(got, _per_column_want(x, w), tolerance_for(jnp.float32, 4, scale=100.0))
    plan = per_column_taps.plan(x, w)
    assert plan.form is sk.Form.BLOCK
    assert "a stack of parameter vectors" in str(plan)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(1, 16), (100, 24), (130, 8)])
def test_vectors_along_the_rows_are_taken_by_index(
    shape: tuple[int, int], dtype: jnp.dtype
) -> None:
    x, w = _data(shape, dtype, 2), _data((shape[0], 4), dtype, 3)
    wide = w.astype(jnp.float32)
    want = wide[:, 0:1] * x.astype(jnp.float32) + wide[:, 3:4]
    assert_close(per_row_taps(x, w), want, tolerance_for(jnp.float32, 2))


@pytest.mark.parametrize("shape", [(3, 5), (64, 300)])
def test_a_stack_is_unpacked(shape: tuple[int, int]) -> None:
    x, w = _data(shape, jnp.float32, 4), _data((3, shape[1]), jnp.float32, 5)
    want = w[0] * x + w[1] - w[2]
    assert_close(unpacked_taps(x, w), want, tolerance_for(jnp.float32, 2))


def test_the_stacks_size_is_checked_at_the_call() -> None:
    x = jnp.ones((8, 64), jnp.float32)
    with pytest.raises(sk.StaticKernelError):
        per_column_taps(x, jnp.ones((5, 64), jnp.float32))


def test_other_uses_of_a_stack_are_refused_with_a_fix() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="vector of parameters") as info:

        @sk.kernel(tile={"M": "BM"})
        def summed(
            x: Float[Array, "M N"], w: Float[Array, "4 N"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x) * jnp.sum(sk.load(w), axis=0)

    assert info.value.kernel == "summed"
    assert "w[0], w[1]" in str(info.value.fix)


def test_a_slice_of_several_vectors_is_refused() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="slices it"):

        @sk.kernel(tile={"M": "BM"})
        def two(
            x: Float[Array, "M N"], w: Float[Array, "4 N"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x) * sk.load(w)[1:3].sum(axis=0)


def test_a_stack_along_a_dim_off_the_blocks_is_refused_at_the_declaration() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"M": "BM"})
        def off(
            x: Float[Array, "M N"], w: Float[Array, "4 Q"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x) + sk.load(w)[0].sum()

    assert info.value.operand == "w"
    assert info.value.dim == "Q"
    assert info.value.fix


def test_a_stack_cross_lowers_for_the_gpu() -> None:
    structs = (
        jax.ShapeDtypeStruct((4096, 5120), jnp.bfloat16),
        jax.ShapeDtypeStruct((4, 5120), jnp.bfloat16),
    )
    text = per_column_taps.lower(*structs).as_text()
    assert "mosaic_gpu" in text


def test_the_plan_counts_the_stacks_buffer() -> None:
    x, w = np.ones((128, 128), np.float32), np.ones((4, 128), np.float32)
    plan = per_column_taps.plan(x, w)
    # The block, the result's, and the stack's 4 rows padded to 8, of 64 columns.
    assert plan.smem_bytes >= 2 * 64 * 64 * 4 + 8 * 64 * 4


@sk.kernel(tile={"L": "BL", "C": "BC"}, batch="B")
def taps_per_entry(
    x: Float[Array, "B L C"],
    w: Float[Array, "B 2 C"],
    *,
    BL: sk.Const[int] = 64,
    BC: sk.Const[int] = 64,
) -> Float[Array, "B L C"]:
    """Each batch entry's stack of 2 per-channel vectors."""
    w0, w1 = sk.load(w)
    return w0 * sk.load(x) + w1


def test_a_stack_per_batch_entry() -> None:
    x, w = _data((3, 70, 72), jnp.float32, 6), _data((3, 2, 72), jnp.float32, 7)
    want = w[:, 0, None, :] * x + w[:, 1, None, :]
    assert_close(taps_per_entry(x, w), want, tolerance_for(jnp.float32, 2))


def test_a_stack_along_the_columns_laid_out_as_its_columns_is_refused() -> None:
    """`"N 4"` would take each vector from a column of the buffer, a strided load Mosaic GPU
    does not lower: the fix transposes it."""
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"})
        def columns_last(
            x: Float[Array, "M N"],
            w: Float[Array, "N 4"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
        ) -> Float[Array, "M N"]:
            return sk.load(x) * sk.load(w)[:, 0][None, :]

    assert info.value.operand == "w" and info.value.dim == "N"
    assert "'4 N'" in str(info.value.fix)


def test_a_stack_along_a_looped_dim_is_refused_with_a_fix_that_applies() -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def looped(
            x: Float[Array, "M N"],
            w: Float[Array, "2 N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
        ) -> Float[Array, " M"]:
            def step(acc):
                return acc + jnp.sum(sk.load(x) * sk.load(w)[0][None, :], axis=1)

            return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32))

    assert info.value.operand == "w" and info.value.dim == "N"
    assert 'w0: Float32[Array, " N"]' in str(info.value.fix)

    # The fix, as it says: each vector an operand of its own, copied block by block.
    @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
    def fixed(
        x: Float[Array, "M N"],
        w0: Float32[Array, " N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
    ) -> Float[Array, " M"]:
        def step(acc):
            return acc + jnp.sum(sk.load(x) * sk.load(w0)[None, :], axis=1)

        return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32))

    x, w0 = _data((70, 200), jnp.float32, 8), _data((200,), jnp.float32, 9)
    assert_close(fixed(x, w0), (x * w0).sum(axis=1), tolerance_for(jnp.float32, 200, scale=10.0))
