"""Interpreted launches: the Mosaic GPU interpreter, one launch at a time, however it is called.

The interpreter keeps its simulated memory in process-wide state (in its private module
`gpu_callbacks`): the first launch to start creates it, every launch allocates buffers and
barriers in it, and the end of a launch discards it. Two launches that overlap corrupt each
other, whichever threads or devices run them. The interpreter orders its own launches only
through JAX's ordered effects, whose tokens are per Python thread, so launches from two
threads, or from the devices of one shard_map, still overlap; and under a mesh it simulates
every device in that one state, where a device that finishes first finds the others' barriers
still allocated.

So an interpreted kernel never puts the interpreter into the caller's computation. Its launch
is one host callback that hands the arrays to a single thread of statickernel's, which runs
the interpreter eagerly on them, one launch at a time and on one simulated device. A callback
runs inside its caller's context (the axis names of a shard_map, the mesh), which the
interpreter reads to size its device grid; the thread of its own keeps that context out. Eager
calls, jax.jit from any thread, vmap (one launch per element), shard_map and pmap (one launch
per device's block) and jit of a sharded array (one launch on the gathered array) all go
through it. A launch that fails resets the interpreter's state, so later launches still run.

The thread is a daemon of statickernel's own, not a `concurrent.futures` executor: an executor
refuses new work once the process starts to exit, yet a computation dispatched before the exit
and not awaited still calls back then. A refused launch fails that device's part of a
multi-device computation, and the devices waiting for it in a collective (jit of a sharded
array gathers and broadcasts) abort the process when XLA's rendezvous times out.
"""

import atexit
import concurrent.futures
import contextlib
import dataclasses
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.extend.core import Primitive

from .._compat import (
    lowering_for_export,
    mesh_manual_axes,
    register_batching_rule,
    register_lowering,
    reset_mosaic_gpu_interpreter,
    varying_manual_axes,
)
from .._compiler.declare.binding import call_site
from .._errors import BackendError

__all__ = ["interpreted_launch", "interrupts_seen"]

# The interrupts (Ctrl-C) each thread received while it waited for an interpreted launch.
_interrupts = threading.local()


def interrupts_seen() -> int:
    """How many times this thread stopped waiting for an interpreted launch on a
    KeyboardInterrupt. Raised inside the host callback, the interrupt reaches the caller as
    XLA's error (a ValueError or JaxRuntimeError, "CpuCallback error"), which an `except
    Exception` would take for a failed call; an eager call raises it again as a
    KeyboardInterrupt when this count moved during the call (`generated.finished_when_eager`)."""
    return getattr(_interrupts, "count", 0)


@dataclasses.dataclass(frozen=True)
class _Launch:
    """One interpreted launch waiting for the interpreter thread, and where its result goes."""

    generated: Callable[..., Any]
    arrays: tuple[np.ndarray, ...]
    outcome: "concurrent.futures.Future[Any]"


class _InterpreterThread:
    """The one thread that runs every interpreted launch in the process, one at a time, in the
    order they arrive."""

    def __init__(self) -> None:
        self._launches: queue.SimpleQueue[_Launch] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._waits_at_exit = False

    def start(self) -> None:
        """Starts the thread unless it runs: when a kernel is built, since a launch that comes
        while the process exits could not start one. A fork leaves none in the child."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="statickernel-interpret", daemon=True
                )
                self._thread.start()
            if not self._waits_at_exit:
                # Registered after JAX's own exit hook, so it runs before it.
                atexit.register(_finish_dispatched)
                self._waits_at_exit = True

    def run(self, generated: Callable[..., Any], arrays: tuple[np.ndarray, ...]) -> Any:
        launch = _Launch(generated, arrays, concurrent.futures.Future())
        try:
            self.start()
            self._launches.put(launch)
            return launch.outcome.result()
        except KeyboardInterrupt:
            # The launch runs on; it is the next launch's to wait for (and the exit's).
            _interrupts.count = interrupts_seen() + 1
            raise

    def finish(self, timeout_s: float) -> None:
        """Waits for the launches queued so far to end (an interrupted caller stopped waiting
        for its own): a thread still interpreting when the interpreter shuts down aborts the
        process."""
        with self._lock:
            running = self._thread is not None and self._thread.is_alive()
        if not running:
            return
        done = _Launch(_nothing, (), concurrent.futures.Future())
        self._launches.put(done)
        with contextlib.suppress(Exception):
            done.outcome.result(timeout=timeout_s)

    def _serve(self) -> None:
        while True:
            launch = self._launches.get()
            try:
                launch.outcome.set_result(_interpret(launch.generated, launch.arrays))
            except BaseException as exc:  # the callback that waits for it re-raises it
                launch.outcome.set_exception(exc)


def _nothing() -> tuple[()]:
    return ()


_INTERPRETER = _InterpreterThread()
# At exit, how long to wait for a launch that nothing awaits any more.
_EXIT_WAIT_S = 60.0


def _finish_dispatched() -> None:
    """At exit, waits for the computations still running: one dispatched and never awaited
    can still call back into an interpreted launch, and JAX's own exit hook, which runs after
    this one, clears the caches and backends that the launch's interpreter uses."""
    for array in jax.live_arrays():
        # A computation that failed: its error was its caller's to see.
        with contextlib.suppress(Exception):
            array.block_until_ready()
    _INTERPRETER.finish(_EXIT_WAIT_S)


def interpreted_launch(generated: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`generated` (an interpreted module's kernel function) launched as one host callback."""
    _INTERPRETER.start()

    def run_on_host(*arrays: np.ndarray) -> Any:
        return _INTERPRETER.run(generated, arrays)

    def launch(*args: Any) -> Any:
        _check_mesh(name)
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
        results = jax.eval_shape(generated, *structs)
        args = _not_exported_p.bind(*args, kernel=name)
        # One launch per element under vmap: the specialization is for one element's shapes.
        out = jax.pure_callback(run_on_host, results, *args, vmap_method="sequential")
        # In a shard_map each device's launch gives its own results, which vary along the mesh
        # axes its operands vary along; a callback's are typed as varying along none, and a
        # custom_vjp refuses a declared backward's cotangents typed so as mistyped.
        varying = sorted({axis for a in args for axis in varying_manual_axes(a)})
        if varying:
            out = jax.lax.pcast(out, tuple(varying), to="varying")
        # The callback's results live on one device (a "maximal" sharding). As a jit's own
        # results under a mesh set by jax.set_mesh, jax cannot name that sharding on the mesh
        # and fails to compile; past the barrier they are plain values, which it can.
        return jax.lax.optimization_barrier(out)

    return launch


def _interpret(generated: Callable[..., Any], arrays: tuple[np.ndarray, ...]) -> Any:
    try:
        # On the host, wherever the callback came from: a callback from a GPU computation that
        # launched another on the same GPU and waited for it could wait on its own stream.
        with jax.default_device(_host_device()):
            return jax.tree.map(np.asarray, generated(*arrays))
    except BaseException:
        _reset_interpreter()
        raise


@functools.cache
def _host_device() -> Any:
    """The CPU device, or None (the default device) where JAX_PLATFORMS leaves it out."""
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:
        return None


def _reset_interpreter() -> None:
    """Discards the interpreter's state after a failed launch: one that stops before the
    interpreter's own clean-up leaves it allocated, and the next launch would reuse it."""
    reset_mosaic_gpu_interpreter()


def _check_mesh(name: str) -> None:
    """Host callbacks run either once, on whole arrays, or once per device, on its block; a
    shard_map that leaves some mesh axes automatic allows neither."""
    axes = mesh_manual_axes()
    if axes is None:
        return
    manual, automatic = axes
    raise BackendError(
        "the interpreter cannot run inside a shard_map that leaves some mesh axes automatic",
        kernel=name,
        where=call_site(),
        expected="a shard_map over every mesh axis, or a call outside shard_map",
        actual=f"manual axes {', '.join(manual)}; automatic axes {', '.join(automatic)}",
        fix="leave out axis_names so that shard_map maps every axis (each device then runs "
        "the kernel on its block), or use kernel.with_backend('mosaic_gpu') on a GPU",
    )


# An identity on the launch's operands whose lowering refuses jax.export: the launch is a host
# callback, which an exported artifact cannot carry, and JAX would say so only after lowering,
# without naming the kernel.
_not_exported_p = Primitive("statickernel_interpreted_launch")
_not_exported_p.multiple_results = True
_not_exported_p.def_impl(lambda *args, **_: args)
_not_exported_p.def_abstract_eval(lambda *avals, **_: avals)


def _lower_not_exported(ctx: Any, *operands: Any, kernel: str) -> Any:
    if lowering_for_export(ctx):
        raise BackendError(
            "a kernel on the interpret backend cannot be exported: the interpreter runs as a "
            "host callback, which jax.export cannot serialize",
            kernel=kernel,
            where=call_site(),  # the export's line: the trace, and so the call, may be cached
            expected="a kernel with the mosaic_gpu backend",
            actual="backend 'interpret'",
            fix=f"export {kernel}.with_backend('mosaic_gpu') with platforms=('cuda',); that "
            "works on any machine, and the artifact runs on a Hopper GPU",
        ).with_traceback(None)
    return operands


register_lowering(_not_exported_p, _lower_not_exported)


def _batch_not_exported(args: Any, dims: Any, **params: Any) -> Any:
    return _not_exported_p.bind(*args, **params), dims


register_batching_rule(_not_exported_p, _batch_not_exported)
