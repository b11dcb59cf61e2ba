"""Timing: warm-ups, repeated runs, medians, and side-by-side runs for ratios.

Contenders are timed in interleaved rounds (a, b, a, b, ...) rather than one after the other,
so that drift in the machine's speed (other processes, frequency scaling) hits both alike and
cancels in their ratio.
"""

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax

__all__ = ["Timing", "ratio", "time_side_by_side"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds per call of each timed run; a run may batch several calls."""

    per_call_s: tuple[float, ...]
    calls_per_run: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.per_call_s)

    @property
    def median_ms(self) -> float:
        return self.median_s * 1e3

    @property
    def median_us(self) -> float:
        return self.median_s * 1e6

    def to_json(self) -> dict[str, Any]:
        return {
            "median_s": self.median_s,
            "min_s": min(self.per_call_s),
            "max_s": max(self.per_call_s),
            "runs": len(self.per_call_s),
            "calls_per_run": self.calls_per_run,
        }


def ratio(numerator: Timing, denominator: Timing) -> float:
    return numerator.median_s / denominator.median_s if denominator.median_s else math.nan


def _run_once(call: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    out = None
    for _ in range(calls):
        out = call()
    # Dispatch is asynchronous: a run ends when its last result is ready.
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def time_side_by_side(
    contenders: Mapping[str, Callable[[], Any]],
    *,
    warmup: int,
    runs: int,
    min_run_s: float = 0.0,
    max_calls_per_run: int = 10_000,
) -> dict[str, Timing]:
    """Times each contender `runs` times, after `warmup` untimed calls, in interleaved rounds.

    With `min_run_s`, a run batches enough back-to-back calls to last about that long, so that
    calls much shorter than a clock tick or a device sync are still measured well.
    """
    for call in contenders.values():
        for _ in range(warmup):
            jax.block_until_ready(call())
    batch: dict[str, int] = {}
    for name, call in contenders.items():
        calls = 1
        if min_run_s > 0:
            one = _run_once(call, 1)
            calls = max(1, min(max_calls_per_run, math.ceil(min_run_s / max(one, 1e-9))))
        batch[name] = calls
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(runs):
        for name, call in contenders.items():
            samples[name].append(_run_once(call, batch[name]))
    return {name: Timing(tuple(samples[name]), batch[name]) for name in contenders}
