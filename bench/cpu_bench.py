"""The CPU benchmark: what statickernel costs on top of hand-written Pallas, without a GPU.

Five measurements, each printed as a table of medians with their ratios side by side:

1. import-time check: the decorator's cost per gallery kernel, and its share of importing
   the kernel's module;
2. first call: statickernel's bind, plan, generate, trace and lower against a hand-written
   `plgpu.kernel` with the same blocks, both cross-lowered to CUDA (goal: ratio <= 1.5);
3. steady state: a cached kernel called inside `jax.jit` against the hand-written kernel
   called the same way, on the interpreter (goal: ratio <= 1.02);
4. eager call: `kernel(x)` against the generated function it dispatches to, and the cache
   lookup on its own;
5. interpreter throughput of each gallery kernel, for planning test sizes.

    python bench/cpu_bench.py                    # the full run, about 3 minutes on 2 cores
    python bench/cpu_bench.py --quick --out x.json  # seconds: tiny repeats, two kernels

Results go to bench/results/cpu-<date>.json unless --out says otherwise.
"""

import argparse
import dataclasses
import functools
import importlib.util
import itertools
import pathlib
import statistics
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

import statickernel as sk
from gallery import EXAMPLES_DIR, Subject, select
from report import Table, environment, write_json
from statickernel._compiler.declare import binding as _binding
from timing import Timing, ratio, time_side_by_side

RESULTS_DIR = pathlib.Path(__file__).resolve().parent / "results"
FIRST_CALL_GOAL = 1.5
STEADY_STATE_GOAL = 1.02
DTYPE = "float32"


@dataclasses.dataclass(frozen=True)
class Settings:
    quick: bool
    kernels: str | None  # comma-separated names; None for the whole gallery
    fast_runs: int  # timed runs of work that takes milliseconds (declaring, lowering)
    slow_runs: int  # timed runs of interpreted kernels (a tenth of a second or more)
    warmup: int
    first_call_shapes: tuple[tuple[int, int], ...]  # aligned, then ragged
    steady_shape: tuple[int, int]
    eager_shape: tuple[int, int]
    throughput_shape: tuple[int, int]


FULL = Settings(
    quick=False,
    kernels=None,
    fast_runs=21,
    slow_runs=11,
    warmup=1,
    first_call_shapes=((1024, 256), (1000, 200)),
    steady_shape=(512, 256),
    eager_shape=(64, 128),
    throughput_shape=(1024, 256),
)
QUICK = Settings(
    quick=True,
    kernels="add,softmax",
    fast_runs=2,
    slow_runs=2,
    warmup=1,
    first_call_shapes=((128, 256),),
    steady_shape=(64, 128),
    eager_shape=(64, 128),
    throughput_shape=(128, 128),
)


# --- helpers ----------------------------------------------------------------------------------


def forget_specializations(kernel: sk.Kernel[..., Any]) -> None:
    """Empties every cache a kernel's first call fills, so the next call starts from nothing."""
    kernel._cache.clear()
    kernel._by_consts.clear()
    _binding._checker.cache_clear()  # the jaxtyping/beartype checker of the annotations


def fresh_function(fn: Any) -> Any:
    """A new function object with the same code: JAX caches traces by function identity, and a
    first import never hits them."""
    copy = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__annotations__ = dict(fn.__annotations__)
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    return copy


_FRESH_MODULES = itertools.count()


def import_fresh(path: pathlib.Path) -> None:
    """Executes a module file as a first import would, under a name never used before."""
    spec = importlib.util.spec_from_file_location(
        f"_bench_{path.stem}_{next(_FRESH_MODULES)}", path
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def max_abs_diff(a: Any, b: Any) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))


def timings_json(timings: dict[str, Timing]) -> dict[str, Any]:
    return {name: t.to_json() for name, t in timings.items()}


def progress(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


# --- the measurements -------------------------------------------------------------------------


def measure_import_check(subjects: Sequence[Subject], s: Settings) -> tuple[list[dict], Table]:
    table = Table(
        "1. Import-time check (the decorator), per kernel",
        ["kernel", "decorator ms", "module import ms", "decorator share"],
        "decorator: sk.kernel(...) on a fresh copy of the function; module import: the example "
        "file executed as a first import (jax already loaded).",
    )
    rows = []
    for subject in subjects:
        progress(f"import check: {subject.name}")
        kernel = subject.kernel
        path = EXAMPLES_DIR / f"{subject.module}.py"

        def declare(spec: Any = kernel.spec) -> Any:
            return sk.kernel(tile=spec.tile_map, reference=spec.reference, name=spec.name)(
                fresh_function(spec.fn)
            )

        timings = time_side_by_side(
            {"decorator": declare, "module_import": lambda path=path: import_fresh(path)},
            warmup=s.warmup,
            runs=s.fast_runs,
        )
        decorator, module = timings["decorator"], timings["module_import"]
        share = ratio(decorator, module)
        rows.append(
            {
                "kernel": subject.name,
                "decorator_ms": decorator.median_ms,
                "module_import_ms": module.median_ms,
                "decorator_share": share,
                "timings": timings_json(timings),
            }
        )
        table.add(subject.name, decorator.median_ms, module.median_ms, share)
    return rows, table


def measure_first_call(subjects: Sequence[Subject], s: Settings) -> tuple[list[dict], Table]:
    table = Table(
        "2. First call: specialize and cross-lower to CUDA, statickernel vs hand-written",
        ["kernel", "shape", "sk total ms", "sk specialize ms", "hand-written ms", "ratio"],
        f"sk total: bind, plan, generate, exec, trace and lower (kernel.lower on emptied caches); "
        f"sk specialize: the same up to exec; hand-written: jax.jit(f).trace(...).lower(...). "
        f"Goal: ratio <= {FIRST_CALL_GOAL}.",
    )
    rows = []
    for subject in subjects:
        kernel = subject.kernel
        for m, n in s.first_call_shapes:
            progress(f"first call: {subject.name} {m}x{n}")
            sds = subject.structs(m, n, DTYPE)

            def statickernel_lower(kernel: Any = kernel, sds: Any = sds) -> Any:
                forget_specializations(kernel)
                return kernel.lower(*sds)

            def statickernel_specialize(kernel: Any = kernel, sds: Any = sds) -> Any:
                forget_specializations(kernel)
                return kernel.specialize(*sds, backend="mosaic_gpu")

            def handwritten_lower(
                subject: Subject = subject, m: int = m, n: int = n, sds: Any = sds
            ) -> Any:
                f = subject.handwritten(m, n, DTYPE, interpret=False)
                return jax.jit(f).trace(*sds).lower(lowering_platforms=("cuda",))

            timings = time_side_by_side(
                {
                    "statickernel": statickernel_lower,
                    "statickernel_specialize": statickernel_specialize,
                    "handwritten": handwritten_lower,
                },
                warmup=s.warmup,
                runs=s.fast_runs,
            )
            r = ratio(timings["statickernel"], timings["handwritten"])
            rows.append(
                {
                    "kernel": subject.name,
                    "shape": [m, n],
                    "dtype": DTYPE,
                    "statickernel_ms": timings["statickernel"].median_ms,
                    "statickernel_specialize_ms": timings["statickernel_specialize"].median_ms,
                    "handwritten_ms": timings["handwritten"].median_ms,
                    "ratio": r,
                    "goal": FIRST_CALL_GOAL,
                    "meets_goal": r <= FIRST_CALL_GOAL,
                    "timings": timings_json(timings),
                }
            )
            table.add(
                subject.name,
                f"{m}x{n}",
                timings["statickernel"].median_ms,
                timings["statickernel_specialize"].median_ms,
                timings["handwritten"].median_ms,
                r,
            )
    # The specializations built here were for CUDA; later measurements interpret.
    for subject in subjects:
        forget_specializations(subject.kernel)
    return rows, table


def measure_steady_state(subjects: Sequence[Subject], s: Settings) -> tuple[list[dict], Table]:
    m, n = s.steady_shape
    table = Table(
        f"3. Steady state inside jax.jit, interpreter, {m}x{n} {DTYPE}",
        ["kernel", "statickernel ms", "hand-written ms", "ratio", "max |diff|"],
        f"Both called inside an outer jax.jit after warm-up; median per call with "
        f"block_until_ready. Goal: ratio <= {STEADY_STATE_GOAL}.",
    )
    rows = []
    for subject in subjects:
        progress(f"steady state: {subject.name}")
        args = subject.arrays(m, n, DTYPE)
        sk_jit = subject.statickernel_jit("interpret")
        hand_jit = subject.handwritten_jit(m, n, DTYPE, interpret=True)
        diff = max_abs_diff(sk_jit(*args), hand_jit(*args))
        timings = time_side_by_side(
            {
                "statickernel": functools.partial(sk_jit, *args),
                "handwritten": functools.partial(hand_jit, *args),
            },
            warmup=s.warmup,
            runs=s.slow_runs,
        )
        r = ratio(timings["statickernel"], timings["handwritten"])
        rows.append(
            {
                "kernel": subject.name,
                "shape": [m, n],
                "dtype": DTYPE,
                "statickernel_ms": timings["statickernel"].median_ms,
                "handwritten_ms": timings["handwritten"].median_ms,
                "ratio": r,
                "goal": STEADY_STATE_GOAL,
                "meets_goal": r <= STEADY_STATE_GOAL,
                "max_abs_diff": diff,
                "timings": timings_json(timings),
            }
        )
        table.add(
            subject.name,
            timings["statickernel"].median_ms,
            timings["handwritten"].median_ms,
            r,
            diff,
        )
    return rows, table


def measure_eager_call(subjects: Sequence[Subject], s: Settings) -> tuple[list[dict], Table]:
    m, n = s.eager_shape
    table = Table(
        f"4. Eager call overhead, interpreter, {m}x{n} {DTYPE}",
        ["kernel", "kernel(x) ms", "generated fn ms", "ratio", "difference us", "lookup us"],
        "kernel(x): the user's call; generated fn: kernel.specialize(x).fn(x), blocked the same "
        "way (interpreted calls block). The interpreter's run time dwarfs the difference, so the "
        "cache lookup (kernel.specialize on a cached key: the Python work kernel(x) adds) is "
        "timed on its own, in batches.",
    )
    rows = []
    for subject in subjects:
        progress(f"eager call: {subject.name}")
        kernel = subject.kernel
        args = subject.arrays(m, n, DTYPE)
        fn = kernel.specialize(*args).fn
        timings = time_side_by_side(
            {
                "kernel_call": functools.partial(kernel, *args),
                "generated_fn": functools.partial(fn, *args),
            },
            warmup=s.warmup,
            runs=s.slow_runs * 2,
        )
        lookup = time_side_by_side(
            {"cache_lookup": functools.partial(kernel.specialize, *args)},
            warmup=s.warmup,
            runs=s.fast_runs,
            min_run_s=0.02,
        )["cache_lookup"]
        call, generated = timings["kernel_call"], timings["generated_fn"]
        difference_us = call.median_us - generated.median_us
        rows.append(
            {
                "kernel": subject.name,
                "shape": [m, n],
                "dtype": DTYPE,
                "kernel_call_ms": call.median_ms,
                "generated_fn_ms": generated.median_ms,
                "ratio": ratio(call, generated),
                "difference_us": difference_us,
                "cache_lookup_us": lookup.median_us,
                "timings": {**timings_json(timings), "cache_lookup": lookup.to_json()},
            }
        )
        table.add(
            subject.name,
            call.median_ms,
            generated.median_ms,
            ratio(call, generated),
            difference_us,
            lookup.median_us,
        )
    return rows, table


def measure_throughput(subjects: Sequence[Subject], s: Settings) -> tuple[list[dict], Table]:
    m, n = s.throughput_shape
    table = Table(
        f"5. Interpreter throughput, eager kernel(x), {m}x{n} {DTYPE}",
        ["kernel", "ms per call", "elements/s"],
        "Elements of the (M, N) operand per second: what test shapes cost on the interpreter.",
    )
    rows = []
    for subject in subjects:
        progress(f"throughput: {subject.name}")
        kernel = subject.kernel
        args = subject.arrays(m, n, DTYPE)
        timing = time_side_by_side(
            {"kernel_call": functools.partial(kernel, *args)}, warmup=s.warmup, runs=s.slow_runs
        )["kernel_call"]
        rate = m * n / timing.median_s
        rows.append(
            {
                "kernel": subject.name,
                "shape": [m, n],
                "dtype": DTYPE,
                "median_ms": timing.median_ms,
                "elements_per_s": rate,
                "timings": {"kernel_call": timing.to_json()},
            }
        )
        table.add(subject.name, timing.median_ms, rate)
    return rows, table


# --- the run ----------------------------------------------------------------------------------

SECTIONS: tuple[tuple[str, Callable[[Sequence[Subject], Settings], tuple[list, Table]]], ...] = (
    ("import_check", measure_import_check),
    ("first_call", measure_first_call),
    ("steady_state", measure_steady_state),
    ("eager_call", measure_eager_call),
    ("throughput", measure_throughput),
)


def summary(results: dict[str, Any]) -> dict[str, Any]:
    def median_of(section: str, key: str) -> float | None:
        values = [row[key] for row in results.get(section, [])]
        return statistics.median(values) if values else None

    return {
        "first_call_ratio_median": median_of("first_call", "ratio"),
        "first_call_ratio_max": max((r["ratio"] for r in results["first_call"]), default=None),
        "steady_state_ratio_median": median_of("steady_state", "ratio"),
        "steady_state_ratio_max": max((r["ratio"] for r in results["steady_state"]), default=None),
        "decorator_ms_median": median_of("import_check", "decorator_ms"),
        "cache_lookup_us_median": median_of("eager_call", "cache_lookup_us"),
        "goals": {"first_call_ratio": FIRST_CALL_GOAL, "steady_state_ratio": STEADY_STATE_GOAL},
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="tiny repeats and shapes (a smoke run)"
    )
    parser.add_argument("--kernels", help="comma-separated gallery kernels (default: all)")
    parser.add_argument("--out", type=pathlib.Path, help="the JSON file to write")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # This benchmark is about the CPU: keep JAX off any accelerator the machine may have.
    jax.config.update("jax_platforms", "cpu")
    settings = QUICK if args.quick else FULL
    if args.kernels:
        settings = dataclasses.replace(settings, kernels=args.kernels)
    subjects = select(settings.kernels)
    env = environment()
    out = args.out or RESULTS_DIR / f"cpu-{env['date']}.json"
    print(
        f"statickernel CPU benchmark: jax {env['jax']}, {env['cpu_count']} CPUs, "
        f"{env['processor']}, backend interpret{' (quick)' if settings.quick else ''}"
    )
    results: dict[str, Any] = {
        "benchmark": "cpu",
        "environment": env,
        "settings": dataclasses.asdict(settings),
        "kernels": [subject.name for subject in subjects],
    }
    started = time.perf_counter()
    for key, measure in SECTIONS:
        rows, table = measure(subjects, settings)
        results[key] = rows
        print()
        print(table.text(), flush=True)
    results["summary"] = summary(results)
    results["wall_s"] = time.perf_counter() - started
    write_json(out, results)
    print(f"\nwrote {out} ({results['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
