"""The products on each target's tensor cores (`emit.products`, `lower.dots`, `plan.products`):
the same gallery sources planned for sm_90a (WGMMA) and sm_100a (tcgen05 into tensor memory),
the sm_100a code run by the interpreter against jnp and jax.nn references at ragged shapes,
what the plan and the module say, and the refusals with their fixes."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float32, Int8, Int32

import statickernel as sk
from attention import attention
from batched_matmul import batched_matmul
from blackwell import BLACKWELL, close, normal, on_blackwell
from grouped_matmul import grouped_matmul
from matmul import matmul
from matmul_bias_gelu import matmul_bias_gelu, matmul_bias_gelu_reference
from matmul_fp8 import matmul_fp8, matmul_fp8_reference
from mlp import mlp, mlp_reference
from statickernel.aot.compile import compile_specialization

# --- the same source, each target's products -----------------------------------------------


def test_the_plan_and_module_name_the_targets_products() -> None:
    a, b = (
        jax.ShapeDtypeStruct((300, 200), jnp.bfloat16),
        jax.ShapeDtypeStruct((200, 260), jnp.bfloat16),
    )
    hopper = matmul.plan(a, b, backend="mosaic_gpu", target="sm_90a")
    blackwell = matmul.plan(a, b, backend="mosaic_gpu", target=BLACKWELL)
    assert hopper.target == "sm_90a" and blackwell.target == BLACKWELL
    assert "WGMMA sk.dot(a, b)" in str(hopper) and "tcgen05" not in str(hopper)
    text = str(blackwell)
    assert "tcgen05 sk.dot(a, b)" in text
    # A matmul takes the MMA warp's form (`test_mma_warp.py`); a loop of another shape keeps
    # the pipelined one, with its products' form line.
    assert blackwell.schedule is not None and blackwell.schedule.kind.value.startswith(
        "warp-specialized (TMA warp, MMA warp"
    )
    x, w1, w2 = (
        jax.ShapeDtypeStruct(shape, jnp.bfloat16) for shape in ((130, 64), (64, 200), (200, 48))
    )
    pipelined = mlp.plan(x, w1, w2, backend="mosaic_gpu", target=BLACKWELL)
    assert "form: products by tcgen05 on sm_100a: 2 product(s) of a step" in str(pipelined)
    assert pipelined.schedule is not None and pipelined.schedule.kind.value == "pipelined loops"
    source = str(mlp.emit(x, w1, w2, backend="mosaic_gpu", target=BLACKWELL))
    for expected in (
        "plgpu.tcgen05_mma(",
        "orders_tensor_core=True",
        "plgpu.barrier_wait(v2_mma_done.at[0])",
        "plgpu.wait_load_tmem()",
        "# Target:      sm_100a",
    ):
        assert expected in source, expected
    assert "wgmma" not in source and "plgpu.ACC" not in source
    assert "tcgen05" not in str(mlp.emit(x, w1, w2, backend="mosaic_gpu", target="sm_90a"))


def test_each_target_is_a_specialization_of_its_own() -> None:
    a = jax.ShapeDtypeStruct((128, 64), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((64, 128), jnp.bfloat16)
    first = matmul.specialize(a, b, backend="interpret", target="sm_90a")
    second = matmul.specialize(a, b, backend="interpret", target=BLACKWELL)
    assert first is not second and first.source != second.source
    assert matmul.with_target(BLACKWELL).specialize(a, b, backend="interpret") is second


def test_an_unknown_target_names_the_known_ones() -> None:
    with pytest.raises(sk.CompileTargetError, match="unknown GPU target 'sm_80'") as info:
        matmul.with_target("sm_80")
    assert info.value.expected == "'sm_90a' or 'sm_100a'"


def test_block_values_take_the_tensor_memory_layout() -> None:
    a, b = normal(0, (300, 200)), normal(1, (200, 260))
    bias = normal(2, (260,))
    source = str(matmul_bias_gelu.emit(a, b, bias, backend="mosaic_gpu", target=BLACKWELL))
    assert "plgpu.Layout.TCGEN05.reduce(0)" in source
    assert "plgpu.Layout.WGMMA" not in source
    # Mosaic GPU spreads a column vector into WGMMA's layout unless told: the module tells it.
    assert (
        "plgpu.layout_cast(lax.broadcast_in_dim(v5, (128, 128), (1,)), plgpu.Layout.TCGEN05)"
        in source
    )


# --- the interpreter runs the sm_100a code --------------------------------------------------


@settings(max_examples=6, deadline=None)
@given(
    m=st.sampled_from([1, 7, 128, 129, 300]),
    k=st.sampled_from([8, 64, 130, 200]),
    n=st.sampled_from([16, 100, 128, 260]),
)
def test_the_tcgen05_matmul_is_exact_at_ragged_shapes(m: int, k: int, n: int) -> None:
    a, b = normal(m, (m, k)), normal(n + k, (k, n))
    out = on_blackwell(matmul)(a, b)
    ref = jnp.dot(a, b, preferred_element_type=jnp.float32)
    close(out, ref, 1e-5)


def test_the_gallery_matmuls_run_on_blackwell() -> None:
    a, b = normal(0, (300, 200)), normal(1, (200, 260))
    bias = normal(2, (260,))
    close(on_blackwell(matmul)(a, b, bf16_out=True), jnp.dot(a, b), 1e-2)
    ref = matmul_bias_gelu_reference(a, b, bias)
    close(on_blackwell(matmul_bias_gelu)(a, b, bias), ref, 1e-2)
    batched = jnp.stack([a, a * 2]), jnp.stack([b, -b])
    ref = jnp.einsum("bmk,bkn->bmn", *batched, preferred_element_type=jnp.float32)
    close(on_blackwell(batched_matmul)(*batched), ref, 1e-5)
    a8 = normal(3, (300, 200), jnp.float8_e4m3fn)
    b8 = normal(4, (260, 200), jnp.float8_e4m3fn)
    scales = jnp.float32(0.5), jnp.float32(3.0)
    ref = matmul_fp8_reference(a8, b8, *scales)
    close(on_blackwell(matmul_fp8)(a8, b8, *scales), ref, 1e-5)


def test_a_split_loop_folds_each_part_from_zero() -> None:
    """Few blocks of a long K: the loop is split across CTAs, each part's accumulator starts
    at its own first step."""
    a, b = normal(5, (128, 4096)), normal(6, (4096, 128))
    plan = matmul.plan(a, b, backend="interpret", target=BLACKWELL)
    assert plan.split is not None
    close(on_blackwell(matmul)(a, b), jnp.dot(a, b, preferred_element_type=jnp.float32), 1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_runs_on_blackwell_from_its_hopper_defaults(causal: bool) -> None:
    q, k, v = (normal(i, (1, 2, 200, 64)) for i in range(3))
    plan = attention.plan(q, k, v, causal=causal, backend="interpret", target=BLACKWELL)
    assert dict(plan.constants)["BQ"] == 128
    assert any("BQ=64 (its default) is 128 on sm_100a" in note for note in plan.notes)
    assert "tcgen05 sk.dot(q, k.T) a step" in str(plan)
    out = on_blackwell(attention)(q, k, v, causal=causal)
    f32 = [x.astype(jnp.float32).transpose(0, 2, 1, 3) for x in (q, k, v)]
    ref = jax.nn.dot_product_attention(*f32, is_causal=causal).transpose(0, 2, 1, 3)
    close(out, ref, 2e-2)
    source = str(attention.emit(q, k, v, causal=causal, backend="mosaic_gpu", target=BLACKWELL))
    # acc * rescale + sk.dot(p, v): the MMA adds to the rescaled accumulator in tensor memory.
    assert "plgpu.async_store_tmem(" in source and "plgpu.commit_tmem()" in source


def test_the_mlp_runs_on_blackwell() -> None:
    x, w1, w2 = normal(0, (130, 64)), normal(1, (64, 200)) * 0.1, normal(2, (200, 48))
    close(on_blackwell(mlp)(x, w1, w2), mlp_reference(x, w1, w2), 2e-2)


def test_the_tcgen05_matmul_has_no_races() -> None:
    a, b = normal(0, (200, 130)), normal(1, (130, 100))
    report = sk.testing.detect_races(matmul.with_target(BLACKWELL), a, b)
    assert not report.races_found


# --- refusals ---------------------------------------------------------------------------------


def _refused(kernel: sk.Kernel, *args: object, **overrides: object) -> sk.TensorCoreTargetError:
    with pytest.raises(sk.TensorCoreTargetError) as info:
        kernel.plan(*args, backend="interpret", target=BLACKWELL, **overrides)
    return info.value


def test_wide_accumulators_are_refused_with_the_block_that_fits() -> None:
    a = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    error = _refused(matmul, a, a, BN=256)
    assert error.dim == "N" and error.actual == "BN=256" and error.fix == "set BN=128"


def test_a_rows_constant_passed_at_the_call_is_kept_and_refused() -> None:
    a = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    error = _refused(matmul, a, a, BM=64)
    assert error.dim == "M" and error.fix == "set BM=128"


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def int8_matmul(
    a: Int8[Array, "M K"],
    b_t: Int8[Array, "N K"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 128,
) -> Int32[Array, "M N"]:
    return sk.loop("K", lambda acc: acc + sk.dot(a, b_t), init=jnp.zeros((BM, BN), jnp.int32))


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def prefix_matmul(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "K N"],
    stop: Int32[Array, ""],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "M N"]:
    init = jnp.zeros((BM, BN), jnp.float32)
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=init, stop=sk.load(stop))


def test_products_tcgen05_does_not_take_here_are_refused() -> None:
    i8 = jax.ShapeDtypeStruct((256, 256), jnp.int8)
    error = _refused(int8_matmul, i8, i8)
    assert error.actual == "int8" and "sm_90a" in (error.fix or "")
    bf = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    stop = jax.ShapeDtypeStruct((), jnp.int32)
    error = _refused(prefix_matmul, bf, bf, stop)
    assert "start= or stop=" in error.what
    x = jax.ShapeDtypeStruct((300, 128), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((4, 128, 256), jnp.bfloat16)
    sizes = jax.ShapeDtypeStruct((4,), jnp.int32)
    error = _refused(grouped_matmul, x, w, sizes)
    assert "ragged=" in error.what and error.actual == BLACKWELL


def test_code_for_one_target_is_never_compiled_for_another() -> None:
    a = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    with pytest.raises(sk.CompileError, match="bound to generate code for sm_100a"):
        matmul.with_target(BLACKWELL).compile(a, a, target="sm_90a")
    entry = matmul.specialize(a, a, backend="mosaic_gpu", target=BLACKWELL)

    def never_lowered(*args: Any) -> Any:
        raise AssertionError("the specialization's function was lowered")

    # Refused from the plan alone, before the function is made or lowered.
    with pytest.raises(sk.CompileError, match="generated for sm_100a") as info:
        compile_specialization(entry.plan, never_lowered, (a, a), "sm_90a", None)
    assert info.value.expected == "target='sm_100a', the plan's"


def test_a_call_never_launches_another_targets_code_on_this_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On an H100, a call planned for sm_100a is refused before anything is lowered; plan,
    emit and the interpreter take it."""
    from statickernel import _targets

    monkeypatch.setattr(_targets, "live_target", lambda: _targets.TARGETS["sm_90a"])
    a = jnp.ones((128, 64), jnp.bfloat16)
    b = jnp.ones((64, 128), jnp.bfloat16)
    with pytest.raises(sk.BackendError, match="generated for sm_100a") as info:
        matmul.with_target(BLACKWELL).with_backend("mosaic_gpu")(a, b)
    assert info.value.expected == "target='sm_90a', this GPU's (the default)"
    assert "tcgen05" in str(matmul.emit(a, b, backend="mosaic_gpu", target=BLACKWELL))
    close(on_blackwell(matmul)(a, b), jnp.dot(a, b, preferred_element_type=jnp.float32), 1e-5)
