"""The warp-specialized, persistent matmul: a body of `acc + sk.dot(a, b)` and an elementwise
epilogue, generated with a producer warpgroup, one or two consumers and a persistent grid.

Every run here is in the interpreter with its race detector on (the barriers between the
producer and the consumers, and the epilogue slots' waits), against `jnp.dot`. The register
budget (setmaxnreg) and WGMMA's waits are no-ops in the interpreter: `test_compile.py` checks
them on the deviceless compile.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float, Float16

import statickernel as sk
from batched_matmul import batched_matmul, batched_matmul_reference
from matmul import matmul, matmul_reference
from matmul_bias_gelu import matmul_bias_gelu, matmul_bias_gelu_reference
from matmul_fp8 import matmul_fp8, matmul_fp8_reference
from matmul_int8 import matmul_int8, matmul_int8_reference
from statickernel._compiler.mosaic_gpu.plan import schedule as _schedule
from tolerances import assert_close, tolerance_for

# (M, K, N): aligned, +1, primes, K below one block, below one block everywhere, one row.
SHAPES = {
    "aligned": (256, 256, 512),
    "plus-one": (257, 129, 257),
    "primes": (131, 67, 139),
    "k-below-block": (256, 40, 256),
    "tiny": (8, 8, 8),
    "one-row": (1, 64, 300),
}


def _operands(m: int, k: int, n: int, dtype: Any, *, transposed: bool = False) -> tuple[Any, Any]:
    ka, kb = jax.random.split(jax.random.key(m * 7919 + k * 31 + n))
    if jnp.issubdtype(dtype, jnp.integer):
        a = jax.random.randint(ka, (m, k), -128, 128, jnp.int32).astype(dtype)
        b = jax.random.randint(kb, (n, k) if transposed else (k, n), -128, 128, jnp.int32)
        return a, b.astype(dtype)
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(dtype)
    b = jax.random.normal(kb, (n, k) if transposed else (k, n), jnp.float32).astype(dtype)
    return a, b


def _run(kernel: sk.Kernel[..., Any], *args: Any, **consts: Any) -> Any:
    """The kernel's result in the interpreter, with no race found on the way."""
    report = sk.testing.detect_races(kernel, *args, **consts)
    assert not report.races_found, "the race detector found unordered shared-memory accesses"
    return report.result


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def matmul_f16(
    a: Float16[Array, "M K"],
    b: Float16[Array, "K N"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
    stages: sk.Const[int | None] = None,
) -> Float[Array, "M N"]:
    """A float16 matmul, as a user writes one: the same body as the gallery's."""
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))


@pytest.fixture
def few_sms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two SMs: the CTAs each walk several tiles at the small shapes the interpreter runs,
    so that a slot or buffer reused from one tile to the next is checked for races."""
    monkeypatch.setattr(_schedule, "SMS", 2)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_matmul_matches_jnp_dot(shape: tuple[int, int, int], dtype: Any, few_sms: None) -> None:
    a, b = _operands(*shape, dtype)
    kernel = matmul if dtype == jnp.bfloat16 else matmul_f16
    # Below two blocks both ways (tiny) the pipelined form computes it.
    assert (kernel.plan(a, b).warp_specialized is None) == (shape == SHAPES["tiny"])
    got = _run(kernel, a, b)
    np.testing.assert_allclose(got, matmul_reference(a, b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2], ids=["e4m3fn", "e5m2"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_fp8_matches_jnp_dot(shape: tuple[int, int, int], dtype: Any, few_sms: None) -> None:
    a, b_t = _operands(*shape, dtype, transposed=True)
    scales = (jnp.float32(0.5), jnp.float32(3.0))
    got = _run(matmul_fp8, a, b_t, *scales)
    want = matmul_fp8_reference(a, b_t, *scales)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_int8_is_exact(shape: tuple[int, int, int], few_sms: None) -> None:
    a, b_t = _operands(*shape, jnp.int8, transposed=True)
    got = _run(matmul_int8, a, b_t)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, matmul_int8_reference(a, b_t))


def test_a_bfloat16_result_and_a_batch(few_sms: None) -> None:
    a, b = _operands(130, 100, 260, jnp.bfloat16)
    got = _run(matmul, a, b, bf16_out=True)
    assert got.dtype == jnp.bfloat16
    # Both sum the 100 products in float32 and round once to bf16, in their own orders: an
    # element may round one bf16 ulp apart, which the machine's vectorization decides.
    assert_close(got, matmul_reference(a, b, bf16_out=True), tolerance_for(jnp.bfloat16, 100))
    ka, kb = jax.random.split(jax.random.key(3))
    a3 = jax.random.normal(ka, (3, 200, 130), jnp.bfloat16)
    b3 = jax.random.normal(kb, (3, 130, 300), jnp.bfloat16)
    assert batched_matmul.plan(a3, b3).warp_specialized is not None
    got3 = _run(batched_matmul, a3, b3)
    np.testing.assert_allclose(got3, batched_matmul_reference(a3, b3), rtol=1e-5, atol=1e-4)


def _ws(kernel: sk.Kernel[..., Any], *args: Any, **consts: Any) -> Any:
    plan = kernel.plan(*args, backend="mosaic_gpu", **consts)
    assert plan.warp_specialized is not None
    return plan.warp_specialized


def _bf16(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.bfloat16)


def test_the_default_configuration_at_4096() -> None:
    ws = _ws(matmul, _bf16(4096, 4096), _bf16(4096, 4096))
    assert (ws.consumers, ws.paired, ws.tile_grid) == (2, "N", (32, 16))
    assert ws.ctas == 132 <= 2 * 132 and ws.stages == 4
    assert ws.swizzled and ws.threads == 384
    plan = matmul.plan(_bf16(4096, 4096), _bf16(4096, 4096))
    assert "warp-specialized" in str(plan) and "fitted to shared memory" in str(plan)


def test_the_pairing_follows_the_shape() -> None:
    # One block of N: the consumers share b's block and take two blocks of M.
    assert _ws(matmul, _bf16(512, 256), _bf16(256, 128)).paired == "M"
    # One block both ways: nothing to pair, the pipelined form of one warpgroup a CTA.
    plan = matmul.plan(_bf16(100, 256), _bf16(256, 100), backend="mosaic_gpu")
    assert plan.warp_specialized is None and plan.schedule is not None
    assert plan.schedule.kind is _schedule.ScheduleKind.PIPELINED_LOOPS
    # An odd number of blocks of N, an even one of M: pairing M wastes no block.
    assert _ws(matmul, _bf16(256, 64), _bf16(64, 384)).paired == "M"


def test_constants_override_the_heuristic() -> None:
    ws = _ws(matmul, _bf16(4096, 4096), _bf16(4096, 4096), stages=2)
    assert ws.stages == 2
    ws = _ws(matmul, _bf16(4096, 4096), _bf16(4096, 4096), BN=64, BK=128)
    assert ws.epilogue[1] <= 64 and ws.stage_bytes == (128 * 128 + 128 * 128) * 2


def test_m_4088_needs_no_padding() -> None:
    args = (_bf16(4088, 4096), _bf16(4096, 4096))
    plan = matmul.plan(*args, backend="mosaic_gpu")
    assert all(op.gmem_shape == op.shape for op in (*plan.operands, *plan.results))
    assert plan.warp_specialized is not None and plan.warp_specialized.swizzled
    assert "jnp.pad" not in matmul.emit(*args, backend="mosaic_gpu")


def test_a_ragged_4095_pads_in_the_kernels_jit_and_says_what_it_costs() -> None:
    args = (_bf16(4095, 4095), _bf16(4095, 4095))
    plan = matmul.plan(*args, backend="mosaic_gpu")
    a = plan.operand("a")
    assert a.gmem_shape == (4096, 4096)  # the next multiple of the tile, not of the block
    assert any("33,554,432 B written" in note for note in plan.notes)
    source = matmul.emit(*args, backend="mosaic_gpu")
    wrapper = source[source.index("@jax.jit") :]
    assert "jnp.pad(a" in wrapper  # inside the jitted function, fusable with a's producer
    # The result's rows are not tiled (4095 % 8): its epilogue slots are untiled.
    assert plan.warp_specialized is not None and not plan.warp_specialized.swizzled


def test_a_fused_epilogue_with_a_bias_vector(few_sms: None) -> None:
    """Each consumer copies its block of the bias while its main loop runs, into its own
    buffer, which the next tile's copy refills: the CTAs here walk several tiles each."""
    ka, kb, kc = jax.random.split(jax.random.key(5), 3)
    a = jax.random.normal(ka, (300, 200), jnp.bfloat16)
    b = jax.random.normal(kb, (200, 520), jnp.bfloat16)
    bias = jax.random.normal(kc, (520,), jnp.float32)
    plan = matmul_bias_gelu.plan(a, b, bias)
    assert plan.warp_specialized is not None
    assert plan.warp_specialized.ctas < plan.warp_specialized.tiles
    source = matmul_bias_gelu.emit(a, b, bias)
    assert "bias_gmem.at[pl.ds(block_N * 128, 128)]" in source and "bias_barrier.at[wg]" in source
    got = _run(matmul_bias_gelu, a, b, bias).astype(jnp.float32)
    want = matmul_bias_gelu_reference(a, b, bias).astype(jnp.float32)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def test_a_tile_operand_in_the_epilogue_keeps_the_pipelined_form() -> None:
    """A whole (BM, BN) block of another operand would not fit beside the stages."""

    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def matmul_add(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        c: Float[Array, "M N"],
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 128,
        BK: sk.Const[int] = 64,
    ) -> Float[Array, "M N"]:
        acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
        return acc + sk.load(c)

    args = (_bf16(256, 256), _bf16(256, 256), jax.ShapeDtypeStruct((256, 256), jnp.float32))
    plan = matmul_add.plan(*args)
    assert plan.warp_specialized is None and plan.schedule is not None
    assert plan.schedule.kind is _schedule.ScheduleKind.PIPELINED_LOOPS


@pytest.mark.parametrize(
    "consts",
    [{}, {"BN": 64}, {"BM": 64, "BK": 128, "stages": 2}],
    ids=["default", "bn64", "bm64-bk128"],
)
@pytest.mark.parametrize("m", [4096, 4095])
def test_cross_lowers(m: int, consts: dict[str, Any]) -> None:
    args = (_bf16(m, 1024), _bf16(1024, 2048))
    assert matmul.plan(*args, backend="mosaic_gpu", **consts).warp_specialized is not None
    text = matmul.lower(*args, **consts).as_text()
    assert "mosaic_gpu" in text


def test_fp8_and_int8_cross_lower() -> None:
    fp8 = jax.ShapeDtypeStruct((4096, 4096), jnp.float8_e4m3fn)
    scale = jax.ShapeDtypeStruct((), jnp.float32)
    assert "mosaic_gpu" in matmul_fp8.lower(fp8, fp8, scale, scale).as_text()
    i8 = jax.ShapeDtypeStruct((4096, 4096), jnp.int8)
    assert "mosaic_gpu" in matmul_int8.lower(i8, i8).as_text()


def test_declared_stages_that_do_not_fit_beside_the_epilogue() -> None:
    with pytest.raises(sk.SharedMemoryError) as info:
        matmul.plan(_bf16(4096, 4096), _bf16(4096, 4096), stages=5)
    text = str(info.value)
    assert "warp-specialized" in text and "stages=4" in text and "epilogue" in text


def test_the_race_detector_sees_an_epilogue_slot_refilled_too_early(few_sms: None) -> None:
    """Without the wait before each slot is refilled, a slot's next piece of the block would
    overwrite what its TMA store has not read yet: the detector must say so."""
    from statickernel.testing.races import run_detecting_races

    a, b = _operands(256, 128, 512, jnp.bfloat16)
    source = str(matmul.emit(a, b, backend="interpret"))
    wait = "plgpu.wait_smem_to_gmem(1, wait_read_only=True)"
    assert wait in source
    assert run_detecting_races(source.replace(wait, "pass"), "matmul", (a, b)).races_found
    assert not run_detecting_races(source, "matmul", (a, b)).races_found


# --- the WGMMA rules of 1-byte products, each with its fix ---------------------------------


def _fp8(*shape: int, dtype: Any = jnp.float8_e4m3fn) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


_SCALE = jax.ShapeDtypeStruct((), jnp.float32)


def test_an_fp8_k_block_is_whole_swizzle_rows() -> None:
    with pytest.raises(sk.DotShapeError) as info:
        matmul_fp8.plan(_fp8(256, 256), _fp8(256, 256), _SCALE, _SCALE, BK=48)
    assert info.value.fix == "set BK=64"  # the 32-byte swizzle's rows: 32 fp8 elements


def test_an_fp8_b_laid_out_k_n_is_refused_with_the_layout_wgmma_reads() -> None:
    from jaxtyping import Float8e4m3fn

    with pytest.raises(sk.DotLayoutError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def fp8_kn(
            a: Float8e4m3fn[Array, "M K"],
            b: Float8e4m3fn[Array, "K N"],
            *,
            BM: sk.Const[int] = 128,
            BN: sk.Const[int] = 128,
            BK: sk.Const[int] = 128,
        ) -> Float[Array, "M N"]:
            return sk.loop(
                "K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32)
            )

    assert "'N K'" in str(info.value.expected) and "b.T" in str(info.value.fix)


def test_fp8_operands_of_two_formats_are_refused() -> None:
    e5m2 = _fp8(256, 256, dtype=jnp.float8_e5m2)
    with pytest.raises(sk.DotDtypeError) as info:
        matmul_fp8.plan(_fp8(256, 256), e5m2, _SCALE, _SCALE)
    assert "float8_e4m3fn" in str(info.value) and "float8_e5m2" in str(info.value)


def test_fp8_is_read_only_by_sk_dot() -> None:
    from jaxtyping import Float8e4m3fn

    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"})
        def loads_fp8(
            x: Float8e4m3fn[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float[Array, "M N"]:
            return sk.load(x).astype(jnp.float32)

    assert "only sk.dot reads" in str(info.value) and "bfloat16" in str(info.value.fix)


def test_an_fp8_result_is_what_the_body_casts_to() -> None:
    """An fp8 result is declared, and the body must cast to it (the cast saturates:
    tests/compiler/mosaic_gpu/lower/test_fp8_results.py); returning the loaded block is a mismatch."""
    from jaxtyping import Float8e4m3fn

    with pytest.raises(sk.ResultMismatchError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"})
        def to_fp8(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
        ) -> Float8e4m3fn[Array, "M N"]:
            return sk.load(x)

    assert info.value.expected == "float8_e4m3fn"
    assert ".astype(" in str(info.value.fix)


@pytest.mark.parametrize(
    ("consts", "error", "fix"),
    [
        ({"BN": 200}, sk.DotShapeError, "set BN=208"),  # N: the 32-byte swizzle of b
        ({"BK": 40}, sk.DotShapeError, "set BK=48"),  # K: the swizzle of a and b
        ({"BN": 512}, sk.TmaBoxError, "set BN to at most 256"),  # one TMA box, WGMMA's N
    ],
)
def test_overrides_that_break_a_wgmma_rule(consts: dict[str, Any], error: Any, fix: str) -> None:
    with pytest.raises(error) as info:
        matmul.plan(_bf16(1024, 1024), _bf16(1024, 1024), **consts)
    assert info.value.fix == fix


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def matmul_nt_72(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "N K"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 72,
    BK: sk.Const[int] = 64,
) -> Float[Array, "M N"]:
    """b stored (N, K), so BN needs to be a multiple of 8 only: 72 columns."""
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))


def test_an_odd_number_of_epilogue_pieces_waits_for_the_last_tiles_store(
    few_sms: None,
) -> None:
    """64 x 72 float32 blocks go out in three 64 x 24 pieces: a block's first piece takes the
    slot the last tile's last piece used, whose store must have read it first (the race
    detector found this when the wait kept one store pending)."""
    ka, kb = jax.random.split(jax.random.key(9))
    a = jax.random.normal(ka, (256, 64), jnp.bfloat16)
    b = jax.random.normal(kb, (300, 64), jnp.bfloat16)
    ws = _ws(matmul_nt_72, a, b)
    assert ws.epilogue == (64, 24) and ws.ctas < ws.tiles
    got = _run(matmul_nt_72, a, b)
    np.testing.assert_allclose(got, matmul_reference(a, b.T), rtol=1e-5, atol=1e-4)
