"""The gallery on a real GPU: compiled with Mosaic GPU and run against each reference.

Every test here is marked `gpu` and skips cleanly on a machine without a CUDA device; the
prepared GPU check (bench/gpu_check.sh) runs them with `pytest -m gpu`.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import statickernel as sk
from add import add
from layernorm import layernorm
from rmsnorm import rmsnorm
from row_sum import row_sum
from scale_bias import scale_bias
from softmax import softmax


def _has_cuda() -> bool:
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA device (an NVIDIA Hopper GPU)"),
]

# (kernel, operand shapes as functions of (M, N)), at an aligned, a ragged and a tiny shape.
CASES: list[tuple[Any, Any]] = [
    (add, lambda m, n: [(m, n), (m, n)]),
    (scale_bias, lambda m, n: [(m, n), (n,)]),
    (softmax, lambda m, n: [(m, n)]),
    (rmsnorm, lambda m, n: [(m, n), (n,)]),
    (layernorm, lambda m, n: [(m, n), (n,), (n,)]),
    (row_sum, lambda m, n: [(m, n)]),
]
SHAPES = [(1024, 256), (1000, 200), (7, 3), (4097, 130)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("m", "n"), SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
@pytest.mark.parametrize(("kernel", "shapes"), CASES, ids=[k.spec.name for k, _ in CASES])
def test_gallery_on_hardware(kernel: sk.Kernel[..., Any], shapes: Any, m: int, n: int, dtype: str):
    keys = jax.random.split(jax.random.key(0), 3)
    operands = [
        (jax.random.normal(k, s, jnp.float32) * 2 - 4).astype(dtype)
        for k, s in zip(keys, shapes(m, n), strict=False)
    ]
    got = kernel.with_backend("mosaic_gpu")(*operands)
    want = kernel.reference(*operands)  # pyright: ignore[reportOptionalCall]
    got32, want32 = np.asarray(got, np.float32), np.asarray(want, np.float32)
    scale = max(1.0, float(np.max(np.abs(want32))))
    tolerance = (1e-5 if dtype == "float32" else 2e-2) * scale
    assert float(np.max(np.abs(got32 - want32))) <= tolerance


# Loop kernels: ragged M, N and K (K smaller than one block, K one past a block), and the short-K
# and host-padded cases that only a device can confirm read zeros where they should.
MATMUL_SHAPES = [
    (1024, 1024, 1024),
    (1000, 40, 1000),
    (997, 257, 331),
    (1, 1, 1),
    (4095, 4095, 4095),
]


@pytest.mark.parametrize(
    ("m", "k", "n"), MATMUL_SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in MATMUL_SHAPES]
)
def test_matmul_on_hardware(m: int, k: int, n: int) -> None:
    from matmul import matmul

    ka, kb = jax.random.split(jax.random.key(m + k + n))
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    got = np.asarray(matmul.with_backend("mosaic_gpu")(a, b))
    want = np.asarray(jnp.dot(a, b, preferred_element_type=jnp.float32))
    # Both sum exact bf16 products in f32; only the order of the sums differs.
    assert float(np.max(np.abs(got - want))) <= 1e-4 * max(1.0, float(np.max(np.abs(want))))


def test_matmul_bias_gelu_and_batched_on_hardware() -> None:
    from batched_matmul import batched_matmul
    from matmul_bias_gelu import matmul_bias_gelu

    ka, kb, kc = jax.random.split(jax.random.key(1), 3)
    a = jax.random.normal(ka, (3, 300, 200), jnp.bfloat16)
    b = jax.random.normal(kb, (3, 200, 260), jnp.bfloat16)
    bias = jax.random.normal(kc, (260,), jnp.float32)
    got = np.asarray(batched_matmul.with_backend("mosaic_gpu")(a, b))
    want = np.asarray(batched_matmul.reference(a, b))  # pyright: ignore[reportOptionalCall]
    assert float(np.max(np.abs(got - want))) <= 1e-3
    got = np.asarray(matmul_bias_gelu.with_backend("mosaic_gpu")(a[0], b[0], bias), np.float32)
    want = np.asarray(matmul_bias_gelu.reference(a[0], b[0], bias), np.float32)  # pyright: ignore[reportOptionalCall]
    assert float(np.max(np.abs(got - want))) <= 2e-2 * max(1.0, float(np.max(np.abs(want))))


# Rows too wide for shared memory (pipelined loops), rows it holds (the row form's loops walk
# them there; 4095 float32 columns addressed flat), and one narrow step.
@pytest.mark.parametrize(("m", "n"), [(130, 100_000), (64, 256), (7, 3), (300, 8192), (33, 4095)])
def test_wide_rows_on_hardware(m: int, n: int) -> None:
    from layernorm_wide import layernorm_wide
    from softmax_online import softmax_online

    keys = jax.random.split(jax.random.key(2), 3)
    x = jax.random.normal(keys[0], (m, n), jnp.float32) - 5.0
    got = np.asarray(softmax_online.with_backend("mosaic_gpu")(x))
    want = np.asarray(jax.nn.softmax(x, axis=-1))
    assert float(np.max(np.abs(got - want))) <= 1e-5 * max(1e-30, float(np.max(want)))
    w = jax.random.normal(keys[1], (n,), jnp.float32)
    bias = jax.random.normal(keys[2], (n,), jnp.float32)
    got = np.asarray(layernorm_wide.with_backend("mosaic_gpu")(x * 3 + 100, w, bias))
    want = np.asarray(layernorm_wide.reference(x * 3 + 100, w, bias))  # pyright: ignore[reportOptionalCall]
    assert float(np.max(np.abs(got - want))) <= 1e-3


# Weight-only quantized matmuls: K over several steps (the 4-bit weight's steps are copied from
# column 0 of a (rows, steps, block) view, as the device needs), ragged N, K and M, decoding.
QUANTIZED_SHAPES = [(64, 256, 64), (100, 200, 5), (257, 1024, 129), (4096, 4096, 16)]


@pytest.mark.parametrize(
    ("n", "k", "m"), QUANTIZED_SHAPES, ids=[f"{n}x{k}x{m}" for n, k, m in QUANTIZED_SHAPES]
)
def test_quantized_weight_matmuls_on_hardware(n: int, k: int, m: int) -> None:
    from matmul_int4 import (
        linear_int4,
        linear_int4_reference,
        matmul_w4a16,
        matmul_w4a16_reference,
    )
    from matmul_int8_weights import matmul_w8a16, matmul_w8a16_reference

    kw, ks, kx = jax.random.split(jax.random.key(n + k + m), 3)
    x = jax.random.normal(kx, (m, k), jnp.bfloat16)
    w4 = jax.random.randint(kw, (n, k), -8, 8, jnp.int32).astype(jnp.int4)
    scales = jax.random.uniform(ks, (-(-k // 128), n), jnp.float32, 0.01, 0.1)
    w8 = jax.random.randint(kw, (n, k), -128, 128, jnp.int32).astype(jnp.int8)
    scale = jax.random.uniform(ks, (n,), jnp.float32, 0.001, 0.01)
    for got, want in (
        (
            matmul_w4a16.with_backend("mosaic_gpu")(w4, scales, x),
            matmul_w4a16_reference(w4, scales, x),
        ),
        (
            matmul_w8a16.with_backend("mosaic_gpu")(w8, scale, x),
            matmul_w8a16_reference(w8, scale, x),
        ),
        # The weight laid out (K, N): b dequantized in registers and staged in shared memory,
        # its int4 blocks of N copied from column 0 of a view of them.
        (
            linear_int4.with_backend("mosaic_gpu")(x, w4.T, scales),
            linear_int4_reference(x, w4.T, scales),
        ),
    ):
        got32, want32 = np.asarray(got, np.float32), np.asarray(want, np.float32)
        # The same bf16 products summed in f32 in another order, rounded once to bfloat16.
        tolerance = 1e-2 * max(1.0, float(np.max(np.abs(want32))))
        assert float(np.max(np.abs(got32 - want32))) <= tolerance


# Causal convolutions in both layouts: the rows above a block copied with it (channels last),
# and a window a column offset copied from the shifted columns (Mamba's layout), the first
# block's starting before the array, which TMA reads as zeros by its signed coordinates.
CONV_SHAPES = [(1, 64, 64), (2, 100, 72), (4, 1000, 320)]


@pytest.mark.parametrize(
    ("batch", "length", "channels"), CONV_SHAPES, ids=["x".join(map(str, s)) for s in CONV_SHAPES]
)
def test_causal_conv1d_on_hardware(batch: int, length: int, channels: int) -> None:
    from causal_conv1d import (
        causal_conv1d,
        causal_conv1d_channels_first,
        causal_conv1d_channels_first_reference,
        causal_conv1d_reference,
    )

    kx, kw, kb = jax.random.split(jax.random.key(length + channels), 3)
    x = jax.random.normal(kx, (batch, length, channels), jnp.float32)
    w = jax.random.normal(kw, (4, channels), jnp.float32) / 2
    b = jax.random.normal(kb, (channels,), jnp.float32) / 10
    x_cl, w_cl = jnp.swapaxes(x, 1, 2), w.T
    for got, want in (
        (causal_conv1d.with_backend("mosaic_gpu")(x, w, b), causal_conv1d_reference(x, w, b)),
        (
            causal_conv1d_channels_first.with_backend("mosaic_gpu")(x_cl, w_cl, b),
            causal_conv1d_channels_first_reference(x_cl, w_cl, b),
        ),
    ):
        # Four float32 products and a bias summed in another order, then SiLU.
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
