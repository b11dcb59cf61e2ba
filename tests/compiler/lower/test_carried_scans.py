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


@settings(max_examples=10, deadline=None)
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
    [(running_sum, jnp.bfloat16), (running_extremes, F32)],
    ids=["sum", "extremes"],
)
def test_carried_scans_cross_lower_for_the_gpu(kernel: Any, dtype: Any) -> None:
    x = jax.ShapeDtypeStruct((130, 1000), dtype)
    assert "mosaic_gpu" in kernel.lower(x).as_text()


def test_a_reversed_scan_along_the_loop_dim_is_refused() -> None:
    """The carry holds the steps before each block: a suffix scan cannot be carried, and the
    last step's fill past the edge would reach its elements."""
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

    assert info.value.dim == "N" and "scan forward" in str(info.value.fix)


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
