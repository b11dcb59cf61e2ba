"""The GPU check's paged part: decode attention over a paged KV cache
(`examples/paged_attention.py`) against jax's Pallas `paged_attention` and XLA (the pages
gathered, then dense attention), and the KV-cache update (`examples/kv_cache_update.py`)
against XLA's `.at[].set`, side by side.

Attention is memory-bound: its figure is the bandwidth of the pages it reads (each sequence's
K and V rows up to its length) as a fraction of the copy bandwidth measured in the same run.
The cache update, with the cache donated under `jax.jit`, should move only the rows it writes:
its figure is the bandwidth of those rows (read once, written once) against the copy's, and
its time against XLA's scatter of the same rows. Each result is checked against XLA's first.
"""

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gallery import example_module
from gpu_settings import CacheUpdateShape, PagedShape, Settings
from report import Table, agrees, describe_error
from timing import ratio, time_side_by_side

__all__ = ["measure_cache_update", "measure_paged"]


def paged_operands(shape: PagedShape) -> tuple[jax.Array, ...]:
    """q (B, H, D), pages (Hkv, P, S, D) holding every sequence's pages in a seeded shuffle,
    a table of each sequence's pages and its length (the full `tokens`)."""
    keys = jax.random.split(jax.random.key(shape.b), 3)
    pmax = -(-shape.tokens // shape.page)
    pool = shape.b * pmax
    q = jax.random.normal(keys[0], (shape.b, shape.h, shape.d), jnp.float32).astype(jnp.bfloat16)
    pages = (shape.hkv, pool, shape.page, shape.d)
    k = jax.random.normal(keys[1], pages, jnp.float32).astype(jnp.bfloat16)
    v = jax.random.normal(keys[2], pages, jnp.float32).astype(jnp.bfloat16)
    order = np.random.default_rng(shape.b).permutation(pool).astype(np.int32)
    tables = jnp.asarray(order.reshape(shape.b, pmax))
    lengths = jnp.full((shape.b,), shape.tokens, jnp.int32)
    return q, k, v, tables, lengths


def _jax_paged_attention() -> Callable[..., Any]:
    """jax's Pallas paged_attention (its Triton lowering), at its defaults."""
    from jax.experimental.pallas.ops.gpu import paged_attention as jpa

    return jax.jit(lambda q, k, v, t, n: jpa.paged_attention(q, k, v, t, n))


def measure_paged_case(shape: PagedShape, settings: Settings, copy_gb_s: float) -> dict[str, Any]:
    started = time.monotonic()
    row: dict[str, Any] = {
        "shape": [shape.b, shape.h, shape.hkv, shape.d, shape.tokens, shape.page],
        "errors": {},
    }
    try:
        module = example_module("paged_attention")
        args = paged_operands(shape)
        # The wrapper calls the gallery's kernel on the process's backend: Mosaic GPU on a
        # GPU, the interpreter in a dry run.
        ours = jax.jit(module.paged_attention)
        xla = jax.jit(module.paged_attention_reference)
        want = xla(*args)
        row["agrees_with_xla"] = agrees(ours(*args), want)
        calls: dict[str, Callable[[], Any]] = {
            "statickernel": lambda: ours(*args),
            "xla": lambda: xla(*args),
        }
        if not settings.dry_run:
            try:
                theirs = _jax_paged_attention()
                if agrees(theirs(*args), want):
                    calls["jax_paged_attention"] = lambda: theirs(*args)
                else:
                    row["errors"]["jax_paged_attention"] = "disagrees with XLA: not timed"
            except Exception as exc:  # a baseline that does not run is a note, not a failure
                row["errors"]["jax_paged_attention"] = describe_error(exc)
        timings = time_side_by_side(
            calls, warmup=settings.warmup, runs=settings.runs, min_run_s=settings.min_run_s
        )
        read = 2 * shape.b * shape.hkv * shape.tokens * shape.d * 2  # K and V, bf16
        row["median_us"] = timings["statickernel"].median_us
        row["pages_gb_per_s"] = read / timings["statickernel"].median_s / 1e9
        row["copy_fraction"] = row["pages_gb_per_s"] / copy_gb_s
        for name in timings:
            if name != "statickernel":
                row[f"{name}_us"] = timings[name].median_us
                row[f"{name}_over_sk"] = ratio(timings[name], timings["statickernel"])
        row["timing"] = {n: t.to_json() for n, t in timings.items()}
    except Exception as exc:
        row["errors"]["statickernel"] = describe_error(exc)
    row["wall_s"] = time.monotonic() - started
    return row


def measure_paged(
    settings: Settings, budget: Any, copy_gb_s: float
) -> tuple[list[dict[str, Any]], Table]:
    """Each paged-attention shape of the settings, until the time budget is spent."""
    table = Table(
        "Paged decode attention (bf16)",
        ["B, H/Hkv, D, tokens/page", "sk us", "of copy", "jax / sk", "XLA / sk", "agrees"],
        "examples/paged_attention.py (the wrapper: split over the sequence when the batch "
        "does not fill the GPU) against jax's Pallas paged_attention and XLA (gather, then "
        "dense attention). of copy: the K and V pages read, per second, over the copy "
        "bandwidth (goal >= 0.8); a ratio above 1 is statickernel faster (goal > 1).",
    )
    rows: list[dict[str, Any]] = []
    for shape in settings.paged:
        if budget.spent():
            rows.append({"shape": [shape.b, shape.h, shape.hkv, shape.d], "skipped": True})
            continue
        print(f"  .. paged attention: B={shape.b} H={shape.h} Hkv={shape.hkv}", flush=True)
        row = measure_paged_case(shape, settings, copy_gb_s)
        rows.append(row)
        table.add(
            f"{shape.b}, {shape.h}/{shape.hkv}, {shape.d}, {shape.tokens}/{shape.page}",
            row.get("median_us"),
            row.get("copy_fraction"),
            row.get("jax_paged_attention_over_sk"),
            row.get("xla_over_sk"),
            row["errors"].get("statickernel") or ("yes" if row.get("agrees_with_xla") else "NO"),
        )
    return rows, table


def measure_cache_update_case(
    shape: CacheUpdateShape, settings: Settings, copy_gb_s: float
) -> dict[str, Any]:
    started = time.monotonic()
    row: dict[str, Any] = {"shape": [shape.slots, shape.hkv, shape.d, shape.tokens], "errors": {}}
    try:
        module = example_module("kv_cache_update")
        rows_kernel = module.kv_cache_rows.with_backend(settings.backend)
        kc, kn = jax.random.split(jax.random.key(shape.tokens))
        width = shape.hkv * shape.d
        cache = jax.random.normal(kc, (shape.slots, width), jnp.float32).astype(jnp.bfloat16)
        new = jax.random.normal(kn, (shape.tokens, width), jnp.float32).astype(jnp.bfloat16)
        order = np.random.default_rng(shape.tokens).permutation(shape.slots)[: shape.tokens]
        slots = jnp.asarray(order.astype(np.int32))
        ours = jax.jit(rows_kernel, donate_argnums=0)
        xla = jax.jit(module.kv_cache_rows_reference, donate_argnums=0)
        want = xla(cache + 0, new, slots)
        row["agrees_with_xla"] = bool(jnp.all(ours(cache + 0, new, slots) == want))
        # Each side updates its own cache, donated and handed back run after run.
        state = {"statickernel": cache + 0, "xla": cache + 0}

        def side(name: str, fn: Callable[..., Any]) -> Callable[[], Any]:
            def run() -> Any:
                state[name] = fn(state[name], new, slots)
                return state[name]

            return run

        timings = time_side_by_side(
            {"statickernel": side("statickernel", ours), "xla": side("xla", xla)},
            warmup=settings.warmup,
            runs=settings.runs,
            min_run_s=settings.min_run_s,
        )
        moved = 2 * shape.tokens * width * 2  # the new rows read once and written once, bf16
        row["median_us"] = timings["statickernel"].median_us
        row["rows_gb_per_s"] = moved / timings["statickernel"].median_s / 1e9
        row["copy_fraction"] = row["rows_gb_per_s"] / copy_gb_s
        row["xla_us"] = timings["xla"].median_us
        row["xla_over_sk"] = ratio(timings["xla"], timings["statickernel"])
        row["timing"] = {n: t.to_json() for n, t in timings.items()}
    except Exception as exc:
        row["errors"]["statickernel"] = describe_error(exc)
    row["wall_s"] = time.monotonic() - started
    return row


def measure_cache_update(
    settings: Settings, budget: Any, copy_gb_s: float
) -> tuple[list[dict[str, Any]], Table]:
    """Each cache-update shape of the settings, until the time budget is spent."""
    table = Table(
        "KV-cache update, in place (bf16)",
        ["Slots x Hkv x D, tokens", "sk us", "rows of copy", "XLA / sk", "agrees"],
        "examples/kv_cache_update.py's kv_cache_rows under jax.jit with the cache donated, "
        "against XLA's .at[].set (donated too). rows of copy: the new rows moved (read and "
        "written) per second over the copy bandwidth: the cache's other rows are not moved.",
    )
    rows: list[dict[str, Any]] = []
    for shape in settings.cache_update:
        if budget.spent():
            rows.append({"shape": [shape.slots, shape.hkv, shape.d, shape.tokens], "skipped": True})
            continue
        print(f"  .. kv-cache update: {shape.tokens} rows into {shape.slots}", flush=True)
        row = measure_cache_update_case(shape, settings, copy_gb_s)
        rows.append(row)
        table.add(
            f"{shape.slots}x{shape.hkv}x{shape.d}, {shape.tokens}",
            row.get("median_us"),
            row.get("copy_fraction"),
            row.get("xla_over_sk"),
            row["errors"].get("statickernel") or ("yes" if row.get("agrees_with_xla") else "NO"),
        )
    return rows, table
