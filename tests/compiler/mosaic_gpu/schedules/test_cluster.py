"""Clusters of the warp-specialized matmul: when the plan takes them, which block the two
CTAs share, and the clustered launch against jnp in the interpreter (with few SMs, so that
small shapes walk enough tiles for a cluster)."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float32

import statickernel as sk
from batched_matmul import batched_matmul, batched_matmul_reference
from matmul import matmul, matmul_reference
from matmul_bias_gelu import matmul_bias_gelu, matmul_bias_gelu_reference
from matmul_fp8 import matmul_fp8, matmul_fp8_reference
from statickernel._compiler.mosaic_gpu.plan import schedule
from statickernel._compiler.mosaic_gpu.plan.cluster import (
    CLUSTER_SIZE,
    MIN_TILES_PER_CTA,
    choose_cluster,
)
from statickernel._compiler.mosaic_gpu.plan.warpspec import WarpSpecialized
from tolerances import assert_close, tolerance_for


def _specs(*shapes: tuple[int, ...], dtype: Any = jnp.bfloat16) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(s, dtype) for s in shapes]


def _normal(key: int, shape: tuple[int, ...], dtype: Any = jnp.bfloat16) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, jnp.float32).astype(dtype)


@pytest.fixture
def h200(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule, "SMS", 132)


@pytest.fixture
def four_sms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launches sized for 4 SMs: a few hundred rows walk two tiles a CTA."""
    monkeypatch.setattr(schedule, "SMS", 4)


def _cluster(plan: sk.LaunchPlan) -> Any:
    assert plan.warp_specialized is not None
    return plan.warp_specialized.cluster


# --- when the plan takes a cluster -----------------------------------------------------------


@pytest.mark.usefixtures("h200")
def test_a_large_product_runs_in_clusters_sharing_bs_block() -> None:
    plan = matmul.bind().plan(*_specs((8192, 8192), (8192, 8192)))
    ws = plan.warp_specialized
    assert ws is not None and ws.cluster is not None
    assert (ws.cluster.along, ws.cluster.shared, ws.cluster.tile_grid) == ("M", "b", (32, 32))
    assert ws.tile_grid == (64, 32) and ws.ctas == 132 and ws.launched == 66
    assert "66 clusters" not in str(plan)  # the plan counts CTAs; the module, clusters
    assert "132 persistent CTAs in clusters of 2 CTAs along M, sharing `b`'s block" in str(plan)
    assert "clustered: 2048 CTA tiles, 2 or more a CTA" in str(plan)


@pytest.mark.usefixtures("h200")
@pytest.mark.parametrize(
    ("m", "n"),
    [
        (1024, 1024),  # 32 CTA tiles: one wave
        (128 * 33, 128 * 17),  # 17 x 17 CTA tiles (paired along M): odd both ways
    ],
)
def test_one_wave_or_odd_tile_counts_take_no_cluster(m: int, n: int) -> None:
    plan = matmul.bind().plan(*_specs((m, 256), (256, n)))
    assert plan.warp_specialized is not None
    assert _cluster(plan) is None
    assert "clusters of" not in str(plan) and "clustered" not in str(plan)


@pytest.mark.usefixtures("h200")
def test_an_odd_unpaired_dim_clusters_along_the_paired_one() -> None:
    # 36 x 17 blocks: the consumers pair along M (tiles 18 x 17); 17 is odd, 18 is not.
    plan = matmul.bind().plan(*_specs((128 * 36, 256), (256, 128 * 17)))
    assert isinstance(plan.warp_specialized, WarpSpecialized)
    assert plan.warp_specialized.paired == "M"
    cluster = _cluster(plan)
    assert cluster is not None and (cluster.along, cluster.shared) == ("M", "b")
    assert cluster.tile_grid == (9, 17)


@pytest.mark.usefixtures("h200")
def test_the_cluster_constant_decides_over_the_launchs_size() -> None:
    large = _specs((8192, 8192), (8192, 8192))
    assert _cluster(matmul.bind().plan(*large, cluster=False)) is None
    small = _specs((1024, 256), (256, 1024))  # 32 CTA tiles: one wave
    assert _cluster(matmul.bind().plan(*small)) is None
    plan = matmul.bind().plan(*small, cluster=True)
    assert _cluster(plan) is not None and "clustered: cluster=True" in str(plan)
    odd = _specs((128 * 33, 256), (256, 128 * 17))  # 17 x 17 CTA tiles
    plan = matmul.bind().plan(*odd, cluster=True)
    assert _cluster(plan) is None
    assert "no cluster: odd counts of CTA tiles [17, 17]" in str(plan)


def test_a_cluster_constant_must_be_a_bool() -> None:
    with pytest.raises(sk.ConstantError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def _clustered(  # pyright: ignore[reportUnusedFunction]
            a: BFloat16[Array, "M K"], b: BFloat16[Array, "K N"], *, BM: sk.Const[int] = 128,
            BN: sk.Const[int] = 128, BK: sk.Const[int] = 64, cluster: sk.Const[int] = 2,
        ) -> Float32[Array, "M N"]:  # fmt: skip
            return sk.loop("K", lambda c: c + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))

    assert info.value.constant == "cluster"
    assert "sk.Const[bool | None]" in str(info.value)


def test_ragged_rows_take_no_cluster() -> None:
    cluster, why = choose_cluster((40, 40), ("M", "N"), "N", ("x", "w"), 1600, 132, ragged=True)
    assert cluster is None and "ragged" in why


@given(
    rows=st.integers(1, 80),
    cols=st.integers(1, 80),
    paired_cols=st.booleans(),
    sms=st.integers(1, 140),
)
def test_a_cluster_covers_every_cta_tile_once(
    rows: int, cols: int, paired_cols: bool, sms: int
) -> None:
    names = ("M", "N")
    tiles = rows * cols
    cluster, why = choose_cluster(
        (rows, cols), names, names[1] if paired_cols else names[0], ("a", "b"), tiles, sms, False
    )
    if cluster is None:
        assert tiles < MIN_TILES_PER_CTA * sms or (rows % 2 and cols % 2), why
        return
    assert tiles >= MIN_TILES_PER_CTA * sms
    cluster.check_invariants((rows, cols))
    assert cluster.shared == ("b" if cluster.along == "M" else "a")
    if (rows if paired_cols else cols) % 2 == 0:  # the unpaired dim first
        assert cluster.along == ("M" if paired_cols else "N")
    # Cluster tile (i, j) and the CTA's place c in it: CTA tile (2i + c, j) along M.
    covered = sorted(
        (CLUSTER_SIZE * i + c, j) if cluster.axis == 0 else (i, CLUSTER_SIZE * j + c)
        for i in range(cluster.tile_grid[0])
        for j in range(cluster.tile_grid[1])
        for c in range(CLUSTER_SIZE)
    )
    assert covered == [(i, j) for i in range(rows) for j in range(cols)]


# --- the clustered launch in the interpreter --------------------------------------------------


@pytest.mark.usefixtures("four_sms")
@pytest.mark.parametrize(
    ("m", "k", "n", "along", "shared"),
    [
        (1000, 200, 1000, "M", "b"),  # 8 x 8 blocks, paired along N: tiles 8 x 4
        (300, 130, 1000, "N", "a"),  # 3 x 8 blocks: tiles 3 x 4, so along N
        (1000, 64, 300, "M", "b"),  # 8 x 3 blocks, paired along M: tiles 4 x 3
    ],
)
@pytest.mark.parametrize("bf16_out", [False, True])
def test_clustered_matmul_matches_jnp(
    m: int, k: int, n: int, along: str, shared: str, bf16_out: bool
) -> None:
    a, b = _normal(1, (m, k)), _normal(2, (k, n))
    kernel = matmul.bind()
    cluster = _cluster(kernel.plan(a, b, bf16_out=bf16_out))
    assert cluster is not None and (cluster.along, cluster.shared) == (along, shared)
    want = matmul_reference(a, b, bf16_out=bf16_out)
    dtype = jnp.bfloat16 if bf16_out else jnp.float32
    assert_close(kernel(a, b, bf16_out=bf16_out), want, tolerance_for(dtype, terms=k, scale=4.0))


def test_a_small_product_asked_for_clusters_matches_jnp() -> None:
    a, b = _normal(12, (257, 100)), _normal(13, (100, 300))  # 3 x 3 blocks: tiles 3 x 2
    kernel = matmul.bind()
    cluster = _cluster(kernel.plan(a, b, cluster=True))
    assert cluster is not None and cluster.along == "N"
    want = matmul_reference(a, b)
    assert_close(kernel(a, b, cluster=True), want, tolerance_for(jnp.float32, 100, scale=4.0))


@pytest.mark.usefixtures("four_sms")
def test_a_clustered_batched_product_matches_jnp() -> None:
    a, b = _normal(3, (2, 300, 130)), _normal(4, (2, 130, 1000))
    kernel = batched_matmul.bind()
    assert _cluster(kernel.plan(a, b)) is not None
    want = batched_matmul_reference(a, b)
    assert_close(kernel(a, b), want, tolerance_for(jnp.float32, terms=130, scale=4.0))


@pytest.mark.usefixtures("four_sms")
def test_a_clustered_epilogue_reads_its_bias() -> None:
    a, b = _normal(5, (1000, 200)), _normal(6, (200, 1000))
    bias = _normal(7, (1000,), jnp.float32)
    kernel = matmul_bias_gelu.bind()
    assert _cluster(kernel.plan(a, b, bias)) is not None
    want = matmul_bias_gelu_reference(a, b, bias)
    assert_close(kernel(a, b, bias), want, tolerance_for(jnp.bfloat16, terms=200, scale=4.0))


@pytest.mark.usefixtures("four_sms")
def test_a_clustered_fp8_product_multicasts_the_transposed_weights() -> None:
    a = _normal(8, (1000, 256), jnp.float8_e4m3fn)
    b_t = _normal(9, (1000, 256), jnp.float8_e4m3fn)
    scales = jnp.float32(0.5), jnp.float32(0.25)
    kernel = matmul_fp8.bind()
    cluster = _cluster(kernel.plan(a, b_t, *scales))
    assert cluster is not None and cluster.shared == "b_t"
    want = matmul_fp8_reference(a, b_t, *scales)
    assert_close(kernel(a, b_t, *scales), want, tolerance_for(jnp.float32, terms=256, scale=2.0))


@pytest.mark.usefixtures("four_sms")
def test_a_clustered_launch_has_no_race() -> None:
    a, b = _normal(10, (1000, 200)), _normal(11, (200, 1000))
    kernel = matmul.bind()
    assert _cluster(kernel.plan(a, b, bf16_out=True)) is not None
    report = sk.testing.detect_races(kernel, a, b, bf16_out=True)
    assert not report.races_found and report.result is not None
    want = matmul_reference(a, b, bf16_out=True)
    assert_close(report.result, want, tolerance_for(jnp.bfloat16, terms=200, scale=4.0))


# --- the module it prints ------------------------------------------------------------------


@pytest.mark.usefixtures("h200")
def test_the_module_launches_clusters_and_multicasts_the_shared_block() -> None:
    kernel = matmul.bind()
    args = _specs((8192, 8192), (8192, 8192))
    source = kernel.emit(*args, bf16_out=True)
    assert "grid=(66,)" in source and "cluster=(2,)" in source
    assert 'cluster_names=("cluster",)' in source
    assert source.count('collective_axes=("cluster",)') == 1  # b's spec alone
    assert "(cluster_tile_M, tile_N) = plgpu.planar_snake(tile_index, (32, 32), 1, 8)" in source
    assert "tile_M = cluster_tile_M * 2 + cluster_cta" in source
    lowered = kernel.lower(*args, bf16_out=True)  # cross-lowered for Mosaic GPU on CUDA
    assert "mosaic_gpu" in lowered.as_text()
