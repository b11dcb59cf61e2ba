"""Kernels' cases inside a user's own test suite: one pytest item per probe case
(`parametrize`), and a hypothesis strategy of cases at drawn shapes (`cases`).

pytest and hypothesis stay optional: each is imported only when its helper is called.
"""

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..runtime.kernel import Kernel
from .probes import (
    ProbeCase,
    ShapeSpec,
    dtype_text,
    probe_cases,
    probe_dtypes,
    require_kernel,
)

__all__ = ["case_id", "cases", "parametrize"]

_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_.()-]+")


def case_id(case: ProbeCase) -> str:
    """A pytest id for a case: its probe label and dtypes, e.g. `ragged_M-float32`."""
    label = _UNSAFE_ID.sub("_", case.label).strip("_")
    return f"{label}-{dtype_text(case.dtypes)}"


def parametrize(
    kernel: Kernel,
    shapes: Sequence[ShapeSpec] | None = None,
    dtypes: Sequence[Any] | None = None,
    *,
    argname: str = "case",
) -> Any:
    """A pytest decorator giving the test one item per probe case of `kernel` (as
    `probe_cases(kernel, shapes, dtypes)`), each passed as the `case` argument:

        @sk.testing.parametrize(softmax)
        def test_softmax(case):
            sk.testing.check_case(softmax, case)

    The items are named after the probe and dtypes, e.g. `test_softmax[ragged_M-float32]`.
    """
    require_kernel(kernel, "parametrize")
    import pytest  # optional: only a pytest suite calls this

    found = probe_cases(kernel, shapes, dtypes)
    ids = [case_id(c) for c in found]
    return pytest.mark.parametrize(argname, found, ids=ids)


def cases(
    kernel: Kernel,
    *,
    max_size: int | Mapping[str, int] = 64,
    min_size: int = 1,
    dtypes: Sequence[Any] | None = None,
) -> Any:
    """A hypothesis strategy of cases of `kernel` at drawn shapes.

    Each dim named in the annotations gets one size from `min_size` to `max_size` (an int for
    every dim, or a mapping from dim name to its largest size), so operands that share a dim
    share its size, batch dims included. The dtypes are one of `probe_dtypes(kernel, dtypes)`:
    what the annotations allow. Use it with `check_case`:

        @given(case=sk.testing.cases(softmax, max_size=40))
        @settings(max_examples=5, deadline=None)
        def test_softmax_at_any_shape(case):
            sk.testing.check_case(softmax, case)
    """
    require_kernel(kernel, "cases")
    from hypothesis import strategies as st  # optional: only a hypothesis suite calls this

    spec = kernel.spec
    # A dim named by its size ("3", a vector of parameters) is not drawn.
    fixed = {d: st.just(n) for d, n in spec.fixed_sizes().items()}
    dims = [d for d in spec.dim_names() if d not in fixed]
    largest = {d: max_size if isinstance(max_size, int) else max_size[d] for d in dims}
    too_small = [d for d in dims if largest[d] < min_size]
    if too_small:
        raise ValueError(f"max_size is below min_size={min_size} for dim(s) {', '.join(too_small)}")
    sizes = st.fixed_dictionaries({**{d: st.integers(min_size, largest[d]) for d in dims}, **fixed})
    configs = probe_dtypes(kernel, dtypes)

    def build(drawn: dict[str, int], config: tuple[str, ...]) -> ProbeCase:
        label = "drawn " + " ".join(f"{d}={n}" for d, n in drawn.items())
        shapes = tuple(tuple(drawn[d] for d in o.dims) for o in spec.operands)
        return ProbeCase(label, shapes, config)

    return st.builds(build, sizes, st.sampled_from(configs))
