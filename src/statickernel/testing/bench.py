"""Timing a kernel, or any JAX function, the way a kernel author compares them: warm-up calls,
repeated timed runs, the median and the spread, and for a kernel the rates its plan's cost
gives (achieved HBM bytes and FLOP a second, and the fraction of its roofline floor).

On a GPU the time is the device's: CUPTI records each kernel a call launches, with its start
and end on the device, and a run's time is the sum over the call's kernels, without the host's
dispatch. A write of 256 MiB before each run evicts the 50 MiB L2 (outside the recorded
window), so that no run reads operands an earlier one left there. Where jaxlib has no CUPTI
timer, or a call launches nothing it records, the host clock times runs of back-to-back calls
(at least `min_run_s`, 1 ms by default, so that dispatch overlaps the device's work), L2
evicted between runs. On a CPU the time is the host clock around each call: the
interpreter's or XLA:CPU's time, not a GPU's. Results say which (`BenchResult.timing`). Side
by side, contenders are timed in interleaved rounds (a, b, a, b, ...), so that drift in the
machine's speed hits all alike.
"""

import dataclasses
import enum
import math
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._compat import cupti_kernel_timer
from .._compiler.mosaic_gpu.plan.cost import Cost
from .._display import TextDisplay
from .._errors import BenchError
from .._where import call_site

__all__ = ["BenchResult", "BenchTable", "Timing", "bench", "bench_side_by_side"]

_FLUSH_BYTES = 256 * 2**20


class Timing(enum.StrEnum):
    """How the times were taken."""

    HOST = "host"
    """The host clock around each call, on a CPU: the interpreter's or XLA:CPU's time."""
    HOST_BATCHED = "host, batched"
    """The host clock around runs of back-to-back calls on a GPU, L2 evicted between runs."""
    DEVICE = "device (CUPTI)"
    """The device time of the kernels each call launched, summed, on a GPU; L2 evicted
    before each call."""


@dataclasses.dataclass(frozen=True)
class BenchResult(TextDisplay):
    """One function's times: seconds per call of each timed run."""

    name: str
    timing: Timing
    device: str
    times: tuple[float, ...]
    calls_per_run: int
    cost: Cost | None = None
    """For a kernel, its plan's cost at these arguments; None for another function."""

    def check_invariants(self) -> None:
        assert self.times and all(t > 0 for t in self.times) and self.calls_per_run >= 1
        assert self.p10 <= self.median <= self.p90

    def _quantile(self, q: float) -> float:
        return float(np.quantile(np.asarray(self.times), q))

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def p10(self) -> float:
        return self._quantile(0.1)

    @property
    def p90(self) -> float:
        return self._quantile(0.9)

    @property
    def bytes_per_s(self) -> float | None:
        """The plan's HBM bytes over the median time; None without a cost."""
        return None if self.cost is None else self.cost.hbm_bytes / self.median

    @property
    def flops_per_s(self) -> float | None:
        return None if self.cost is None else self.cost.flops / self.median

    @property
    def floor_fraction(self) -> float | None:
        """The roofline floor over the median time: 1.0 runs at the H200's rates."""
        return None if self.cost is None else self.cost.floor_seconds / self.median

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "timing": self.timing.value,
            "device": self.device,
            "median_s": self.median,
            "p10_s": self.p10,
            "p90_s": self.p90,
            "runs": len(self.times),
            "calls_per_run": self.calls_per_run,
            "bytes_per_s": self.bytes_per_s,
            "flops_per_s": self.flops_per_s,
            "floor_fraction": self.floor_fraction,
        }

    def __str__(self) -> str:
        return BenchTable((self,)).__str__()


@dataclasses.dataclass(frozen=True)
class BenchTable(TextDisplay):
    """Contenders timed side by side; `str` is their table, with each one's time over the
    first's."""

    results: tuple[BenchResult, ...]

    def __getitem__(self, name: str) -> BenchResult:
        return next(r for r in self.results if r.name == name)

    def __str__(self) -> str:
        first = self.results[0]
        head = ("", "median", "p10", "p90", "vs first", "GB/s", "TFLOP/s", "of floor")
        rows: list[tuple[str, ...]] = [head]
        for r in self.results:
            rows.append(
                (
                    r.name,
                    _us(r.median),
                    _us(r.p10),
                    _us(r.p90),
                    f"{r.median / first.median:.3g}x",
                    "-" if r.bytes_per_s is None else f"{r.bytes_per_s / 1e9:,.1f}",
                    "-" if r.flops_per_s is None else f"{r.flops_per_s / 1e12:,.3f}",
                    "-" if r.floor_fraction is None else f"{r.floor_fraction:.1%}",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        lines = [
            f"timing: {first.timing.value} on {first.device}; {len(first.times)} runs of "
            f"{first.calls_per_run} call(s) each"
        ]
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [
                v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True)
            ]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us"


def _on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def _device() -> str:
    device = jax.devices()[0]
    return getattr(device, "device_kind", device.platform)


def _cost(fn: Callable[..., Any], args: tuple[Any, ...]) -> Cost | None:
    """A kernel's plan's cost at `args`; None for another function."""
    plan = getattr(fn, "plan", None)
    if plan is None or not hasattr(fn, "spec"):
        return None
    return plan(*args).cost


def _flush() -> None:
    jax.block_until_ready(jnp.zeros((_FLUSH_BYTES // 4,), jnp.float32) + 1)


def _run(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> float:
    if _on_gpu():
        _flush()
    start = time.perf_counter()
    out = None
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


KernelTimer = tuple[Callable[[], None], Callable[[], list[tuple[str, float]]]]


def _device_run(fn: Callable[..., Any], args: tuple[Any, ...], timer: KernelTimer) -> float | None:
    """The device seconds of the kernels one call launches, L2 evicted first (before the
    timer starts, so the eviction is not counted); None when it launched none the timer saw."""
    start, stop = timer
    _flush()
    start()
    try:
        jax.block_until_ready(fn(*args))
    finally:
        launched = stop()
    return sum(ms for _, ms in launched) / 1e3 if launched else None


def _device_timer(
    contenders: Mapping[str, Callable[..., Any]], args: tuple[Any, ...]
) -> KernelTimer | None:
    """CUPTI's timer where this is a GPU, jaxlib has one and it sees every contender's
    kernels; None otherwise (the host clock times them instead)."""
    if not _on_gpu():
        return None
    timer = cupti_kernel_timer()
    if timer is None:
        return None
    try:
        seen = all(_device_run(fn, args, timer) for fn in contenders.values())
    except RuntimeError:  # CUPTI taken by another profiler (Nsight, a debugger)
        return None
    return timer if seen else None


def _check(warmup: Any, reps: Any, min_run_s: Any) -> None:
    def refuse(name: str, value: Any, expected: str, example: str) -> BenchError:
        return BenchError(
            f"the setting {name}={value!r} is out of range",
            where=call_site(),
            expected=expected,
            actual=f"{name}={value!r}",
            fix=f"pass {name}={example}",
        )

    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise refuse("warmup", warmup, "an int >= 0: the untimed calls first", "3")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise refuse("reps", reps, "an int >= 1: the timed runs", "20")
    if min_run_s is not None and (
        isinstance(min_run_s, bool)
        or not isinstance(min_run_s, int | float)
        or not math.isfinite(min_run_s)
        or min_run_s < 0
    ):
        raise refuse(
            "min_run_s",
            min_run_s,
            "finite seconds >= 0: the least time one run of back-to-back calls takes "
            "(0: one call a run), or None for the default",
            "1e-3",
        )


def _described(value: Any) -> str:
    """A value in one short line: an array by its shape and dtype."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"an array ({type(value).__name__}) of shape {tuple(shape)}, {dtype}"
    text = " ".join(repr(value).split())
    return f"{type(value).__name__} {text[:77] + '...' if len(text) > 80 else text}"


def _check_contenders(contenders: Any) -> None:
    """Refuses contenders that are not a non-empty map of names to callables."""
    if not isinstance(contenders, Mapping) or not contenders:
        raise BenchError(
            "sk.testing.bench_side_by_side needs contenders: names mapped to the functions to time",
            where=call_site(),
            expected="a non-empty dict of name -> function",
            actual=_described(contenders),
            fix='pass e.g. {"kernel": softmax, "jnp": jax.jit(softmax_reference)}',
        )
    for name, fn in contenders.items():
        if not callable(fn):
            raise BenchError(
                f"the contender {name!r} is not a function: it cannot be called to time it",
                where=call_site(),
                expected="a callable taking the arguments, e.g. a kernel or a jax.jit function",
                actual=_described(fn),
                fix=f"map {name!r} to the function itself, not to its result (pass `f`, not "
                "`f(x)`)",
            )


def bench_side_by_side(
    contenders: Mapping[str, Callable[..., Any]],
    *args: Any,
    warmup: int = 3,
    reps: int = 20,
    min_run_s: float | None = None,
) -> BenchTable:
    """Times each contender on `args`, in interleaved rounds, and returns their table: e.g.
    `{"kernel": softmax, "jnp": jax.jit(softmax_reference)}`. On a GPU a run is one call timed
    on the device (CUPTI); where that is not to be had, a run batches back-to-back calls for
    at least `min_run_s` (default: 1 ms on a GPU, one call on a CPU) timed by the host."""
    _check(warmup, reps, min_run_s)
    _check_contenders(contenders)
    for fn in contenders.values():
        for _ in range(warmup):
            jax.block_until_ready(fn(*args))
    timer = _device_timer(contenders, args)
    if timer is not None:
        times, calls = _device_times(contenders, args, reps, timer)
        timing = Timing.DEVICE
    else:
        times, calls = _host_times(contenders, args, reps, min_run_s)
        timing = Timing.HOST_BATCHED if _on_gpu() else Timing.HOST
    results = []
    for name, fn in contenders.items():
        result = BenchResult(
            name, timing, _device(), tuple(times[name]), calls[name], _cost(fn, args)
        )
        result.check_invariants()
        results.append(result)
    return BenchTable(tuple(results))


def _device_times(
    contenders: Mapping[str, Callable[..., Any]],
    args: tuple[Any, ...],
    reps: int,
    timer: KernelTimer,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """One device-timed call a run, as `_host_times` returns its runs."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(reps):
        for name, fn in contenders.items():
            seconds = _device_run(fn, args, timer)
            if seconds is None:
                raise RuntimeError(f"{name}: CUPTI saw no kernel of this call, as it did before")
            times[name].append(seconds)
    return times, dict.fromkeys(contenders, 1)


def _host_times(
    contenders: Mapping[str, Callable[..., Any]],
    args: tuple[Any, ...],
    reps: int,
    min_run_s: float | None,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Host-clock runs of back-to-back calls, each at least `min_run_s` (default: 1 ms on a
    GPU, one call on a CPU), and the calls a run of each contender makes."""
    floor = min_run_s if min_run_s is not None else (1e-3 if _on_gpu() else 0.0)
    calls: dict[str, int] = {}
    for name, fn in contenders.items():
        once = max(_run(fn, args, 1), 1e-9)  # a clock's tick
        calls[name] = 1 + int(min(floor / once, 10_000 - 1)) if floor else 1
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(reps):
        for name, fn in contenders.items():
            times[name].append(_run(fn, args, calls[name]))
    return times, calls


def bench(
    fn: Callable[..., Any],
    *args: Any,
    warmup: int = 3,
    reps: int = 20,
    min_run_s: float | None = None,
    name: str | None = None,
) -> BenchResult:
    """Times `fn(*args)`: the median, p10 and p90 of `reps` runs after `warmup` calls, and for
    a statickernel kernel the rates of its plan's cost."""
    label = (
        name or getattr(getattr(fn, "spec", None), "name", None) or getattr(fn, "__name__", "fn")
    )
    table = bench_side_by_side({label: fn}, *args, warmup=warmup, reps=reps, min_run_s=min_run_s)
    return table.results[0]
