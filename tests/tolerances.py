"""Tolerances for floating-point results that a kernel and its reference (or two kernels)
compute in different orders.

Adding the same terms in another order rounds differently, and the order is not the test's
to choose: XLA:CPU vectorizes reductions and dots by the machine's instruction set (AVX2,
AVX-512, NEON), and a kernel adds its blocks in its own order. So a result rounded to its
dtype may land one unit in the last place (ulp) either side, and a test must never compare
such results bit for bit. `tolerance_for` derives the allowance from the result's dtype and
the number of terms summed into each element, instead of a number that happens to pass on
one CPU:

- rtol: one ulp of the result's dtype (its final rounding may go either way), plus the
  relative error of a float32 accumulation of `terms` terms of one sign (about
  sqrt(terms) * eps(float32) in the worst order), both taken `ulps` times;
- atol: the absolute error of that accumulation when the terms cancel and the sum lands
  near zero, where rtol allows nothing: about terms * eps(float32) * `scale`, `scale` being
  the magnitude of one term, taken `ulps` times.

Legitimately exact results stay compared exactly: integers, copies and masks, maxima and
minima, and elementwise ops on the same values with one rounding.
"""

import dataclasses
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["Tolerance", "assert_close", "tolerance_for"]


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """numpy.isclose's rule: |got - want| <= atol + rtol * |want|."""

    rtol: float
    atol: float


def tolerance_for(dtype: Any, terms: int = 1, *, scale: float = 1.0, ulps: int = 2) -> Tolerance:
    """The tolerance for results of `dtype` that each sum `terms` terms of magnitude about
    `scale`, accumulated in float32 (or in `dtype` where it is wider)."""
    result_eps = float(jnp.finfo(dtype).eps)
    accumulated_eps = min(result_eps, float(jnp.finfo(jnp.float32).eps))
    terms = max(1, terms)
    return Tolerance(
        rtol=ulps * (result_eps + math.sqrt(terms) * accumulated_eps),
        atol=ulps * terms * accumulated_eps * scale,
    )


def assert_close(got: Any, want: Any, tolerance: Tolerance, err_msg: str = "") -> None:
    """`got` within `tolerance` of `want`, compared in float32 (bf16 and f16 widen exactly)."""
    np.testing.assert_allclose(
        np.asarray(got, np.float32),
        np.asarray(want, np.float32),
        rtol=tolerance.rtol,
        atol=tolerance.atol,
        err_msg=err_msg,
    )
