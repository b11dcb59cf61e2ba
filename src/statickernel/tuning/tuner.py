"""`kernel.tune(...)`: the candidates, measured and ranked, the best cached; and the constants a
call takes from the cache."""

import dataclasses
import itertools
import pathlib
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
from jax.core import Tracer

from .._compiler.declare.binding import bind_consts
from .._errors import (
    ErrorContext,
    NoCandidateError,
    Phase,
    StaticKernelError,
    ToolchainError,
    TuneError,
)
from .._targets import live_target, resolve_target
from ..aot.compile import toolchain
from ..runtime.backend import has_cuda, resolve_backend
from ..runtime.tunings import note_tuning
from . import cache
from .cache_warning import TuningCacheWarning
from .measure import CompileMeasure, DeviceMeasure, Measure, PlanMeasure
from .result import Ranking, Status, TuneCandidate, TuneResult, constants_text
from .subject import TunedKernel

__all__ = ["CallConstants", "call_constants", "tune_kernel"]


def fixed_constants(kernel: TunedKernel, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The constants a caller chose: its overrides, and the values `kernel.bind` set apart
    from the declared defaults. Tuning leaves them as they are, and they key the cache."""
    defaults = kernel.spec.const_defaults
    bound = {k: v for k, v in kernel.consts.items() if k in defaults and v != defaults[k]}
    return {**bound, **overrides}


def _open(kernel: TunedKernel, fixed: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    """The tuned constants the caller did not fix, with their candidates."""
    return {k: v for k, v in kernel.spec.tunables.items() if k not in fixed}


def _shapes(args: Sequence[Any]) -> list[tuple[tuple[int, ...], str]]:
    return [(tuple(int(n) for n in a.shape), str(jax.numpy.dtype(a.dtype))) for a in args]


def _concrete(args: Sequence[Any]) -> bool:
    return all(isinstance(a, jax.Array) and not isinstance(a, Tracer) for a in args)


def _device_target() -> str:
    return jax.devices("cuda")[0].device_kind


def _measure(
    kernel: TunedKernel,
    args: Sequence[Any],
    by: str | None,
    reps: int,
    ctx: ErrorContext,
    target: str,
) -> Measure:
    """The measure `by` names, or the best one this machine has, for the GPU architecture
    `target`: the device measure runs on this machine's GPU, so only for its architecture."""
    names = [r.value for r in Ranking]
    if by is not None and by not in names:
        raise ctx.error(
            TuneError,
            "the measure to rank candidates by is unknown",
            expected=" or ".join(repr(n) for n in names) + " (or None: the best available)",
            actual=repr(by),
            fix='by="compile" on a machine with the [aot] toolchain, by="plan" anywhere',
        )
    live = live_target()
    on_device = (
        has_cuda()
        and resolve_backend(None, kernel.backend) == "mosaic_gpu"
        and live is not None
        and live.name == target
    )
    if by == Ranking.DEVICE.value or (by is None and on_device and _concrete(args)):
        if not has_cuda():
            raise ctx.error(
                TuneError,
                'by="device" needs a CUDA device, and this machine has none',
                expected="a machine with an NVIDIA Hopper GPU",
                actual=f"jax devices: {', '.join(d.platform for d in jax.devices())}",
                fix='by="compile" (the [aot] toolchain) or by="plan"',
            )
        if not _concrete(args):
            raise ctx.error(
                TuneError,
                'by="device" runs the kernel, and some operands are not arrays',
                expected="jax arrays",
                actual=", ".join(type(a).__name__ for a in args),
                fix="pass arrays of the shapes to tune for (the results are checked against "
                "the reference on them)",
            )
        if live is None or live.name != target:
            raise ctx.error(
                TuneError,
                f'by="device" runs the candidates on this machine\'s GPU, and the tuning is '
                f"for {target}",
                expected=f"target={live.name!r}, this GPU's"
                if live
                else "a Hopper or Blackwell GPU",
                actual=f"target={target!r}; this GPU: {_device_target()}",
                fix=f'by="compile" or by="plan" to tune for {target} here'
                + (f", or target={live.name!r}" if live else ""),
            )
        return DeviceMeasure(_device_target(), reps=reps, planned_for=target)
    if by == Ranking.COMPILE.value:
        return CompileMeasure(target)
    if by is None:
        try:
            toolchain()
            return CompileMeasure(target)
        except ToolchainError:
            pass
    return PlanMeasure(target)


def tune_kernel(
    kernel: TunedKernel,
    args: Sequence[Any],
    overrides: Mapping[str, Any],
    by: str | None,
    reps: int,
    where: str | None,
    force: bool = False,
    target: str | None = None,
) -> TuneResult:
    """Measures every candidate of the kernel's tuned constants at `args`' shapes, planned
    for the GPU architecture `target` (by default the kernel's, else the attached GPU's, else
    sm_90a), ranks them, caches the best for that architecture and returns the table; a
    tuning cached by the same measure is returned as it is (`cached`) unless `force`."""
    spec = kernel.spec
    ctx = ErrorContext(spec.name, where, Phase.CALL)
    planned_for = resolve_target(target or kernel.target, spec.name, where).name
    bind_consts(spec, kernel.consts, overrides, ctx)  # names and types, before any candidate
    fixed = fixed_constants(kernel, overrides)
    space = _open(kernel, fixed)
    if not space:
        raise ctx.error(
            TuneError,
            "the kernel has no constant left to tune",
            expected="a constant declared with sk.tune(...) that the call does not fix",
            actual="tuned constants: "
            + (", ".join(spec.tunables) + " (all fixed)" if spec.tunables else "none"),
            fix="declare candidates, e.g. `BM: sk.Const[int] = sk.tune(64, 128, 256)`, and "
            "leave them out of the call",
        )
    measure = _measure(kernel, args, by, reps, ctx, planned_for)
    shapes = _shapes(args)
    key = cache.tuning_key(spec, shapes, fixed, planned_for, _measured_on(measure))
    # A file that holds no tuning is not reported: this tuning replaces it.
    hit = None if force else cache.load(key, spec.name, report=False)
    path = cache.path_of(key, spec.name)
    if hit is not None and hit.ranked_by is measure.ranking and _fits(hit, space, path, False):
        note_tuning(spec)  # calls specialized before the file was written read it now
        return hit
    combos = [
        dict(zip(space, values, strict=True)) for values in itertools.product(*space.values())
    ]
    try:
        table = [_measured(measure, kernel, args, fixed, combo) for combo in combos]
    except ToolchainError:
        if by is not None:
            raise
        # The toolchain was found but cannot compile here (a plugin jax did not register).
        measure = PlanMeasure(planned_for)
        table = [_measured(measure, kernel, args, fixed, combo) for combo in combos]
    ranked = sorted((c for c in table if c.status is Status.RANKED), key=lambda c: c.rank_key)
    others = [c for c in table if c.status is not Status.RANKED]
    if not ranked:
        raise ctx.error(
            NoCandidateError,
            f"none of the {len(table)} candidates can be chosen",
            expected="at least one candidate the rules accept, that compiles and matches",
            actual=_reasons(others),
            fix=(
                f"change what the call fixes ({constants_text(overrides)}), or add "
                if overrides
                else "add "
            )
            + "candidates that fit: shared memory and registers bound the larger blocks",
        )
    best = dict(ranked[0].constants)
    result = TuneResult(
        spec.name,
        measure.ranking,
        measure.target,
        tuple(f"{dtype}[{','.join(map(str, shape))}]" for shape, dtype in shapes),
        best,
        (*ranked, *others),
    )
    result.check_invariants()
    try:
        cache.store(key, result, planned_for)
        note_tuning(spec)  # calls already specialized for these shapes read it again
    except OSError as exc:  # a read-only home: the result stands, later calls take defaults
        warnings.warn(
            f"kernel `{spec.name}`: the tuning could not be cached under {cache.cache_dir()} "
            f"({exc.strerror or exc}); set {cache.CACHE_ENV} to a writable folder",
            TuningCacheWarning,
            stacklevel=3,
        )
    return result


def _measured_on(measure: Measure) -> str | None:
    """The device a measure timed its candidates on (a part of the cache key), or None."""
    return measure.target if measure.ranking is Ranking.DEVICE else None


def _reasons(candidates: Sequence[TuneCandidate]) -> str:
    """Why the candidates were refused: each reason once, with the candidates it refused."""
    by_reason: dict[str, list[TuneCandidate]] = {}
    for candidate in candidates:
        by_reason.setdefault(candidate.reason, []).append(candidate)
    return "; ".join(
        f"{reason} ({constants_text(first.constants)}"
        + (f" and {len(rest)} more" if rest else "")
        + ")"
        for reason, (first, *rest) in by_reason.items()
    )


def _measured(
    measure: Measure,
    kernel: TunedKernel,
    args: Sequence[Any],
    fixed: Mapping[str, Any],
    combo: Mapping[str, Any],
) -> TuneCandidate:
    candidate = measure.measure(kernel, args, {**fixed, **combo})
    # The table shows the tuned constants; the fixed ones are the caller's.
    return TuneCandidate(**{**vars(candidate), "constants": dict(combo)})


@dataclasses.dataclass(frozen=True)
class CallConstants:
    """A call's constant overrides with the tuned constants the cache gave for its shapes, and
    the file they came from (None where none did)."""

    overrides: Mapping[str, Any]
    cache_file: pathlib.Path | None = None

    def refused(self, kernel: str, exc: StaticKernelError) -> None:
        """Reports that a rule refused the cached constants (the call takes the defaults)."""
        assert self.cache_file is not None
        cache.report_bad_entry(
            self.cache_file,
            kernel,
            f"gives constants that the kernel refuses at these shapes ({type(exc).__name__}: "
            f"{exc.what})",
        )


def call_constants(
    kernel: TunedKernel,
    args: Sequence[Any],
    overrides: Mapping[str, Any],
    backend: str,
    target: str,
    where: str | None,
) -> CallConstants:
    """A call's constant overrides, with the cached tuning of its shapes, for the GPU
    architecture it plans for, of the tuned constants it leaves open
    (`STATICKERNEL_AUTOTUNE`)."""
    unchanged = CallConstants(overrides)
    if not kernel.spec.tunables:
        return unchanged
    fixed = fixed_constants(kernel, overrides)
    space = _open(kernel, fixed)
    if not space:
        return unchanged
    setting = cache.autotune_setting(kernel.spec.name, where)
    if setting is cache.Autotune.OFF:
        return unchanged
    try:
        shapes = _shapes(args)
    except (AttributeError, TypeError, ValueError):  # not arrays: the call's checks say so
        return unchanged
    # Timed on this GPU first, when the call runs on it; then compiled or planned.
    devices: list[str | None] = [None]
    live = live_target()
    if backend == "mosaic_gpu" and has_cuda() and live is not None and live.name == target:
        devices.insert(0, _device_target())
    for device in devices:
        key = cache.tuning_key(kernel.spec, shapes, fixed, target, device)
        hit = cache.load(key, kernel.spec.name)
        if hit is not None and _fits(hit, space, cache.path_of(key, kernel.spec.name)):
            return CallConstants({**overrides, **hit.best}, cache.path_of(key, kernel.spec.name))
    if setting is cache.Autotune.FORCE:
        tuned = tune_kernel(kernel, args, overrides, None, 20, where, target=target)
        return CallConstants({**overrides, **tuned.best})
    return unchanged


def _fits(
    hit: TuneResult, space: Mapping[str, tuple[Any, ...]], path: pathlib.Path, report: bool = True
) -> bool:
    """Whether a cached tuning chooses one of its candidates for each constant the call leaves
    open; a file that does not (edited by hand) is ignored and, if `report`, reported."""
    best = dict(hit.best)
    if set(best) == set(space) and all(best[k] in space[k] for k in space):
        return True
    if not report:
        return False
    cache.report_bad_entry(
        path,
        hit.kernel,
        f"chooses {constants_text(best)}, where the kernel's tuned constants left open take "
        + "; ".join(f"{k} in {list(v)}" for k, v in space.items()),
    )
    return False
