"""Loops over the columns in the row form: a row that fits in shared memory is read from global
memory once and each `sk.loop` / `sk.map_blocks` over its columns walks it there. The plan's
form and cost, the emitted walks, and the kernels against their references in the
interpreter, under the race detector and cross-lowered. (Registers and spills at 16384 x 8192
are in tests/aot/test_compile.py.)"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, Float, Int32

import statickernel as sk
import statickernel._compiler.mosaic_gpu.plan.schedule
from layernorm_wide import layernorm_wide, layernorm_wide_reference
from softmax_online import softmax_online, softmax_online_reference
from tolerances import assert_close, tolerance_for

F32, BF16 = jnp.float32, jnp.bfloat16


def _normal(key: int, shape: tuple[int, ...], dtype: Any, scale: float = 1.0) -> jax.Array:
    return (scale * jax.random.normal(jax.random.key(key), shape, F32)).astype(dtype)


def _args(kernel: sk.Kernel[..., Any], m: int, n: int, dtype: Any, key: int = 0) -> list[Any]:
    x = _normal(key, (m, n), dtype, 3.0)
    if kernel is softmax_online:
        return [x]
    return [x, _normal(key + 1, (n,), dtype), _normal(key + 2, (n,), dtype)]


def _structs(kernel: sk.Kernel[..., Any], m: int, n: int, dtype: Any) -> list[Any]:
    x = jax.ShapeDtypeStruct((m, n), dtype)
    return [x] if kernel is softmax_online else [x, *[jax.ShapeDtypeStruct((n,), dtype)] * 2]


REFERENCES = {softmax_online: softmax_online_reference, layernorm_wide: layernorm_wide_reference}
KERNELS = pytest.mark.parametrize(
    "kernel", [softmax_online, layernorm_wide], ids=["softmax_online", "layernorm_wide"]
)


def _array_bytes(args: list[Any]) -> int:
    return sum(math.prod(a.shape) * jnp.dtype(a.dtype).itemsize for a in args)


@KERNELS
def test_wide_rows_are_read_once_by_every_cta_of_the_machine(kernel: sk.Kernel[..., Any]) -> None:
    """At 16384 x 8192 float32 (32 KiB rows) both loops walk the row in shared memory: one
    read of x, one write of the result, and a CTA for every SM at least."""
    args = _structs(kernel, 16384, 8192, F32)
    plan = kernel.plan(*args)
    assert plan.form is sk.Form.ROWS and not plan.loops
    assert "its loops walk the row in shared memory" in str(plan)
    ideal = _array_bytes(args) + 16384 * 8192 * 4
    assert plan.cost is not None and plan.cost.hbm_bytes <= 1.05 * ideal
    schedule = plan.schedule
    assert schedule is not None and (schedule.ctas >= 132 or schedule.ctas_per_sm >= 2)
    assert any("loop 1: N in 32 step(s) of 256 over the row" in note for note in plan.notes)


@KERNELS
def test_rows_too_wide_for_shared_memory_stream_through_the_pipelines(
    kernel: sk.Kernel[..., Any],
) -> None:
    """400 KB rows do not fit: the block form's pipelines read x once a loop, as before."""
    args = _structs(kernel, 130, 100_000, F32)
    plan = kernel.plan(*args)
    assert plan.form is sk.Form.BLOCK and len(plan.loops) == 2
    assert plan.schedule is not None
    assert plan.schedule.kind is sk.ScheduleKind.PIPELINED_LOOPS
    assert plan.cost is not None and plan.cost.hbm_bytes >= 3 * 130 * 100_000 * 4


def test_narrow_rows_keep_the_block_form() -> None:
    """A row of 100 padded to a step of 256 columns would waste most of the row."""
    plan = softmax_online.plan(jax.ShapeDtypeStruct((1000, 100), F32))
    assert plan.form is sk.Form.BLOCK


def test_the_module_walks_the_row_in_shared_memory() -> None:
    x = jax.ShapeDtypeStruct((64, 1000), F32)
    source = softmax_online.emit(x)
    assert "emit_pipeline" not in source
    assert "lax.fori_loop(0, 4, loop0_step, (loop0_init0, loop0_init1))" in source
    assert "@pl.loop(0, 4)\n    def loop1_step(loop1_index):" in source
    # Each step reads its columns of the row, the last step's past N reading the loop's fill.
    assert "x_smem.at[r, pl.ds(loop0_index * 256, 256)]" in source
    assert "x = jnp.where(col_ok, x, jnp.float32(-jnp.inf))" in source
    assert "x = jnp.where(col_ok, x, jnp.float32(0.0))" in source
    # The result goes into x's row, where the same thread read it (an assignment before jax
    # 0.12, `plgpu.store` from it).
    step = "x_smem.at[r, pl.ds(loop1_index * 256, 256)]"
    assert f"{step}[...] = " in source or f"plgpu.store({step}, " in source
    assert "plgpu.Layout.WG_STRIDED((256,), 2)" in source
    lowered = softmax_online.lower(x)  # cross-lowered for Mosaic GPU on CUDA
    assert "mosaic_gpu" in lowered.as_text()


@KERNELS
@pytest.mark.parametrize(
    ("m", "n", "dtype"),
    [
        (1, 256, F32),
        (1, 129, F32),
        (3, 200, BF16),
        (7, 1000, F32),
        (5, 4095, BF16),
        (3, 4097, F32),
        (2, 8192, BF16),
    ],
    ids=["1x256", "1x129", "3x200-bf16", "7x1000", "5x4095-bf16", "3x4097", "2x8192-bf16"],
)
def test_row_loops_match_the_reference(
    kernel: sk.Kernel[..., Any], m: int, n: int, dtype: Any
) -> None:
    args = _args(kernel, m, n, dtype)
    assert kernel.plan(*args).form is sk.Form.ROWS
    assert_close(kernel(*args), REFERENCES[kernel](*args), tolerance_for(dtype, terms=n, scale=4))


@settings(max_examples=10, deadline=None)
@given(
    m=st.integers(1, 24),
    n=st.integers(129, 6000),
    dtype=st.sampled_from([F32, BF16]),
    which=st.sampled_from([softmax_online, layernorm_wide]),
)
def test_any_row_that_fits_is_exact(m: int, n: int, dtype: Any, which: Any) -> None:
    args = _args(which, m, n, dtype, key=m + n)
    want = REFERENCES[which](*args)
    assert_close(which(*args), want, tolerance_for(dtype, terms=n, scale=4))


@KERNELS
def test_persistent_blocks_walk_their_rows_without_a_race(
    kernel: sk.Kernel[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Few SMs, so each CTA walks several blocks and refills its slots; the map writes the
    result into the slot of x it reads."""
    monkeypatch.setattr(statickernel._compiler.mosaic_gpu.plan.schedule, "SMS", 2)
    bound = kernel.bind()
    args = _args(kernel, 23, 4095, F32)  # 16,380-byte rows: addressed flat
    plan = bound.plan(*args)
    assert plan.form is sk.Form.ROWS and "persistent" in str(plan), str(plan)
    report = sk.testing.detect_races(bound, *args)
    assert not report.races_found and report.result is not None
    assert_close(report.result, REFERENCES[kernel](*args), tolerance_for(F32, terms=4095, scale=4))


@KERNELS
def test_rows_of_whole_pieces_walk_without_a_race(kernel: sk.Kernel[..., Any]) -> None:
    """One block a CTA, rows of 1024 float32 (whole 128-byte pieces, no copy overlapping
    another): each loop's steps read the slot its copies filled."""
    args = _args(kernel, 9, 1024, F32)
    assert kernel.plan(*args).form is sk.Form.ROWS
    report = sk.testing.detect_races(kernel, *args)
    assert not report.races_found and report.result is not None
    assert_close(report.result, REFERENCES[kernel](*args), tolerance_for(F32, terms=1024, scale=4))


def _first_max_reference(x: jax.Array) -> jax.Array:
    return jnp.argmax(x, axis=-1).astype(jnp.int32)


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, reference=_first_max_reference)
def first_max(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 256
) -> Int32[Array, " M"]:
    """The first column of each row's largest element, walked from the last block to the
    first: positions of the step's columns, a per-row result."""

    def step(carry):
        best, where = carry
        v = sk.load(x, fill=-jnp.inf).astype(jnp.float32)
        block_max = sk.max(v, axis=1)
        columns = sk.position("N")[None, :]
        first = sk.min(jnp.where(v == block_max[:, None], columns, jnp.int32(2**30)), axis=1)
        # Walking backwards, a block's maximum wins ties with the blocks after it.
        better = block_max >= best
        return jnp.where(better, block_max, best), jnp.where(better, first, where)

    init = (jnp.full((BM,), -jnp.inf, jnp.float32), jnp.zeros((BM,), jnp.int32))
    _, where = sk.loop("N", step, init=init, reverse=True)
    return where


@pytest.mark.parametrize(("m", "n"), [(9, 1001), (1, 2047), (40, 3001)])
def test_positions_and_reverse_walks_in_the_row_form(m: int, n: int) -> None:
    """One pass over rows that are not a multiple of 16 bytes: the row form addresses them
    flat where the block form would pad them on the host."""
    x = jnp.round(_normal(m, (m, n), F32, 4.0))  # ties across blocks
    x = x.at[:, -1].set(x.max() + 1.0).at[0, 3].set(x.max() + 2.0)
    plan = first_max.plan(x)
    assert plan.form is sk.Form.ROWS, str(plan)
    assert "last to first" in " ".join(plan.notes)
    assert jnp.array_equal(first_max(x), _first_max_reference(x))


def _prefix_sums_reference(x: jax.Array, limit: jax.Array) -> jax.Array:
    del limit
    return jnp.sum(x.astype(jnp.float32), axis=-1)


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, reference=_prefix_sums_reference)
def bounded_sum(
    x: Float[Array, "M N"],
    limit: Int32[Array, " M"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 256,
) -> Float[Array, " M"]:
    """A loop bounded per block (stop=) walks blocks of rows: it keeps the block form."""
    del limit

    def step(total):
        return total + sk.sum(sk.load(x).astype(jnp.float32), axis=1)

    def twice(total):
        return total + 0.0 * sk.sum(sk.load(x).astype(jnp.float32), axis=1)

    total = sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32), stop=sk.dim("N"))
    return sk.loop("N", twice, init=total)


def test_a_loop_bounded_per_block_keeps_the_block_form() -> None:
    x = _normal(5, (70, 1000), F32)
    limit = jnp.zeros((70,), jnp.int32)
    plan = bounded_sum.plan(x, limit)
    assert plan.form is sk.Form.BLOCK and len(plan.loops) == 2
    assert_close(bounded_sum(x, limit), _prefix_sums_reference(x, limit), tolerance_for(F32, 1000))
