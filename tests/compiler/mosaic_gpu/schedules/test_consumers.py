"""Two consumer warpgroups sharing a loop's blocks (`schedules.consumers`): which bodies and
shapes take it, what the plan and the module say, and exact results in the interpreter at
ragged shapes, an odd count of row blocks among them, against jax.nn.dot_product_attention."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16

import statickernel as sk
from attention import attention
from matmul_int8_weights import matmul_w8a16
from statickernel._compiler.mosaic_gpu.plan.consumers import CONSUMER_REGISTERS, PRODUCER_REGISTERS


def _reference(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    f32 = [x.astype(jnp.float32)[None, :, None, :] for x in (q, k, v)]
    return jax.nn.dot_product_attention(*f32)[0, :, 0].astype(q.dtype)


def _online_softmax(q: jax.Array, k: jax.Array, v: jax.Array, BS: int) -> jax.Array:
    """A user's flash attention: the scores of each block of keys, a running max and sum."""
    scale = 1.0 / jnp.sqrt(jnp.float32(sk.dim("D")))

    def step(carry):
        running_max, running_sum, acc = carry
        s = sk.dot(q, k) * scale
        new_max = jnp.maximum(running_max, sk.max(s, axis=1))
        rescale = jnp.exp(running_max - new_max)
        p = jnp.exp(s - new_max[:, None])
        running_sum = running_sum * rescale + sk.sum(p, axis=1)
        return new_max, running_sum, acc * rescale[:, None] + sk.dot(p.astype(q.dtype), v)

    init = (
        jnp.full((BS,), -jnp.inf, jnp.float32),
        jnp.zeros((BS,), jnp.float32),
        jnp.zeros((BS, sk.dim("D")), jnp.float32),
    )
    _, row_sum, acc = sk.loop("T", step, init=init)
    return (acc / row_sum[:, None]).astype(q.dtype)


@sk.kernel(tile={"S": "BS"}, loop={"T": "BT"}, reference=_reference)
def flash(
    q: BFloat16[Array, "S D"],
    k: BFloat16[Array, "T D"],
    v: BFloat16[Array, "T D"],
    *,
    BS: sk.Const[int] = 64,
    BT: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> BFloat16[Array, "S D"]:
    return _online_softmax(q, k, v, BS)


@sk.kernel(tile={"S": "BS"}, loop={"T": "BT"}, reference=_reference)
def flash_prescaled(
    q: BFloat16[Array, "S D"],
    k: BFloat16[Array, "T D"],
    v: BFloat16[Array, "T D"],
    *,
    BS: sk.Const[int] = 64,
    BT: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> BFloat16[Array, "S D"]:
    """The same with q scaled once before the loop: its step reads a value of the body."""
    scaled = (sk.load(q).astype(jnp.float32) / jnp.sqrt(jnp.float32(sk.dim("D")))).astype(q.dtype)

    def step(carry):
        running_max, running_sum, acc = carry
        s = sk.dot(scaled, k)
        new_max = jnp.maximum(running_max, sk.max(s, axis=1))
        rescale = jnp.exp(running_max - new_max)
        p = jnp.exp(s - new_max[:, None])
        running_sum = running_sum * rescale + sk.sum(p, axis=1)
        return new_max, running_sum, acc * rescale[:, None] + sk.dot(p.astype(q.dtype), v)

    init = (
        jnp.full((BS,), -jnp.inf, jnp.float32),
        jnp.zeros((BS,), jnp.float32),
        jnp.zeros((BS, sk.dim("D")), jnp.float32),
    )
    _, row_sum, acc = sk.loop("T", step, init=init)
    return (acc / row_sum[:, None]).astype(q.dtype)


def _arrays(s: int, t: int, d: int, seed: int = 0) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng([seed, s, t, d])
    return tuple(
        jnp.asarray(rng.standard_normal((n, d), dtype=np.float32), jnp.bfloat16) for n in (s, t, t)
    )


def _structs(*shapes: tuple[int, ...]) -> tuple[jax.ShapeDtypeStruct, ...]:
    return tuple(jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in shapes)


def _kind(kernel: sk.Kernel[..., Any], *args: Any, **consts: Any) -> sk.ScheduleKind:
    schedule = kernel.plan(*args, **consts).schedule
    assert schedule is not None
    return schedule.kind


def _assert_close(got: jax.Array, want: jax.Array) -> None:
    np.testing.assert_allclose(
        np.asarray(got, np.float32), np.asarray(want, np.float32), atol=2e-2, rtol=2e-2
    )


def test_an_attention_shaped_loop_takes_two_consumers() -> None:
    args = _structs((300, 64), (200, 64), (200, 64))
    plan = flash.plan(*args)
    assert plan.schedule is not None
    assert plan.schedule.kind is sk.ScheduleKind.CONSUMER_PAIR
    assert plan.schedule.threads == 384
    text = str(plan)
    assert "two consumer warpgroups of 64 rows of S each (128 a CTA)" in text
    assert f"setmaxnreg {PRODUCER_REGISTERS} / {CONSUMER_REGISTERS}" in text
    source = flash.emit(*args)
    # 5 blocks of rows: 3 CTAs, the last one's second consumer past the rows.
    assert "grid=(3,)" in source and "the blocks (5,) over (S), two of S a CTA" in source
    assert "plgpu.emit_pipeline_warp_specialized(" in source
    assert "compute_context=consumer" in source and "num_threads=3" in source
    assert "consumer_block < 5" in source  # the twin stores nothing


@pytest.mark.parametrize(("rows", "swizzled"), [(256, True), (300, False)])
def test_a_consumer_stores_through_swizzled_shared_memory_where_tma_copies_it_whole(
    rows: int, swizzled: bool
) -> None:
    """Whole 8-row tiles of whole 128-byte rows: the result's buffer is tiled and swizzled, as
    its blocks' are; 300 rows end inside a tile, and the buffer stays untiled."""
    args = _structs((rows, 64), (200, 64), (200, 64))
    assert flash.plan(*args).results[0].swizzle == (64 if swizzled else 0)
    source = flash.emit(*args)
    # The scratch: q's pair of buffers, then the result's.
    result_buffer = source[source.index("scratch_types") :].split("plgpu.SMEM(")[2]
    assert ("SwizzleTransform(128)" in result_buffer) is swizzled


@pytest.mark.parametrize(
    ("kernel", "shapes", "consts"),
    [
        # One block of rows: nothing to share.
        (flash, ((64, 64), (200, 64), (200, 64)), {}),
        # Blocks of 128 rows: more than one WGMMA row group a consumer.
        (flash, ((300, 64), (200, 64), (200, 64)), {"BS": 128}),
        # A step that reads a value computed before the loop.
        (flash_prescaled, ((300, 64), (200, 64), (200, 64)), {}),
    ],
)
def test_other_loops_keep_one_warpgroup(
    kernel: sk.Kernel[..., Any], shapes: Any, consts: dict[str, Any]
) -> None:
    assert _kind(kernel, *_structs(*shapes), **consts) is sk.ScheduleKind.PIPELINED_LOOPS


def test_a_loop_with_bounds_keeps_one_warpgroup() -> None:
    args = _structs(*((1, 2, 300, 64),) * 3)
    assert _kind(attention, *args) is sk.ScheduleKind.CONSUMER_PAIR
    # Causal: the loop stops at each block's last query.
    assert _kind(attention, *args, causal=True) is sk.ScheduleKind.PIPELINED_LOOPS


def test_a_loop_over_blocks_along_the_rows_keeps_one_warpgroup() -> None:
    # w's blocks are along N, the rows: each consumer would need its own.
    x = jax.ShapeDtypeStruct((64, 4096), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((256, 4096), jnp.int8)
    scale = jax.ShapeDtypeStruct((256,), jnp.float32)
    assert _kind(matmul_w8a16, w, scale, x) is not sk.ScheduleKind.CONSUMER_PAIR


@settings(max_examples=6, deadline=None)
@given(
    s=st.sampled_from([65, 128, 150, 257, 300]),
    t=st.sampled_from([1, 17, 64, 100, 130]),
    d=st.sampled_from([64, 128]),
)
def test_two_consumers_are_exact_at_ragged_shapes(s: int, t: int, d: int) -> None:
    q, k, v = _arrays(s, t, d)
    assert _kind(flash, q, k, v) is sk.ScheduleKind.CONSUMER_PAIR
    _assert_close(flash(q, k, v), _reference(q, k, v))


def test_two_consumers_have_no_races() -> None:
    q, k, v = _arrays(150, 130, 64)
    report = sk.testing.detect_races(flash, q, k, v)
    assert not report.races_found
