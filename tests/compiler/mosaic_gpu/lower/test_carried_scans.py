"""Scans along a loop dim (`sk.map_blocks(axis, step, init=...)`): each step scans its block
of the loop dim and the carry brings in the steps before, so a running sum, max or min runs
along rows wider than a block. Against jnp on whole arrays, on ragged rows and columns (one
column, under a block, one past a block, several blocks), integers exact, bfloat16 inputs,
two results and two carries, hypothesis; the refusals (a scan in a map without a carry, a
step that does not return a pair, a carry unlike its init), the plan, and the cross-lowering
for Mosaic GPU."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jaxtyping import Array, Float, Float32

import statickernel as sk
from tolerances import assert_close, tolerance_for

F32 = jnp.float32
# (rows, cols): one column; under a block; a block and one past it; several ragged blocks.
SHAPES = [(1, 1), (5, 7), (64, 128), (65, 129), (130, 1000)]


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def running_sum(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float32[Array, "M N"]:
    """jnp.cumsum(x, axis=1) along rows of any width: each step's block scanned, plus the
    total of the steps before it."""

    def step(total: jax.Array) -> Any:
        v = sk.load(x).astype(F32)
        return jnp.cumsum(v, axis=1) + total[:, None], total + jnp.sum(v, axis=1)

    out, _ = sk.map_blocks("N", step, init=jnp.zeros((BM,), F32))
    return out


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def running_extremes(
    x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> tuple[Float32[Array, "M N"], Float32[Array, "M N"], Float32[Array, " M"]]:
    """The running max and min of each row (two results, two carries), and the row's max
    from the final carry."""

    def step(carry: tuple[jax.Array, jax.Array]) -> Any:
        high, low = carry
        v = sk.load(x, fill=jnp.nan)
        v = jnp.where(jnp.isnan(v), high[:, None], v)  # past the edge: no new extreme
        ups = jnp.maximum(lax.cummax(v, axis=1), high[:, None])
        downs = jnp.minimum(lax.cummin(v, axis=1), low[:, None])
        return (ups, downs), (
            jnp.maximum(high, jnp.max(v, axis=1)),
            jnp.minimum(low, jnp.min(v, axis=1)),
        )

    init = (jnp.full((BM,), -jnp.inf, F32), jnp.full((BM,), jnp.inf, F32))
    (ups, downs), (high, _) = sk.map_blocks("N", step, init=init)
    return ups, downs, high


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def suffix_sum(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> tuple[Float32[Array, "M N"], Float32[Array, " M"]]:
    """lax.cumsum(x, axis=1, reverse=True) along rows of any width, the loop walked from the
    last block to the first: each step's block scanned backwards, plus the total of the
    blocks after it; and each row's total, the final carry."""

    def step(total: jax.Array) -> Any:
        v = sk.load(x).astype(F32)
        return lax.cumsum(v, axis=1, reverse=True) + total[:, None], total + jnp.sum(v, axis=1)

    out, total = sk.map_blocks("N", step, init=jnp.zeros((BM,), F32), reverse=True)
    return out, total


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def suffix_extremes(
    x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> tuple[Float32[Array, "M N"], Float32[Array, "M N"]]:
    """The running max and min of each row from its end (two results, two carries)."""

    def step(carry: tuple[jax.Array, jax.Array]) -> Any:
        high, low = carry
        v = sk.load(x, fill=-jnp.inf)
        w = jnp.where(jnp.isneginf(v), jnp.inf, v)  # past the edge: no new minimum either
        ups = jnp.maximum(lax.cummax(v, axis=1, reverse=True), high[:, None])
        downs = jnp.minimum(lax.cummin(w, axis=1, reverse=True), low[:, None])
        return (ups, downs), (jnp.max(ups, axis=1), jnp.min(downs, axis=1))

    init = (jnp.full((BM,), -jnp.inf, F32), jnp.full((BM,), jnp.inf, F32))
    (ups, downs), _ = sk.map_blocks("N", step, init=init, reverse=True)
    return ups, downs


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def halved_from_the_end(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Float32[Array, " M"]:
    """A fold whose order shows: each block's sum plus half the carry, the blocks walked
    from the last to the first, so the first block's sum counts whole."""

    def step(carry: jax.Array) -> jax.Array:
        return carry * 0.5 + jnp.sum(sk.load(x).astype(F32), axis=1)

    return sk.loop("N", step, init=jnp.zeros((BM,), F32), reverse=True)


def _halved_from_the_end_reference(x: jax.Array, block: int) -> jax.Array:
    sums = [jnp.sum(x[:, i : i + block].astype(F32), axis=1) for i in range(0, x.shape[1], block)]
    carry = jnp.zeros((x.shape[0],), F32)
    for part in reversed(sums):
        carry = carry * 0.5 + part
    return carry


def _integers(shape: tuple[int, ...], seed: int, dtype: Any = F32) -> jax.Array:
    """Small integers: every partial sum is exact in float32, in any order."""
    return jnp.asarray(np.random.default_rng(seed).integers(-9, 10, shape), dtype)


@pytest.mark.parametrize(("m", "n"), SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
@pytest.mark.parametrize("dtype", [F32, jnp.bfloat16])
def test_a_running_sum_along_the_loop_dim_matches_jnp(m: int, n: int, dtype: Any) -> None:
    x = _integers((m, n), m + n, dtype)
    np.testing.assert_array_equal(running_sum(x), jnp.cumsum(x.astype(F32), axis=1))


@pytest.mark.parametrize(("m", "n"), SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_running_extremes_with_two_carries_match_jnp(m: int, n: int) -> None:
    x = jax.random.normal(jax.random.key(m * n), (m, n), F32)
    ups, downs, high = running_extremes(x)
    np.testing.assert_array_equal(ups, lax.cummax(x, axis=1))
    np.testing.assert_array_equal(downs, lax.cummin(x, axis=1))
    np.testing.assert_array_equal(high, jnp.max(x, axis=1))


@pytest.mark.parametrize(("m", "n"), SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
@pytest.mark.parametrize("dtype", [F32, jnp.bfloat16])
def test_a_suffix_sum_walked_backwards_matches_jnp(m: int, n: int, dtype: Any) -> None:
    x = _integers((m, n), m * n + 1, dtype)
    out, total = suffix_sum(x)
    np.testing.assert_array_equal(out, lax.cumsum(x.astype(F32), axis=1, reverse=True))
    np.testing.assert_array_equal(total, jnp.sum(x.astype(F32), axis=1))


@pytest.mark.parametrize(("m", "n"), SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_suffix_extremes_walked_backwards_match_jnp(m: int, n: int) -> None:
    x = jax.random.normal(jax.random.key(m + n), (m, n), F32)
    ups, downs = suffix_extremes(x)
    np.testing.assert_array_equal(ups, lax.cummax(x, axis=1, reverse=True))
    np.testing.assert_array_equal(downs, lax.cummin(x, axis=1, reverse=True))


@pytest.mark.parametrize(("m", "n"), SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_a_fold_walked_backwards_visits_the_last_block_first(m: int, n: int) -> None:
    x = _integers((m, n), m + 3 * n)
    want = _halved_from_the_end_reference(x, 64)
    np.testing.assert_array_equal(halved_from_the_end(x), want)
    if n > 64:  # walked forward, the last block's sum would count whole instead
        forward = _halved_from_the_end_reference(x[:, ::-1], 64)
        assert not np.array_equal(np.asarray(want), np.asarray(forward))


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 140), n=st.integers(1, 700), bn=st.sampled_from([64, 128]))
def test_suffix_sums_with_hypothesis(m: int, n: int, bn: int) -> None:
    x = jax.random.normal(jax.random.key(m + 5 * n), (m, n), F32)
    out, _ = suffix_sum(x, BN=bn)
    assert_close(out, lax.cumsum(x, axis=1, reverse=True), tolerance_for(F32, n, scale=4.0))


def test_the_plan_says_the_loop_walks_backwards() -> None:
    text = str(suffix_sum.plan(jax.ShapeDtypeStruct((100, 300), F32)))
    assert "from the last block to the first, write a block per step, carrying 2" not in text
    assert "from the last block to the first, write a block per step, carrying 1" in text


def test_reverse_with_a_stop_is_refused() -> None:
    with pytest.raises(sk.BodyError, match="both reverse=True and stop=") as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def stopped(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
        ) -> Float32[Array, " M"]:
            def step(c: jax.Array) -> jax.Array:
                return c + jnp.sum(sk.load(x).astype(F32), axis=1)

            return sk.loop("N", step, init=jnp.zeros((BM,), F32), stop=100, reverse=True)

    assert info.value.dim == "N" and info.value.fix


def test_a_reverse_that_is_not_a_bool_is_refused() -> None:
    with pytest.raises(sk.BodyError, match="not a Python bool"):

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def traced(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.map_blocks("N", lambda: sk.load(x), reverse=jnp.bool_(True))  # type: ignore[arg-type]


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 140), n=st.integers(1, 700), bn=st.sampled_from([64, 128]))
def test_running_sums_with_hypothesis(m: int, n: int, bn: int) -> None:
    x = jax.random.normal(jax.random.key(m + 7 * n), (m, n), F32)
    got = running_sum(x, BN=bn)
    assert_close(got, jnp.cumsum(x, axis=1), tolerance_for(F32, n, scale=4.0))


def test_the_plan_says_the_map_carries_a_value() -> None:
    text = str(running_sum.plan(jax.ShapeDtypeStruct((100, 300), F32)))
    assert "write a block per step, carrying 1 value(s) to the next (a scan)" in text
    assert "the body's scans run in" in text


def test_a_scan_along_the_loop_dim_without_a_carry_is_refused_with_the_scan_as_fix() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="inside a loop's step") as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def blockwise(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float[Array, "M N"]:
            return sk.map_blocks("N", lambda: jnp.cumsum(sk.load(x), axis=1))

    assert "sk.map_blocks('N', step, init=...)" in str(info.value.fix)


def test_a_step_that_does_not_return_a_pair_is_refused() -> None:
    with pytest.raises(sk.BodyError, match="not \\(blocks, carry\\)"):

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def unpaired(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float[Array, "M N"]:
            out, _ = sk.map_blocks("N", lambda c: sk.load(x), init=jnp.zeros((BM,)))
            return out


def test_a_carry_unlike_its_init_is_refused() -> None:
    with pytest.raises(sk.BodyError, match="returns a carry unlike its init") as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def widened(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float[Array, "M N"]:
            def step(c: jax.Array) -> Any:
                return sk.load(x), c.astype(jnp.int32)

            out, _ = sk.map_blocks("N", step, init=jnp.zeros((BM,), F32))
            return out

    assert "float32[64]" in str(info.value.expected)


@pytest.mark.parametrize(
    ("kernel", "dtype"),
    [
        (running_sum, jnp.bfloat16),
        (running_extremes, F32),
        (suffix_sum, jnp.bfloat16),
        (suffix_extremes, F32),
        (halved_from_the_end, F32),
    ],
    ids=["sum", "extremes", "suffix-sum", "suffix-extremes", "reversed-fold"],
)
def test_carried_scans_cross_lower_for_the_gpu(kernel: Any, dtype: Any) -> None:
    x = jax.ShapeDtypeStruct((130, 1000), dtype)
    assert "mosaic_gpu" in kernel.lower(x).as_text()


def test_a_reversed_scan_in_a_forward_loop_is_refused() -> None:
    """The carry holds the steps before each block: a suffix scan cannot be carried forward,
    and the last step's fill past the edge would reach its elements; the fix walks the loop
    backwards."""
    with pytest.raises(sk.UnsupportedOpError, match="reversed") as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def suffix(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
        ) -> Float32[Array, "M N"]:
            def step(total: jax.Array) -> Any:
                v = sk.load(x).astype(F32)
                return lax.cumsum(v, axis=1, reverse=True) + total[:, None], total

            out, _ = sk.map_blocks("N", step, init=jnp.zeros((BM,), F32))
            return out

    assert info.value.dim == "N" and "reverse=True)" in str(info.value.fix)


def test_a_forward_scan_in_a_reversed_loop_is_refused() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="from the last block to the first") as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def prefix(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
        ) -> Float32[Array, "M N"]:
            def step(total: jax.Array) -> Any:
                v = sk.load(x).astype(F32)
                return jnp.cumsum(v, axis=1) + total[:, None], total

            out, _ = sk.map_blocks("N", step, init=jnp.zeros((BM,), F32), reverse=True)
            return out

    assert info.value.dim == "N" and "reverse=False)" in str(info.value.fix)


def test_a_scan_of_a_whole_dim_in_a_step_offers_no_scan_along_it() -> None:
    """The fix names a scan along the loop dim only for a scan along the loop dim."""
    with pytest.raises(sk.UnsupportedOpError, match="inside a loop's step") as info:

        @sk.kernel(tile={"L": "BL"}, loop={"S": "BS"})
        def within(
            q: Float[Array, "L D"],
            k: Float[Array, "S D"],
            *,
            BL: sk.Const[int] = 64,
            BS: sk.Const[int] = 64,
        ) -> Float32[Array, "L D"]:
            def step(acc: jax.Array) -> jax.Array:
                return acc + jnp.cumsum(sk.load(q).astype(F32), axis=1)

            return sk.loop("S", step, init=jnp.zeros((BL, 64), F32))

    assert "sk.map_blocks" not in str(info.value.fix)


def test_the_scan_buffer_is_counted_beside_the_pipeline() -> None:
    """At 64x256 float32 blocks the scan's buffer (96 KiB) and two stages of x (128 KiB) do
    not fit: the plan says so with a SharedMemoryError, not Mosaic GPU at lowering."""
    x = jax.ShapeDtypeStruct((1000, 3000), F32)
    with pytest.raises(sk.SharedMemoryError):
        running_sum.plan(x, BN=256)
    plan = running_sum.plan(x, BN=128)  # 64 KiB of x, 48 KiB of scan, 32 KiB of results
    assert plan.smem_bytes <= 232448
    assert "mosaic_gpu" in running_sum.lower(x, BN=128).as_text()
