"""The GPU check's attention-training and decoding part: `jax.grad` through
`examples/attention.py` (the forward with its log-sum-exp, then the declared backward: a
delta pre-pass, dq over the keys, dk and dv over the queries) against `jax.grad` of
`jax.nn.dot_product_attention` by cuDNN and by XLA; and `attention_decode`
(`examples/attention_variants.py`, the cache split across CTAs) against XLA's attention over
the same cache, as the bandwidth of the K and V rows it reads over the copy bandwidth.

Each side's result is checked against XLA's before it is timed.
"""

import time
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp

from gallery import example_module
from gpu_settings import AttentionShape, DecodeShape, Settings
from report import Table, agrees, describe_error
from timing import ratio, time_side_by_side

__all__ = ["measure_attention_backward", "measure_decode"]


def _normal(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.normal(key, shape, jnp.float32).astype(jnp.bfloat16)


def _timed(row: dict[str, Any], calls: dict[str, Callable[[], Any]], settings: Settings) -> None:
    timings = time_side_by_side(
        calls, warmup=settings.warmup, runs=settings.runs, min_run_s=settings.min_run_s
    )
    row["median_us"] = timings["statickernel"].median_us
    for name in timings:
        if name != "statickernel":
            row[f"{name}_us"] = timings[name].median_us
            row[f"{name}_over_sk"] = ratio(timings[name], timings["statickernel"])
    row["timing"] = {n: t.to_json() for n, t in timings.items()}


def _grad_of_library(
    shape: AttentionShape, weights: jax.Array, implementation: Literal["xla", "cudnn"]
) -> Callable[..., Any]:
    """jax.grad of the weighted output of jax.nn.dot_product_attention, on (B, H, S, D)."""

    def loss(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        swap = lambda x: jnp.swapaxes(x, 1, 2)  # noqa: E731
        out = jax.nn.dot_product_attention(
            swap(q), swap(k), swap(v), is_causal=shape.causal, implementation=implementation
        )
        return jnp.sum(swap(out).astype(jnp.float32) * weights)

    return jax.jit(jax.grad(loss, (0, 1, 2)))


def measure_backward_case(shape: AttentionShape, settings: Settings) -> dict[str, Any]:
    started = time.monotonic()
    row: dict[str, Any] = {
        "shape": [shape.b, shape.h, shape.s, shape.d],
        "causal": shape.causal,
        "errors": {},
    }
    try:
        module = example_module("attention")
        keys = jax.random.split(jax.random.key(shape.s), 4)
        dims = (shape.b, shape.h, shape.s, shape.d)
        q, k, v = (_normal(key, dims) for key in keys[:3])
        weights = jax.random.normal(keys[3], dims, jnp.float32)

        def loss(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            out, _ = module.attention_lse(q, k, v, causal=shape.causal)
            return jnp.sum(out.astype(jnp.float32) * weights)

        ours = jax.jit(jax.grad(loss, (0, 1, 2)))
        xla = _grad_of_library(shape, weights, "xla")
        want = xla(q, k, v)
        row["agrees_with_xla"] = agrees(ours(q, k, v), want)
        calls: dict[str, Callable[[], Any]] = {
            "statickernel": lambda: ours(q, k, v),
            "xla": lambda: xla(q, k, v),
        }
        if not settings.dry_run:
            try:
                cudnn = _grad_of_library(shape, weights, "cudnn")
                if agrees(cudnn(q, k, v), want):
                    calls["cudnn"] = lambda: cudnn(q, k, v)
                else:
                    row["errors"]["cudnn"] = "disagrees with XLA: not timed"
            except Exception as exc:  # a baseline that does not run is a note, not a failure
                row["errors"]["cudnn"] = describe_error(exc)
        _timed(row, calls, settings)
    except Exception as exc:
        row["errors"]["statickernel"] = describe_error(exc)
    row["wall_s"] = time.monotonic() - started
    return row


def measure_attention_backward(
    settings: Settings, budget: Any
) -> tuple[list[dict[str, Any]], Table]:
    """jax.grad through attention at each shape of the settings, until the budget is spent."""
    table = Table(
        "Flash attention, jax.grad (bf16)",
        ["shape", "sk us", "cuDNN / sk", "XLA / sk", "agrees"],
        "jax.grad of a weighted sum of examples/attention.py's attention_lse (its declared "
        "backward) against jax.grad of jax.nn.dot_product_attention by cuDNN and XLA; a "
        "ratio above 1 is statickernel faster (goal: cuDNN / sk >= 0.8).",
    )
    rows: list[dict[str, Any]] = []
    for shape in settings.attention_backward:
        if budget.spent():
            rows.append({"shape": [shape.b, shape.h, shape.s, shape.d], "skipped": True})
            continue
        print(f"  .. attention backward: S={shape.s} causal={shape.causal}", flush=True)
        row = measure_backward_case(shape, settings)
        rows.append(row)
        label = "x".join(map(str, row["shape"])) + (" causal" if shape.causal else "")
        table.add(
            label,
            row.get("median_us"),
            row.get("cudnn_over_sk"),
            row.get("xla_over_sk"),
            row["errors"].get("statickernel") or ("yes" if row.get("agrees_with_xla") else "NO"),
        )
    return rows, table


def measure_decode_case(shape: DecodeShape, settings: Settings, copy_gb_s: float) -> dict[str, Any]:
    started = time.monotonic()
    row: dict[str, Any] = {
        "shape": [shape.b, shape.h, shape.hkv, shape.d, shape.tokens],
        "errors": {},
    }
    try:
        module = example_module("attention_variants")
        keys = jax.random.split(jax.random.key(shape.tokens), 3)
        q = _normal(keys[0], (shape.b, shape.h, 1, shape.d))
        cache = (shape.b, shape.hkv, shape.tokens, shape.d)
        k, v = _normal(keys[1], cache), _normal(keys[2], cache)
        lengths = jnp.full((shape.b,), shape.tokens, jnp.int32)
        ours = jax.jit(module.attention_decode)
        xla = jax.jit(module.attention_decode_reference)
        row["agrees_with_xla"] = agrees(ours(q, k, v, lengths), xla(q, k, v, lengths))
        calls: dict[str, Callable[[], Any]] = {
            "statickernel": lambda: ours(q, k, v, lengths),
            "xla": lambda: xla(q, k, v, lengths),
        }
        _timed(row, calls, settings)
        read = 2 * shape.b * shape.hkv * shape.tokens * shape.d * 2  # K and V, bf16
        row["cache_gb_per_s"] = read / (row["median_us"] * 1e-6) / 1e9
        row["copy_fraction"] = row["cache_gb_per_s"] / copy_gb_s
    except Exception as exc:
        row["errors"]["statickernel"] = describe_error(exc)
    row["wall_s"] = time.monotonic() - started
    return row


def measure_decode(
    settings: Settings, budget: Any, copy_gb_s: float
) -> tuple[list[dict[str, Any]], Table]:
    """Decoding one token at each shape of the settings, until the budget is spent."""
    table = Table(
        "Decoding attention, one token (bf16)",
        ["B, H/Hkv, D, tokens", "sk us", "of copy", "XLA / sk", "agrees"],
        "examples/attention_variants.py's attention_decode (the cache cut into parts across "
        "CTAs, combined by their log-sum-exp) against XLA's attention over the same cache. "
        "of copy: the K and V rows read, per second, over the copy bandwidth (goal >= 0.8).",
    )
    rows: list[dict[str, Any]] = []
    for shape in settings.decode:
        if budget.spent():
            rows.append({"shape": [shape.b, shape.h, shape.hkv, shape.d], "skipped": True})
            continue
        print(f"  .. decode: B={shape.b} tokens={shape.tokens}", flush=True)
        row = measure_decode_case(shape, settings, copy_gb_s)
        rows.append(row)
        table.add(
            f"{shape.b}, {shape.h}/{shape.hkv}, {shape.d}, {shape.tokens}",
            row.get("median_us"),
            row.get("copy_fraction"),
            row.get("xla_over_sk"),
            row["errors"].get("statickernel") or ("yes" if row.get("agrees_with_xla") else "NO"),
        )
    return rows, table
