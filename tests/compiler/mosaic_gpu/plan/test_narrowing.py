"""Blocks narrowed by the plan: a skinny product (a decode step's few rows by a large
weight) whose declared blocks would split K takes narrower blocks instead, one a CTA, that
read the weight once; a constant the call passes is kept. Exact against jnp in the
interpreter at ragged skinny shapes, with the narrower swizzles the blocks take."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float

import statickernel as sk
from matmul import matmul, matmul_reference
from matmul_bias_gelu import matmul_bias_gelu
from statickernel._compiler.mosaic_gpu.layout.blocks import DimLayout
from statickernel._compiler.mosaic_gpu.plan import schedule
from statickernel._compiler.mosaic_gpu.plan.narrowing import (
    NARROWEST_BLOCK,
    narrowing_candidates,
    score,
)
from tolerances import assert_close, tolerance_for

BF16 = jnp.bfloat16


def _specs(*shapes: tuple[int, ...]) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(s, BF16) for s in shapes]


def _normal(key: int, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, jnp.float32).astype(BF16)


@pytest.fixture
def h200(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule, "SMS", 132)
    # A tuning cached for these shapes (the CLI docs tune matmul at 64 x 4096) is passed as
    # constants, which are never narrowed: these tests plan the defaults.
    monkeypatch.setenv("STATICKERNEL_AUTOTUNE", "0")


@pytest.fixture
def sixteen_sms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launches sized for 16 SMs: shapes the interpreter runs quickly split and narrow."""
    monkeypatch.setattr(schedule, "SMS", 16)


# --- the decode step's product at model widths ----------------------------------------------


@pytest.mark.usefixtures("h200")
@pytest.mark.parametrize("m", [1, 16, 64])
def test_a_decode_step_streams_the_weight_once_on_every_sm(m: int) -> None:
    k = n = 4096
    plan = matmul.plan(*_specs((m, k), (k, n)))
    consts = dict(plan.constants)
    assert (consts["BM"], consts["BN"]) == (64, 32)
    assert plan.split is None and plan.warp_specialized is None
    assert plan.schedule is not None and plan.schedule.ctas >= 128
    assert plan.cost is not None and plan.cost.hbm_bytes <= 1.1 * k * n * 2
    # 32 bfloat16 columns are 64 bytes: b takes the 64-byte swizzle, and a with it.
    assert plan.operand("a").swizzle == plan.operand("b").swizzle == 32
    narrowing = plan.narrowing
    assert narrowing is not None
    assert narrowing.declared == (("BM", 128), ("BN", 128))
    assert narrowing.chosen == (("BM", 64), ("BN", 32))
    assert narrowing.declared_split == 4 and narrowing.hbm_bytes < narrowing.declared_hbm_bytes
    text = str(plan)
    assert "narrowed: BM 128 -> 64, BN 128 -> 32" in text and "Pass BM=128, BN=128" in text


@pytest.mark.usefixtures("h200")
def test_a_constant_the_call_passes_is_kept() -> None:
    plan = matmul.plan(*_specs((16, 4096), (4096, 4096)), BN=128)
    assert dict(plan.constants)["BN"] == 128
    assert plan.split is not None
    # BM, left at its default, narrows to the 64 rows of one WGMMA row group: the same
    # split, in half the shared memory.
    assert plan.narrowing is not None and plan.narrowing.chosen == (("BM", 64),)
    assert plan.narrowing.smem_bytes < plan.narrowing.declared_smem_bytes
    pinned = matmul.plan(*_specs((16, 4096), (4096, 4096)), BM=128, BN=128)
    assert pinned.narrowing is None and "narrowed" not in str(pinned)
    assert dict(pinned.constants)["BM"] == 128


@pytest.mark.usefixtures("h200")
def test_a_bound_constant_is_a_default_and_an_other_value_is_kept() -> None:
    assert matmul.bind(BK=64).plan(*_specs((16, 4096), (4096, 4096))).narrowing is not None
    pinned = matmul.bind(BN=64).plan(*_specs((16, 4096), (4096, 4096)))
    assert dict(pinned.constants)["BN"] == 64


@pytest.mark.usefixtures("h200")
@pytest.mark.parametrize(
    "shape",
    [(4096, 4096, 4096), (256, 4096, 4096), (16, 448, 1024)],
    ids=["large", "256-rows-split", "short-loop"],
)
def test_launches_that_fill_the_sms_or_do_not_split_keep_their_blocks(
    shape: tuple[int, int, int],
) -> None:
    m, k, n = shape
    plan = matmul.plan(*_specs((m, k), (k, n)))
    assert plan.narrowing is None
    assert dict(plan.constants)["BN"] == 128


@pytest.mark.usefixtures("h200")
def test_a_product_that_is_not_split_keeps_its_blocks() -> None:
    """Narrowing is the split's alternative: a bias and GELU after the sum are never split,
    so their launch keeps the declared blocks."""
    plan = matmul_bias_gelu.plan(*_specs((8, 4096), (4096, 4096), (4096,)))
    assert plan.split is None and plan.narrowing is None


# --- the candidates and their score ---------------------------------------------------------


def _dim(name: str, size: int, const: str | None, block: int, axis: int | None) -> DimLayout:
    return DimLayout(name, size, const, block, block, axis)


def test_the_candidates_halve_each_default_within_one_wave() -> None:
    dims = (
        _dim("M", 64, "BM", 128, 0),
        _dim("K", 4096, None, 64, None),
        _dim("N", 4096, "BN", 128, 1),
    )
    found = narrowing_candidates(dims, {"BM": 128, "BN": 128}, frozenset({"BM", "BN"}), 132)
    assert {"BM": 64, "BN": 32} in found and {"BM": 128, "BN": 64} in found
    for consts in found:
        blocks = -(-64 // consts["BM"]) * -(-4096 // consts["BN"])
        assert blocks <= 132 and min(consts.values()) >= NARROWEST_BLOCK
        assert consts != {"BM": 128, "BN": 128}
    # A passed constant is not narrowed: only BM's halvings, all one block of rows.
    only_bm = narrowing_candidates(dims, {"BM": 128, "BN": 128}, frozenset({"BM"}), 132)
    assert only_bm and all(c == {"BM": c["BM"]} for c in only_bm)
    assert narrowing_candidates(dims, {"BM": 128, "BN": 128}, frozenset(), 132) == []


def test_the_score_charges_the_sms_a_launch_leaves_idle() -> None:
    assert score(1e-6, 132, 132) == score(1e-6, 1000, 132) == pytest.approx(1e-6)
    assert score(1e-6, 66, 132) == pytest.approx(2e-6)


# --- against jnp in the interpreter ---------------------------------------------------------


@pytest.mark.usefixtures("sixteen_sms")
@pytest.mark.parametrize(
    "shape",
    [(1, 1000, 250), (16, 512, 256), (64, 2048, 512), (7, 3000, 129)],
    ids=str,
)
def test_a_narrowed_matmul_matches_jnp(shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    a, b = _normal(m, (m, k)), _normal(k, (k, n))
    plan = matmul.plan(a, b)
    assert plan.narrowing is not None
    got = matmul(a, b)
    assert got.shape == (m, n)
    assert_close(got, matmul_reference(a, b), tolerance_for(jnp.float32, terms=k, scale=4.0))


@pytest.mark.usefixtures("sixteen_sms")
def test_a_narrowed_matmul_with_a_cast_matches_jnp() -> None:
    a, b = _normal(1, (5, 1500)), _normal(2, (1500, 300))
    assert matmul.plan(a, b, bf16_out=True).narrowing is not None
    got = matmul(a, b, bf16_out=True)
    assert got.dtype == BF16
    assert_close(got, matmul_reference(a, b, True), tolerance_for(BF16, terms=1500, scale=4.0))


@pytest.mark.usefixtures("sixteen_sms")
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    m=st.integers(1, 64),
    k=st.integers(300, 2500),
    n=st.integers(17, 400),
    bn=st.sampled_from([16, 32, 48, 64, 128]),
)
def test_every_swizzle_of_a_product_matches_jnp(m: int, k: int, n: int, bn: int) -> None:
    """Blocks of 16 to 128 columns take the 32-, 64- and 128-byte swizzles, passed or narrowed."""
    a, b = _normal(m, (m, k)), _normal(k, (k, n))
    got: Any = matmul(a, b, BN=bn)
    assert_close(got, matmul_reference(a, b), tolerance_for(jnp.float32, terms=k, scale=4.0))


def test_a_block_of_one_swizzle_row_is_the_narrowest_product() -> None:
    with pytest.raises(sk.DotShapeError) as info:
        matmul.plan(*_specs((64, 256), (256, 256)), BN=8)
    assert info.value.fix == "set BN=16" and "32-byte swizzle" in str(info.value.expected)


@pytest.mark.usefixtures("sixteen_sms")
def test_a_narrowed_launch_has_no_races_and_the_same_bits_each_call() -> None:
    a, b = _normal(5, (9, 1200)), _normal(6, (1200, 200))
    assert matmul.plan(a, b).narrowing is not None
    report = sk.testing.detect_races(matmul, a, b)
    assert not report.races_found and report.result is not None
    first, second = matmul(a, b), matmul(a, b)
    assert bool(jnp.all(first == second))  # no split, no atomics: one order of additions


# --- which errors make a candidate no candidate ----------------------------------------------


def _skinny_call_with_candidates_refused(
    monkeypatch: pytest.MonkeyPatch, error: type[sk.StaticKernelError]
) -> Any:
    """The skinny product's call compiled with its one narrowing candidate's compile refused
    by an `error`, the declared constants compiled as they are."""
    from statickernel._compiler import build
    from statickernel._compiler.declare.binding import bind
    from statickernel._compiler.mosaic_gpu import constants
    from statickernel._targets import TARGETS

    monkeypatch.setattr(constants, "narrowing_candidates", lambda *args: [{"BM": 64, "BN": 32}])

    def refuse(unit: Any) -> Any:
        raise error("a candidate refused", kernel=unit.spec.name)

    real = constants.narrowed
    monkeypatch.setattr(
        constants, "narrowed", lambda unit, declared, _: real(unit, declared, refuse)
    )
    args = _specs((16, 4096), (4096, 4096))
    binding = bind(
        matmul.spec, args, matmul.consts, {}, call=False, limits=TARGETS["sm_90a"].limits
    )
    return build.compile_call(matmul.spec, binding, "mosaic_gpu", None)


@pytest.mark.usefixtures("h200")
def test_a_candidate_a_narrower_blocks_rule_refuses_is_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled = _skinny_call_with_candidates_refused(monkeypatch, sk.BlockAlignmentError)
    assert compiled.plan.narrowing is None  # the declared blocks stay
    assert compiled.plan.split is not None


@pytest.mark.usefixtures("h200")
def test_a_candidate_any_other_rule_refuses_surfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error that no narrower block causes is no "not a candidate": it surfaces."""
    with pytest.raises(sk.PlanError, match="a candidate refused"):
        _skinny_call_with_candidates_refused(monkeypatch, sk.PlanError)


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def _hopper_matmul(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "K N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
) -> Float[Array, "M N"]:
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))


@pytest.mark.usefixtures("h200")
def test_a_narrowed_blackwell_plan_keeps_the_rows_it_was_given_and_says_why() -> None:
    """A kernel written with 64-row blocks for Hopper takes tcgen05's 128 rows on Blackwell;
    where its skinny product then narrows BN, the narrowed plan keeps BM=128 and its note."""
    plan = _hopper_matmul.with_target("sm_100a").plan(*_specs((16, 4096), (4096, 4096)))
    consts = dict(plan.constants)
    assert consts["BM"] == 128 and consts["BN"] < 128
    assert plan.narrowing is not None
    assert any(n.startswith("BM=64 (its default) is 128 on sm_100a") for n in plan.notes)
