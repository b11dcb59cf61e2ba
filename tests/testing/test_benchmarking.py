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
_THIS_FILE = "tests/testing/test_benchmarking.py"


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
    # Warm-up for each, one sizing run each, then the rounds a, b, a, b, a, b.
    assert order == ["a", "a", "b", "b"] + ["a", "b"] + ["a", "b"] * 3
    assert [r.name for r in table.results] == ["a", "b"] and table["b"].name == "b"
    lines = str(table).splitlines()
    assert lines[2].split()[:1] == ["a"] and "1x" in lines[2]


def test_a_run_batches_calls_to_last_min_run_s() -> None:
    def slow(x: jax.Array) -> jax.Array:
        time.sleep(0.002)
        return x

    # 2 ms calls batched to 100 ms: at least 5 of them, even if the sizing call took 20 ms.
    result = sk.testing.bench(slow, X, warmup=0, reps=2, min_run_s=0.1)
    assert result.calls_per_run >= 5
    assert result.median >= 0.002


def test_the_kernel_and_its_reference_side_by_side() -> None:
    table = sk.testing.bench_side_by_side(
        {"kernel": softmax, "jnp": jax.jit(softmax_reference)}, X, warmup=1, reps=2
    )
    assert table["kernel"].cost is not None and table["jnp"].cost is None
    assert str(table).splitlines()[1].split()[:4] == ["median", "p10", "p90", "vs"]


class _FakeCupti:
    """CUPTI's timer as a GPU has it: what the kernels launched between start and stop took."""

    def __init__(self, launched: list[tuple[str, float]]) -> None:
        self.launched = launched
        self.events: list[str] = []

    def start(self) -> None:
        self.events.append("start")

    def stop(self) -> list[tuple[str, float]]:
        self.events.append("stop")
        return list(self.launched)


def _as_if_on_a_gpu(monkeypatch: pytest.MonkeyPatch, cupti: _FakeCupti | None) -> list[str]:
    import importlib

    bench_module = importlib.import_module("statickernel.testing.bench")

    events = cupti.events if cupti else []
    monkeypatch.setattr(bench_module, "_on_gpu", lambda: True)
    monkeypatch.setattr(bench_module, "_flush", lambda: events.append("flush"))
    timer = (cupti.start, cupti.stop) if cupti else None
    monkeypatch.setattr(bench_module, "cupti_kernel_timer", lambda: timer)
    return events


def test_on_a_gpu_each_run_is_the_device_time_of_its_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupti = _FakeCupti([("softmax_kernel", 0.25), ("pad_fusion", 0.05)])
    events = _as_if_on_a_gpu(monkeypatch, cupti)
    result = sk.testing.bench(softmax, X, warmup=1, reps=4)
    assert result.timing is sk.testing.Timing.DEVICE and result.calls_per_run == 1
    # The kernels of one call, summed: 0.3 ms.
    assert result.times == pytest.approx((3e-4,) * 4) and result.median == pytest.approx(3e-4)
    # L2 is evicted before the timer starts, so the eviction's own kernel is not counted.
    assert events == ["flush", "start", "stop"] * 5  # one probe, then the four runs
    assert str(result).startswith("timing: device (CUPTI) on ")


def test_without_the_device_timer_a_gpu_run_is_timed_by_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _as_if_on_a_gpu(monkeypatch, None)
    result = sk.testing.bench(jax.jit(jnp.sin), X, warmup=0, reps=2, min_run_s=0.0)
    assert result.timing is sk.testing.Timing.HOST_BATCHED


def test_a_call_that_launches_no_kernel_the_timer_sees_is_timed_by_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _as_if_on_a_gpu(monkeypatch, _FakeCupti([]))
    result = sk.testing.bench(jax.jit(jnp.sin), X, warmup=0, reps=2, min_run_s=0.0)
    assert result.timing is sk.testing.Timing.HOST_BATCHED


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"reps": 0}, "reps=0"),
        ({"warmup": -1}, "warmup=-1"),
        ({"reps": True}, "reps=True"),
        ({"min_run_s": -1.0}, "min_run_s=-1.0"),
        ({"min_run_s": float("inf")}, "min_run_s=inf"),
        ({"min_run_s": float("nan")}, "min_run_s=nan"),
        ({"min_run_s": True}, "min_run_s=True"),
    ],
)
def test_settings_that_measure_nothing_are_refused(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(sk.BenchError, match=match) as info:
        sk.testing.bench(jnp.sin, X, **settings)
    assert (info.value.where or "").startswith(f"{_THIS_FILE}:")
    assert info.value.fix and info.value.expected


def test_a_long_least_run_is_batched_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    _as_if_on_a_gpu(monkeypatch, None)
    result = sk.testing.bench(jax.jit(jnp.sin), X, warmup=0, reps=1, min_run_s=1e300)
    assert result.calls_per_run == 10_000


@pytest.mark.parametrize(
    ("contenders", "match"),
    [
        ({"kernel": softmax, "jnp": softmax_reference(X)}, "the contender 'jnp' is not a function"),
        ({}, "needs contenders"),
        ([softmax], "needs contenders"),
    ],
)
def test_contenders_that_cannot_be_timed_are_refused(contenders: Any, match: str) -> None:
    with pytest.raises(sk.BenchError, match=match) as info:
        sk.testing.bench_side_by_side(contenders, X, warmup=0, reps=1)
    assert (info.value.where or "").startswith(f"{_THIS_FILE}:")
    assert info.value.fix
