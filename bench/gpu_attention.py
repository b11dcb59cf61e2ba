"""The GPU check's attention part: `examples/attention.py` against cuDNN's flash attention
(`jax.nn.dot_product_attention(implementation="cudnn")`), XLA's, and jax's own Pallas kernel
`attention_mgpu` where it runs (sequence lengths a multiple of its blocks), side by side.

Every side computes the same thing from the same inputs: (B, H, S, D) for statickernel and
attention_mgpu's (B, S, H, D) transposed once, before timing. Each result is checked against
XLA's before anything is timed.
"""

import time
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp

from gallery import example_module
from gpu_settings import AttentionShape, Budget, Settings
from report import Table, agrees, describe_error
from timing import ratio, time_side_by_side

__all__ = ["measure_attention"]


def _operands(shape: AttentionShape) -> tuple[jax.Array, jax.Array, jax.Array]:
    keys = jax.random.split(jax.random.key(shape.s), 3)
    dims = (shape.b, shape.h, shape.s, shape.d)
    return tuple(jax.random.normal(k, dims, jnp.float32).astype(jnp.bfloat16) for k in keys)  # pyright: ignore[reportReturnType]


def _baselines(shape: AttentionShape, settings: Settings) -> dict[str, Callable[..., Any]]:
    """The other sides, on (B, S, H, D) inputs; cuDNN and attention_mgpu only on a GPU."""

    def library(implementation: Literal["xla", "cudnn"]) -> Callable[..., Any]:
        return jax.jit(
            lambda q, k, v: jax.nn.dot_product_attention(
                q, k, v, is_causal=shape.causal, implementation=implementation
            )
        )

    sides = {"xla": library("xla")}
    if settings.dry_run:
        return sides
    sides["cudnn"] = library("cudnn")
    if shape.s % 128 == 0:  # attention_mgpu's blocks must divide the sequence
        from jax.experimental.pallas.ops.gpu import attention_mgpu

        config = attention_mgpu.TuningConfig(
            block_q=64, block_kv=64, max_concurrent_steps=2, causal=shape.causal
        )
        sides["attention_mgpu"] = jax.jit(lambda q, k, v: attention_mgpu.attention(q, k, v, config))
    return sides


def measure_attention_case(shape: AttentionShape, settings: Settings) -> dict[str, Any]:
    started = time.monotonic()
    attention = example_module("attention").attention.with_backend(settings.backend)
    q, k, v = _operands(shape)
    heads_second = [jnp.swapaxes(x, 1, 2) for x in (q, k, v)]  # (B, S, H, D), made once
    row: dict[str, Any] = {
        "shape": [shape.b, shape.h, shape.s, shape.d],
        "causal": shape.causal,
        "errors": {},
    }
    try:
        ours = jax.jit(lambda q, k, v: attention(q, k, v, causal=shape.causal))
        calls: dict[str, Callable[[], Any]] = {"statickernel": lambda: ours(q, k, v)}
        want = jnp.swapaxes(_baselines(shape, settings)["xla"](*heads_second), 1, 2)
        row["agrees_with_xla"] = agrees(ours(q, k, v), want)
        for name, side in _baselines(shape, settings).items():
            try:
                theirs = jax.block_until_ready(side(*heads_second))
            except Exception as exc:  # a baseline that does not run is a note, not a failure
                row["errors"][name] = describe_error(exc)
                continue
            if name != "xla" and not agrees(jnp.swapaxes(theirs, 1, 2), want):
                row["errors"][name] = "disagrees with XLA: not timed"
                continue
            calls[name] = lambda side=side: side(*heads_second)
        timings = time_side_by_side(
            calls, warmup=settings.warmup, runs=settings.runs, min_run_s=settings.min_run_s
        )
        row["median_us"] = timings["statickernel"].median_us
        for name in timings:
            if name != "statickernel":
                row[f"{name}_us"] = timings[name].median_us
                row[f"{name}_over_sk"] = ratio(timings[name], timings["statickernel"])
        row["timing"] = {n: t.to_json() for n, t in timings.items()}
    except Exception as exc:
        row["errors"]["statickernel"] = describe_error(exc)
    row["wall_s"] = time.monotonic() - started
    return row


def _label(row: dict[str, Any]) -> str:
    b, h, s, d = row["shape"]
    return f"{b}x{h}x{s}x{d}" + (" causal" if row["causal"] else "")


def measure_attention(settings: Settings, budget: Budget) -> tuple[list[dict[str, Any]], Table]:
    """Each attention shape of the settings, in order, until the time budget is spent; with
    each ragged shape's time against its aligned one, and causal against full."""
    table = Table(
        "Flash attention, forward (bf16)",
        ["shape", "sk us", "cuDNN / sk", "mgpu / sk", "XLA / sk", "vs other", "agrees"],
        "examples/attention.py against jax.nn.dot_product_attention (cuDNN, XLA) and jax's "
        "attention_mgpu (where the sequence is a multiple of its blocks); a ratio above 1 is "
        "statickernel faster. vs other: a ragged shape's time over its aligned one's, or "
        "causal over full at the same shape.",
    )
    rows: list[dict[str, Any]] = []
    for shape in settings.attention:
        if budget.spent():
            rows.append({"shape": [shape.b, shape.h, shape.s, shape.d], "skipped": True})
            continue
        row = measure_attention_case(shape, settings)
        if shape.versus is not None and "median_us" in row:
            other = next(
                (
                    r
                    for r in rows
                    if r.get("shape") == [shape.b, shape.h, shape.versus[0], shape.d]
                    and r.get("causal") == shape.versus[1]
                    and "median_us" in r
                ),
                None,
            )
            if other is not None:
                row["versus"] = row["median_us"] / other["median_us"]
        rows.append(row)
        table.add(
            _label(row),
            row.get("median_us"),
            row.get("cudnn_over_sk"),
            row.get("attention_mgpu_over_sk"),
            row.get("xla_over_sk"),
            row.get("versus"),
            row["errors"].get("statickernel") or ("yes" if row.get("agrees_with_xla") else "NO"),
        )
    return rows, table
