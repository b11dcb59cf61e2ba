"""The gallery's elementwise and whole-row kernels, operands that show a wrong edge, and the
check of a result against the kernel's reference: shared by the gallery's tests and the row
form's."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import statickernel as sk
from add import add
from layernorm import layernorm
from rmsnorm import rmsnorm
from row_sum import row_sum
from scale_bias import scale_bias
from softmax import softmax

__all__ = ["BF16", "F32", "KERNELS", "check_against_reference", "make_args", "tolerance"]

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


def make_args(name: str, m: int, n: int, dtype: Any, seed: int = 0) -> tuple[jax.Array, ...]:
    """Operands for a gallery kernel, chosen so that a wrong edge would show."""
    rng = np.random.default_rng([seed, m, n])

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    x = normal(m, n)
    if name == "softmax":
        # All negative: a zero read past the edge would win the row max and the sum.
        arrays = [x - 10]
    elif name == "add":
        arrays = [x, normal(m, n)]
    elif name == "scale_bias":
        arrays = [x, normal(n)]
    elif name == "rmsnorm":
        arrays = [x, 1 + 0.1 * normal(n)]
    elif name == "layernorm":
        # A non-zero mean: zeros past the edge would shift the mean and the variance.
        arrays = [3 * x + 1, 1 + 0.1 * normal(n), normal(n)]
    elif name == "row_sum":
        arrays = [x - 1]
    else:
        raise AssertionError(name)
    return tuple(jnp.asarray(a, dtype) for a in arrays)


def tolerance(name: str, dtype: Any) -> tuple[float, float]:
    """(rtol, atol), comparing in float32."""
    if dtype == BF16:
        # row_sum casts to f32 before summing, so only the summation order differs.
        return (1e-2, 1e-2) if name == "row_sum" else (2e-2, 2e-2)
    # A sum of a few hundred terms in another order.
    return (1e-5, 1e-4) if name == "row_sum" else (1e-5, 1e-5)


def check_against_reference(name: str, args: tuple[jax.Array, ...]) -> None:
    kernel = KERNELS[name]
    assert kernel.reference is not None
    out = kernel(*args)
    ref = kernel.reference(*args)
    assert out.shape == ref.shape
    assert out.dtype == ref.dtype
    got = np.asarray(out, np.float32)
    assert np.isfinite(got).all(), "a value past the edge leaked into the result"
    rtol, atol = tolerance(name, args[0].dtype)
    np.testing.assert_allclose(got, np.asarray(ref, np.float32), rtol=rtol, atol=atol)
