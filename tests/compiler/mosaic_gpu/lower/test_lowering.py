"""Every gallery kernel cross-lowers for CUDA on this CPU-only machine.

`kernel.lower(*args)` takes arrays or `jax.ShapeDtypeStruct`s, plans the specialization for the
mosaic_gpu backend and lowers the generated module with `lowering_platforms=("cuda",)`.
"""

from typing import Any

import jax
import jax.numpy as jnp
import pytest

import statickernel as sk
from add import add
from layernorm import layernorm
from rmsnorm import rmsnorm
from row_sum import row_sum
from scale_bias import scale_bias
from softmax import softmax

F32 = jnp.dtype(jnp.float32)
BF16 = jnp.dtype(jnp.bfloat16)

KERNELS: dict[str, sk.Kernel[..., Any]] = {
    "add": add,
    "scale_bias": scale_bias,
    "softmax": softmax,
    "rmsnorm": rmsnorm,
    "layernorm": layernorm,
    "row_sum": row_sum,
}
SHAPES = {
    "aligned": (128, 256),
    "ragged": (1000, 130),  # 1000 % 64 != 0; f32 rows of 520 B need host padding
    "ragged-small": (65, 100),  # bf16 rows of 200 B need host padding
    "wide": (200, 300),  # a whole N wider than one TMA box is copied in two
}


def specs(name: str, m: int, n: int, dtype: Any) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Abstract operands of a gallery kernel: shapes and dtypes, no data."""
    x = jax.ShapeDtypeStruct((m, n), dtype)
    v = jax.ShapeDtypeStruct((n,), dtype)
    return {
        "add": (x, x),
        "scale_bias": (x, v),
        "softmax": (x,),
        "rmsnorm": (x, v),
        "layernorm": (x, v, v),
        "row_sum": (x,),
    }[name]


def assert_mosaic_gpu(lowered: Any) -> str:
    text = lowered.as_text()
    assert isinstance(text, str)
    assert "mosaic_gpu" in text
    return text


@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("name", KERNELS)
def test_cross_lowers(name: str, shape: tuple[int, int], dtype: Any) -> None:
    kernel = KERNELS[name]
    args = specs(name, *shape, dtype)
    assert_mosaic_gpu(kernel.lower(*args))
    # The lowered specialization is the mosaic_gpu one, whatever the default backend.
    plan = kernel.plan(*args, backend="mosaic_gpu")
    assert plan.backend == "mosaic_gpu"
    assert plan.bindings == {"M": shape[0], "N": shape[1]}


def test_lower_takes_concrete_arrays() -> None:
    x = jnp.ones((100, 100), jnp.float32)
    assert_mosaic_gpu(softmax.lower(x))


def test_lowering_is_traced_for_the_given_shape() -> None:
    lowered = softmax.lower(jax.ShapeDtypeStruct((1000, 100), jnp.float32))
    assert lowered.out_info.shape == (1000, 100)
    assert lowered.out_info.dtype == jnp.float32


@pytest.mark.parametrize(
    ("name", "shape", "overrides"),
    [
        pytest.param("add", (1000, 777), {"BM": 128, "BN": 64}, id="add-BM128-BN64"),
        pytest.param("add", (300, 1000), {"BN": 256}, id="add-BN256"),
        pytest.param("softmax", (1000, 100), {"BM": 128}, id="softmax-BM128"),
        pytest.param("scale_bias", (300, 1000), {"BN": 64, "scale": 0.5}, id="scale_bias"),
        pytest.param("layernorm", (1000, 130), {"BM": 128, "eps": 1e-3}, id="layernorm"),
        pytest.param("rmsnorm", (517, 100), {"BM": 128}, id="rmsnorm-BM128"),
        pytest.param("row_sum", (999, 100), {"BM": 256}, id="row_sum-BM256"),
    ],
)
@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: d.name)
def test_cross_lowers_with_non_default_constants(
    name: str, shape: tuple[int, int], overrides: dict[str, Any], dtype: Any
) -> None:
    kernel = KERNELS[name]
    args = specs(name, *shape, dtype)
    assert_mosaic_gpu(kernel.lower(*args, **overrides))
    plan = kernel.plan(*args, backend="mosaic_gpu", **overrides)
    constants = dict(plan.constants)
    for const, value in overrides.items():
        assert constants[const] == value
    for d in plan.dims:
        if d.tiled_by in overrides:
            assert d.block == overrides[d.tiled_by]


def test_lowering_with_different_constants_differs() -> None:
    x = jax.ShapeDtypeStruct((1000, 100), jnp.float32)
    default = softmax.lower(x).as_text()
    wide = softmax.lower(x, BM=128).as_text()
    assert default != wide


def test_lower_refuses_a_plan_over_shared_memory() -> None:
    """BM=256 and BN=256 with three f32 blocks need 768 KiB: checked before lowering."""
    x = jax.ShapeDtypeStruct((1000, 1000), jnp.float32)
    with pytest.raises(sk.SharedMemoryError) as info:
        add.lower(x, x, BM=256, BN=256)
    assert "shared memory" in info.value.what
    assert info.value.fix


def test_lower_refuses_a_row_too_wide_for_shared_memory() -> None:
    x = jax.ShapeDtypeStruct((1000, 100_000), jnp.float32)
    with pytest.raises(sk.SharedMemoryError) as info:
        softmax.lower(x)
    assert "shared memory" in info.value.what
    assert info.value.bindings == {"M": 1000, "N": 100_000}


@pytest.mark.parametrize(
    ("shape", "dtype", "rows"),
    [((1000, 256), F32, 4), ((1000, 2000), F32, 4), ((300, 16384), F32, 1), ((5, 32768), BF16, 1)],
)
def test_wide_rows_cross_lower_in_the_row_form(
    shape: tuple[int, int], dtype: Any, rows: int
) -> None:
    """Rows too wide for 64-row blocks (even with BM=128 asked for) take the row form."""
    x = jax.ShapeDtypeStruct(shape, dtype)
    assert_mosaic_gpu(softmax.lower(x, BM=128))
    plan = softmax.plan(x, BM=128, backend="mosaic_gpu")
    assert plan.form is sk.Form.ROWS and plan.dim("M").block == rows


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        pytest.param("rmsnorm", {"BM": 128}, id="rmsnorm"),  # plans 230,288 B; lowers to 232,464 B
        pytest.param("layernorm", {"BM": 128}, id="layernorm"),  # plans 231,192 B; 233,496 B
    ],
)
def test_a_plan_within_shared_memory_lowers(name: str, overrides: dict[str, Any]) -> None:
    kernel = KERNELS[name]
    args = specs(name, 517, 200, F32)
    try:
        plan = kernel.plan(*args, backend="mosaic_gpu", **overrides)
    except sk.PlanError:
        return  # refusing the plan up front would be fine too
    assert plan.smem_bytes <= 232448
    kernel.lower(*args, **overrides)
