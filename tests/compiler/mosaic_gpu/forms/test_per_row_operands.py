"""Per-row operands in the row form: an operand over the rows alone (a norm's saved rstd, a
per-row scale) keeps whole rows in the row form, each row reading its own element from global
memory. The oracles are the plain-jnp references and, for the trained norms, `jax.grad` of
the plain norm."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Array, Float

import statickernel as sk
import statickernel._compiler.mosaic_gpu.plan.schedule as schedule
from norm_saved_stats import (
    layernorm_backward_saved,
    layernorm_trained,
    layernorm_with_stats,
    rmsnorm_backward_saved,
    rmsnorm_trained,
    rmsnorm_with_rstd,
)
from tolerances import assert_close, tolerance_for

F32, BF16 = jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)
KERNELS = (rmsnorm_backward_saved, layernorm_backward_saved)


def _args(kernel: sk.Kernel[..., Any], m: int, n: int, dtype: Any) -> list[jax.Array]:
    """x (with a mean of 1, so that a lost mean shows), a weight, dy, and the forward's
    saved statistics, computed in plain jnp."""
    kx, kw, kd = jax.random.split(jax.random.key(m * 100_003 + n), 3)
    x = (jax.random.normal(kx, (m, n), jnp.float32) + 1).astype(dtype)
    w = (1 + 0.1 * jax.random.normal(kw, (n,), jnp.float32)).astype(dtype)
    dy = jax.random.normal(kd, (m, n), dtype)
    v = x.astype(jnp.float32)
    if kernel is rmsnorm_backward_saved:
        return [x, w, dy, jax.lax.rsqrt(jnp.mean(v * v, axis=1) + 1e-6)]
    mean = jnp.mean(v, axis=1)
    rstd = jax.lax.rsqrt(jnp.var(v, axis=1) + 1e-5)
    return [x, w, dy, mean, rstd]


def _structs(kernel: sk.Kernel[..., Any], m: int, n: int) -> list[jax.ShapeDtypeStruct]:
    """x and dy bf16 (m, n), the weight bf16 (n,), each saved statistic float32 (m,)."""
    saved = len(kernel.spec.operands) - 3
    return [
        jax.ShapeDtypeStruct((m, n), BF16),
        jax.ShapeDtypeStruct((n,), BF16),
        jax.ShapeDtypeStruct((m, n), BF16),
        *[jax.ShapeDtypeStruct((m,), F32)] * saved,
    ]


def _check(kernel: sk.Kernel[..., Any], args: list[jax.Array]) -> None:
    assert kernel.reference is not None
    n = args[0].shape[1]
    for got, want in zip(kernel(*args), kernel.reference(*args), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.isfinite(np.asarray(got, np.float32)).all(), "a row past the edge leaked"
        scale = 4.0 if got.dtype == BF16 else 1.0
        assert_close(got, want, tolerance_for(got.dtype, n, scale=scale))


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.spec.name)
def test_a_per_row_operand_keeps_whole_rows(kernel: sk.Kernel[..., Any]) -> None:
    """At 4096 columns, 64-row blocks are far over shared memory: the row form is taken, and
    the saved statistics are read from global memory a row at a time, not copied."""
    for m, kind in ((64, sk.ScheduleKind.ONE_BLOCK_PER_CTA), (8192, sk.ScheduleKind.PERSISTENT)):
        args = _structs(kernel, m, 4096)
        plan = kernel.plan(*args)
        assert plan.form is sk.Form.ROWS
        assert plan.schedule is not None and plan.schedule.kind is kind
        saved = [op for op in plan.operands if op.dims == ("M",)]
        assert saved and all(op.in_place and op.smem_bytes == 0 for op in saved)
        assert "each row's element read from global memory" in str(plan)
        source = kernel.emit(*args)
        for op in saved:
            assert f"{op.name} = {op.name}_gmem[row]  # this row's, from global memory" in source
            assert f"{op.name}_smem" not in source and f"{op.name}_barrier" not in source


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.spec.name)
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((64, 4096), BF16),  # model width, one row a block
        ((1001, 1024), F32),  # four rows a block, the last block ragged
        ((2003, 1000), F32),  # eight rows a block, ragged rows and padded columns
        ((1, 8192), F32),  # one row
        ((5, 16384), BF16),  # the widest rows
    ],
)
def test_saved_statistics_match_the_reference(
    kernel: sk.Kernel[..., Any], shape: tuple[int, int], dtype: Any
) -> None:
    args = _args(kernel, *shape, dtype)
    assert kernel.plan(*args).form is sk.Form.ROWS
    _check(kernel, args)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.spec.name)
def test_saved_statistics_in_the_persistent_row_form(
    kernel: sk.Kernel[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU of four SMs, so that the persistent launch (each CTA's blocks walked, three in
    flight, the last one ragged) runs in the interpreter at a small size."""
    monkeypatch.setattr(schedule, "SMS", 4)
    kernel._cache.clear()  # pyright: ignore[reportPrivateUsage]
    kernel._by_consts.clear()  # pyright: ignore[reportPrivateUsage]
    try:
        args = _args(kernel, 397, 2048, F32)
        plan = kernel.plan(*args)
        assert plan.form is sk.Form.ROWS
        assert plan.schedule is not None and plan.schedule.kind is sk.ScheduleKind.PERSISTENT
        _check(kernel, args)
    finally:
        kernel._cache.clear()  # pyright: ignore[reportPrivateUsage]
        kernel._by_consts.clear()  # pyright: ignore[reportPrivateUsage]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.integers(1, 300),
    n=st.integers(1, 2100),
    kernel=st.sampled_from(KERNELS),
)
def test_saved_statistics_match_the_reference_at_any_shape(
    m: int, n: int, kernel: sk.Kernel[..., Any]
) -> None:
    """Whichever form the shape takes (the block form for narrow rows, whose per-row operand
    is copied as a block), the result is the reference's."""
    _check(kernel, _args(kernel, m, n, F32))


@pytest.mark.parametrize(
    ("trained", "forward", "reference"),
    [
        (rmsnorm_trained, rmsnorm_with_rstd, "rmsnorm"),
        (layernorm_trained, layernorm_with_stats, "layernorm"),
    ],
)
def test_the_trained_norms_match_autodiff_of_plain_jnp(
    trained: Any, forward: sk.Kernel[..., Any], reference: str
) -> None:
    """jax.grad through the saving forward and the reading backward equals jax.grad of the
    norm written in plain jnp, at a model width."""
    m, n = 33, 4096
    kx, kw, kb, kd = jax.random.split(jax.random.key(7), 4)
    x = jax.random.normal(kx, (m, n), jnp.float32) + 0.5
    w = 1 + 0.1 * jax.random.normal(kw, (n,), jnp.float32)
    b = jax.random.normal(kb, (n,), jnp.float32)
    dy = jax.random.normal(kd, (m, n), jnp.float32)

    def plain(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        if reference == "rmsnorm":
            return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w + b

    def ours(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        return trained(x, w) if reference == "rmsnorm" else trained(x, w, b)

    argnums = (0, 1) if reference == "rmsnorm" else (0, 1, 2)
    _, want_vjp = jax.vjp(plain, x, w, b)
    _, got_vjp = jax.vjp(ours, x, w, b)
    got, want = got_vjp(dy), want_vjp(dy)
    assert forward.plan(x, w, *([b] if reference == "layernorm" else [])).form is sk.Form.ROWS
    for i in argnums:
        assert_close(got[i], want[i], tolerance_for(F32, m * n, scale=4.0))


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.spec.name)
@pytest.mark.parametrize("n", [4096, 16384])
def test_saved_statistics_cross_lower_at_model_widths(kernel: sk.Kernel[..., Any], n: int) -> None:
    args = _structs(kernel, 8192, n)
    assert kernel.plan(*args).form is sk.Form.ROWS
    kernel.lower(*args)


def test_a_per_row_operand_the_body_never_reads() -> None:
    """A per-row operand loaded but unused takes no copy in the row form, and the rows are
    still computed (found by the body fuzzer: the plan's invariants assumed it was copied)."""

    @sk.kernel(tile={"M": "BM"})
    def unused_rows(
        x: Float[Array, "M N"], r: Float[Array, " M"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        sk.load(r)
        v = sk.load(x)
        return 3.0 / (1.0 + v * v)

    x = jax.random.normal(jax.random.key(0), (82, 2 * 4096 + 3))
    r = jnp.ones((82,))
    assert unused_rows.plan(x, r).form is sk.Form.ROWS
    assert_close(unused_rows(x, r), 3.0 / (1.0 + x * x), tolerance_for("float32"))
