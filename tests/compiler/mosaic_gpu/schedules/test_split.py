"""A loop split across CTAs: which bodies may be split, how many parts the plan takes, and
the split launch against jnp at the skinny shapes it is for (a decode step's products).

The plan narrows a split launch's blocks where narrower ones do better (`plan/narrowing.py`,
tested in tests/compiler/mosaic_gpu/plan/test_narrowing.py); the tests here whose shapes it narrows
pass matmul's declared blocks (BM=128, BN=128: a constant the call passes is never
narrowed), so that each sees the split it is about."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float32

import statickernel as sk
from batched_matmul import batched_matmul, batched_matmul_reference
from grouped_matmul import grouped_matmul
from matmul import matmul, matmul_reference
from matmul_bias_gelu import matmul_bias_gelu
from matmul_fp8 import Fp8, matmul_fp8, matmul_fp8_reference
from matmul_int4 import matmul_w4a16, matmul_w4a16_reference, quantize_int4
from matmul_int8 import matmul_int8, matmul_int8_reference
from matmul_int8_weights import matmul_w8a16, matmul_w8a16_reference
from statickernel._compiler.mosaic_gpu.plan.split import MIN_PART_STEPS, split_parts
from tolerances import assert_close, tolerance_for

SPLIT = sk.ScheduleKind.SPLIT_LOOP


def _specs(*shapes: tuple[int, ...], dtype: Any = jnp.bfloat16) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(s, dtype) for s in shapes]


def _kind(plan: sk.LaunchPlan) -> sk.ScheduleKind:
    assert plan.schedule is not None
    return plan.schedule.kind


def _normal(key: int, shape: tuple[int, ...], dtype: Any = jnp.bfloat16) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, jnp.float32).astype(dtype)


# --- which bodies: sums from zero, and results that are those sums --------------------------


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def _scaled_after(
    a: BFloat16[Array, "M K"], b: BFloat16[Array, "K N"], *, BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64, BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:  # fmt: skip
    acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
    return jnp.tanh(acc)  # not a sum of the parts' sums


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def _rounded_then_scaled(
    a: BFloat16[Array, "M K"], b: BFloat16[Array, "K N"], s: Float32[Array, ""], *,
    BM: sk.Const[int] = 64, BN: sk.Const[int] = 64, BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:  # fmt: skip
    acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
    return acc.astype(jnp.bfloat16).astype(jnp.float32) * sk.load(s)  # rounded, then scaled


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def _started_at_one(
    a: BFloat16[Array, "M K"], b: BFloat16[Array, "K N"], *, BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64, BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:  # fmt: skip
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.ones((BM, BN), jnp.float32))


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def _running_max(
    a: BFloat16[Array, "M K"], b: BFloat16[Array, "K N"], *, BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64, BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:  # fmt: skip
    def step(acc: jax.Array) -> jax.Array:
        return jnp.maximum(acc, sk.dot(a, b))

    return sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32))


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def _term_reads_a_carry(
    a: BFloat16[Array, "M K"], b: BFloat16[Array, "K N"], *, BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64, BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:  # fmt: skip
    def step(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        acc, total = carry
        acc = acc + sk.dot(a, b)
        return acc, total + acc  # the running sum of running sums

    zeros = jnp.zeros((BM, BN), jnp.float32)
    return sk.loop("K", step, init=(zeros, zeros))[1]


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def _stopped(
    a: BFloat16[Array, "M K"], b: BFloat16[Array, "K N"], *, BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64, BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:  # fmt: skip
    def step(acc: jax.Array) -> jax.Array:
        return acc + sk.dot(a, b)

    return sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32), stop=2048)


@pytest.mark.parametrize(
    "kernel",
    [_scaled_after, _started_at_one, _running_max, _term_reads_a_carry, _stopped],
    ids=lambda k: k.spec.name,
)
def test_a_body_that_is_not_a_sum_of_parts_is_never_split(kernel: sk.Kernel[..., Any]) -> None:
    plan = kernel.plan(*_specs((16, 4096), (4096, 256)))
    assert _kind(plan) is not SPLIT
    assert plan.split is None


def test_rows_in_ragged_groups_are_never_split() -> None:
    """The warp-specialized launch alone walks rows split into ragged groups."""
    x, w = _specs((256, 4096), (4, 4096, 256))
    plan = grouped_matmul.plan(x, w, jax.ShapeDtypeStruct((4,), jnp.int32))
    assert plan.split is None and _kind(plan) is sk.ScheduleKind.WARP_SPECIALIZED


def test_an_epilogue_of_a_bias_and_an_activation_is_never_split() -> None:
    plan = matmul_bias_gelu.plan(*_specs((16, 4096), (4096, 1024), (1024,)))
    assert plan.split is None


def test_a_sum_rounded_before_it_is_scaled_is_never_split() -> None:
    scale = jax.ShapeDtypeStruct((), jnp.float32)
    plan = _rounded_then_scaled.plan(*_specs((16, 4096), (4096, 256)), scale)
    assert plan.split is None


# --- how many parts ----------------------------------------------------------------------


@given(
    blocks=st.integers(1, 200),
    steps=st.integers(1, 2000),
    sms=st.sampled_from([114, 132, 148]),
    least=st.integers(1, 8),
)
def test_the_parts_fill_the_sms_without_an_empty_part(
    blocks: int, steps: int, sms: int, least: int
) -> None:
    parts = split_parts(blocks, steps, sms, least)
    least = max(least, MIN_PART_STEPS)
    if parts is None:
        assert 2 * blocks > sms or steps < 2 * least
        return
    count, part_steps = parts
    assert count >= 2 and part_steps >= least
    assert blocks * count <= sms
    assert (count - 1) * part_steps < steps <= count * part_steps  # the last part walks some


@pytest.mark.parametrize(
    ("m", "k", "n", "parts"),
    [
        (16, 4096, 4096, 4),  # 32 blocks of 128 columns: 4 parts of 16 steps
        (1, 4096, 1024, 16),  # 8 blocks: 16 parts of 4 steps
        (16, 4096, 14336, None),  # 112 blocks: not two parts a block
        (16, 448, 1024, None),  # 7 steps: not two parts of 4
        (4096, 4096, 4096, None),  # 1024 blocks: warp-specialized
    ],
)
def test_the_plan_splits_skinny_products(m: int, k: int, n: int, parts: int | None) -> None:
    plan = matmul.plan(*_specs((m, k), (k, n)), BM=128, BN=128)
    if parts is None:
        assert plan.split is None and _kind(plan) is not SPLIT
        return
    assert plan.split is not None and plan.split.parts == parts
    assert _kind(plan) is SPLIT
    assert plan.schedule is not None and plan.schedule.ctas == plan.split.ctas
    (result,) = plan.results
    assert result.shape == (parts, m, n) and result.dtype == "float32"
    assert "split: K in" in str(plan) and "deterministic" in str(plan)


def test_a_declared_stage_count_is_kept_by_every_part() -> None:
    plan = matmul.plan(*_specs((16, 4096), (4096, 1024)), stages=3)
    assert plan.split is not None and plan.split.part_steps >= 4
    assert plan.loops[0].stages == 3
    plan = matmul.plan(*_specs((16, 4096), (4096, 1024)), BN=64, stages=2)
    assert plan.split is not None and plan.loops[0].stages == 2


def test_the_split_is_sized_for_the_sms(monkeypatch: pytest.MonkeyPatch) -> None:
    from statickernel._compiler.mosaic_gpu.plan import schedule as figures

    monkeypatch.setattr(figures, "SMS", 16)
    plan = matmul.plan(*_specs((16, 4096), (4096, 1024)), BM=128, BN=128)
    assert plan.split is not None and plan.split.ctas <= 16 and plan.split.parts == 2


def test_the_cost_counts_the_partial_sums() -> None:
    m, k, n = 16, 4096, 4096
    plan = matmul.plan(*_specs((m, k), (k, n)), bf16_out=True, BM=128, BN=128)
    assert plan.split is not None and plan.cost is not None
    reads = 2 * (m * k + k * n)
    partials = plan.split.parts * m * n * 4  # written by the kernel, read by the sum
    assert plan.cost.hbm_bytes == reads + 2 * partials + 2 * m * n


# --- the split launch against jnp -----------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(1, 4096, 1024), (16, 1000, 520), (33, 2049, 300), (7, 577, 129)],
)
@pytest.mark.parametrize("bf16_out", [False, True])
def test_a_split_matmul_matches_jnp(m: int, k: int, n: int, bf16_out: bool) -> None:
    a, b = _normal(m, (m, k)), _normal(k, (k, n))
    assert matmul.plan(a, b, bf16_out=bf16_out).split is not None
    got = matmul(a, b, bf16_out=bf16_out)
    want = matmul_reference(a, b, bf16_out)
    assert got.dtype == want.dtype and got.shape == (m, n)
    dtype = jnp.bfloat16 if bf16_out else jnp.float32
    assert_close(got, want, tolerance_for(dtype, terms=k, scale=4.0))


def test_a_split_launch_gives_the_same_bits_on_every_call() -> None:
    a, b = _normal(1, (5, 3000)), _normal(2, (3000, 700))
    first, second = matmul(a, b), matmul(a, b)
    assert matmul.plan(a, b).split is not None
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))


def test_a_split_int8_matmul_is_exact() -> None:
    m, k, n = 16, 2000, 1000
    a = jax.random.randint(jax.random.key(0), (m, k), -128, 128, jnp.int8)
    b_t = jax.random.randint(jax.random.key(1), (n, k), -128, 128, jnp.int8)
    plan = matmul_int8.plan(a, b_t)
    assert plan.split is not None and plan.results[0].dtype == "int32"
    np.testing.assert_array_equal(
        np.asarray(matmul_int8(a, b_t)), np.asarray(matmul_int8_reference(a, b_t))
    )


def test_a_split_int4_matmul_of_a_decode_step_matches_jnp() -> None:
    weight = _normal(3, (1000, 2048), jnp.float32) * 0.02
    w, scales = quantize_int4(weight)
    x = _normal(4, (3, 2048))
    plan = matmul_w4a16.plan(w, scales, x)
    assert plan.split is not None and plan.split.parts >= 2
    got = matmul_w4a16(w, scales, x)
    want = matmul_w4a16_reference(w, scales, x)
    assert_close(got, want, tolerance_for(jnp.bfloat16, terms=2048, scale=0.1))


def test_a_split_fp8_matmul_scales_each_part() -> None:
    m, k, n = 16, 3000, 700
    a = _normal(13, (m, k), jnp.float8_e4m3fn)
    b_t = _normal(14, (n, k), jnp.float8_e4m3fn)
    a_scale, b_scale = jnp.float32(0.5), jnp.float32(0.25)
    plan = matmul_fp8.plan(a, b_t, a_scale, b_scale)
    assert plan.split is not None and plan.split.casts == ((),)
    got = matmul_fp8(a, b_t, a_scale, b_scale)
    want = matmul_fp8_reference(a, b_t, a_scale, b_scale)
    assert_close(got, want, tolerance_for(jnp.float32, terms=k, scale=2.0))


def test_a_split_int8_weight_matmul_scales_each_part_then_casts() -> None:
    w = jax.random.randint(jax.random.key(15), (1000, 3000), -127, 128, jnp.int8)
    scale = jnp.abs(_normal(16, (1000,), jnp.float32)) * 0.01
    x = _normal(17, (4, 3000))
    plan = matmul_w8a16.plan(w, scale, x)
    assert plan.split is not None and plan.split.casts == (("bfloat16",),)
    got = matmul_w8a16(w, scale, x)
    want = matmul_w8a16_reference(w, scale, x)
    assert_close(got, want, tolerance_for(jnp.bfloat16, terms=3000, scale=1.0))


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def _fp8_sums(
    a: BFloat16[Array, "M K"], b: BFloat16[Array, "K N"], *, BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64, BK: sk.Const[int] = 64,
) -> Fp8[Array, "M N"]:  # fmt: skip
    acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
    return acc.astype(jnp.float8_e4m3fn)


def test_a_split_fp8_result_saturates_as_the_kernels_own_cast() -> None:
    """The wrapper casts the added parts as the kernel casts: to e4m3fn, clipped to +-448."""
    a = jnp.full((8, 1024), 4.0, jnp.bfloat16).at[:, :512].multiply(-1.0).at[0].set(4.0)
    b = jnp.full((1024, 100), 4.0, jnp.bfloat16).at[:, 50:].set(0.01)
    plan = _fp8_sums.plan(a, b)
    assert plan.split is not None and plan.split.casts == (("float8_e4m3fn",),)
    got = np.asarray(_fp8_sums(a, b).astype(jnp.float32))
    exact = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32))
    want = np.asarray(jnp.clip(exact, -448, 448).astype(jnp.float8_e4m3fn).astype(jnp.float32))
    assert got[0, 0] == 448.0  # 16384, saturated
    np.testing.assert_array_equal(got, want)


def test_a_split_batched_matmul_matches_jnp() -> None:
    a, b = _normal(5, (3, 16, 1500)), _normal(6, (3, 1500, 200))
    plan = batched_matmul.plan(a, b)
    assert plan.split is not None
    assert plan.results[0].shape == (3, plan.split.parts, 16, 200)
    assert_close(
        batched_matmul(a, b),
        batched_matmul_reference(a, b),
        tolerance_for(jnp.float32, terms=1500, scale=4.0),
    )


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def _two_sums(
    a: BFloat16[Array, "M K"], b: BFloat16[Array, "K N"], c: BFloat16[Array, "K N"], *,
    BM: sk.Const[int] = 64, BN: sk.Const[int] = 64, BK: sk.Const[int] = 64,
) -> tuple[Float[Array, "M N"], BFloat16[Array, "M N"]]:  # fmt: skip
    """Two products sharing `a` (a gate and an up projection), the second cast."""

    def step(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        gate, up = carry
        return gate + sk.dot(a, b), up + sk.dot(a, c)

    zeros = jnp.zeros((BM, BN), jnp.float32)
    gate, up = sk.loop("K", step, init=(zeros, zeros))
    return gate, up.astype(jnp.bfloat16)


def test_two_sums_split_together() -> None:
    a, b, c = _normal(7, (9, 1111)), _normal(8, (1111, 130)), _normal(9, (1111, 130))
    plan = _two_sums.plan(a, b, c)
    assert plan.split is not None and [r.dtype for r in plan.results] == ["float32"] * 2
    gate, up = _two_sums(a, b, c)
    exact = jax.lax.Precision.HIGHEST
    want_gate = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32), precision=exact)
    want_up = jnp.dot(a.astype(jnp.float32), c.astype(jnp.float32), precision=exact)
    assert gate.dtype == jnp.float32 and up.dtype == jnp.bfloat16
    assert_close(gate, want_gate, tolerance_for(jnp.float32, terms=1111, scale=4.0))
    assert_close(up, want_up.astype(jnp.bfloat16), tolerance_for(jnp.bfloat16, 1111, scale=4.0))


@sk.kernel(tile={"N": "BN"}, loop={"K": "BK"})
def _weighted_rows(
    w: Float32[Array, "K N"], *, BN: sk.Const[int] = 128, BK: sk.Const[int] = 64
) -> Float32[Array, " N"]:
    """A column sum of rows weighted by their position: a vector carry in registers, and a
    term that reads the loop's positions."""

    def step(acc: jax.Array) -> jax.Array:
        k = sk.position("K").astype(jnp.float32)
        return acc + jnp.sum(sk.load(w) * (k[:, None] + 1.0), axis=0)

    return sk.loop("K", step, init=jnp.zeros((BN,), jnp.float32))


def test_a_vector_sum_that_reads_the_positions_splits() -> None:
    w = _normal(10, (1300, 300), jnp.float32)
    plan = _weighted_rows.plan(w)
    assert plan.split is not None and plan.split.last_part_steps != plan.split.part_steps
    want = jnp.sum(w * (jnp.arange(1300, dtype=jnp.float32)[:, None] + 1.0), axis=0)
    assert_close(_weighted_rows(w), want, tolerance_for(jnp.float32, terms=1300, scale=1300.0))


def test_a_split_launch_has_no_race() -> None:
    a, b = _normal(11, (8, 1300)), _normal(12, (1300, 200))
    assert matmul.plan(a, b, bf16_out=True).split is not None
    report = sk.testing.detect_races(matmul, a, b, bf16_out=True)
    assert not report.races_found and report.result is not None
    want = matmul_reference(a, b, bf16_out=True)
    assert_close(report.result, want, tolerance_for(jnp.bfloat16, terms=1300, scale=4.0))


# --- the module it prints ------------------------------------------------------------------


def test_the_module_numbers_the_parts_and_adds_them() -> None:
    source = matmul.emit(*_specs((16, 4096), (4096, 4096)), bf16_out=True, BM=128, BN=128)
    assert 'grid_names=("M", "N", "K")' in source
    assert "grid=(1, 32, 4)" in source
    assert "loop0_first = block_K * 16" in source
    assert "result_gmem = result_gmem.at[block_K]" in source
    assert "lax.convert_element_type(jnp.sum(result, axis=0), jnp.bfloat16)" in source


def test_a_split_launch_cross_lowers_for_mosaic_gpu() -> None:
    lowered = matmul.lower(*_specs((16, 4096), (4096, 1024)), bf16_out=True)
    assert "mosaic_gpu" in lowered.as_text()
