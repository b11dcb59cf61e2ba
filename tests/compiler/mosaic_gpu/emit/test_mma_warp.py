"""The warp-specialized, persistent matmul on tcgen05 tensor cores (`plan.mma_warp`,
`schedules.mma_warp`, `emit.mma_warp`): the gallery's matmuls planned for sm_100a, run by the
interpreter against jnp references at ragged shapes, with CTAs walking many tiles (the ring of
stages and the two accumulators turning over across tiles), under the race detector, and the
errors of stages that do not fit."""

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import statickernel as sk
from batched_matmul import batched_matmul
from blackwell import BLACKWELL, close, normal, on_blackwell
from matmul import matmul
from matmul_bias_gelu import matmul_bias_gelu, matmul_bias_gelu_reference
from matmul_fp8 import matmul_fp8, matmul_fp8_reference
from statickernel._compiler.mosaic_gpu.plan import schedule
from statickernel._compiler.mosaic_gpu.plan.mma_warp import MmaWarpSpecialized
from statickernel._compiler.mosaic_gpu.plan.schedule import ScheduleKind


def _config(plan: sk.LaunchPlan) -> MmaWarpSpecialized:
    assert plan.schedule is not None and plan.schedule.kind is ScheduleKind.MMA_WARP
    config = plan.warp_specialized
    assert isinstance(config, MmaWarpSpecialized)
    return config


@pytest.fixture
def few_sms(monkeypatch: pytest.MonkeyPatch) -> int:
    """Three SMs: each CTA walks several tiles, as on a GPU at model sizes."""
    monkeypatch.setattr(schedule, "SMS", 3)
    return 3


# --- the plan and the module -------------------------------------------------------------------


def test_a_matmul_for_blackwell_takes_the_mma_warp_form() -> None:
    s = jax.ShapeDtypeStruct
    a, b = s((4096, 4096), jnp.bfloat16), s((4096, 4096), jnp.bfloat16)
    plan = matmul.plan(a, b, cluster=False, backend="mosaic_gpu", target=BLACKWELL)
    config = _config(plan)
    assert config.cluster is None and "no 2-CTA MMA: cluster=False" in config.reason
    # One CTA an SM of a B200, 32 x 32 tiles; two accumulators of 128 columns.
    assert config.ctas == 148 and config.tile_grid == (32, 32) and config.tiles == 1024
    assert config.accumulator_columns == 128 and config.tmem_columns == 256
    assert config.threads == 256 and config.stages == 4 and config.swizzled
    assert plan.smem_bytes <= 232_448
    text = str(plan)
    assert "form: warp-specialized, tcgen05: a TMA warp and an MMA warp" in text
    assert "products by tcgen05 on" not in text  # the form line says how they are issued
    source = str(matmul.emit(a, b, cluster=False, backend="mosaic_gpu", target=BLACKWELL))
    for expected in (
        "@plgpu.warp_map",
        '@plgpu.nd_loop((1024,), collective_axes="cta")',
        "accumulators.at[:, pl.ds(acc_slot * 128, 128)]",
        "accumulate=k_step > 0",
        "plgpu.tcgen05_commit_arrive(mma_done.at[acc_slot])",
        "plgpu.barrier_arrive(acc_free.at[acc_slot])",
        "accumulators=plgpu.TMEM((128, 256), jnp.float32)",
        "num_threads=2",
        "grid=(148,)",
    ):
        assert expected in source, expected
    assert "wgmma" not in source and "plgpu.ACC" not in source
    assert "collective_axis=" not in source and "ClusterBarrier" not in source
    # The same source for Hopper keeps the WGMMA form: a producer and two consumers.
    hopper = matmul.plan(a, b, backend="mosaic_gpu", target="sm_90a")
    assert hopper.schedule is not None and hopper.schedule.kind is ScheduleKind.WARP_SPECIALIZED


def test_narrow_blocks_take_less_tensor_memory() -> None:
    a = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    config = _config(matmul.plan(a, a, BN=64, backend="interpret", target=BLACKWELL))
    assert config.accumulator_columns == 64 and config.tmem_columns == 128
    config = _config(matmul.plan(a, a, BN=48, backend="interpret", target=BLACKWELL))
    assert config.tmem_columns == 128  # 96 columns, allocated as a power of two


def test_a_large_matmul_pairs_ctas_for_2cta_mmas() -> None:
    s = jax.ShapeDtypeStruct
    a, b = s((4096, 4096), jnp.bfloat16), s((4096, 4096), jnp.bfloat16)
    config = _config(matmul.plan(a, b, backend="mosaic_gpu", target=BLACKWELL))
    assert config.cluster is not None and config.cluster.shared == "b"
    assert "pairs of CTAs issue 2-CTA MMAs: 1024 tiles, 2 or more a CTA" in config.reason
    # 74 pairs of the 148 SMs over 16 x 32 pair tiles of 256 x 128; each CTA holds 64 of
    # b's columns and 128 of the accumulator's, twice, in tensor memory.
    assert config.ctas == 148 and config.launched == 74 and config.tile_grid == (16, 32)
    assert config.b_columns == 64 and config.tmem_columns == 256
    source = str(matmul.emit(a, b, backend="mosaic_gpu", target=BLACKWELL))
    for expected in (
        'cluster_cta = lax.axis_index("cluster")',
        "block_M = tile_M * 2 + cluster_cta",
        "a_gmem.at[pl.ds(tile_M * 256, 256), pl.ds(k_step * 64, 64)]",
        "leader_tracked=plgpu.CopyPartition.PARTITIONED(0)",
        "leader_tracked=plgpu.CopyPartition.PARTITIONED(1)",
        "@pl.when(jnp.logical_and(warp == 1, cluster_cta == 0))",
        'collective_axis="cluster"',
        "plgpu.TMEM((128, 256), jnp.float32, collective=True)",
        "plgpu.ClusterBarrier(",
        "(4, 64, 64)",  # b's ring: half of the pair's 128 columns a CTA
        "cluster=(2,)",
        "grid=(74,)",
    ):
        assert expected in source, expected
    # Cross-lowered for Mosaic GPU on CUDA (the interpreter does not run 2-CTA MMAs).
    lowered = matmul.lower(a, b, target=BLACKWELL)
    assert "mosaic_gpu" in lowered.as_text()


def test_a_transposed_b_is_split_along_its_rows() -> None:
    s = jax.ShapeDtypeStruct
    a8, b8 = s((4096, 4096), jnp.float8_e4m3fn), s((4096, 4096), jnp.float8_e4m3fn)
    scale = s((), jnp.float32)
    plan = matmul_fp8.plan(a8, b8, scale, scale, backend="mosaic_gpu", target=BLACKWELL)
    assert _config(plan).cluster is not None
    source = str(matmul_fp8.emit(a8, b8, scale, scale, backend="mosaic_gpu", target=BLACKWELL))
    assert source.count("leader_tracked=plgpu.CopyPartition.PARTITIONED(0)") == 2
    assert "b_t_smem.at[ring_slot].T" in source


def test_the_interpreter_takes_the_single_cta_twin(few_sms: int) -> None:
    """Where a launch on the GPU pairs CTAs, the interpreter's runs the single-CTA form of
    the same blocks: the numbers the pair computes, checked on a CPU."""
    a, b = normal(0, (600, 260)), normal(1, (260, 390))
    on_gpu = _config(matmul.plan(a, b, backend="mosaic_gpu", target=BLACKWELL))
    twin = _config(matmul.plan(a, b, backend="interpret", target=BLACKWELL))
    assert on_gpu.cluster is not None and twin.cluster is None
    assert "the interpreter runs the single-CTA form" in twin.reason
    assert twin.tile_grid == (on_gpu.tile_grid[0] * 2 - 1, on_gpu.tile_grid[1])
    close(on_blackwell(matmul)(a, b), jnp.dot(a, b, preferred_element_type=jnp.float32), 1e-5)
    # cluster=True pairs wherever the blocks allow; one block of rows has no pair.
    small = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    forced = matmul.plan(small, small, cluster=True, backend="mosaic_gpu", target=BLACKWELL)
    assert _config(forced).cluster is not None
    one_row = jax.ShapeDtypeStruct((128, 256), jnp.bfloat16)
    alone = matmul.plan(one_row, small, cluster=True, backend="mosaic_gpu", target=BLACKWELL)
    assert "no 2-CTA MMA: one block of rows" in _config(alone).reason


# --- the interpreter runs it --------------------------------------------------------------------


@settings(max_examples=5, deadline=None)
@given(
    m=st.sampled_from([1, 100, 128, 300, 513]),
    k=st.sampled_from([8, 64, 200, 1000]),
    n=st.sampled_from([16, 128, 260, 700]),
)
def test_it_is_exact_at_ragged_shapes_with_ctas_walking_many_tiles(m: int, k: int, n: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schedule, "SMS", 2)
        a, b = normal(m + k, (m, k)), normal(n, (k, n))
        out = on_blackwell(matmul)(a, b)
    close(out, jnp.dot(a, b, preferred_element_type=jnp.float32), 1e-5)


def test_the_ring_turns_over_across_tiles(few_sms: int) -> None:
    """16 K steps a tile over 4 stages, 30 tiles over 3 CTAs: every stage and accumulator
    is reused across tiles, and the drains see the last phases."""
    a, b = normal(0, (513, 1000)), normal(1, (1000, 700))
    plan = matmul.plan(a, b, backend="interpret", target=BLACKWELL)
    config = _config(plan)
    assert config.ctas == few_sms and config.tiles == 30 and config.stages == 4
    close(on_blackwell(matmul)(a, b), jnp.dot(a, b, preferred_element_type=jnp.float32), 1e-5)
    out = on_blackwell(matmul)(a, b, stages=2)
    close(out, jnp.dot(a, b, preferred_element_type=jnp.float32), 1e-5)


def test_the_gallery_matmuls_walk_tiles_exactly(few_sms: int) -> None:
    a, b = normal(0, (300, 200)), normal(1, (200, 260))
    bias = normal(2, (260,), jnp.float32)
    close(on_blackwell(matmul)(a, b, bf16_out=True), jnp.dot(a, b), 1e-2)
    ref = matmul_bias_gelu_reference(a, b, bias)
    close(on_blackwell(matmul_bias_gelu)(a, b, bias), ref, 1e-2)
    batched = jnp.stack([a, a * 2, -a]), jnp.stack([b, -b, b * 0.5])
    plan = batched_matmul.plan(*batched, backend="interpret", target=BLACKWELL)
    assert _config(plan).batch == (3,)
    ref = jnp.einsum("bmk,bkn->bmn", *batched, preferred_element_type=jnp.float32)
    close(on_blackwell(batched_matmul)(*batched), ref, 1e-5)
    # fp8, b stored (N, K): the MMA reads it transposed; the scales are read by the epilogue.
    a8, b8 = normal(3, (300, 256), jnp.float8_e4m3fn), normal(4, (260, 256), jnp.float8_e4m3fn)
    scales = jnp.float32(0.5), jnp.float32(3.0)
    assert _config(matmul_fp8.plan(a8, b8, *scales, backend="interpret", target=BLACKWELL))
    close(on_blackwell(matmul_fp8)(a8, b8, *scales), matmul_fp8_reference(a8, b8, *scales), 1e-5)


def test_it_has_no_races(few_sms: int) -> None:
    a, b = normal(0, (300, 330)), normal(1, (330, 260))
    report = sk.testing.detect_races(matmul.with_target(BLACKWELL), a, b, stages=2)
    assert not report.races_found
    close(report.result, jnp.dot(a, b, preferred_element_type=jnp.float32), 1e-5)


# --- errors ------------------------------------------------------------------------------------


def test_declared_stages_that_do_not_fit_say_how_many_do() -> None:
    a = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    with pytest.raises(sk.SharedMemoryError) as info:
        matmul.plan(a, a, BK=128, stages=4, backend="interpret", target=BLACKWELL)
    error = info.value
    assert "warp-specialized tcgen05 matmul's 4 stage(s)" in error.what
    assert error.fix is not None and error.fix.startswith("set stages=3")
    config = _config(matmul.plan(a, a, BK=128, stages=3, backend="interpret", target=BLACKWELL))
    assert config.stages == 3
