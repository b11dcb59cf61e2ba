"""The fuzzer: random declarations and random calls either work exactly or fail on purpose.

The invariant: every declaration either gives a kernel or raises a `sk.DeclarationError`, and
every call either returns what the body computes with jnp, or raises a `sk.StaticKernelError`.
Any other exception, from JAX or from Python, fails the test; so does a wrong result, and so
does an error without a location or a fix. Calls are made directly, inside `jax.jit` or with
NumPy arrays, and some successful ones are also cross-lowered for CUDA, under the same
invariant.

Profiles: "fuzz-ci" (the default: derandomized, 300 declarations, dims up to 200) and
"fuzz-thorough" (2000 random declarations, dims up to 520), chosen with FUZZ_PROFILE=ci or
FUZZ_PROFILE=thorough. The test prints how many cases ran and how they split between results
and errors.
"""

import atexit
import collections
import hashlib
import itertools
import os
import pathlib
import shutil
import tempfile
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import statickernel as sk
from fuzz_kernels import COL_BLOCKS, KERNEL_NAME, ROW_BLOCKS, Declaration, declarations
from generated_modules import write_and_import
from statickernel._targets import MOSAIC_GPU_LIMITS
from statickernel.language.context import TraceContext, tracing

settings.register_profile(
    "fuzz-ci",
    # FUZZ_EXAMPLES: fewer in CI's run (.ci/run), for time.
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    derandomize=True,
    # Every example compiles kernels, so shrinking a failure takes minutes; the failing case
    # is printed unshrunk and, derandomized, reproduces exactly.
    phases=[Phase.explicit, Phase.generate],
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fuzz-thorough",
    max_examples=2000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = "fuzz-" + os.environ.get("FUZZ_PROFILE", "ci")
# Dims stay small in CI, for time; the thorough profile also reaches whole dims wider than
# one TMA box (256), which are copied in several boxes.
MAX_SIZE = 520 if PROFILE == "fuzz-thorough" else 200

_THIS_FILE = pathlib.Path(__file__).name
_MODULE_DIR = pathlib.Path(tempfile.mkdtemp(prefix="statickernel_fuzz_"))
atexit.register(shutil.rmtree, _MODULE_DIR, ignore_errors=True)
_MODULES: dict[str, types.ModuleType | sk.StaticKernelError] = {}

# What ran, for the summary.
STATS: collections.Counter[str] = collections.Counter()


# --- declarations ------------------------------------------------------------------------------


def declare(decl: Declaration) -> sk.Kernel[..., Any] | sk.StaticKernelError:
    """Imports the declaration as a real module, so errors point at a real file and line.

    The same text is imported once; its kernel (and its specializations) are reused.
    """
    digest = hashlib.sha1(decl.source.encode()).hexdigest()[:16]
    if digest not in _MODULES:
        path = _MODULE_DIR / f"fuzzed_{digest}.py"
        try:
            module = write_and_import(path, decl.source)
        except sk.StaticKernelError as exc:
            check_error(exc, expected_files=(path.name,), declaration=True)
            _MODULES[digest] = exc
        else:
            _MODULES[digest] = module
    found = _MODULES[digest]
    if isinstance(found, sk.StaticKernelError):
        return found
    return getattr(found, KERNEL_NAME)


def check_error(exc: sk.StaticKernelError, expected_files: tuple[str, ...], declaration: bool):
    """The facts every error must carry: its branch, a location in the user's files, a fix."""
    if declaration:
        assert isinstance(exc, sk.DeclarationError), f"{type(exc).__name__} at import:\n{exc}"
    assert exc.where and any(f in exc.where for f in expected_files), (
        f"{type(exc).__name__} located at {exc.where!r}, not in {expected_files}:\n{exc}"
    )
    assert exc.fix, f"{type(exc).__name__} without a fix:\n{exc}"
    assert exc.kernel == KERNEL_NAME, str(exc)


# --- calls -------------------------------------------------------------------------------------


class Call:
    """One call: its arguments, the mistake planted in them if any, and how it is made."""

    def __init__(
        self,
        args: tuple[Any, ...],
        overrides: dict[str, Any],
        mistake: str | None,
        how: str,  # "direct", "jit" (inside jax.jit) or "numpy" (NumPy arrays)
        lower: bool,
    ):
        self.args = args
        self.overrides = overrides
        self.mistake = mistake
        self.how = how
        self.lower = lower

    def __repr__(self) -> str:  # what a failing case prints: shapes and dtypes, not the data
        args = ", ".join(
            f"{np.dtype(a.dtype)}{list(a.shape)}" if hasattr(a, "shape") else repr(a)
            for a in self.args
        )
        return f"Call({args}, overrides={self.overrides}, mistake={self.mistake}, how={self.how})"

    def run(self, kernel: sk.Kernel[..., Any]) -> Any:
        if self.how == "jit":
            return jax.jit(lambda *args: kernel(*args, **self.overrides))(*self.args)
        if self.how == "numpy":
            args = [np.asarray(a) if isinstance(a, jax.Array) else a for a in self.args]
            return kernel(*args, **self.overrides)
        return kernel(*self.args, **self.overrides)


def _size(block: int | None) -> st.SearchStrategy[int]:
    """Sizes that exercise edges: tiny, primes, around 64 and around the block."""
    fixed = [1, 2, 3, 7, 13, 31, 63, 64, 65, 97, 127, 128, 129, 193, 200, 257, 300, 511]
    fixed = [n for n in fixed if n <= MAX_SIZE]
    near = [b for b in ((block - 1, block, block + 1) if block else ()) if 1 <= b <= MAX_SIZE]
    return st.one_of(st.sampled_from(fixed + near), st.integers(1, MAX_SIZE))


_VALID_OVERRIDES = {
    "BM": st.sampled_from(ROW_BLOCKS),
    "BN": st.sampled_from(COL_BLOCKS),
    "s": st.sampled_from([0.25, 3, -2.0]),
    "flag": st.booleans(),
}
_BAD_OVERRIDES = st.sampled_from(
    [
        ("BM", 96),
        ("BM", 0),
        ("BM", -64),
        ("BM", 512),
        ("BM", 64.0),
        ("BM", True),
        ("BM", "64"),
        ("BN", 12),
        ("BN", 1024),
        ("BK", 64),
        ("s", "x"),
        ("flag", 1),
    ]
)
_CALL_MISTAKES = [None] * 20 + [
    "float64",
    "bool",
    "other-dtype",
    "rank",
    "mismatched-dim",
    "zero-dim",
    "not-an-array",
    "too-few",
    "too-many",
    "bad-override",
]


def _default_block(kernel: sk.Kernel[..., Any], dim: str) -> int | None:
    const = kernel.spec.tile_map.get(dim)
    return kernel.consts.get(const) if const else None


@st.composite
def calls(draw: Any, kernel: sk.Kernel[..., Any], decl: Declaration) -> Call:
    mistake = draw(st.sampled_from(_CALL_MISTAKES))
    sizes = {
        "M": draw(_size(_default_block(kernel, "M"))),
        "N": draw(_size(_default_block(kernel, "N"))),
    }
    floats = draw(st.sampled_from(["float32"] * 5 + ["bfloat16"] * 3 + ["float16"]))
    ints = draw(st.sampled_from(["int32"] * 4 + ["int8"]))
    mixed = draw(st.integers(0, 4)) == 0
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # All-negative and all-positive data expose a reduction that lets padding in.
    shift = draw(st.sampled_from([0.0, 0.0, -8.0, 8.0]))
    args: list[Any] = []
    for operand in kernel.spec.operands:
        dtype = draw(st.sampled_from(["float32", "bfloat16"])) if mixed else floats
        if "int" in operand.dtypes[0]:
            dtype = ints
        if dtype not in operand.dtypes:
            dtype = operand.dtypes[0]  # wrong dtypes are planted on purpose below, not here
        values = 2 * rng.standard_normal([sizes[d] for d in operand.dims]) + shift
        if "int" in dtype:
            values = np.round(values * 4)
        args.append(jnp.asarray(values.astype(np.float32), dtype))
    overrides = {}
    for name, _ in decl.consts:
        if name in _VALID_OVERRIDES and draw(st.integers(0, 3)) == 0:
            overrides[name] = draw(_VALID_OVERRIDES[name])
    which = draw(st.integers(0, len(args) - 1))
    if mistake == "float64":
        args[which] = np.asarray(args[which], np.float64)
    elif mistake == "bool":
        args[which] = args[which] > 0
    elif mistake == "other-dtype":
        allowed = kernel.spec.operands[which].dtypes
        other = next(d for d in ("int32", "float32", "uint8") if d not in allowed)
        args[which] = args[which].astype(other)
    elif mistake == "rank":
        arr = args[which]
        args[which] = arr[None] if draw(st.booleans()) or arr.ndim == 1 else arr[0]
    elif mistake == "mismatched-dim":
        arr = args[which]
        axis = draw(st.integers(0, arr.ndim - 1))
        args[which] = jnp.concatenate([arr, arr], axis=axis)
        dim = decl.operands[which][1][axis]
        if sum(dim in dims for _, dims in decl.operands) == 1:
            mistake = None  # no other operand binds this dim: just another valid size
    elif mistake == "zero-dim":
        arr = args[which]
        args[which] = arr[:0]
    elif mistake == "not-an-array":
        args[which] = draw(st.sampled_from([1.5, 3, None, "x", [1.0, 2.0]]))
    elif mistake == "too-few":
        args.pop()
    elif mistake == "too-many":
        args.append(args[0])
    elif mistake == "bad-override":
        name, value = draw(_BAD_OVERRIDES)
        overrides[name] = value
        tiles_nothing = name in kernel.consts and name not in kernel.spec.tile_map.values()
        well_typed = type(value) is type(kernel.consts.get(name))
        if tiles_nothing and well_typed and not (isinstance(value, int) and value <= 0):
            mistake = None  # a block size that tiles nothing has no rule to break
    how = draw(st.sampled_from(["direct"] * 4 + ["jit", "numpy"]))
    if how == "jit" and mistake in ("not-an-array", "float64"):
        how = "direct"  # jax.jit itself refuses non-arrays, and turns float64 into float32
    return Call(tuple(args), overrides, mistake, how, lower=draw(st.integers(0, 3)) == 0)


# --- the reference -----------------------------------------------------------------------------


def reference(kernel: sk.Kernel[..., Any], args: tuple[Any, ...], consts: dict[str, Any]) -> Any:
    """What the body computes, with jnp: the undecorated body, run on each block of the arrays.

    A block is cut at the array's edge, which is what a kernel promises: elements past the
    edge take no part in a reduction and are never stored. Without a tiling there is one
    block, the whole array.
    """
    spec = kernel.spec
    sizes = {
        d: s
        for o, a in zip(spec.operands, args, strict=True)
        for d, s in zip(o.dims, a.shape, strict=True)
    }
    tile = spec.tile_map
    ranges = {
        d: [(i, min(i + consts[tile[d]], n)) for i in range(0, n, consts[tile[d]])]
        if d in tile
        else [(0, n)]
        for d, n in sizes.items()
    }
    tiled = [d for d in sizes if d in tile]
    outputs: list[np.ndarray] | None = None
    for combo in itertools.product(*(ranges[d] for d in tiled)):
        where = {d: slice(*r) for d, r in zip(tiled, combo, strict=True)}
        tiles = {
            o.name: sk.Tile(
                o.name, a[tuple(where.get(d, slice(None)) for d in o.dims)], a.shape, []
            )
            for o, a in zip(spec.operands, args, strict=True)
        }
        with tracing(
            TraceContext(sizes, {}, MOSAIC_GPU_LIMITS)
        ):  # what sk.dim reads: the bound sizes
            blocks = spec.fn(**tiles, **consts)
        blocks = blocks if spec.result_is_tuple else (blocks,)
        if outputs is None:
            outputs = [
                np.zeros([sizes[d] for d in r.dims], np.asarray(b).dtype)
                for r, b in zip(spec.results, blocks, strict=True)
            ]
        for out, result, block in zip(outputs, spec.results, blocks, strict=True):
            index = tuple(where.get(d, slice(None)) for d in result.dims)
            out[index] = np.asarray(block)
    assert outputs is not None
    return tuple(outputs) if spec.result_is_tuple else outputs[0]


def assert_matches(actual: Any, expected: Any, args: tuple[Any, ...]) -> None:
    """Equal within the precision of the narrowest float the body computed in."""
    actual_parts = actual if isinstance(actual, tuple) else (actual,)
    expected_parts = expected if isinstance(expected, tuple) else (expected,)
    assert len(actual_parts) == len(expected_parts)
    narrowest = (
        min(np.dtype(a.dtype).itemsize for a in (*args, *actual_parts) if "float" in str(a.dtype))
        if any("float" in str(a.dtype) for a in (*args, *actual_parts))
        else 4
    )
    for got, want in zip(actual_parts, expected_parts, strict=True):
        assert got.shape == want.shape, (got.shape, want.shape)
        assert np.dtype(got.dtype) == np.dtype(want.dtype), (got.dtype, want.dtype)
        if "int" in str(got.dtype):
            np.testing.assert_array_equal(np.asarray(got), want)
            continue
        tol = 1e-4 if narrowest >= 4 else 3e-2
        want32 = np.asarray(want, np.float32)
        finite = np.abs(want32[np.isfinite(want32)])
        scale = max(1.0, float(finite.max()) if finite.size else 1.0)
        np.testing.assert_allclose(
            np.asarray(got, np.float32), want32, rtol=tol, atol=tol * scale, equal_nan=True
        )


# --- the invariant -----------------------------------------------------------------------------


def run_call(kernel: sk.Kernel[..., Any], decl_file: str, call: Call) -> None:
    STATS["calls"] += 1
    try:
        result = call.run(kernel)
    except sk.StaticKernelError as exc:
        check_error(exc, expected_files=(_THIS_FILE, decl_file), declaration=False)
        STATS["call errors"] += 1
        STATS[f"call error: {type(exc).__name__}"] += 1
        event(f"call error: {type(exc).__name__}")
        return
    assert call.mistake is None, f"the call with mistake {call.mistake!r} succeeded"
    consts = {**kernel.consts, **call.overrides}
    assert_matches(result, reference(kernel, call.args, consts), call.args)
    STATS["call results"] += 1
    event("call result")
    if call.lower:
        try:
            kernel.lower(*call.args, **call.overrides)
        except sk.StaticKernelError as exc:
            check_error(exc, expected_files=(_THIS_FILE, decl_file), declaration=False)
            STATS["lowering errors"] += 1
        else:
            STATS["lowered"] += 1


@pytest.fixture(autouse=True)
def _interpreter_by_default(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("STATICKERNEL_BACKEND", raising=False)
    sk.set_backend(None)
    yield


@settings(settings.get_profile(PROFILE))
@given(decl=declarations(), data=st.data())
def _fuzz(decl: Declaration, data: st.DataObject) -> None:
    STATS["declarations"] += 1
    found = declare(decl)
    if isinstance(found, sk.StaticKernelError):
        STATS["declaration errors"] += 1
        STATS[f"declaration error: {type(found).__name__}"] += 1
        event(f"declaration error: {type(found).__name__}")
        return
    STATS["kernels"] += 1
    decl_file = pathlib.Path(found.spec.location.rsplit(":", 1)[0]).name
    previous: Call | None = None
    for _ in range(data.draw(st.integers(1, 4), label="calls")):
        if previous is not None and data.draw(st.integers(0, 4), label="repeat") == 0:
            call = previous  # the same call again: the cached specialization
        else:
            call = data.draw(calls(found, decl))
        run_call(found, decl_file, call)
        previous = call


def summary() -> str:
    lines = [
        f"fuzz ({PROFILE}): {STATS['declarations']} declarations "
        f"({STATS['kernels']} kernels, {STATS['declaration errors']} declaration errors), "
        f"{STATS['calls']} calls ({STATS['call results']} results, "
        f"{STATS['call errors']} errors), {STATS['lowered']} cross-lowered for CUDA"
        + (f" ({STATS['lowering errors']} refused)" if STATS["lowering errors"] else "")
    ]
    for key in sorted(k for k in STATS if ": " in k):
        lines.append(f"  {key}: {STATS[key]}")
    return "\n".join(lines)


@pytest.mark.slow
def test_every_case_is_a_result_or_a_statickernel_error(capsys: pytest.CaptureFixture[str]) -> None:
    STATS.clear()
    try:
        _fuzz()
    finally:
        with capsys.disabled():  # shown without -s
            print("\n" + summary())
    # The split must stay useful: a generator that only produced errors would prove nothing.
    text = summary()
    assert STATS["call results"] >= STATS["declarations"] // 4, text
    assert STATS["declaration errors"] > 0 and STATS["call errors"] > 0, text
