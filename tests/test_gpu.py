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
    got = kernel(*operands, backend="mosaic_gpu")
    want = kernel.reference(*operands)  # pyright: ignore[reportOptionalCall]
    got32, want32 = np.asarray(got, np.float32), np.asarray(want, np.float32)
    scale = max(1.0, float(np.max(np.abs(want32))))
    tolerance = (1e-5 if dtype == "float32" else 2e-2) * scale
    assert float(np.max(np.abs(got32 - want32))) <= tolerance
