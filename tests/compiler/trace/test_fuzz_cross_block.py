"""The differential fuzzer for results reduced across blocks: random compositions of sums,
maxes, mins and means over tiled and whole dims, with scalar, per-column and per-row results,
either compute what their body computes with plain jnp on the whole arrays, or are refused at
the declaration with a `sk.CrossBlockResultError` that a blockwise combination justifies.

Each case (tests/cross_block_fuzz.py draws it) is a real module imported from a temporary file,
so the decorator reads real annotations and a refusal points at a real line. An accepted kernel
runs in the Mosaic GPU interpreter at the drawn shape and at one of two blocks and a ragged one
along each tiled dim, and must match the whole-array body within float32 rounding. A refused
one must be refused for a reason: combining the blocks' own results with the result's last
reduction, what a combination that ignores the body's other reductions gives, must differ from
the whole-array value (see `cross_block_fuzz.blockwise`), unless every reduction over a tiled
dim is a max or a min. Any other exception, a refusal of another class, or one at the call, fails the case.

CROSS_BLOCK_FUZZ_EXAMPLES sets the number of cases (default 60); the run is derandomized.
"""

import atexit
import collections
import hashlib
import os
import pathlib
import shutil
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings

import statickernel as sk
from cross_block_fuzz import (
    KERNEL_NAME,
    Composition,
    blockwise,
    compositions,
    make_args,
    multi_block_shape,
    whole_array,
)
from generated_modules import write_and_import

EXAMPLES = int(os.environ.get("CROSS_BLOCK_FUZZ_EXAMPLES", "60"))
_MODULE_DIR = pathlib.Path(tempfile.mkdtemp(prefix="statickernel_cross_block_"))
atexit.register(shutil.rmtree, _MODULE_DIR, ignore_errors=True)
STATS: collections.Counter[str] = collections.Counter()


@pytest.fixture(autouse=True)
def _interpreter_by_default(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("STATICKERNEL_BACKEND", raising=False)
    sk.set_backend(None)
    yield


def declare(case: Composition) -> tuple[sk.Kernel[..., Any] | sk.CrossBlockResultError, str]:
    """The kernel, or its refusal, from the module imported from a file."""
    digest = hashlib.sha1(case.source.encode()).hexdigest()[:16]
    path = _MODULE_DIR / f"cross_block_{digest}.py"
    try:
        module = write_and_import(path, case.source)
    except sk.StaticKernelError as exc:
        assert isinstance(exc, sk.CrossBlockResultError), (
            f"refused with {type(exc).__name__}, not CrossBlockResultError:\n{exc}\n\n"
            f"{case.describe()}"
        )
        assert exc.where and path.name in exc.where, f"located at {exc.where!r}:\n{exc}"
        assert exc.kernel == KERNEL_NAME and exc.fix and exc.dim in case.tiled, str(exc)
        return exc, path.name
    return getattr(module, KERNEL_NAME), path.name


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max()) if finite.size else 1.0)
    return got.shape == want.shape and bool(
        np.allclose(got, want, rtol=2e-4, atol=2e-4 * scale, equal_nan=True)
    )


def check_case(case: Composition) -> None:
    found, filename = declare(case)
    multi = multi_block_shape(case)
    if isinstance(found, sk.CrossBlockResultError):
        args = make_args(case, *multi, salt=1)
        want = whole_array(case, filename, args)
        naive = blockwise(case, filename, args)
        if all(_close(a, b) for a, b in zip(naive, want, strict=True)):
            assert case.order_only, (
                "refused, but combining each block's result gives the whole-array value:\n"
                f"{found}\n\n{case.describe()}"
            )
            STATS["refused, only maxes and mins: the blocks' results agree"] += 1
        else:
            STATS["refused, the blocks' results would combine wrong"] += 1
        # By rule: the message without the result's name, up to its first colon.
        STATS[f"refused: {found.what.split(' ', 1)[1].split(':')[0][:70]}"] += 1
        return
    kernel = found
    for m, n in {(case.m, case.n), multi}:
        args = make_args(case, m, n)
        try:
            got = kernel(*args)
        except sk.StaticKernelError as exc:
            raise AssertionError(f"refused at the call:\n{exc}\n\n{case.describe()}") from exc
        parts = got if isinstance(got, tuple) else (got,)
        want = whole_array(case, filename, args)
        for i, (g, w) in enumerate(zip(parts, want, strict=True)):
            g = np.asarray(g, np.float32)
            assert _close(g, w), (
                f"result {i} at M={m}, N={n}: got {g.ravel()[:4]}, the body on the whole arrays "
                f"gives {w.ravel()[:4]}\n\n{case.describe()}"
            )
    STATS["accepted, matches jnp"] += 1
    crosses = kernel.plan(*make_args(case, *multi)).cross_blocks
    if any(c.outer is not None for c in crosses):
        STATS["accepted, the blocks' partials combined before an outer reduction"] += 1


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # every case compiles: no shrinking
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=compositions())
def _fuzz(case: Composition) -> None:
    STATS["cases"] += 1
    check_case(case)


def summary() -> str:
    lines = [f"cross-block fuzz: {STATS['cases']} cases"]
    lines += [f"  {key}: {count}" for key, count in sorted(STATS.items()) if key != "cases"]
    return "\n".join(lines)


@pytest.mark.slow
def test_results_reduced_across_blocks_match_jnp_or_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    STATS.clear()
    try:
        _fuzz()
    finally:
        with capsys.disabled():  # shown without -s
            print("\n" + summary())
    accepted = STATS["accepted, matches jnp"]
    refused = STATS["cases"] - accepted
    # The split must stay useful: a generator that only produced refusals would prove nothing.
    assert accepted >= EXAMPLES // 5 and refused >= EXAMPLES // 10, summary()
    assert STATS["accepted, the blocks' partials combined before an outer reduction"], summary()
