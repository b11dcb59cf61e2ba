"""sk.testing.bench and bench_side_by_side on the CPU: the statistics, a kernel's rates from
its plan's cost, interleaved rounds, batching, and the refused settings."""

import time
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import statickernel as sk
from softmax import softmax, softmax_reference

X = jax.random.normal(jax.random.key(0), (130, 100), jnp.float32)


def test_a_function_gets_its_statistics_and_no_rates() -> None:
    result = sk.testing.bench(jax.jit(jnp.sin), X, warmup=1, reps=7)
    result.check_invariants()
    assert result.timing is sk.testing.Timing.HOST and len(result.times) == 7
    assert result.calls_per_run == 1 and result.cost is None
    assert result.p10 <= result.median <= result.p90
    assert result.bytes_per_s is None and result.floor_fraction is None
    assert str(result).startswith("timing: host on ")
    assert result.to_json()["runs"] == 7


def test_a_kernel_gets_the_rates_of_its_plans_cost() -> None:
    result = sk.testing.bench(softmax, X, warmup=1, reps=3)
    cost = softmax.plan(X).cost
    assert cost is not None and result.cost == cost and result.name == "softmax"
    assert result.bytes_per_s == pytest.approx(cost.hbm_bytes / result.median)
    assert result.flops_per_s == pytest.approx(cost.flops / result.median)
    assert result.floor_fraction == pytest.approx(cost.floor_seconds / result.median)
    row = str(result).splitlines()[2]
    assert row.startswith("softmax") and row.endswith("%")


def test_contenders_run_in_interleaved_rounds() -> None:
    order: list[str] = []

    def tagged(tag: str) -> Any:
        def fn(x: jax.Array) -> jax.Array:
            order.append(tag)
            return x

        return fn

    table = sk.testing.bench_side_by_side({"a": tagged("a"), "b": tagged("b")}, X, warmup=2, reps=3)
    # Warm-up and one sizing run each, then the rounds a, b, a, b, a, b.
    assert order == ["a"] * 3 + ["b"] * 3 + ["a", "b"] * 3
    assert [r.name for r in table.results] == ["a", "b"] and table["b"].name == "b"
    lines = str(table).splitlines()
    assert lines[2].split()[:1] == ["a"] and "1x" in lines[2]


def test_a_run_batches_calls_to_last_min_run_s() -> None:
    def slow(x: jax.Array) -> jax.Array:
        time.sleep(0.002)
        return x

    result = sk.testing.bench(slow, X, warmup=0, reps=2, min_run_s=0.02)
    assert result.calls_per_run >= 5
    assert result.median >= 0.002


def test_the_kernel_and_its_reference_side_by_side() -> None:
    table = sk.testing.bench_side_by_side(
        {"kernel": softmax, "jnp": jax.jit(softmax_reference)}, X, warmup=1, reps=2
    )
    assert table["kernel"].cost is not None and table["jnp"].cost is None
    assert str(table).splitlines()[1].split()[:4] == ["median", "p10", "p90", "vs"]


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"reps": 0}, "reps=0"),
        ({"warmup": -1}, "warmup=-1"),
        ({"reps": True}, "reps=True"),
        ({"min_run_s": -1.0}, "min_run_s=-1.0"),
    ],
)
def test_settings_that_measure_nothing_are_refused(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sk.testing.bench(jnp.sin, X, **settings)
