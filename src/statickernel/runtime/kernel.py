"""The `@sk.kernel` decorator and the `Kernel` object it returns.

Every call binds its arguments and runs the one compile path (`build.py`) once per
specialization; the decorator runs the same path on probe sizes. This module holds what is
left: the cache, the entry points and the `exec` of the generated source, whose launch gets
the derivative rule `vjp=` declares (`runtime/autodiff.py`). `plan`, `emit` and `lower` read the
same cached specialization, so what `emit` prints is what runs.
"""

import functools
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast, overload

import jax

from .._compiler.build import compile_call, compile_declaration
from .._compiler.declare.binding import bind, bind_consts, call_site, check_arguments
from .._compiler.declare.declaration import Declaration
from .._compiler.declare.spec import KernelSpec, build_spec
from .._compiler.mosaic_gpu.plan.plan import LaunchPlan
from .._compiler.mosaic_gpu.plan.schedule import sm_count
from .._display import PallasSource
from .._errors import (
    BackendError,
    ErrorContext,
    Phase,
    StaticKernelError,
)
from .._targets import DEFAULT_TARGET, GpuTarget, check_runs_here, resolve_target
from ..aot.compile import compile_kernel
from ..aot.report import CompileReport
from .autodiff import JVP_OF_CUSTOM_VJP, DeclaredBackward, Derivative, parse_vjp
from .backend import default_backend, has_cuda, resolve_backend
from .entry import at_entry_point, for_kernel
from .generated import overrides_key
from .indices import check_indices, checking_indices
from .lru import LruCache, configured_size
from .profiling import current_profile, unprofiled
from .specialization import Specialization, specialization
from .tunings import tunings_of

if TYPE_CHECKING:
    from ..tuning.result import TuneResult
    from ..tuning.tuner import CallConstants

__all__ = ["Kernel", "Specialization", "kernel"]


P = ParamSpec("P")
R = TypeVar("R")


class Kernel(Generic[P, R]):
    """A checked kernel declaration. Call it like the function it decorates."""

    def __init__(
        self,
        spec: KernelSpec,
        consts: Mapping[str, Any],
        backend: str | None,
        shares_cache_with: "Kernel[..., Any] | None" = None,
        derivative: Derivative = None,
        target: str | None = None,
    ):
        self.spec = spec
        self._derivative = derivative
        self.consts: dict[str, Any] = dict(consts)
        self.backend = backend
        # The GPU architecture calls plan for ("sm_90a", "sm_100a"); None: the attached GPU's.
        self.target = target
        self.reference = spec.reference
        if shares_cache_with is None:
            size = configured_size()
            self._cache: LruCache[Specialization] = LruCache(size)
            self._by_consts: LruCache[Specialization] = LruCache(size)
            self._lock = threading.Lock()
        else:
            # Both keys name the backend, so kernels that differ only in their default backend
            # share one cache: `kernel.with_backend(b)(x)` compiles nothing `kernel(x,
            # backend=b)` already did.
            self._cache = shares_cache_with._cache
            self._by_consts = shares_cache_with._by_consts
            self._lock = shares_cache_with._lock
        functools.update_wrapper(self, spec.fn)

    def __repr__(self) -> str:
        consts = ", ".join(f"{k}={v!r}" for k, v in self.consts.items())
        return f"<statickernel.Kernel {self.spec.name} ({self.spec.location}) {consts}>"

    # --- calling -----------------------------------------------------------------------------

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Runs the kernel: the operands as the decorated function takes them, and constant
        overrides by keyword (`softmax(x, BM=128)`), typed from its signature.

        `backend=` is also accepted here, but it is not in the decorated function's
        signature, so a type checker flags it; `kernel.with_backend(name)(x)` is the typed
        spelling, and shares this kernel's cached specializations."""
        operands = cast(tuple[Any, ...], args)
        overrides: dict[str, Any] = dict(kwargs)
        backend: str | None = overrides.pop("backend", None)
        target: str | None = overrides.pop("target", None)
        try:
            try:
                key = (
                    tuple((a.shape, a.dtype) for a in operands),
                    overrides_key(overrides),
                    self._launch_key(backend, target),
                )
                entry = self._cache.get(key)
            except (AttributeError, TypeError):  # a non-array argument, or an unhashable override
                key, entry = None, None
            if entry is None:
                entry = self._specialize(args, overrides, backend, key, call=True, target=target)
            if (self.spec.index or self.spec.ragged) and checking_indices():
                check_indices(self.spec, args)
            try:
                return entry.fn(*args)
            except TypeError as exc:
                if JVP_OF_CUSTOM_VJP in str(exc) and isinstance(self._derivative, DeclaredBackward):
                    raise self._derivative.forward_mode_refused(self.spec.name) from None
                # A cached specialization meets what bind never saw: say what is wrong with it,
                # without jax's TypeError as its context.
                try:
                    check_arguments(self.spec, args, call=True)
                except StaticKernelError as refused:
                    raise refused from None
                raise
            except ValueError:
                if not entry.interpreted and not has_cuda():
                    raise BackendError(
                        "the mosaic_gpu backend needs a CUDA device, and this machine has none",
                        kernel=self.spec.name,
                        where=call_site(),
                        expected="a machine with an NVIDIA Hopper GPU",
                        actual=f"jax devices: {', '.join(d.platform for d in jax.devices())}",
                        fix="use backend='interpret' here, or kernel.lower(...) to check that the "
                        "kernel compiles for CUDA",
                    ) from None
                raise
        except StaticKernelError as exc:
            raise at_entry_point(exc) from None

    def _specialize(
        self,
        args: tuple[Any, ...],
        overrides: Mapping[str, Any],
        backend: str | None,
        key: Any,
        call: bool = False,
        target: str | None = None,
    ) -> Specialization:
        entry = self._cache.get(key) if key is not None else None
        if entry is not None:
            return entry
        tuned = None
        if self.spec.tunables:
            # Outside the lock: tuning on a call (STATICKERNEL_AUTOTUNE=force) plans the
            # candidates through this path.
            from ..tuning.tuner import call_constants

            chosen, gpu = self._backend_key(backend), self._target(target).name
            tuned = call_constants(self, args, overrides, chosen, gpu, call_site())
        with self._lock:
            entry = self._cache.get(key) if key is not None else None
            if entry is None:
                entry = self._tuned_or_own(args, overrides, tuned, backend, key, call, target)
                if key is not None:
                    self._cache[key] = entry
        return entry

    def _tuned_or_own(
        self,
        args: tuple[Any, ...],
        overrides: Mapping[str, Any],
        tuned: "CallConstants | None",
        *launch: Any,
    ) -> Specialization:
        """The specialization with the tuned constants the cache gave, if any; where a rule
        refuses those (a file edited by hand), with the call's own, and the file is reported.
        `launch` is the rest of what `_shared` takes."""
        if tuned is None or tuned.cache_file is None:
            return self._shared(args, overrides if tuned is None else tuned.overrides, *launch)
        try:
            return self._shared(args, tuned.overrides, *launch)
        except StaticKernelError as refused:
            entry = self._shared(args, overrides, *launch)  # the call's own error, if it has one
            tuned.refused(self.spec.name, refused)
            return entry

    def _shared(
        self,
        args: tuple[Any, ...],
        overrides: Mapping[str, Any],
        backend: str | None,
        key: Any,
        call: bool,
        target: str | None,
    ) -> Specialization:
        """The specialization of these constants: one built for the same constants spelled
        otherwise (another order, an explicit default), else built now."""
        canonical = self._canonical_key(key, overrides, backend, target)
        entry = self._by_consts.get(canonical) if canonical is not None else None
        if entry is None:
            entry = self._build(args, overrides, backend, call, target)
        if canonical is not None:
            self._by_consts[canonical] = entry
        return entry

    def _backend_key(self, backend: str | None) -> str:
        """The backend of a call's cache key: named by the call or the kernel, or the default,
        whose environment variable may name an unknown one."""
        try:
            return backend or self.backend or default_backend()
        except BackendError as exc:
            raise for_kernel(exc, self.spec.name) from None

    def _launch_key(self, backend: str | None, target: str | None = None) -> Any:
        """The launch settings of a call's cache key: its backend, its GPU target as named, the
        SMs launches are sized for (a split loop's parts and narrowed blocks depend on them),
        the tunings of the kernel so far (a new one may change the constants a call takes),
        and the profile of `sk.profile` when one is active (a specialization of its own)."""
        chosen = self._backend_key(backend)
        active = current_profile()
        key = (chosen, target or self.target, sm_count(), tunings_of(self.spec))
        return key if active is None else (*key, active)

    def _target(self, target: str | None) -> GpuTarget:
        return resolve_target(target or self.target, self.spec.name, call_site())

    def _canonical_key(
        self, key: Any, overrides: Mapping[str, Any], backend: str | None, target: str | None
    ) -> Any:
        if key is None:
            return None
        try:
            consts = overrides_key(dict(sorted({**self.consts, **overrides}.items())))
            # A tile constant passed, even at its default, is kept as passed; one left out
            # the plan may narrow (plan/narrowing.py): they are different specializations.
            passed = frozenset(overrides) & frozenset(self.spec.tile_map.values())
            canonical = (
                key[0],
                consts,
                passed,
                resolve_backend(backend, self.backend),
                self._target(target).name,
                sm_count(),
                current_profile(),
            )
            hash(canonical)
        except (BackendError, TypeError):
            return None
        return canonical

    def specialize(
        self, *args: Any, backend: str | None = None, target: str | None = None, **overrides: Any
    ) -> Specialization:
        """The cached specialization for these arguments (arrays or jax.ShapeDtypeStruct),
        planned for the GPU `target` ("sm_90a", "sm_100a"; default: the attached GPU's)."""
        try:
            return self._specialization(args, overrides, backend, target)
        except StaticKernelError as exc:
            raise at_entry_point(exc) from None

    def _specialization(
        self,
        args: tuple[Any, ...],
        overrides: Mapping[str, Any],
        backend: str | None,
        target: str | None = None,
    ) -> Specialization:
        try:
            key = (
                tuple((a.shape, a.dtype) for a in args),
                overrides_key(overrides),
                self._launch_key(backend, target),
            )
            entry = self._cache.get(key)
        except (AttributeError, TypeError):
            key, entry = None, None
        if entry is not None:
            check_arguments(self.spec, args, call=False)  # a duck with a cached shape
            return entry
        return self._specialize(args, overrides, backend, key, target=target)

    def plan(
        self, *args: Any, backend: str | None = None, target: str | None = None, **overrides: Any
    ) -> LaunchPlan:
        """The frozen launch plan for these arguments (arrays or jax.ShapeDtypeStruct), for
        the GPU `target` (by default the attached GPU's, or sm_90a)."""
        try:
            return self._specialization(args, overrides, backend, target).plan
        except StaticKernelError as exc:
            raise at_entry_point(exc) from None

    def emit(
        self, *args: Any, backend: str | None = None, target: str | None = None, **overrides: Any
    ) -> str:
        """The standalone Pallas source this specialization runs, for the GPU `target`: a
        `str`, shown as highlighted Python in a notebook."""
        try:
            return PallasSource(self._specialization(args, overrides, backend, target).source)
        except StaticKernelError as exc:
            raise at_entry_point(exc) from None

    def lower(self, *args: Any, target: str | None = None, **overrides: Any) -> jax.stages.Lowered:
        """Cross-lowers this specialization for Mosaic GPU on CUDA; works on a CPU-only machine.
        The result is jax's own `Lowered`: `.as_text()` is its StableHLO, with the Mosaic GPU
        kernel inside."""
        try:
            with unprofiled():  # the profiler's host callback lowers on its device alone
                entry = self._specialization(args, overrides, "mosaic_gpu", target)
            traced: jax.stages.Traced = entry.fn.trace(*args)
            return traced.lower(lowering_platforms=("cuda",))
        except StaticKernelError as exc:
            raise at_entry_point(exc) from None

    def compile(self, *args: Any, target: str | None = None, **overrides: Any) -> CompileReport:
        """Compiles this specialization for the GPU `target` (by default the kernel's, or
        sm_90a) through ptxas, on this machine's GPU or, without one, from the GPU's description
        (deviceless); reports registers, spills, shared memory, occupancy, SASS. Needs [aot]."""
        chosen = target or self.target or DEFAULT_TARGET
        try:
            with unprofiled():  # the profiler's host callback lowers on its device alone
                return compile_kernel(self, args, overrides, chosen, call_site())
        except StaticKernelError as exc:
            raise at_entry_point(exc) from None

    def tune(
        self,
        *args: Any,
        by: str | None = None,
        reps: int = 20,
        force: bool = False,
        target: str | None = None,
        **fixed: Any,
    ) -> "TuneResult":
        """Tries every combination of the candidates the constants declare with
        `sk.tune(...)` (those `fixed` leaves open) at these arguments' shapes, planned for the
        GPU `target` (by default the kernel's, else the attached GPU's, else sm_90a), ranks
        them and caches the best on disk, where later calls of these shapes for `target` find it.

        `by` names the measure: "device" (each candidate checked against the reference and
        timed on this machine's GPU, of `target`; needs arrays), "compile" (compiled for
        `target` without a GPU: no spills first, then the plan's estimate with the compiled
        registers), "plan" (the plan's estimate alone); None takes the first of these that
        this machine can do. The result says which ranked it. A tuning cached by the same
        measure is returned as it is (`result.cached`), unless `force`."""
        from ..tuning.tuner import tune_kernel

        try:
            return tune_kernel(self, args, fixed, by, reps, call_site(), force, target)
        except StaticKernelError as exc:
            raise at_entry_point(exc) from None

    def trace(
        self, *args: Any, backend: str | None = None, target: str | None = None, **overrides: Any
    ) -> jax.stages.Traced:
        """This specialization traced as `jax.jit(kernel).trace(...)` traces it; with it,
        `jax.export.export(kernel)` works as it does for a jitted function."""
        try:
            fn = self._specialization(args, overrides, backend, target).fn
            # The mosaic_gpu function is a jit already; an interpreted one is wrapped in one.
            return (fn if hasattr(fn, "trace") else jax.jit(fn)).trace(*args)
        except StaticKernelError as exc:
            raise at_entry_point(exc) from None

    # --- variants ----------------------------------------------------------------------------

    def bind(self, **overrides: Any) -> "Kernel[P, R]":
        """A new kernel with other constant defaults, checked now as the declaration was: a
        hardware rule they break raises its class with `phase` `Phase.DECLARATION`."""
        where = call_site()
        try:
            ctx = ErrorContext(self.spec.name, where, Phase.DECLARATION)
            consts = bind_consts(self.spec, self.consts, overrides, ctx)
            new = Kernel(
                self.spec, consts, self.backend, derivative=self._derivative, target=self.target
            )
            compile_declaration(self.spec, consts, where)
        except StaticKernelError as exc:
            raise at_entry_point(exc, Phase.DECLARATION) from None
        return new

    def with_backend(self, backend: str | None) -> "Kernel[P, R]":
        """A new kernel that runs on `backend` unless a call says otherwise."""
        try:
            chosen = resolve_backend(backend, None, "kernel.with_backend") if backend else None
        except BackendError as exc:
            raise for_kernel(exc, self.spec.name) from None
        return Kernel(
            self.spec,
            self.consts,
            chosen,
            shares_cache_with=self,
            derivative=self._derivative,
            target=self.target,
        )

    def with_target(self, target: str | None) -> "Kernel[P, R]":
        """A new kernel whose calls plan for the GPU `target` ("sm_90a", "sm_100a"; None: the
        attached GPU's); with `backend="interpret"` it runs that target's code anywhere."""
        try:
            named = resolve_target(target, self.spec.name, call_site()).name if target else None
        except StaticKernelError as exc:
            raise at_entry_point(exc) from None
        return Kernel(
            self.spec,
            self.consts,
            self.backend,
            shares_cache_with=self,
            derivative=self._derivative,
            target=named,
        )

    # --- the one path ------------------------------------------------------------------------

    def _build(
        self,
        args: tuple[Any, ...],
        overrides: Mapping[str, Any],
        backend: str | None,
        call: bool = False,
        target: str | None = None,
    ) -> Specialization:
        spec = self.spec
        where = call_site()
        gpu = self._target(target)
        try:
            chosen = resolve_backend(backend, self.backend)
        except BackendError as exc:
            raise for_kernel(exc, spec.name) from None
        binding = bind(spec, args, self.consts, overrides, limits=gpu.limits, call=call)
        if call and chosen == "mosaic_gpu":
            check_runs_here(gpu, spec.name, where)
        compiled = compile_call(spec, binding, chosen, where, current_profile(), gpu)
        assert isinstance(compiled.plan, LaunchPlan) and compiled.source is not None
        return specialization(
            spec,
            compiled.plan,
            compiled.source,
            dict(binding.consts),
            self._derivative,
            chosen,
        )


@overload
def kernel(fn: Callable[P, R], /) -> Kernel[P, R]: ...
@overload
def kernel(
    *,
    tile: Mapping[str, str] | None = None,
    loop: Mapping[str, str] | None = None,
    stages: str | int | None = None,
    batch: str | tuple[str, ...] = (),
    groups: Mapping[str, str] | None = None,
    index: Mapping[str, str] | None = None,
    update: str | None = None,
    pages: Mapping[str, str] | None = None,
    ragged: Mapping[str, str] | None = None,
    reference: Callable[..., Any] | None = None,
    vjp: str | Callable[..., Any] | None = None,
    test_data: Mapping[str, Callable[..., Any]] | None = None,
    backend: str | None = None,
    name: str | None = None,
    approx_math: bool = False,
) -> Callable[[Callable[P, R]], Kernel[P, R]]: ...
def kernel(
    fn: Callable[P, R] | None = None,
    /,
    *,
    tile: Mapping[str, str] | None = None,
    loop: Mapping[str, str] | None = None,
    stages: str | int | None = None,
    batch: str | tuple[str, ...] = (),
    groups: Mapping[str, str] | None = None,
    index: Mapping[str, str] | None = None,
    update: str | None = None,
    pages: Mapping[str, str] | None = None,
    ragged: Mapping[str, str] | None = None,
    reference: Callable[..., Any] | None = None,
    vjp: str | Callable[..., Any] | None = None,
    test_data: Mapping[str, Callable[..., Any]] | None = None,
    backend: str | None = None,
    name: str | None = None,
    approx_math: bool = False,
) -> Any:
    """Declares a kernel; checks it now, when the decorator runs.

    Args:
      tile: which dims are split across the grid, and by which int constant, e.g.
        `{"M": "BM"}`. Dims not tiled are whole inside every block.
      loop: which dims each block walks in sequence, and by which int constant, e.g.
        `{"K": "BK"}`. The body walks them with `sk.loop` and `sk.map_blocks`.
      stages: the pipeline's stage count for loops: the name of an int constant, or an int.
        By default the constant named `stages` if there is one, else 2.
      batch: leading dims of the operands that the grid walks one index at a time, e.g. "B";
        the body sees each operand without them.
      groups: dims that number the steps of a loop, e.g. `{"G": "K"}`: G counts the groups
        of BK elements along K (a quantized weight's scales, "G N"), and each step of the loop
        over K reads index `step` of G. An operand leads with them (after its batch dims);
        the body, in the loop's step, sees it without them.
      index: dims addressed by the values of an integer operand, e.g. `{"V": "ids"}`: an
        embedding's `table: "V D"` beside `ids: "T"` is seen by the body as a block over
        "T D" whose row t is the table's row `ids[t]`, gathered row by row. An id outside
        [0, V) reads a row of zeros.
      update: the operand the result updates in place, e.g. "cache": the result is laid out
        as it is, and the kernel writes its blocks into that operand's array, whose other
        elements keep their values. With an index on the result's dim (`index={"Slots":
        "slot_mapping"}`), row t of the body's block is written to row `slot_mapping[t]`,
        and a slot outside the array is skipped. Under `jax.jit` with the operand donated,
        no copy of it is made.
      pages: page dims of a paged operand, each with the table listing its pages, e.g.
        `{"P": "block_tables"}`: `k_pages: "Hkv P S D"` holds pages of S rows, and
        `block_tables: "B Pages"` lists the pages of each batch entry's sequence, in order.
        The loop over S (`loop={"S": "BS"}`) walks that sequence: its size is Pages * S,
        token t is row t % S of page `block_tables[b, t // S]`, and each step's block of BS
        tokens (whole pages, or an equal part of one; pages of a multiple of 8 rows) is
        copied page by page. A page outside [0, P), padding -1 included, reads zeros.
      ragged: the tiled dim whose rows are split into consecutive groups, with the integer
        operand of the groups' sizes, e.g. `{"M": "group_sizes"}`: with `x: "M K"`, `w: "G K
        N"` and `group_sizes: "G"`, rows [sum(group_sizes[:g]), sum(group_sizes[:g+1])) of M
        are group g's, and the body sees `w` as group g's block "K N" (a grouped matmul,
        `jax.lax.ragged_dot`). A row block straddling groups is computed once for each group
        it holds, each storing only its group's rows; a row in no group (past the sizes'
        sum) multiplies no weights (its products are zeros, then the epilogue applies); a
        negative size counts as 0, and sizes past M are cut there. Computed by the
        warp-specialized matmul.
      reference: a plain jnp function computing the same result, for tests and tools.
      vjp: how `jax.grad` differentiates the kernel. "reference": the forward runs the
        kernel and the derivatives are JAX's of `reference`, in forward and reverse mode. A
        function `backward(*operands, *results, *cotangents, **constants)`: reverse mode
        only; it returns one cotangent per operand (None for one with no gradient). None,
        the default: differentiating the kernel raises `NotDifferentiableError`.
      test_data: generators of test data for the operands whose meaning random data miss,
        by operand, e.g. `{"lse": lambda d: np.log(d.sizes["Skv"]) + d.rng.random(d.shape)}`
        (a function of an `sk.testing.Draw`, returning an array of `d.shape`). Every check of
        the kernel (`sk.testing`, `statickernel test`) draws those operands with them; a
        check's `operands=` replaces them one by one.
      backend: "mosaic_gpu" or "interpret"; by default the process-wide choice.
      name: the kernel's name in plans and generated code; the function's name by default.
      approx_math: run the body's exp, exp2, log, log2 and rsqrt as PTX's approximate
        instructions (`ex2`, `lg2`, `rsqrt` `.approx.ftz`: a few units in float32's last
        place, subnormals flushed to zero), as Mosaic GPU's `approx_math` does, for a body
        bound by them (a softmax, attention). A body that also takes tanh, sin, cos or sqrt,
        whose approximations are coarser, stays exact, and the plan says why. The
        interpreter computes exactly either way.
    """

    def decorate(f: Callable[P, R]) -> Kernel[P, R]:
        try:
            declaration = Declaration(
                fn=f,
                tile=tile if tile is not None else {},
                reference=reference,
                name=name,
                loop=loop,
                stages=stages,
                batch=(batch,) if isinstance(batch, str) else tuple(batch),
                groups=groups,
                index=index,
                update=update,
                pages=pages,
                ragged=ragged,
                test_data=test_data,
                approx_math=approx_math,
            )
            spec = build_spec(declaration)
            derivative = parse_vjp(vjp, spec)
            try:
                chosen = resolve_backend(backend, None) if backend else None
            except BackendError as exc:
                raise for_kernel(exc, spec.name) from None
            compile_declaration(spec, spec.const_defaults)
        except StaticKernelError as exc:
            raise at_entry_point(exc, Phase.DECLARATION) from None
        return Kernel(spec, spec.const_defaults, chosen, derivative=derivative)

    if fn is None:
        return decorate
    try:
        return decorate(fn)
    except StaticKernelError as exc:  # `@sk.kernel` without arguments: one entry frame, not two
        raise at_entry_point(exc, Phase.DECLARATION) from None
