"""Results that lack a tiled dim: each block writes a partial, one reduction after the launch
combines them.

Every kernel here is compared with its jnp reference on whole arrays in the Mosaic GPU
interpreter, at aligned, ragged, prime, one-row and below-one-block shapes; the partials'
plan and the generated wrapper are checked, the combination is deterministic, and the
mosaic_gpu backend cross-lowers.
"""

import linecache
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float32

import statickernel as sk
from statickernel._compiler.mosaic_gpu.plan import schedule as _schedule


def _total_reference(x: jax.Array) -> jax.Array:
    return jnp.sum(x.astype(jnp.float32))


@sk.kernel(tile={"M": "BM"}, reference=_total_reference)
def total(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, ""]:
    return jnp.sum(sk.load(x).astype(jnp.float32))


def _column_sums_reference(x: jax.Array) -> jax.Array:
    return jnp.sum(x.astype(jnp.float32), axis=0)


@sk.kernel(tile={"M": "BM"}, reference=_column_sums_reference)
def column_sums(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
    return sk.sum(sk.load(x).astype(jnp.float32), axis=0)


def _column_max_reference(x: jax.Array) -> jax.Array:
    return jnp.max(x, axis=0)


@sk.kernel(tile={"M": "BM", "N": "BN"}, reference=_column_max_reference)
def column_max(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, " N"]:
    return sk.max(sk.load(x, fill=-jnp.inf), axis=0)


def _row_min_reference(x: jax.Array) -> jax.Array:
    return jnp.min(x, axis=1)


@sk.kernel(tile={"M": "BM", "N": "BN"}, reference=_row_min_reference)
def row_min(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, " M"]:
    # N is tiled: each block along N writes its rows' minimum; one min combines them.
    return sk.min(sk.load(x), axis=1)


def _scaled_bf16_reference(x: jax.Array) -> jax.Array:
    return (jnp.sum(x.astype(jnp.float32), axis=0) * 0.5).astype(jnp.bfloat16)


@sk.kernel(tile={"M": "BM", "N": "BN"}, reference=_scaled_bf16_reference)
def scaled_bf16(
    x: BFloat16[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> BFloat16[Array, " N"]:
    # The scale and the cast run after the partials are summed in float32.
    return (sk.sum(sk.load(x).astype(jnp.float32), axis=0) * 0.5).astype(jnp.bfloat16)


def _mean_logsumexp_reference(x: jax.Array) -> jax.Array:
    return jnp.mean(jax.nn.logsumexp(x.astype(jnp.float32), axis=1))


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, reference=_mean_logsumexp_reference)
def mean_logsumexp(
    x: Float[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
    stages: sk.Const[int] = 2,
) -> Float[Array, ""]:
    def step(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        running_max, running_sum = carry
        v = sk.load(x, fill=-jnp.inf).astype(jnp.float32)
        new_max = jnp.maximum(running_max, sk.max(v, axis=1))
        rescale = jnp.exp(running_max - new_max)
        return new_max, running_sum * rescale + sk.sum(jnp.exp(v - new_max[:, None]), axis=1)

    init = (jnp.full((BM,), -jnp.inf, jnp.float32), jnp.zeros((BM,), jnp.float32))
    row_max, row_sum = sk.loop("N", step, init=init)
    # A mean over the tiled M: a sum, divided by the true count.
    return sk.sum(row_max + jnp.log(row_sum), axis=0) / sk.dim("M")


def _batch_totals_reference(x: jax.Array) -> jax.Array:
    return jnp.sum(x, axis=(1, 2))


@sk.kernel(tile={"M": "BM"}, batch="B", reference=_batch_totals_reference)
def batch_totals(x: Float[Array, "B M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " B"]:
    return jnp.sum(sk.load(x))


def _norms_reference(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    x = x.astype(jnp.float32)
    return x * 2.0, jnp.sum(x * x, axis=0)


@sk.kernel(tile={"M": "BM"}, reference=_norms_reference)
def scaled_and_squares(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64
) -> tuple[Float[Array, "M N"], Float[Array, " N"]]:
    # A per-block result next to a cross-block one, as a norm's backward has dx and dw.
    v = sk.load(x).astype(jnp.float32)
    return v * 2.0, sk.sum(v * v, axis=0)


KERNELS: dict[str, sk.Kernel[..., Any]] = {
    "total": total,
    "column_sums": column_sums,
    "column_max": column_max,
    "row_min": row_min,
    "scaled_bf16": scaled_bf16,
    "mean_logsumexp": mean_logsumexp,
    "scaled_and_squares": scaled_and_squares,
}
DTYPES = {"scaled_bf16": jnp.bfloat16}
SHAPES = {
    "aligned": (128, 256),
    "ragged": (300, 130),  # ragged M, f32 rows TMA cannot address
    "primes": (131, 257),
    "one-row": (1, 7),
    "below-one-block": (5, 100),
    "model-width": (129, 4096),
}


def _operand(name: str, shape: tuple[int, ...], seed: int = 0) -> jax.Array:
    dtype = DTYPES.get(name, jnp.float32)
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


def _assert_matches(got: Any, want: Any, dtype: Any) -> None:
    rtol = 2e-2 if dtype == jnp.bfloat16 else 1e-4
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(
            np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=rtol, atol=rtol
        )


# Whole rows of 4096 float32 do not fit a block's shared memory with the rows 64 deep.
WHOLE_ROWS = ("column_sums", "scaled_and_squares")


@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
@pytest.mark.parametrize("name", list(KERNELS))
def test_matches_the_reference(name: str, shape: tuple[int, int]) -> None:
    if name in WHOLE_ROWS and shape[1] > 1024:
        pytest.skip("too wide for a block of whole rows; the SharedMemoryError says so")
    kernel = KERNELS[name]
    x = _operand(name, shape)
    assert kernel.reference is not None
    _assert_matches(kernel(x), kernel.reference(x), DTYPES.get(name, jnp.float32))


@settings(max_examples=8, deadline=None)
@given(
    m=st.integers(1, 300),
    n=st.integers(1, 300),
    bm=st.sampled_from([64, 128]),
    name=st.sampled_from(["total", "column_sums", "column_max", "row_min"]),
)
def test_any_shape_and_block(m: int, n: int, bm: int, name: str) -> None:
    kernel = KERNELS[name]
    x = _operand(name, (m, n), seed=m * 1000 + n)
    assert kernel.reference is not None
    _assert_matches(kernel(x, BM=bm), kernel.reference(x), jnp.float32)


@pytest.mark.parametrize("shape", [(3, 100, 40), (1, 64, 8), (2, 129, 130)])
def test_batch_dims_lead_the_partials(shape: tuple[int, int, int]) -> None:
    x = _operand("batch_totals", shape)
    _assert_matches(batch_totals(x), _batch_totals_reference(x), jnp.float32)


def test_the_same_bits_on_every_call() -> None:
    x = _operand("column_sums", (1000, 260), seed=3)
    first = np.asarray(column_sums(x))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(column_sums(x)), first)
    np.testing.assert_array_equal(np.asarray(jax.jit(column_sums)(x)), first)


def test_the_plan_shows_the_partials() -> None:
    x = jax.ShapeDtypeStruct((300, 130), jnp.float32)
    plan = column_sums.plan(x)
    (result,) = plan.results
    (cross,) = plan.cross_blocks
    assert cross.lacks == ("M",) and cross.kept == "N" and cross.per_block == ("M",)
    assert result.per_block == ("M",)
    assert result.shape == (5, 130) and result.gmem_shape == (5, 132)  # 16-byte rows of partials
    assert any("one sum after the launch" in note for note in plan.notes)
    # The scalar keeps the rows, a vector along the tiled M: no block dim leads it.
    (total_cross,) = total.plan(x).cross_blocks
    assert total_cross.kept == "M" and total_cross.per_block == ()


def test_the_wrapper_combines_the_partials() -> None:
    source = scaled_bf16.emit(jax.ShapeDtypeStruct((300, 260), jnp.bfloat16))
    assert "result_gmem = result_gmem.at[block_M]" in source
    assert "jnp.sum(result" in source and "axis=(0,)" in source
    # The scale and the cast run on the combined float32 sum, in the order the body has them.
    flat = "".join(source.split())
    assert "lax.convert_element_type(lax.mul(jnp.sum(result,axis=(0,)),jnp.float32(0.5))" in flat


def _lower(kernel: sk.Kernel[..., Any], *shapes: tuple[tuple[int, ...], Any]) -> str:
    args = [jax.ShapeDtypeStruct(s, d) for s, d in shapes]
    return kernel.with_backend("mosaic_gpu").lower(*args).as_text()


@pytest.mark.parametrize(
    ("name", "shape", "dtype"),
    [
        ("total", (1000, 4096), jnp.float32),
        ("column_sums", (16384, 512), jnp.float32),
        ("scaled_bf16", (1000, 4096), jnp.bfloat16),
        ("mean_logsumexp", (1000, 32000), jnp.float32),
        ("scaled_and_squares", (999, 256), jnp.float32),
    ],
)
def test_cross_lowers_for_the_gpu(name: str, shape: tuple[int, int], dtype: Any) -> None:
    assert "mosaic_gpu" in _lower(KERNELS[name], (shape, dtype))


def _refused(body: Callable[..., Any]) -> sk.CrossBlockResultError:
    with pytest.raises(sk.CrossBlockResultError) as info:
        sk.kernel(tile={"M": "BM"})(body)
    return info.value


def test_a_result_that_is_not_a_reduction_is_refused() -> None:
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
        return jnp.exp(sk.sum(sk.load(x), axis=0))

    error = _refused(k)
    assert error.dim == "M" and error.operand == "result"
    assert "`exp`" in str(error.actual)


def _group_rstd(tile: dict[str, str]) -> sk.Kernel[..., Any]:
    """Each group's rstd over its (C, L) block, one value a (B, G) grid step."""

    @sk.kernel(batch=("B", "G"), tile=tile)
    def group_rstd(
        x: Float32[Array, "B G C L"], *, BC: sk.Const[int] = 64
    ) -> Float32[Array, "B G"]:
        v = sk.load(x)
        count = sk.dim("C") * sk.dim("L")
        centred = v - jnp.sum(v) / count
        return jax.lax.rsqrt(jnp.sum(centred * centred) / count + 1e-5)

    return group_rstd


def test_a_statistic_that_is_no_reduction_names_the_dim_to_hold_whole() -> None:
    """A group's rstd where C is tiled: each block holds part of the group, and rsqrt of the
    parts does not combine. The fix also says how to compute it in the kernel: C whole, one
    value a grid step; applied, it matches jnp."""
    with pytest.raises(sk.CrossBlockResultError) as info:
        _group_rstd({"C": "BC"})
    fix = str(info.value.fix)
    assert info.value.dim == "C" and "drop C from tile= so that each block holds all of it" in fix
    fixed = _group_rstd({})
    for shape in [(2, 3, 7, 5), (1, 1, 1, 1), (1, 2, 67, 3)]:
        x = 2 * jax.random.normal(jax.random.key(shape[2]), shape, jnp.float32) + 1
        want = jax.lax.rsqrt(jnp.var(x, axis=(2, 3)) + 1e-5)
        np.testing.assert_allclose(fixed(x), want, rtol=1e-5, atol=1e-6)


def test_a_mean_over_the_block_is_refused() -> None:
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
        return jnp.mean(sk.load(x), axis=0)

    error = _refused(k)
    assert "sk.dim('M')" in str(error.fix)


def test_a_sum_divided_by_the_block_size_is_refused_for_what_it_is() -> None:
    """A sum over the tiled M divided by BM (64, one block's rows): a mean's count only if M
    were one block. Before, it was called "a mean", which the body never wrote."""

    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
        return sk.sum(sk.load(x), axis=0) / BM

    error = _refused(k)
    assert error.dim == "M" and error.operand == "result"
    assert "divides its sum over the tiled dim M by 64" in error.what
    assert "jnp.sum(v, axis=0) / sk.dim('M')" in str(error.fix)
    assert "after the kernel" in str(error.fix)
    assert "`div` by 64" in str(error.actual)


def test_two_scalar_results_from_one_sum() -> None:
    """`s, s * 2` from one sum: before, the shared sum stayed in the body, whole, and was
    refused as "a block reduced to a scalar" though `jnp.sum(v), jnp.sum(v) * 2` works."""

    @sk.kernel(tile={"M": "BM"})
    def sum_and_double(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64
    ) -> tuple[Float32[Array, ""], Float32[Array, ""], Float32[Array, ""]]:
        s = jnp.sum(sk.load(x).astype(jnp.float32))
        return s, s * 2, s / sk.dim("M")

    for shape in [(300, 130), (64, 8), (1, 7)]:
        x = jax.random.normal(jax.random.key(shape[0]), shape, jnp.float32)
        want = jnp.sum(x)
        got = sum_and_double(x)
        atol = 1e-5 * np.sqrt(x.size)  # float32 sums in another order
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=atol)
        np.testing.assert_allclose(got[1], 2 * want, rtol=1e-5, atol=2 * atol)
        np.testing.assert_allclose(got[2], want / shape[0], rtol=1e-5, atol=atol)
    lowered = sum_and_double.with_backend("mosaic_gpu").lower(
        jax.ShapeDtypeStruct((300, 130), jnp.float32)
    )
    assert "mosaic_gpu" in lowered.as_text()


def test_a_scaled_max_is_refused() -> None:
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
        return sk.max(sk.load(x), axis=0) * 2.0

    assert "scale" in str(_refused(k))


def test_a_constant_result_is_refused() -> None:
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, ""]:
        del x
        return jnp.float32(1.0)

    assert _refused(k).dim == "M"


def test_a_reduction_over_the_wrong_axis_is_refused() -> None:
    """N is whole and as wide as the rows' block, so the shapes agree; the axis does not."""

    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
        return sk.sum(sk.load(x), axis=1)

    with pytest.raises(sk.CrossBlockResultError) as info:
        sk.kernel(tile={"M": "BM"})(k)(jnp.ones((200, 64), jnp.float32))
    assert "keeps M" in info.value.what and "axis=0" in str(info.value.fix)


# --- the row form adds up the rows of its CTAs ---------------------------------------------------


def _one_pass_norm_backward_reference(
    x: jax.Array, weight: jax.Array, dy: jax.Array, eps: float = 1e-6
) -> tuple[jax.Array, jax.Array]:
    v, w, g = x.astype(jnp.float32), weight.astype(jnp.float32), dy.astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + eps)
    gw = g * w
    dx = r * gw - v * r**3 * jnp.mean(gw * v, axis=-1, keepdims=True)
    return dx.astype(x.dtype), jnp.sum(g * v * r, axis=0)


@sk.kernel(tile={"M": "BM"}, reference=_one_pass_norm_backward_reference)
def one_pass_norm_backward(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    dy: Float[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-6,
) -> tuple[Float[Array, "M N"], Float32[Array, " N"]]:
    """rmsnorm's dx and dweight in one pass over x and dy: at model widths the row form adds
    up each CTA's rows of dy * x * r, and one sum combines the CTAs'."""
    v = sk.load(x).astype(jnp.float32)
    g = sk.load(dy).astype(jnp.float32)
    gw = g * sk.load(weight).astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(v * v, axis=1) + eps)
    correction = r * r * jnp.mean(gw * v, axis=1)
    dx = r[:, None] * (gw - v * correction[:, None])
    return dx.astype(x.dtype), sk.sum(g * v * r[:, None], axis=0)


@sk.kernel(tile={"M": "BM"}, reference=lambda x: jnp.max(x.astype(jnp.float32), axis=0))
def column_max_of_rows(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, " N"]:
    return sk.max(sk.load(x).astype(jnp.float32), axis=0)


ROW_FORM_SHAPES = {
    # Two SMs (see below): 4 CTAs walk 33 blocks of 4 rows, each slot refilled 8 times.
    "persistent": (132, 2048),
    "one-block-a-cta": (100, 2048),
    "host-padded": (17, 4095),  # 8,190-byte rows and a partial of 16,380 bytes
    # The last block ragged: its rows past the edge copy the last row, and are left out.
    "ragged-blocks": (101, 2048),
    "ragged-persistent": (263, 1024),  # two SMs: 33 blocks of 8 rows, the last one of 7
}


@pytest.mark.parametrize("name", list(ROW_FORM_SHAPES))
def test_the_row_form_adds_up_the_rows_of_each_cta(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shape = ROW_FORM_SHAPES[name]
    persistent = name.endswith("persistent")
    if persistent:
        # Two SMs make a small array persistent, so the interpreter runs it in seconds.
        monkeypatch.setattr(_schedule, "SMS", 2)
    keys = jax.random.split(jax.random.key(shape[0]), 3)
    x = jax.random.normal(keys[0], shape, jnp.float32).astype(jnp.bfloat16)
    w = (1 + 0.1 * jax.random.normal(keys[1], (shape[1],), jnp.float32)).astype(jnp.bfloat16)
    dy = jax.random.normal(keys[2], shape, jnp.float32).astype(jnp.bfloat16)
    plan = one_pass_norm_backward.plan(x, w, dy)
    assert plan.form is sk.Form.ROWS and plan.schedule is not None
    assert (plan.schedule.kind is _schedule.ScheduleKind.PERSISTENT) == persistent
    dx, dweight = one_pass_norm_backward(x, w, dy)
    want_dx, want_dweight = _one_pass_norm_backward_reference(x, w, dy)
    np.testing.assert_allclose(
        np.asarray(dx, np.float32), np.asarray(want_dx, np.float32), atol=2e-2, rtol=2e-2
    )
    np.testing.assert_allclose(dweight, want_dweight, rtol=1e-4, atol=1e-3)
    # The max of the rows: the identity is -inf, so rows past the edge must be left out.
    shifted = -jnp.abs(x.astype(jnp.float32)) - 1.0
    np.testing.assert_array_equal(column_max_of_rows(shifted), jnp.max(shifted, axis=0))
    assert column_max_of_rows.plan(shifted).form is sk.Form.ROWS


def test_a_persistent_ctas_partials_are_one_a_cta() -> None:
    s = jax.ShapeDtypeStruct
    args = (
        s((16384, 4096), jnp.bfloat16),
        s((4096,), jnp.bfloat16),
        s((16384, 4096), jnp.bfloat16),
    )
    plan = one_pass_norm_backward.plan(*args)
    assert plan.form is sk.Form.ROWS and plan.schedule is not None
    ctas = plan.schedule.ctas
    dweight = plan.results[1]
    assert dweight.shape == (ctas, 4096) and dweight.per_block == ("M",)
    assert any(f"each of the {ctas:,} CTAs adds up the rows" in note for note in plan.notes)
    source = one_pass_norm_backward.emit(*args)
    assert "result1_gmem = result1_gmem.at[cta]" in source
    lowered = one_pass_norm_backward.with_backend("mosaic_gpu").lower(*args)
    assert "mosaic_gpu" in lowered.as_text()


# --- a reduction of the blocks' partial reductions ----------------------------------------------
# The body's last reduction reduces the vector of another over the tiled dim: the blocks'
# partials of that one are combined first, then the ops between the two and the last one run
# after the launch. One combination of everything would sum each block's column maxes.


@sk.kernel(tile={"M": "BM"}, reference=lambda x: jnp.sum(jnp.max(x, axis=0)))
def sum_of_column_maxes(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, ""]:
    return sk.sum(sk.max(sk.load(x, fill=-jnp.inf), axis=0), axis=0)


@sk.kernel(tile={"M": "BM"}, reference=lambda x: jnp.max(jnp.sum(x, axis=0)))
def max_of_column_sums(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, ""]:
    return sk.max(sk.sum(sk.load(x), axis=0), axis=0)


@sk.kernel(tile={"M": "BM", "N": "BN"}, reference=lambda x: jnp.min(jnp.sum(x, axis=1)))
def min_of_row_sums(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, ""]:
    # N is tiled: each block along N holds its part of every row's sum.
    return sk.min(sk.sum(sk.load(x), axis=1), axis=0)


@sk.kernel(
    tile={"M": "BM", "N": "BN"},
    reference=lambda x: jnp.sum(jnp.max(x, axis=0) * -2.0) / x.shape[1],
)
def mean_of_scaled_column_maxes(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, ""]:
    return sk.sum(sk.max(sk.load(x, fill=-jnp.inf), axis=0) * -2.0, axis=0) / sk.dim("N")


@sk.kernel(tile={"M": "BM"}, reference=lambda x: jnp.mean(jnp.sum(x, axis=0)))
def mean_of_column_sums(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, ""]:
    # A mean over the whole N divides by N's true size: it is no mean over the block.
    return jnp.mean(sk.sum(sk.load(x), axis=0))


COMPOSED: dict[str, sk.Kernel[..., Any]] = {
    "sum_of_column_maxes": sum_of_column_maxes,
    "max_of_column_sums": max_of_column_sums,
    "min_of_row_sums": min_of_row_sums,
    "mean_of_scaled_column_maxes": mean_of_scaled_column_maxes,
    "mean_of_column_sums": mean_of_column_sums,
}
COMPOSED_SHAPES = ("aligned", "ragged", "primes", "below-one-block")


@pytest.mark.parametrize("shape", [SHAPES[s] for s in COMPOSED_SHAPES], ids=COMPOSED_SHAPES)
@pytest.mark.parametrize("name", list(COMPOSED))
def test_a_reduction_of_partial_reductions_matches_jnp(name: str, shape: tuple[int, int]) -> None:
    kernel = COMPOSED[name]
    x = _operand(name, shape, seed=7)
    assert kernel.reference is not None
    _assert_matches(kernel(x), kernel.reference(x), jnp.float32)


def test_the_blocks_partials_are_combined_before_the_outer_reduction() -> None:
    x = jax.ShapeDtypeStruct((300, 130), jnp.float32)
    (cross,) = sum_of_column_maxes.plan(x).cross_blocks
    assert cross.combine == "max" and cross.outer == "sum"
    assert cross.kept == "N" and cross.per_block == ("M",)
    assert any(
        "one max after the launch combines them, then a sum over N" in note
        for note in (sum_of_column_maxes.plan(x).notes)
    )
    flat = "".join(sum_of_column_maxes.emit(x).split())
    assert "jnp.sum(jnp.max(result[:,:130],axis=(0,)),axis=(0,))" in flat
    # The scale between the reductions runs on the combined maxes; the mean's division last.
    flat = "".join(mean_of_scaled_column_maxes.emit(x).split())
    assert "lax.div(jnp.sum(lax.mul(jnp.max(result" in flat


def test_a_reduction_of_partial_reductions_keeps_the_row_form() -> None:
    """At model widths each CTA adds up its rows' maxes; the CTAs' are combined, then summed."""
    x = jax.random.normal(jax.random.key(5), (131, 4096), jnp.float32).astype(jnp.bfloat16)
    assert sum_of_column_maxes.plan(x).form is sk.Form.ROWS
    want = jnp.sum(jnp.max(x.astype(jnp.float32), axis=0))
    np.testing.assert_allclose(np.asarray(sum_of_column_maxes(x), np.float32), want, rtol=2e-2)


@pytest.mark.parametrize(
    ("name", "shape", "dtype"),
    [
        ("sum_of_column_maxes", (1001, 4096), jnp.bfloat16),
        ("max_of_column_sums", (999, 256), jnp.float32),
        ("min_of_row_sums", (300, 1000), jnp.float32),
        ("mean_of_scaled_column_maxes", (1000, 4096), jnp.float32),
    ],
)
def test_a_reduction_of_partial_reductions_cross_lowers(
    name: str, shape: tuple[int, int], dtype: Any
) -> None:
    assert "mosaic_gpu" in _lower(COMPOSED[name], (shape, dtype))


def _refused_at(
    body: Callable[..., Any], marker: str, tile: dict[str, str] | None = None
) -> sk.CrossBlockResultError:
    """The refusal at the declaration, which names the kernel and the line holding `marker`."""
    with pytest.raises(sk.CrossBlockResultError) as info:
        sk.kernel(tile=tile or {"M": "BM"})(body)
    error = info.value
    assert error.kernel == body.__name__ and error.operand == "result" and error.fix
    path, line = str(error.where).rsplit(":", 1)
    assert path.endswith("test_cross_block.py")
    assert marker in linecache.getline(__file__, int(line)), error
    return error


def test_exp_of_partial_column_sums_is_refused() -> None:
    def sum_exp(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, ""]:
        return sk.sum(jnp.exp(sk.sum(sk.load(x), axis=0)), axis=0)  # @exp

    error = _refused_at(sum_exp, "# @exp")
    assert error.dim == "M" and "`exp`" in str(error.actual)
    assert 'Float[Array, " N"]' in str(error.fix) and "tile=" in str(error.fix)


def test_a_square_of_partial_row_sums_is_refused() -> None:
    def sum_of_squares(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
    ) -> Float[Array, ""]:
        s = sk.sum(sk.load(x), axis=1)
        return sk.sum(s * s, axis=0)  # @square

    error = _refused_at(sum_of_squares, "# @square", {"M": "BM", "N": "BN"})
    assert error.dim == "N" and "`mul`" in str(error.actual)


def test_a_block_minus_its_own_column_max_is_refused() -> None:
    def centred(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " N"]:
        v = sk.load(x)
        top = sk.max(v, axis=0)  # @partial-max
        return sk.sum(v - top[None, :], axis=0)

    error = _refused_at(centred, "# @partial-max")
    assert error.dim == "M" and "reduce_max" in str(error.actual)


def test_a_vector_every_block_holds_whole_is_not_summed() -> None:
    def weights_total(
        x: Float[Array, "M N"], w: Float[Array, " N"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, ""]:
        del x
        return sk.sum(sk.load(w), axis=0)  # @whole

    error = _refused_at(weights_total, "# @whole")
    assert error.dim == "M" and "once a block" in error.what
