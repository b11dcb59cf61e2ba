"""Checking kernels against their references, from a test suite or from the shell.

    import statickernel as sk

    def test_softmax():
        sk.testing.check_kernel(softmax)  # raises AssertionError with a table on any mismatch

`check_kernel` runs the kernel and its `reference` on the same random data at probe shapes
that statickernel derives from the tiling (`probe_shapes`): aligned, ragged on each tiled dim,
ragged on the whole dims, and smaller than one block; in float32 and, where the annotations
allow it, bfloat16. The data is seeded and centred well below zero, so that a zero read past an
edge changes a max, a softmax or a norm visibly. Results are compared in float32 against a
tolerance derived from the dtypes. `statickernel test` runs the same machinery.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

from . import _hardware as hw
from ._autodiff import named_constants
from ._backend import default_backend
from ._errors import StaticKernelError
from ._kernel import Kernel
from ._layout import call_layout, split_blocks
from ._smem import smem_bytes
from ._spec import KernelSpec

__all__ = [
    "CheckResult",
    "ProbeCase",
    "ProbeShape",
    "check_kernel",
    "format_results",
    "probe_cases",
    "probe_dtypes",
    "probe_shapes",
    "run_case",
    "tolerance",
]

# A shape to check: dim sizes by name ({"M": 100, "N": 30}), or one shape per operand.
ShapeSpec: TypeAlias = Mapping[str, int] | Sequence[Sequence[int]]

# Whole (untiled) dims at the aligned probe: one WGMMA row tile, or 128 columns. They are
# halved while the blocks would not fit in shared memory.
_WHOLE_ALIGNED = {"rows": hw.WGMMA_ROWS, "cols": 128}
# Whole dims at the "smaller than one block" probe: a few rows, and a row of a few elements
# (too few bytes for TMA, so host padding is exercised as well).
_WHOLE_SMALL = {"rows": 3, "cols": 5}
# The dtypes each kernel is checked in by default, where its annotations allow them.
_DEFAULT_DTYPES = ("float32", "bfloat16")
# Relative tolerances by the narrowest float involved; integer results must match exactly.
_RELATIVE_TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 2e-2}


@dataclasses.dataclass(frozen=True)
class ProbeShape:
    """Dim sizes to check a kernel at, with a label saying which edge they exercise."""

    label: str
    dims: tuple[tuple[str, int], ...]

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.dims)

    def __str__(self) -> str:
        return f"{self.label} ({', '.join(f'{d}={n}' for d, n in self.dims)})"


@dataclasses.dataclass(frozen=True)
class ProbeCase:
    """One run of a check: a label, one shape and one dtype per operand."""

    label: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    def structs(self) -> tuple[jax.ShapeDtypeStruct, ...]:
        return tuple(
            jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
            for shape, dtype in zip(self.shapes, self.dtypes, strict=True)
        )

    def describe(self) -> str:
        return f"{self.label}, {_shapes_text(self.shapes)} {_dtype_text(self.dtypes)}"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One case of a kernel checked against its reference."""

    kernel: str
    probe: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    backend: str
    max_abs_error: float  # nan when the run raised
    tolerance: float
    error: str | None = None  # the exception the kernel or the reference raised

    @property
    def passed(self) -> bool:
        return self.error is None and self.max_abs_error <= self.tolerance


# --- what to check ----------------------------------------------------------------------------


def probe_shapes(kernel: Kernel) -> list[ProbeShape]:
    """Dim sizes that exercise each edge case of the kernel's tiling, at its current constants.

    Tiled and loop dims are 2 blocks (aligned), 2 blocks + 1 (ragged) and half a block + 1
    (smaller than one block); batch dims are 2, and 1 in the smallest case; whole dims are 128
    columns or 64 rows (aligned), three quarters of that minus one (ragged), and 5 columns or 3
    rows (small).
    """
    spec = kernel.spec
    # Loop dims have edges like tiled ones: the last step of the loop is partly past the edge.
    tile = spec.block_map
    blocks = split_blocks(spec, kernel.consts)
    batch = set(spec.batch)
    whole = [d for d in spec.dim_names() if d not in tile and d not in batch]
    aligned_whole = _fitting_whole_sizes(kernel, blocks, whole)
    aligned = {
        d: 2 if d in batch else (2 * blocks[d] if d in tile else aligned_whole[d])
        for d in spec.dim_names()
    }
    candidates = [ProbeShape("aligned", tuple(aligned.items()))]
    for d in tile:
        candidates.append(
            ProbeShape(f"ragged {d}", tuple((aligned | {d: 2 * blocks[d] + 1}).items()))
        )
    if whole:
        ragged = {d: aligned_whole[d] - aligned_whole[d] // 4 - 1 for d in whole}
        label = f"ragged {' '.join(whole)} (whole)"
        candidates.append(ProbeShape(label, tuple((aligned | ragged).items())))
    small = {
        d: 1 if d in batch else (blocks[d] // 2 + 1 if d in tile else _WHOLE_SMALL[_axis(spec, d)])
        for d in spec.dim_names()
    }
    candidates.append(ProbeShape("smaller than one block", tuple(small.items())))
    unique: dict[tuple[tuple[str, int], ...], ProbeShape] = {}
    for probe in candidates:
        unique.setdefault(probe.dims, probe)
    return list(unique.values())


def _axis(spec: KernelSpec, dim: str) -> str:
    return "rows" if dim == spec.rows else "cols"


def _fitting_whole_sizes(
    kernel: Kernel, blocks: Mapping[str, int], whole: Sequence[str]
) -> dict[str, int]:
    """Aligned sizes for the whole dims, halved until the blocks fit in shared memory with the
    widest dtypes the annotations allow (a whole dim is whole in every block)."""
    spec = kernel.spec
    sizes = {d: _WHOLE_ALIGNED[_axis(spec, d)] for d in whole}
    widest = {o.name: max(o.dtypes, key=hw.itemsize) for o in spec.operands + spec.results}
    loaded = {o.name for o in spec.operands}
    batch = {d: 1 for d in spec.batch}
    while True:
        layout = call_layout(spec, {**batch, **blocks, **sizes}, kernel.consts, widest)
        if smem_bytes(spec, layout, widest, loaded) <= hw.SMEM_BYTES:
            return sizes
        largest = max(sizes, key=lambda d: sizes[d], default=None)
        if largest is None or sizes[largest] <= hw.WGMMA_COLS:
            return sizes  # the tiled blocks alone overflow; the plan will say so
        sizes[largest] //= 2


def probe_dtypes(kernel: Kernel, dtypes: Sequence[Any] | None = None) -> list[tuple[str, ...]]:
    """One dtype per operand for each dtype to check: float32, and bfloat16 where allowed.

    An operand whose annotation does not allow a checked dtype keeps its first allowed one
    (e.g. an int32 index next to float data). A dtype no operand allows is skipped, unless it
    was asked for explicitly, which raises ValueError.
    """
    spec = kernel.spec
    wanted = [jnp.dtype(d).name for d in dtypes] if dtypes is not None else list(_DEFAULT_DTYPES)
    configs: list[tuple[str, ...]] = []
    for name in wanted:
        if not any(name in o.dtypes for o in spec.operands):
            if dtypes is not None:
                allowed = sorted({d for o in spec.operands for d in o.dtypes})
                raise ValueError(
                    f"kernel `{spec.name}` has no operand that allows {name}; its annotations "
                    f"allow {', '.join(allowed)}"
                )
            continue
        config = tuple(name if name in o.dtypes else o.dtypes[0] for o in spec.operands)
        if config not in configs:
            configs.append(config)
    return configs or [tuple(o.dtypes[0] for o in spec.operands)]


def probe_cases(
    kernel: Kernel,
    shapes: Sequence[ShapeSpec] | None = None,
    dtypes: Sequence[Any] | None = None,
) -> list[ProbeCase]:
    """Every (shape, dtypes) pair to check: the probe shapes, or `shapes`, in each dtype."""
    spec = kernel.spec
    if shapes is None:
        labelled = [
            (p.label, tuple(tuple(p.sizes[d] for d in o.dims) for o in spec.operands))
            for p in probe_shapes(kernel)
        ]
    else:
        labelled = [("given", _operand_shapes(spec, s)) for s in shapes]
    configs = probe_dtypes(kernel, dtypes)
    return [ProbeCase(label, s, config) for config in configs for label, s in labelled]


def _operand_shapes(spec: KernelSpec, shape: ShapeSpec) -> tuple[tuple[int, ...], ...]:
    if isinstance(shape, Mapping):
        missing = [d for d in spec.dim_names() if d not in shape]
        if missing:
            raise ValueError(
                f"kernel `{spec.name}`: the shape {dict(shape)} does not size dim(s) "
                f"{', '.join(missing)}"
            )
        return tuple(tuple(int(shape[d]) for d in o.dims) for o in spec.operands)
    shapes = tuple(tuple(int(n) for n in s) for s in shape)
    if len(shapes) != len(spec.operands):
        raise ValueError(
            f"kernel `{spec.name}` takes {len(spec.operands)} operand(s) "
            f"({', '.join(o.name for o in spec.operands)}) but {len(shapes)} shape(s) were given"
        )
    return shapes


# --- running one case -------------------------------------------------------------------------


def random_operands(case: ProbeCase, seed: int = 0) -> list[jax.Array]:
    """Seeded data for a case: normal * 2 - 4, rounded for integer dtypes."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in zip(case.shapes, case.dtypes, strict=True):
        values = rng.standard_normal(shape, dtype=np.float32) * 2 - 4
        if jnp.issubdtype(dtype, jnp.integer):
            values = np.rint(values)
            if jnp.issubdtype(dtype, jnp.unsignedinteger):
                values = np.abs(values)
        arrays.append(jnp.asarray(values).astype(dtype))
    return arrays


def call_reference(
    kernel: Kernel, args: Sequence[Any], reference: Callable[..., Any] | None = None
) -> Any:
    """The reference on `args`, given the kernel's constants that it takes by name (e.g. eps)."""
    reference = reference or kernel.reference
    assert reference is not None
    # The rule vjp="reference" follows too, so that tests and derivatives see one reference.
    return reference(*args, **named_constants(reference, len(args), kernel.consts))


def tolerance(dtypes: Sequence[str], scale: float = 1.0) -> float:
    """The allowed max abs error: relative to the narrowest float dtype, times `scale` (at
    least 1); zero when every dtype is an integer."""
    relative = [_RELATIVE_TOLERANCE.get(jnp.dtype(d).name, 2e-2) for d in dtypes if _is_float(d)]
    return max(relative, default=0.0) * max(1.0, scale)


def _is_float(dtype: str) -> bool:
    return bool(jnp.issubdtype(jnp.dtype(dtype), jnp.floating))


def _compare(got: Any, want: Any) -> tuple[float, float, tuple[str, ...]]:
    """(max abs error, largest finite reference magnitude, result dtypes), in float32.

    Equal values count as no error (including matching infinities and NaNs); any other NaN
    counts as an infinite error.
    """
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    got_shapes = [tuple(np.shape(g)) for g in got_leaves]
    want_shapes = [tuple(np.shape(w)) for w in want_leaves]
    if got_shapes != want_shapes:
        raise ValueError(f"the kernel returned shapes {got_shapes}, the reference {want_shapes}")
    worst, scale = 0.0, 0.0
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g32, w32 = np.asarray(g, np.float32), np.asarray(w, np.float32)
        same = (g32 == w32) | (np.isnan(g32) & np.isnan(w32))
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(same, 0.0, np.abs(g32 - w32))
        diff = np.where(np.isnan(diff), np.inf, diff)
        if diff.size:
            worst = max(worst, float(np.max(diff)))
        finite = np.abs(w32[np.isfinite(w32)])
        if finite.size:
            scale = max(scale, float(np.max(finite)))
    return worst, scale, tuple(jnp.dtype(np.asarray(g).dtype).name for g in got_leaves)


def run_case(
    kernel: Kernel,
    case: ProbeCase,
    *,
    backend: str | None = None,
    seed: int = 0,
    reference: Callable[..., Any] | None = None,
) -> CheckResult:
    """Runs one case; an exception from the kernel or the reference becomes a failed result."""
    chosen = backend or kernel.backend or default_backend()
    facts: dict[str, Any] = dict(
        kernel=kernel.spec.name,
        probe=case.label,
        shapes=case.shapes,
        dtypes=case.dtypes,
        backend=chosen,
    )
    try:
        args = random_operands(case, seed)
        got = kernel(*args, backend=chosen)
        want = call_reference(kernel, args, reference)
        error, scale, result_dtypes = _compare(got, want)
    except Exception as exc:  # reported in the table rather than stopping the other cases
        return CheckResult(
            **facts, max_abs_error=math.nan, tolerance=math.nan, error=_describe(exc)
        )
    return CheckResult(
        **facts, max_abs_error=error, tolerance=tolerance(case.dtypes + result_dtypes, scale)
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, StaticKernelError):
        return str(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- checking a kernel ------------------------------------------------------------------------


def run_checks(
    kernel: Kernel,
    shapes: Sequence[ShapeSpec] | None = None,
    dtypes: Sequence[Any] | None = None,
    *,
    backend: str | None = None,
    seed: int = 0,
    reference: Callable[..., Any] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Every case of `kernel` against its reference; never raises for a failing case."""
    if (reference or kernel.reference) is None:
        raise ValueError(
            f"kernel `{kernel.spec.name}` ({kernel.spec.location}) declares no reference; pass "
            "reference=... to @sk.kernel or to check_kernel"
        )
    results = []
    for case in probe_cases(kernel, shapes, dtypes):
        result = run_case(kernel, case, backend=backend, seed=seed, reference=reference)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def check_kernel(
    kernel: Kernel,
    shapes: Sequence[ShapeSpec] | None = None,
    dtypes: Sequence[Any] | None = None,
    *,
    backend: str | None = None,
    seed: int = 0,
    reference: Callable[..., Any] | None = None,
) -> list[CheckResult]:
    """Checks `kernel` against its reference; raises AssertionError with a table if any case
    fails, and returns the results otherwise.

    Args:
      shapes: what to check instead of the probe shapes: each entry maps dim names to sizes
        (`{"M": 1000, "N": 777}`) or gives one shape per operand (`[(1000, 777), (777,)]`).
      dtypes: the dtypes to check instead of float32 and bfloat16 (e.g. `["float16"]`).
      backend: "interpret" or "mosaic_gpu"; by default the kernel's.
      seed: the random data's seed.
      reference: a reference to use instead of the kernel's own.
    """
    results = run_checks(kernel, shapes, dtypes, backend=backend, seed=seed, reference=reference)
    failed = [r for r in results if not r.passed]
    if failed:
        raise AssertionError(
            f"kernel `{kernel.spec.name}` ({kernel.spec.location}) differs from its reference "
            f"in {len(failed)} of {len(results)} case(s):\n" + format_results(results)
        )
    return results


# --- reporting --------------------------------------------------------------------------------


def _shapes_text(shapes: Sequence[tuple[int, ...]]) -> str:
    return " ".join("[" + ",".join(str(n) for n in s) + "]" for s in shapes)


def _dtype_text(dtypes: Sequence[str]) -> str:
    return "/".join(dict.fromkeys(dtypes))


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3g}"


def format_results(results: Sequence[CheckResult]) -> str:
    """A table of results, one row per case, then the full text of any error raised."""
    header = ("kernel", "probe", "shapes", "dtype", "backend", "max abs error", "tolerance", "")
    rows = [
        (
            r.kernel,
            r.probe,
            _shapes_text(r.shapes),
            _dtype_text(r.dtypes),
            r.backend,
            "raised" if r.error is not None else _number(r.max_abs_error),
            _number(r.tolerance),
            "✓" if r.passed else "✗",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    numeric = {5, 6}

    def line(row: Sequence[str]) -> str:
        cells = [
            cell.rjust(width) if i in numeric else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    lines = [line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)]
    for r in results:
        if r.error is not None:
            detail = r.error.replace("\n", "\n    ")
            lines.append(f"✗ {r.kernel}, {r.probe}, {_shapes_text(r.shapes)}:\n    {detail}")
    return "\n".join(lines)
