"""Interpreted launches however they are reached: from threads at once, eagerly, under jax.jit
and under vmap; and over several devices (shard_map, pmap, jit of a sharded array), in a
process of its own with four host devices."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import statickernel as sk
from add import add
from rmsnorm import rmsnorm
from row_sum import row_sum
from softmax import softmax

EXAMPLES_DIR = os.path.join(str(pathlib.Path(__file__).resolve().parents[2]), "examples")
# Generous: a round interprets a few small kernels, well under a second each.
THREAD_TIMEOUT_S = 300


def rand(*shape: int, seed: int = 0) -> Any:
    return jnp.asarray(np.random.default_rng([seed, *shape]).standard_normal(shape, np.float32))


@dataclasses.dataclass(frozen=True)
class Job:
    """One call that a thread makes: a kernel on its operands, eagerly, jitted or vmapped."""

    kernel: sk.Kernel[..., Any]
    args: tuple[Any, ...]
    mode: str  # "eager", "jit" or "vmap" (jitted, over a leading axis of 2)

    def call(self) -> Callable[[], Any]:
        kernel = self.kernel.with_backend("interpret")
        if self.mode == "eager":
            fn: Callable[..., Any] = kernel
        elif self.mode == "jit":
            fn = jax.jit(lambda *a: kernel(*a))
        else:
            fn = jax.jit(jax.vmap(lambda *a: kernel(*a)))
        return lambda: np.asarray(fn(*self.args))

    def expected(self) -> Any:
        reference = self.kernel.reference
        assert reference is not None
        if self.mode == "vmap":
            return np.asarray(jax.vmap(reference)(*self.args))
        return np.asarray(reference(*self.args))


def _jobs(modes: Sequence[str]) -> list[Job]:
    """Eight calls over four kernels and several shapes, in the given modes in turn."""
    shapes = [(70, 30), (129, 65), (64, 64), (200, 17), (33, 130), (10, 20), (3, 256), (65, 3)]
    jobs = []
    for i, (m, n) in enumerate(shapes):
        lead = (2,) if modes[i % len(modes)] == "vmap" else ()
        x = rand(*lead, m, n, seed=i)
        kernel, args = [
            (softmax, (x,)),
            (add, (x, x + 1)),
            (rmsnorm, (x, rand(*lead, n, seed=i + 100))),
            (row_sum, (x,)),
        ][i % 4]
        jobs.append(Job(kernel, args, modes[i % len(modes)]))
    return jobs


def run_together(calls: Sequence[Callable[[], Any]], timeout: float) -> list[Any]:
    """Runs each call on a thread of its own, all released at once: each one's result, or the
    exception it raised. Fails if any thread is still running after `timeout` seconds."""
    start = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def worker(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = calls[i]()
        except BaseException as exc:  # reported by the test, with the others
            outcomes[i] = exc

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"calls still running after {timeout} s"
    return outcomes


def _check_outcomes(jobs: Sequence[Job], outcomes: Sequence[Any]) -> None:
    failures = [
        f"{job.kernel.spec.name} ({job.mode}): {type(out).__name__}: {str(out)[:300]}"
        for job, out in zip(jobs, outcomes, strict=True)
        if isinstance(out, BaseException)
    ]
    assert not failures, "\n".join(failures)
    for job, out in zip(jobs, outcomes, strict=True):
        np.testing.assert_allclose(out, job.expected(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "modes",
    [("jit",), ("eager", "jit"), ("jit", "eager", "vmap")],
    ids=["jitted", "eager-and-jitted", "eager-jitted-and-vmapped"],
)
def test_interpreted_calls_from_eight_threads(modes: tuple[str, ...]) -> None:
    jobs = _jobs(modes)
    calls = [job.call() for job in jobs]
    for call in calls:  # build and compile first: only the launches run at once
        call()
    for _ in range(3):
        _check_outcomes(jobs, run_together(calls, THREAD_TIMEOUT_S))


def test_threads_share_one_jitted_function() -> None:
    x = rand(129, 65)
    jitted = jax.jit(lambda v: softmax.with_backend("interpret")(v) + 1)
    want = np.asarray(softmax.reference(x)) + 1  # pyright: ignore[reportOptionalCall]
    jitted(x)
    for out in run_together([lambda: np.asarray(jitted(x))] * 8, THREAD_TIMEOUT_S):
        assert not isinstance(out, BaseException), out
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


# --- several devices ---------------------------------------------------------------------------


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jitted"])
def test_shard_map_on_this_process_devices(jitted: bool) -> None:
    # The launch runs outside the shard_map's axis names, which the interpreter would read.
    mesh = jax.make_mesh((len(jax.devices()),), ("d",))
    x = jax.device_put(rand(256, 100), NamedSharding(mesh, PartitionSpec("d")))
    spec = PartitionSpec("d")
    mapped = jax.shard_map(
        softmax.with_backend("interpret"), mesh=mesh, in_specs=spec, out_specs=spec
    )
    out = (jax.jit(mapped) if jitted else mapped)(x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(jax.nn.softmax(x, axis=-1)), atol=1e-6)


_DEVICES_SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    sys.path.insert(0, sys.argv[1])
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import statickernel as sk
    from softmax import softmax, softmax_reference

    kernel = softmax.with_backend("interpret")
    x = jax.random.normal(jax.random.key(0), (256, 100))
    want = np.asarray(softmax_reference(x))
    explicit = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Explicit,))
    auto = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Auto,))
    square = jax.make_mesh((2, 2), ("a", "b"), axis_types=(AxisType.Auto,) * 2)
    x_explicit = jax.device_put(x, NamedSharding(explicit, P("d")))
    x_auto = jax.device_put(x, NamedSharding(auto, P("d")))

    CASES = {
        "shard_map": lambda: jax.shard_map(
            kernel, mesh=explicit, in_specs=P("d"), out_specs=P("d")
        )(x_explicit),
        "jit-shard_map-2x2": lambda: jax.jit(
            jax.shard_map(kernel, mesh=square, in_specs=P(("a", "b")), out_specs=P(("a", "b")))
        )(x),
        "pmap": lambda: jax.pmap(kernel)(x.reshape(4, 64, 100)).reshape(256, 100),
        "jit-sharded": lambda: jax.jit(kernel)(x_auto),
        "jit-sharded-out": lambda: jax.jit(
            kernel, out_shardings=NamedSharding(auto, P("d"))
        )(x_auto),
        "jit-sharded-explicit": lambda: jax.jit(kernel)(x_explicit),
        "eager-sharded": lambda: kernel(x_auto),
        "eager-shard_map-2x2": lambda: jax.shard_map(
            kernel, mesh=square, in_specs=P(("a", "b")), out_specs=P(("a", "b"))
        )(jax.device_put(x, NamedSharding(square, P(("a", "b"))))),
        "partial-shard_map": lambda: jax.jit(
            jax.shard_map(kernel, mesh=square, in_specs=P("a"), out_specs=P("a"), axis_names={"a"})
        )(x),
        "eager-after": lambda: kernel(x),
    }
    results = {}
    for name, case in CASES.items():
        try:
            out = case()
        except Exception as exc:
            results[name] = {
                "error": type(exc).__name__,
                "message": str(exc),
                "statickernel": isinstance(exc, sk.StaticKernelError),
                "fix": getattr(exc, "fix", None),
            }
        else:
            results[name] = {
                "close": bool(np.allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)),
                "devices": len(out.sharding.device_set),
            }
    print(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def on_four_devices() -> dict[str, Any]:
    """What each way of running a kernel over four host devices gave, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "STATICKERNEL_BACKEND"}
    # The device count is read when jax initializes, so it needs a process of its own.
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", _DEVICES_SCRIPT, EXAMPLES_DIR],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("case", "devices"),
    [
        ("shard_map", 4),
        ("jit-shard_map-2x2", 4),
        ("pmap", 4),
        ("jit-sharded", 4),
        ("jit-sharded-out", 4),
        ("jit-sharded-explicit", 4),
        ("eager-sharded", 4),
        ("eager-shard_map-2x2", 4),
        ("eager-after", 1),
    ],
)
def test_several_devices(on_four_devices: dict[str, Any], case: str, devices: int) -> None:
    result = on_four_devices[case]
    assert "error" not in result, f"{result['error']}: {result['message'][:2000]}"
    assert result["close"]
    assert result["devices"] == devices


def test_a_shard_map_with_automatic_axes_is_a_backend_error(
    on_four_devices: dict[str, Any],
) -> None:
    result = on_four_devices["partial-shard_map"]
    assert result.get("error") == "BackendError", result
    assert result["statickernel"]
    assert "automatic axes b" in result["message"]
    assert "axis_names" in result["fix"]
    # The refusal leaves the process usable: later calls still run.
    assert on_four_devices["eager-after"]["close"]
