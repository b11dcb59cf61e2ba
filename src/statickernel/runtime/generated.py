"""The generated module run as Python, and the cache keys of its specializations."""

import linecache
import struct
from collections.abc import Callable, Mapping
from typing import Any

import jax
from jax.core import Tracer

from .._compiler.declare.spec import KernelSpec
from .interpreter import interpreted_launch, interrupts_seen
from .static_batch import static_batch

__all__ = ["execute_module", "finished_when_eager", "overrides_key"]


def overrides_key(overrides: Mapping[str, Any]) -> tuple[tuple[str, type, Any], ...]:
    """Overrides as a cache key. The type is part of it because equal values of different types
    are different overrides: `BM=64.0` is an error where `BM=64` is valid, and `flag=1` is not
    `flag=True`. A float is keyed by its bits: -0.0 == 0.0 though `x / eps` tells them apart,
    and a NaN equal to nothing would miss the cache, and add an entry, on every call."""
    if not overrides:  # the common call: keep it as cheap as the key it replaces
        return ()
    return tuple(
        (name, type(value), struct.pack("<d", value) if isinstance(value, float) else value)
        for name, value in overrides.items()
    )


_SOURCE_COUNTER = iter(range(1 << 62))


def finished_when_eager(launch: Callable[..., Any]) -> Callable[..., Any]:
    """`launch`, which blocks until its results are ready when it runs on concrete arrays;
    traced (inside jit, grad or vmap) it is `launch` itself. A Ctrl-C while it waits for the
    interpreter is raised as the KeyboardInterrupt it is, not as the error XLA made of it."""

    def finished(*args: Any) -> Any:
        interrupts = interrupts_seen()
        try:
            out = launch(*args)
            if not any(isinstance(a, Tracer) for a in args):
                jax.block_until_ready(out)
        except Exception:
            if interrupts_seen() != interrupts:
                raise KeyboardInterrupt from None
            raise
        return out

    return finished


def execute_module(source: str, spec: KernelSpec, interpreted: bool) -> Callable[..., Any]:
    """Runs the generated module and returns its kernel function.

    An interpreted kernel launches through `interpreted_launch`, one launch at a time. Either
    launch refuses a `jax.vmap` over a symbolic axis (`static_batch`). The caller adds the
    derivative rule and the jit (`specialization`).
    """
    name = spec.name
    filename = f"<statickernel:{name}:{next(_SOURCE_COUNTER)}>"
    # Registering the text lets tracebacks and JAX's source info show the generated lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"__name__": f"statickernel_generated_{name}"}
    exec(compile(source, filename, "exec"), namespace)
    generated = namespace[name]
    launch = interpreted_launch(generated, name) if interpreted else generated
    return static_batch(launch, name, tuple(op.name for op in spec.operands))
