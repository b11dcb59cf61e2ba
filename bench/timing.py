"""Timing for the benchmark scripts: `sk.testing.bench_side_by_side` (the product's helper)
over zero-argument calls, with the figures the scripts' JSON records.

Contenders are timed in interleaved rounds (a, b, a, b, ...) rather than one after the other,
so that drift in the machine's speed (other processes, frequency scaling) hits both alike and
cancels in their ratio. On a GPU each run is one call timed on the device (CUPTI), the L2
evicted before it; where that cannot be had, runs of back-to-back calls are timed by the host
(`Timing.how` says which).
"""

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping
from typing import Any

import statickernel as sk

__all__ = ["Timing", "ratio", "time_side_by_side"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds per call of each timed run; a run may batch several calls."""

    per_call_s: tuple[float, ...]
    calls_per_run: int
    how: str = "host"
    """`sk.testing.Timing`'s value: device (CUPTI), host, batched, or host."""

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
            "timing": self.how,
        }


def ratio(numerator: Timing, denominator: Timing) -> float:
    return numerator.median_s / denominator.median_s if denominator.median_s else math.nan


def time_side_by_side(
    contenders: Mapping[str, Callable[[], Any]],
    *,
    warmup: int,
    runs: int,
    min_run_s: float = 0.0,
) -> dict[str, Timing]:
    """Times each contender `runs` times, after `warmup` untimed calls, in interleaved rounds.

    With `min_run_s`, a host-timed run batches enough back-to-back calls to last about that
    long, so that calls much shorter than a clock tick or a device sync are still measured
    well; a device-timed run is one call.
    """
    table = sk.testing.bench_side_by_side(
        dict(contenders), warmup=warmup, reps=runs, min_run_s=min_run_s
    )
    return {r.name: Timing(r.times, r.calls_per_run, r.timing.value) for r in table.results}
