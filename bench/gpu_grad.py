"""The GPU check's training part: `jax.grad` through the gallery's backward kernels against
`jax.grad` of the same loss in jnp, which XLA differentiates and fuses, side by side.

Each loss weighs the kernel's result by a fixed random cotangent (a plain sum would give
softmax a zero gradient); the cross-entropy is a loss already. Both sides are jitted; their
gradients are checked to agree before either is timed, so that no figure times a wrong
backward.
"""

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gallery import example_module
from gpu_settings import GOAL_GRAD_BEATS_XLA, Budget, GradShape, Settings
from report import Table, describe_error
from timing import ratio, time_side_by_side

__all__ = ["measure_grad"]

# Each kernel, named as its example module is, and the name of its jnp reference there.
SUBJECTS: dict[str, str] = {
    "rmsnorm": "rmsnorm_reference",
    "layernorm": "layernorm_reference",
    "softmax": "softmax_reference",
    "cross_entropy": "cross_entropy_reference",
    "cross_entropy_rows": "cross_entropy_reference",
}
# The kernels that live in another kernel's module.
MODULES: dict[str, str] = {"cross_entropy_rows": "cross_entropy"}


def _subject(name: str) -> tuple[Any, Callable[..., Any]]:
    module = example_module(MODULES.get(name, name))
    return getattr(module, name), getattr(module, SUBJECTS[name])


def _is_loss(name: str) -> bool:
    return name.startswith("cross_entropy")


def _operands(name: str, m: int, n: int, dtype: str) -> tuple[Any, ...]:
    keys = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(keys[0], (m, n), jnp.float32).astype(dtype)
    if _is_loss(name):
        return x, jax.random.randint(keys[1], (m,), 0, n, jnp.int32)
    w = (1 + 0.1 * jax.random.normal(keys[1], (n,), jnp.float32)).astype(dtype)
    b = (0.1 * jax.random.normal(keys[2], (n,), jnp.float32)).astype(dtype)
    return {"softmax": (x,), "layernorm": (x, w, b)}.get(name, (x, w))


def _loss(name: str, fn: Callable[..., Any], probe: jax.Array) -> Callable[..., jax.Array]:
    if _is_loss(name):
        return fn
    return lambda *args: jnp.sum(fn(*args).astype(jnp.float32) * probe)


def _agree(got: Any, want: Any) -> bool:
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g32, w32 = np.asarray(g, np.float32), np.asarray(w, np.float32)
        scale = max(1.0, float(np.max(np.abs(w32))))
        if not np.allclose(g32, w32, atol=3e-2 * scale, rtol=0):
            return False
    return True


def measure_grad_case(shape: GradShape, settings: Settings) -> dict[str, Any]:
    started = time.monotonic()
    kernel, reference = _subject(shape.kernel)
    kernel = kernel.with_backend(settings.backend)
    args = _operands(shape.kernel, shape.m, shape.n, shape.dtype)
    probe = jax.random.normal(jax.random.key(9), (shape.m, shape.n), jnp.float32)
    floats = tuple(i for i, a in enumerate(args) if jnp.issubdtype(a.dtype, jnp.floating))
    row: dict[str, Any] = {
        "kernel": shape.kernel,
        "shape": [shape.m, shape.n],
        "dtype": shape.dtype,
    }
    try:
        sk_grad = jax.jit(jax.grad(_loss(shape.kernel, kernel, probe), argnums=floats))
        xla_grad = jax.jit(jax.grad(_loss(shape.kernel, reference, probe), argnums=floats))
        got, want = jax.block_until_ready((sk_grad(*args), xla_grad(*args)))
        row["agrees_with_xla"] = _agree(got, want)
        timings = time_side_by_side(
            {"statickernel": lambda: sk_grad(*args), "xla": lambda: xla_grad(*args)},
            warmup=settings.warmup,
            runs=settings.runs,
            min_run_s=settings.min_run_s,
        )
        row["median_us"] = timings["statickernel"].median_us
        row["xla_us"] = timings["xla"].median_us
        row["xla_over_sk"] = ratio(timings["xla"], timings["statickernel"])
        row["timing"] = {k: t.to_json() for k, t in timings.items()}
    except Exception as exc:  # a failure is a row of the report, not the end of the check
        row["error"] = describe_error(exc)
    row["wall_s"] = time.monotonic() - started
    return row


def measure_grad(settings: Settings, budget: Budget) -> tuple[list[dict[str, Any]], Table]:
    """Each training shape of the settings, in order, until the time budget is spent."""
    table = Table(
        "jax.grad through the backward kernels",
        ["kernel", "shape", "sk us", "XLA us", "XLA / sk", "agrees"],
        "jax.jit(jax.grad(loss)) with the gallery kernel, whose backward is kernels, against "
        f"the same loss in jnp differentiated by XLA. Goal: XLA / sk > 1 for "
        f"{', '.join(GOAL_GRAD_BEATS_XLA)}.",
    )
    rows: list[dict[str, Any]] = []
    for shape in settings.grad:
        if budget.spent():
            rows.append({"kernel": shape.kernel, "shape": [shape.m, shape.n], "skipped": True})
            table.add(
                shape.kernel, f"{shape.m}x{shape.n} {shape.dtype}", None, None, None, "skipped"
            )
            continue
        row = measure_grad_case(shape, settings)
        rows.append(row)
        table.add(
            shape.kernel,
            f"{shape.m}x{shape.n} {shape.dtype}",
            row.get("median_us"),
            row.get("xla_us"),
            row.get("xla_over_sk"),
            row.get("error") or ("yes" if row.get("agrees_with_xla") else "NO"),
        )
    return rows, table
