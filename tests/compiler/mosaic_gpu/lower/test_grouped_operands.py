"""Group dims (`groups={"G": "K"}`) and int4/uint4 operands: an operand laid out "G N" whose
step of the loop over K reads index `step` of G, as a quantized weight's group scales are read
(W4A16, `examples/matmul_int4.py`). Against jnp on whole arrays: the example on ragged N, K (a
partial last group) and M with bfloat16 and float32 scales, int4 extremes read back through an
identity, a uint4 weight with scales and zero points (AWQ), int4 and uint4 widened outside a
loop, a group operand scaling each step's product, one outside a matmul and one behind a batch
dim, and hypothesis; the refusals (G != cdiv(K, BK), whose proposed fix is then run; the
declaration's; a load outside the loop; computing on int4; int4 as sk.dot's b; int4 under a
wider annotation); the plan (the G line, the scales' line, int4 as half a byte in shared memory
and HBM); the cross-lowering for Mosaic GPU."""

import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float, Float32, Int, Int4, Int8, Shaped, UInt4, UInt8

import statickernel as sk
from matmul_int4 import linear_w4a16, matmul_w4a16, quantize_int4
from tolerances import assert_close, tolerance_for

F32, BF16 = jnp.float32, jnp.bfloat16


# --- the data and the references: whole arrays, K padded to whole groups ------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _weights(
    n: int, k: int, bk: int, seed: int, dtype: Any = jnp.int4, scale_dtype: Any = BF16
) -> tuple[jax.Array, jax.Array]:
    """A random (N, K) weight, int4 in -8..7 or uint4 in 0..15, and its (cdiv(K, bk), N) scales."""
    kw, ks = jax.random.split(jax.random.key(seed))
    low, high = (-8, 8) if dtype == jnp.int4 else (0, 16)
    w = jax.random.randint(kw, (n, k), low, high, jnp.int32).astype(dtype)
    scales = jax.random.uniform(ks, (_cdiv(k, bk), n), F32, 0.01, 0.1)
    return w, scales.astype(scale_dtype)


def _activations(m: int, k: int, seed: int) -> jax.Array:
    return jax.random.normal(jax.random.key(seed + 1), (m, k), BF16)


def _by_group(a: jax.Array, groups: int, bk: int) -> jax.Array:
    """(R, K) as (R, G, bk) in float32, K padded with zeros to G * bk."""
    r, k = a.shape
    return jnp.pad(a.astype(F32), ((0, 0), (0, groups * bk - k))).reshape(r, groups, bk)


def _dequantized(w: jax.Array, scales: jax.Array, bk: int, zeros: Any = None) -> jax.Array:
    """(w - zeros) * scales group by group, rounded to bfloat16 as the kernels multiply it."""
    g = scales.shape[0]
    grouped = _by_group(w, g, bk)
    if zeros is not None:
        grouped = grouped - zeros.astype(F32).T[:, :, None]
    dequantized = grouped * scales.astype(F32).T[:, :, None]
    return dequantized.reshape(w.shape[0], -1)[:, : w.shape[1]].astype(BF16)


def _times_x(a: jax.Array, x: jax.Array) -> jax.Array:
    """a @ x.T, (N, M), in float32."""
    return jnp.dot(a.astype(F32), x.astype(F32).T, precision=jax.lax.Precision.HIGHEST)


def _check_w4a16(w: jax.Array, scales: jax.Array, x: jax.Array, bk: int) -> None:
    got = matmul_w4a16(w, scales, x, BK=bk)
    want = _times_x(_dequantized(w, scales, bk), x).astype(BF16)
    # Each output sums K products of |x| < ~5 and |w * scale| <= 0.8, rounded once to bf16.
    assert got.shape == want.shape and got.dtype == BF16
    assert_close(got, want, tolerance_for(BF16, w.shape[1], scale=4.0))


# --- W4A16: the example ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "k", "m", "bk", "scale_dtype"),
    [
        (64, 128, 1, 128, BF16),
        (100, 200, 5, 128, BF16),  # ragged K: the last group holds 72 of 128
        (100, 200, 5, 128, F32),
        (130, 300, 70, 64, F32),
        (1, 64, 3, 64, BF16),
        (257, 1024, 129, 128, BF16),
    ],
)
def test_w4a16_matches_jnp(n: int, k: int, m: int, bk: int, scale_dtype: Any) -> None:
    w, scales = _weights(n, k, bk, n + k + m, scale_dtype=scale_dtype)
    _check_w4a16(w, scales, _activations(m, k, m), bk)


@settings(max_examples=5, deadline=None, phases=[Phase.explicit, Phase.generate])  # no shrinking
@given(
    n=st.integers(1, 300),
    k=st.integers(1, 600),
    m=st.integers(1, 150),
    bk=st.sampled_from([64, 128]),
    seed=st.integers(0, 2**16),
)
def test_w4a16_matches_jnp_on_drawn_shapes(n: int, k: int, m: int, bk: int, seed: int) -> None:
    w, scales = _weights(n, k, bk, seed)
    _check_w4a16(w, scales, _activations(m, k, seed), bk)


def test_the_extreme_int4_values_read_back_exactly_through_an_identity() -> None:
    """x = I: the product is the dequantized weight itself; each group has its own power of 2."""
    w = jnp.tile(jnp.array([-8, 7, 0, 1, -1, 3, -5, 6], jnp.int32), (64, 16)).astype(jnp.int4)
    powers = 2.0 ** (jnp.arange(2 * 64).reshape(2, 64) % 5 - 2)  # two groups of 64 along K
    got = matmul_w4a16(w, powers.astype(BF16), jnp.eye(128, dtype=BF16), BK=64)
    want = w.astype(F32) * jnp.repeat(powers.T, 64, axis=1)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want))


def test_quantized_weights_through_linear_w4a16() -> None:
    weight = jax.random.normal(jax.random.key(3), (192, 512), F32) * 0.02
    w, scales = quantize_int4(weight)
    assert w.dtype == jnp.int4 and scales.shape == (4, 192) and scales.dtype == BF16
    x = _activations(16, 512, 3)
    want = _times_x(_dequantized(w, scales, 128), x).T
    assert_close(linear_w4a16(x, w, scales), want, tolerance_for(BF16, 512, scale=0.1))


# --- uint4 with scales and zero points (AWQ) -------------------------------------------------------


@functools.cache
def _awq(Zeros: Any, bn: int = 64) -> sk.Kernel:
    """A uint4 weight dequantized as (w - zero) * scale: two group operands read in each step."""

    @sk.kernel(tile={"N": "BN", "M": "BM"}, loop={"K": "BK"}, groups={"G": "K"})
    def awq(
        w: UInt4[Array, "N K"],
        scales: Float[Array, "G N"],
        zeros: Zeros[Array, "G N"],  # pyright: ignore
        x: BFloat16[Array, "M K"],
        *,
        BN: sk.Const[int] = bn,
        BM: sk.Const[int] = 64,
        BK: sk.Const[int] = 128,
    ) -> Float32[Array, "N M"]:
        def step(acc: jax.Array) -> jax.Array:
            zero = sk.load(zeros).astype(F32)[:, None]
            scale = sk.load(scales).astype(F32)[:, None]
            dequantized = (sk.load(w).astype(F32) - zero) * scale
            return acc + sk.dot(dequantized.astype(BF16), x)

        return sk.loop("K", step, init=jnp.zeros((BN, BM), F32))

    return awq


# uint8 zero points: a block of BN of them is one 128-byte copy at BN = 128.
@pytest.mark.parametrize(
    ("Zeros", "zero_dtype", "bn"), [(UInt8, jnp.uint8, 128), (Float, BF16, 64)]
)
@pytest.mark.parametrize(("n", "k", "m", "bk"), [(100, 200, 5, 128), (130, 300, 70, 64)])
def test_uint4_weights_with_zero_points_match_jnp(
    Zeros: Any, zero_dtype: Any, bn: int, n: int, k: int, m: int, bk: int
) -> None:
    w, scales = _weights(n, k, bk, k, dtype=jnp.uint4, scale_dtype=F32)
    zeros = jax.random.randint(jax.random.key(n), scales.shape, 0, 16, jnp.int32).astype(zero_dtype)
    x = _activations(m, k, m)
    want = _times_x(_dequantized(w, scales, bk, zeros), x)
    got = _awq(Zeros, bn)(w, scales, zeros, x, BK=bk)
    assert_close(got, want, tolerance_for(F32, k, scale=8.0))


# --- int4 outside a loop ------------------------------------------------------------------------


@functools.cache
def _widen(Weight: Any, twice: bool = False) -> sk.Kernel:
    """A block of w converted to float32 (`twice`: added to itself first, which is refused).
    Its columns are whole: a 4-bit block starts at column 0."""

    @sk.kernel(tile={"M": "BM"})
    def widen(
        w: Weight[Array, "M N"],  # pyright: ignore
        *,
        BM: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        v = sk.load(w)
        return (v + v if twice else v).astype(F32)

    return widen


@pytest.mark.parametrize(("Weight", "dtype"), [(Int4, jnp.int4), (UInt4, jnp.uint4)])
def test_int4_and_uint4_blocks_widen_exactly(Weight: Any, dtype: Any) -> None:
    w, _ = _weights(100, 200, 128, 7, dtype=dtype)
    np.testing.assert_array_equal(_widen(Weight)(w), w.astype(F32))


def test_int4_columns_split_across_blocks_are_refused() -> None:
    """Mosaic GPU addresses a 4-bit array's columns twice too far on the device: a block that
    would start past column 0 is refused, with loops (which copy from a view) as the fix."""
    with pytest.raises(sk.TmaBoxError, match="start past column 0") as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"})
        def tiled(
            w: Int4[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float32[Array, "M N"]:
            return sk.load(w).astype(F32)

    assert info.value.operand == "w" and info.value.dim == "N"
    assert "loop over N" in str(info.value.fix)
    # A whole dim over one TMA box (256 elements) is copied in boxes past column 0 too.
    with pytest.raises(sk.TmaBoxError, match="start past column 0"):
        _widen(Int4)(jnp.ones((64, 512), jnp.int4))


# --- group operands beside and outside a matmul -------------------------------------------------


@functools.cache
def _declare(
    groups: tuple[tuple[str, str], ...] = (("G", "K"),),
    scales: str = "G N",
    result: str = "N M",
    outside: bool = False,
    batch: str = "",
) -> sk.Kernel:
    """Each step's w @ x.T scaled per row by its group's `s` (`outside`: the sum, after the
    loop); the arguments bend the declaration into its refusals."""
    lead = f"{batch} " if batch else ""

    @sk.kernel(
        tile={"N": "BN", "M": "BM"}, loop={"K": "BK"}, groups=dict(groups), batch=batch or ()
    )
    def scaled_steps(
        w: BFloat16[Array, lead + "N K"],
        s: Float32[Array, scales],
        x: BFloat16[Array, lead + "M K"],
        *,
        BN: sk.Const[int] = 64,
        BM: sk.Const[int] = 64,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, result]:
        def step(acc: jax.Array) -> jax.Array:
            product = sk.dot(w, x)
            return acc + (product if outside else product * sk.load(s)[:, None])

        acc = sk.loop("K", step, init=jnp.zeros((BN, BM), F32))
        return acc * sk.load(s)[:, None] if outside else acc

    return scaled_steps


def test_a_group_operand_scales_each_steps_product() -> None:
    n, k, m, bk = 100, 300, 70, 64
    w, x = _activations(n, k, 10), _activations(m, k, 11)
    s = jax.random.uniform(jax.random.key(12), (_cdiv(k, bk), n), F32, 0.5, 2.0)
    g = s.shape[0]
    per_group = jnp.einsum("ngk,mgk->nmg", _by_group(w, g, bk), _by_group(x, g, bk))
    want = jnp.sum(per_group * s.T[:, None, :], axis=2)
    assert_close(_declare()(w, s, x, BK=bk), want, tolerance_for(F32, k, scale=20.0, ulps=8))


@functools.cache
def _weighted_sums(batch: str = "") -> sk.Kernel:
    """Not a matmul: each step's row sums of x's block, times that step's weights `wt`."""
    lead = f"{batch} " if batch else ""
    rows = f"{lead}M"

    @sk.kernel(tile={"M": "BM"}, loop={"K": "BK"}, groups={"G": "K"}, batch=batch or ())
    def weighted_sums(
        x: Float[Array, lead + "M K"],
        wt: Float[Array, lead + "G M"],
        *,
        BM: sk.Const[int] = 64,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, rows]:
        def step(acc: jax.Array) -> jax.Array:
            return acc + jnp.sum(sk.load(x), axis=1) * sk.load(wt)

        return sk.loop("K", step, init=jnp.zeros((BM,), F32))

    return weighted_sums


def _weighted_sums_want(x: jax.Array, wt: jax.Array, bk: int) -> jax.Array:
    return jnp.sum(jnp.sum(_by_group(x, wt.shape[0], bk), axis=2) * wt.T, axis=1)


def _small_integers(shape: tuple[int, ...], seed: int, bound: int = 50) -> jax.Array:
    """Integers in float32, so that every sum here is exact in any order."""
    return jnp.asarray(np.random.default_rng(seed).integers(-bound, bound + 1, shape), F32)


@pytest.mark.parametrize(("m", "k", "bk"), [(100, 200, 64), (64, 128, 64), (5, 300, 128)])
def test_group_weights_of_each_steps_row_sums_match_jnp(m: int, k: int, bk: int) -> None:
    x, wt = _small_integers((m, k), 1), _small_integers((_cdiv(k, bk), m), 2, bound=3)
    got = _weighted_sums()(x, wt, BK=bk)
    np.testing.assert_array_equal(got, _weighted_sums_want(x, wt, bk))


def test_a_group_operand_behind_a_batch_dim() -> None:
    x, wt = _small_integers((3, 100, 200), 3), _small_integers((3, 4, 100), 4, bound=3)
    want = jax.vmap(functools.partial(_weighted_sums_want, bk=64))(x, wt)
    np.testing.assert_array_equal(_weighted_sums("B")(x, wt), want)


# --- the refusals -------------------------------------------------------------------------------


def test_a_group_count_off_the_loops_steps_is_refused_and_its_fix_runs() -> None:
    w, scales = _weights(64, 256, 64, 0)  # four groups of 64: BK=128 takes two steps
    x = _activations(8, 256, 0)
    with pytest.raises(sk.ShapeError, match="numbers the steps of the loop over K") as info:
        matmul_w4a16(w, scales, x)
    assert info.value.dim == "G" and info.value.operand == "scales"
    assert "cdiv(256, 128) = 2" in str(info.value.expected)
    # Only the data knows its group size (a partial last group makes K / G lie): the fix
    # says which constant to set to it. Set to the data's 64, the kernel matches.
    assert "set BK to the group size the data was quantized with" in str(info.value.fix)
    _check_w4a16(w, scales, x, 64)


def test_a_group_count_not_dividing_k_asks_for_one_index_per_step() -> None:
    w, _ = _weights(64, 256, 128, 0)
    with pytest.raises(sk.ShapeError) as info:
        matmul_w4a16(w, jnp.ones((3, 64), BF16), _activations(8, 256, 0))
    assert info.value.dim == "G" and "one index of G per 128 elements of K" in str(info.value.fix)


@pytest.mark.parametrize(
    ("kw", "operand", "dim", "words", "fix"),
    [
        ({"groups": (("G", "M"),)}, None, "G", "which is not a loop dim", 'groups={"G": "K"}'),
        ({"groups": (("M", "K"),)}, None, "M", "is also tiled or looped", "in one place only"),
        ({"groups": (("B", "K"),), "batch": "B"}, None, "B", "is also batch", "one place only"),
        ({"result": "G N"}, "result", "G", "only operands have", "drop G from the result"),
        ({"scales": "N G"}, "s", "G", "cannot lead a vector", "with G first"),
        ({"scales": " G"}, "s", "G", "cannot lead a vector", "with G first"),
    ],
    ids=["not a loop", "tiled", "batch", "in a result", "not leading", "alone"],
)
def test_malformed_group_declarations_are_refused(
    kw: dict[str, Any], operand: str | None, dim: str, words: str, fix: str
) -> None:
    with pytest.raises(sk.AnnotationError, match=words) as info:
        _declare(**kw)
    assert info.value.operand == operand and info.value.dim == dim
    assert fix in str(info.value.fix)


def test_loading_a_group_operand_outside_its_loop_is_refused() -> None:
    with pytest.raises(sk.BodyError, match="has a group dim numbering the steps") as info:
        _declare(outside=True)
    assert info.value.operand == "s" and info.value.dim == "K"
    assert "into the step of the loop over K" in str(info.value.fix)


def test_computing_on_int4_values_is_refused() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="computes on int4 values") as info:
        _widen(Int4, twice=True)(jnp.ones((64, 128), jnp.int4))
    assert ".astype(jnp.bfloat16)" in str(info.value.fix)


def test_an_int4_b_of_sk_dot_is_refused() -> None:
    with pytest.raises(sk.DotDtypeError, match="multiplies bfloat16 by int4") as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def int4_b(
            x: BFloat16[Array, "M K"],
            w: Int4[Array, "N K"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
            BK: sk.Const[int] = 128,
        ) -> Float32[Array, "M N"]:
            return sk.loop("K", lambda acc: acc + sk.dot(x, w), init=jnp.zeros((BM, BN), F32))

    assert info.value.operand == "w" and "a b computed in registers" in str(info.value.fix)


@pytest.mark.parametrize("Weight", [Int, Shaped], ids=["Int", "Shaped"])
def test_int4_needs_an_int4_annotation(Weight: Any) -> None:
    with pytest.raises(sk.DtypeError, match="int4") as info:
        _widen(Weight)(jnp.ones((64, 128), jnp.int4))
    assert info.value.operand == "w"


def test_a_group_dim_that_is_its_own_loop_dim_is_refused() -> None:
    with pytest.raises(sk.AnnotationError, match="is also tiled or looped"):
        _declare(groups=(("K", "K"),), scales="K N")


def test_a_group_dim_no_operand_has_is_refused() -> None:
    with pytest.raises(sk.AnnotationError, match="no operand has it") as info:
        _declare(scales=" N")
    assert info.value.dim == "G" and "drop G from groups=" in str(info.value.fix)


# --- the plan -----------------------------------------------------------------------------------


def _structs(n: int, k: int, m: int, bk: int = 128, scale_dtype: Any = BF16) -> tuple[Any, ...]:
    shapes = (((n, k), jnp.int4), ((_cdiv(k, bk), n), scale_dtype), ((m, k), BF16))
    return tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes)


def test_the_plan_shows_the_group_dim_and_the_scales_block() -> None:
    plan = matmul_w4a16.plan(*_structs(100, 200, 5))
    text = str(plan)
    assert re.search(r"G=2 +groups of K +one index per step of the loop over K", text), text
    assert re.search(r"scales: bfloat16\[2, 100\] +block \[64\]", text), text
    assert plan.dim("G").grouped == "K" and plan.dim("G").block == 1
    scales = plan.operand("scales")
    assert scales.groups == ("G",) and scales.loop_dim == "K"
    assert re.search(r"loop 0: K in 2 step\(s\) of 128.*pipelines[^;]*scales", text), text
    # int4 is half a byte; its loop walks its columns, so K is padded to whole steps (2 of
    # 128) and each step's block copied from column 0 of a (100, 2, 128) view.
    assert plan.operand("w").gmem_shape == (100, 256) and plan.operand("w").column_steps == 2
    assert "copied a step at a time from column 0 of a (100, 2, 128) view" in text
    # and its block of [64, 128] takes 4 KiB of shared memory; the scales' one of 64, 128 B.
    assert plan.operand("w").smem_bytes == 64 * 128 // 2
    assert plan.operand("scales").smem_bytes == 64 * 2


def test_int4_reads_half_a_byte_an_element_from_hbm() -> None:
    cost = _widen(Int4).plan(jax.ShapeDtypeStruct((256, 256), jnp.int4)).cost
    assert cost is not None and cost.hbm_bytes == 256 * 256 // 2 + 256 * 256 * 4


def test_the_w4a16_cost_reads_every_array_once() -> None:
    """Each array read once; at a decode step's 64 rows in the declared blocks the loop is
    split across CTAs, whose float32 partial sums are written and read back once more before
    the result. Left at its default, BM narrows instead, and no partial sums are written."""
    n, k, m = 4096, 4096, 64
    once = n * k // 2 + (k // 128) * n * 2 + m * k * 2 + n * m * 2
    plan = matmul_w4a16.plan(*_structs(n, k, m), BM=64)
    cost = plan.cost
    assert cost is not None and plan.split is not None
    cost.check_invariants()
    partials = 2 * plan.split.parts * n * m * 4
    assert cost.hbm_bytes == once + partials
    narrowed = matmul_w4a16.plan(*_structs(n, k, m))
    assert narrowed.narrowing is not None and narrowed.split is None
    assert narrowed.cost is not None and narrowed.cost.hbm_bytes == once


# --- cross-lowered for Mosaic GPU -----------------------------------------------------------------


def _awq_structs(zero_dtype: Any) -> tuple[Any, ...]:
    dtypes = (jnp.uint4, F32, zero_dtype, BF16)
    shapes = ((4096, 4096), (32, 4096), (32, 4096), (16, 4096))
    return tuple(jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, dtypes, strict=True))


_BATCHED = (jax.ShapeDtypeStruct((3, 256, 512), F32), jax.ShapeDtypeStruct((3, 8, 256), F32))


@pytest.mark.parametrize(
    ("kernel", "shapes"),
    [
        (lambda: matmul_w4a16, _structs(4096, 4096, 16)),
        (lambda: matmul_w4a16, _structs(4096, 4096, 16, scale_dtype=F32)),
        (lambda: matmul_w4a16, _structs(100, 200, 5)),
        (lambda: _awq(Float), _awq_structs(BF16)),
        (lambda: _weighted_sums("B"), _BATCHED),
    ],
    ids=["w4a16", "float32 scales", "ragged", "awq", "batch"],
)
def test_grouped_kernels_cross_lower_for_the_gpu(kernel: Any, shapes: tuple[Any, ...]) -> None:
    assert "mosaic_gpu" in kernel().lower(*shapes).as_text()


def test_uint4_zero_points_are_refused_at_the_declaration() -> None:
    """Mosaic GPU loads no 4-bit vector: a uint4 "G N" operand (a vector a step) is refused
    with a fix that passes it as uint8."""
    with pytest.raises(sk.AnnotationError, match="a 4-bit operand is a 2-D block") as info:
        _awq(UInt4)
    assert info.value.operand == "zeros" and "uint8" in str(info.value.fix)


# --- regressions: paths that reached a JAX error, an assertion, or the device's 4-bit bug ------


def test_a_batched_4bit_operand_walked_along_its_columns_is_refused() -> None:
    """Its copies would start past column 0 (the device's 4-bit addressing bug); the view of
    its steps is built for (rows, K) operands without batch dims."""
    with pytest.raises(sk.TmaBoxError, match="start past column 0") as info:

        @sk.kernel(tile={"N": "BN"}, loop={"K": "BK"}, batch="B")
        def batched(
            w: Int4[Array, "B N K"], *, BN: sk.Const[int] = 64, BK: sk.Const[int] = 128
        ) -> Float32[Array, "B N"]:
            def step(acc: jax.Array) -> jax.Array:
                return acc + jnp.sum(sk.load(w).astype(F32), axis=1)

            return sk.loop("K", step, init=jnp.zeros((BN,), F32))

    assert info.value.operand == "w" and "fold the batch dims into the rows" in str(info.value.fix)


@pytest.mark.parametrize("how", ["fill", "offset"])
def test_a_4bit_load_with_a_fill_or_an_offset_is_refused(how: str) -> None:
    kwargs: dict[str, Any] = {"fill": 3} if how == "fill" else {"offset": {"M": 1}}
    with pytest.raises(sk.BodyError, match="a 4-bit load is its block as it is") as info:

        @sk.kernel(tile={"M": "BM"})
        def masked(w: Int4[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
            return sk.load(w, **kwargs).astype(F32)

    assert info.value.operand == "w" and "jnp.where(inside" in str(info.value.fix)


def test_4bit_operands_keep_the_block_form_where_the_row_form_would_take_the_rest() -> None:
    @sk.kernel(tile={"M": "BM"})
    def mixed(
        w: Int4[Array, "M N"], a: Float32[Array, "M N"], *, BM: sk.Const[int] = 64
    ) -> Float32[Array, "M N"]:
        return sk.load(w).astype(F32) + sk.load(a)

    w, _ = _weights(300, 256, 128, 3)
    a = _activations(300, 256, 3).astype(F32)
    np.testing.assert_array_equal(mixed(w, a), w.astype(F32) + a)
    assert "mosaic_gpu" in mixed.lower(w, a).as_text()


def test_a_batched_group_vector_is_one_copy_of_128_bytes() -> None:
    """int8 weights "B G M" at BM = 64 would be 64-byte copies, which Mosaic GPU refuses."""
    with pytest.raises(sk.BlockAlignmentError, match="not a multiple of 128"):

        @sk.kernel(tile={"M": "BM"}, loop={"K": "BK"}, groups={"G": "K"}, batch="B")
        def narrow(
            x: Float[Array, "B M K"],
            z: Int8[Array, "B G M"],
            *,
            BM: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "B M"]:
            def step(acc: jax.Array) -> jax.Array:
                return acc + jnp.sum(sk.load(x), axis=1) * sk.load(z).astype(F32)

            return sk.loop("K", step, init=jnp.zeros((BM,), F32))


@pytest.mark.parametrize("groups", ["GK", {"G"}, {1: "K"}])
def test_malformed_groups_are_refused(groups: Any) -> None:
    with pytest.raises(sk.AnnotationError, match="groups= must map each group dim") as info:
        sk.kernel(tile={"N": "BN"}, loop={"K": "BK"}, groups=groups)(_widen(Int4).spec.fn)
    assert 'groups={"G": "K"}' in str(info.value.fix)


def test_a_group_operand_along_another_loop_dim_is_refused() -> None:
    with pytest.raises(sk.AnnotationError, match="runs along the loop dim K") as info:

        @sk.kernel(tile={"M": "BM"}, loop={"K": "BK", "L": "BL"}, groups={"G": "L"})
        def crossed(
            x: Float[Array, "M K"],
            y: Float[Array, "M L"],
            s: Float[Array, "G K"],
            *,
            BM: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
            BL: sk.Const[int] = 64,
        ) -> Float32[Array, " M"]:
            return sk.loop("K", lambda acc: acc + jnp.sum(sk.load(x), axis=1), init=0.0)

    assert info.value.operand == "s" and info.value.dim == "K"


def test_the_example_passes_its_own_probe_checks() -> None:
    """`statickernel test` sizes a group dim by its loop: G = cdiv(K, BK) in every probe."""
    results = sk.testing.run_checks(matmul_w4a16)
    assert len(results) >= 10 and all(r.passed for r in results), results
