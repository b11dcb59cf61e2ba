"""The `@sk.kernel` decorator and the `Kernel` object it returns.

One path runs every call: bind the arguments, plan the launch, trace the body at the block
shapes, translate it, generate the module source, and execute that source. `plan`, `emit` and
`lower` read the same cached specialization, so what `emit` prints is what runs.
"""

import dataclasses
import functools
import linecache
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any, overload

import jax

from . import _hardware as hw
from ._backend import default_backend, has_cuda, resolve_backend
from ._binding import bind, bind_consts, call_site, check_arguments
from ._body import BodyTrace, check_outputs, misplaced_load_error, trace_body
from ._codegen import generate_source
from ._compile import compile_kernel
from ._compile_report import CompileReport
from ._errors import (
    BackendError,
    HardwareLimitError,
    NotDifferentiableError,
    PlanError,
    ResultMismatchError,
    SharedMemoryError,
    StaticKernelError,
)
from ._pipeline import check_dots
from ._plan import (
    LaunchPlan,
    block_extents,
    check_blocks,
    is_ragged,
    make_plan,
    quantum,
    smem_bytes,
    smem_fix,
)
from ._runtime import interpreted_launch
from ._spec import KernelSpec, build_spec
from ._translate import COL, ROW, TILE, Geometry, Translation, translate

__all__ = ["Kernel", "Specialization", "kernel"]


@dataclasses.dataclass(frozen=True)
class Specialization:
    """One compiled specialization: its plan, its generated source and the function it defines."""

    plan: LaunchPlan
    source: str
    fn: Callable[..., Any]
    trace: BodyTrace
    # Whether `fn` runs the interpreter; stored so that a failed call need not read the plan.
    interpreted: bool = False


class Kernel[**P, R]:
    """A checked kernel declaration. Call it like the function it decorates."""

    def __init__(self, spec: KernelSpec, consts: Mapping[str, Any], backend: str | None):
        self.spec = spec
        self.consts: dict[str, Any] = dict(consts)
        self.backend = backend
        self.reference = spec.reference
        self._cache: dict[Any, Specialization] = {}
        self._by_consts: dict[Any, Specialization] = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, spec.fn)

    def __repr__(self) -> str:
        consts = ", ".join(f"{k}={v!r}" for k, v in self.consts.items())
        return f"<statickernel.Kernel {self.spec.name} ({self.spec.location}) {consts}>"

    # --- calling -----------------------------------------------------------------------------

    def __call__(self, *args: Any, backend: str | None = None, **overrides: Any) -> Any:
        try:
            try:
                key = (
                    tuple((a.shape, a.dtype) for a in args),
                    _overrides_key(overrides),
                    backend or self.backend or default_backend(),
                )
                entry = self._cache.get(key)
            except (AttributeError, TypeError):  # a non-array argument, or an unhashable override
                key, entry = None, None
            if entry is None:
                entry = self._specialize(args, overrides, backend, key, call=True)
            try:
                return entry.fn(*args)
            except TypeError:
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
            raise _at_entry_point(exc) from None

    def _specialize(
        self,
        args: tuple[Any, ...],
        overrides: Mapping[str, Any],
        backend: str | None,
        key: Any,
        call: bool = False,
    ) -> Specialization:
        with self._lock:
            entry = self._cache.get(key) if key is not None else None
            if entry is None:
                # Overrides spelled differently (another order, an explicit default) share one
                # specialization.
                canonical = self._canonical_key(key, overrides, backend)
                entry = self._by_consts.get(canonical) if canonical is not None else None
                if entry is None:
                    entry = self._build(args, overrides, backend, call)
                if key is not None:
                    self._cache[key] = entry
                if canonical is not None:
                    self._by_consts[canonical] = entry
        return entry

    def _canonical_key(self, key: Any, overrides: Mapping[str, Any], backend: str | None) -> Any:
        if key is None:
            return None
        try:
            consts = _overrides_key(dict(sorted({**self.consts, **overrides}.items())))
            canonical = (key[0], consts, resolve_backend(backend, self.backend))
            hash(canonical)
        except (BackendError, TypeError):
            return None
        return canonical

    def specialize(
        self, *args: Any, backend: str | None = None, **overrides: Any
    ) -> Specialization:
        """The cached specialization for these arguments (arrays or jax.ShapeDtypeStruct)."""
        try:
            return self._specialization(args, overrides, backend)
        except StaticKernelError as exc:
            raise _at_entry_point(exc) from None

    def _specialization(
        self, args: tuple[Any, ...], overrides: Mapping[str, Any], backend: str | None
    ) -> Specialization:
        try:
            key = (
                tuple((a.shape, a.dtype) for a in args),
                _overrides_key(overrides),
                backend or self.backend or default_backend(),
            )
            entry = self._cache.get(key)
        except (AttributeError, TypeError):
            key, entry = None, None
        if entry is not None:
            check_arguments(self.spec, args, call=False)  # a duck with a cached shape
            return entry
        return self._specialize(args, overrides, backend, key)

    def plan(self, *args: Any, backend: str | None = None, **overrides: Any) -> LaunchPlan:
        """The frozen launch plan for these arguments (arrays or jax.ShapeDtypeStruct)."""
        try:
            return self._specialization(args, overrides, backend).plan
        except StaticKernelError as exc:
            raise _at_entry_point(exc) from None

    def emit(self, *args: Any, backend: str | None = None, **overrides: Any) -> str:
        """The standalone Pallas source this specialization runs."""
        try:
            return self._specialization(args, overrides, backend).source
        except StaticKernelError as exc:
            raise _at_entry_point(exc) from None

    def lower(self, *args: Any, **overrides: Any) -> Any:
        """Cross-lowers this specialization for Mosaic GPU on CUDA; works on a CPU-only machine."""
        try:
            entry = self._specialization(args, overrides, "mosaic_gpu")
            return entry.fn.trace(*args).lower(lowering_platforms=("cuda",))  # pyright: ignore[reportFunctionMemberAccess]
        except StaticKernelError as exc:
            raise _at_entry_point(exc) from None

    def compile(self, *args: Any, target: str = "sm_90a", **overrides: Any) -> CompileReport:
        """Compiles this specialization for the GPU named `target` through ptxas, on this
        machine's GPU or, without one, from the GPU's description (deviceless), and reports
        its registers, spills, shared memory, occupancy and SASS. Needs statickernel[aot]."""
        try:
            return compile_kernel(self, args, overrides, target, call_site())
        except StaticKernelError as exc:
            raise _at_entry_point(exc) from None

    def trace(self, *args: Any, backend: str | None = None, **overrides: Any) -> Any:
        """This specialization traced as `jax.jit(kernel).trace(...)` traces it; with it,
        `jax.export.export(kernel)` works as it does for a jitted function."""
        try:
            return self._specialization(args, overrides, backend).fn.trace(*args)  # pyright: ignore[reportFunctionMemberAccess]
        except StaticKernelError as exc:
            raise _at_entry_point(exc) from None

    # --- variants ----------------------------------------------------------------------------

    def bind(self, **overrides: Any) -> "Kernel[P, R]":
        """A new kernel with other constant defaults, checked now as the declaration was."""
        where = call_site()
        try:
            consts = bind_consts(
                self.spec, self.consts, overrides, dict(kernel=self.spec.name, where=where)
            )
            new = Kernel(self.spec, consts, self.backend)
            check_declaration(self.spec, consts, error=PlanError, where=where)
        except StaticKernelError as exc:
            raise _at_entry_point(exc) from None
        return new  # pyright: ignore[reportReturnType]

    def with_backend(self, backend: str | None) -> "Kernel[P, R]":
        """A new kernel that runs on `backend` unless a call says otherwise."""
        return Kernel(self.spec, self.consts, resolve_backend(backend, None) if backend else None)  # pyright: ignore[reportReturnType]

    # --- the one path ------------------------------------------------------------------------

    def _build(
        self,
        args: tuple[Any, ...],
        overrides: Mapping[str, Any],
        backend: str | None,
        call: bool = False,
    ) -> Specialization:
        spec = self.spec
        where = call_site()
        try:
            chosen = resolve_backend(backend, self.backend)
        except BackendError as exc:
            raise BackendError(
                exc.what,
                kernel=spec.name,
                where=where,
                expected=exc.expected,
                actual=exc.actual,
                fix=exc.fix,
            ) from None
        binding = bind(spec, args, self.consts, overrides, call=call)
        sizes = binding.size_map
        consts = dict(binding.consts)
        dtypes = dict(binding.dtypes)
        logical = _logical_blocks(spec, sizes, consts)
        trace = trace_body(
            spec,
            {o.name: tuple(logical[d] for d in o.block_dims) for o in spec.operands},
            dtypes,
            dict(binding.shapes),
            consts,
            sizes,
        )
        result_dtypes = check_outputs(
            spec,
            trace,
            _result_blocks(spec, logical, sizes),
            spec.location,
            sizes,
        )
        dtypes.update({r.name: dt for r, dt in zip(spec.results, result_dtypes, strict=True)})
        extents = block_extents(spec, sizes, consts, dtypes)
        err: dict[str, Any] = dict(kernel=spec.name, where=where, bindings=sizes)
        check_blocks(spec, extents, {k: (v,) for k, v in dtypes.items()}, PlanError, err)
        fills = {
            n: f
            for n, f in zip([o.name for o in spec.operands], trace.fills, strict=True)
            if f is not None
        }
        translation = _translate(
            spec, trace, sizes, extents, ragged_everywhere=False, interpreted=chosen == "interpret"
        )
        _check_loops(
            spec, translation, extents, {k: (v,) for k, v in dtypes.items()}, PlanError, err
        )
        plan = make_plan(
            spec,
            sizes,
            dtypes,
            consts,
            chosen,
            extents,
            fills,
            translation.masks,
            where,
            loops=translation.loops,
        )
        source = generate_source(plan, translation)
        interpreted = chosen == "interpret"
        fn = _execute(source, spec.name, spec.location, interpreted)
        return Specialization(plan, source, fn, trace, interpreted=interpreted)


def _overrides_key(overrides: Mapping[str, Any]) -> tuple[tuple[str, type, Any], ...]:
    """Overrides as a cache key. The type is part of it because equal values of different types
    are different overrides: `BM=64.0` is an error where `BM=64` is valid, and `flag=1` is not
    `flag=True`. A float is keyed by its bits: -0.0 == 0.0 though `x / eps` tells them apart,
    and a NaN equal to nothing would miss the cache, and add an entry, on every call."""
    if not overrides:  # the common call: keep it as cheap as the key it replaces
        return ()
    return tuple(
        (name, type(value), struct.pack("<d", value) if isinstance(value, float) else value)
        for name, value in overrides.items()
    )


def _at_entry_point(exc: StaticKernelError) -> StaticKernelError:
    """The error, to be re-raised from a public entry point with the frames below it dropped.

    Its message already names the user's line, the operand and the fix; statickernel's own
    frames would only bury that. Errors that are not statickernel's keep their full traceback.
    """
    return exc.with_traceback(None)


def _logical_blocks(
    spec: KernelSpec, sizes: Mapping[str, int], consts: Mapping[str, Any]
) -> dict[str, int]:
    """The block the body sees along each dim; a loop dim is seen one loop block at a time."""
    tile = spec.block_map
    return {d: int(consts[tile[d]]) if d in tile else size for d, size in sizes.items()}


def _result_blocks(
    spec: KernelSpec, logical: Mapping[str, int], sizes: Mapping[str, int]
) -> list[tuple[int, ...]]:
    """What the body returns for each result: a loop dim is whole, written by sk.map_blocks."""
    loops = spec.loop_map
    return [
        tuple(sizes[d] if d in loops else logical[d] for d in r.block_dims) for r in spec.results
    ]


def _check_loops(
    spec: KernelSpec,
    translation: Translation,
    extents: Mapping[str, tuple[int, int]],
    dtypes: Mapping[str, tuple[str, ...]],
    error: type[StaticKernelError],
    err: Mapping[str, Any],
) -> None:
    """The rules of pipelined operands and of sk.dot, for these constants."""
    if not spec.loop:
        return
    dims = {o.name: o.block_dims for o in spec.operands + spec.results}
    for block in translation.loops:
        for name in block.operands:
            for d in dims[name]:
                if d != block.axis and d not in spec.tile_map:
                    raise error(
                        f"`{name}` is read block by block in the loop over {block.axis}, but its "
                        f"dim {d} is neither tiled nor that loop dim",
                        **err,
                        operand=name,
                        dim=d,
                        expected=f"every dim of `{name}` in tile= or the loop dim {block.axis}",
                        actual=f"'{' '.join(dims[name])}' with {d} whole",
                        fix=f'tile {d}, e.g. tile={{..., "{d}": "B{d}"}}',
                    )
    for i, result in enumerate(spec.results):
        looped = [d for d in result.dims if d in spec.loop_map]
        if looped and i not in {r for r, _, _ in translation.streamed}:
            raise ResultMismatchError(
                f"{result.name} has the loop dim {looped[0]}, but the body does not return it "
                "from sk.map_blocks",
                **err,
                operand=result.name,
                dim=looped[0],
                expected=f"the value of sk.map_blocks({looped[0]!r}, ...)",
                actual="a value computed outside a loop",
                fix=f"write the result block by block: return sk.map_blocks({looped[0]!r}, fn), "
                "with fn computing one block",
            )
    check_dots(translation.loops, dims, extents, dtypes, spec.block_map, error, err)


def _kind(spec: KernelSpec, dims: tuple[str, ...]) -> str:
    if len(dims) == 2:
        return TILE
    return ROW if dims[0] == spec.rows else COL


def _translate(
    spec: KernelSpec,
    trace: BodyTrace,
    sizes: Mapping[str, int],
    extents: Mapping[str, tuple[int, int]],
    ragged_everywhere: bool,
    interpreted: bool = False,
) -> Translation:
    try:
        translation = _translate_body(spec, trace, sizes, extents, ragged_everywhere, interpreted)
    except StaticKernelError:
        raise
    except Exception:
        if trace.misplaced:  # the misplaced load is the cause; say so
            raise misplaced_load_error(spec, trace) from None
        raise
    if trace.misplaced:
        raise misplaced_load_error(spec, trace)
    return translation


def _translate_body(
    spec: KernelSpec,
    trace: BodyTrace,
    sizes: Mapping[str, int],
    extents: Mapping[str, tuple[int, int]],
    ragged_everywhere: bool,
    interpreted: bool = False,
) -> Translation:
    tile = spec.tile_map

    def ragged(dim: str | None) -> bool:
        if dim is None:
            return False
        return ragged_everywhere or is_ragged(sizes[dim], *extents[dim], dim in tile)

    geometry = Geometry(
        interpreted=interpreted,
        rows=extents[spec.rows][1],
        cols=extents[spec.cols][1] if spec.cols else hw.WGMMA_COLS,
        ragged_rows=ragged(spec.rows),
        ragged_cols=ragged(spec.cols),
        input_kinds=tuple((o.name, _kind(spec, o.block_dims)) for o in spec.operands),
        input_fills=tuple(
            (o.name, fill)
            for o, fill in zip(spec.operands, trace.fills, strict=True)
            if fill is not None
        ),
    )
    loops = spec.loop_map
    if loops:

        def looped_ragged(dim: str) -> bool:
            return ragged_everywhere or sizes[dim] % extents[dim][0] != 0

        steps = tuple(
            (
                axis,
                dataclasses.replace(
                    geometry,
                    cols=extents[axis][1] if axis == spec.cols else geometry.cols,
                    ragged_cols=looped_ragged(axis) if axis == spec.cols else geometry.ragged_cols,
                ),
            )
            for axis in loops
        )
        geometry = dataclasses.replace(
            geometry,
            steps=steps,
            looped_operands=tuple(
                (o.name, next(d for d in o.dims if d in loops))
                for o in spec.operands
                if any(d in loops for d in o.dims)
            ),
        )
    result_kinds = tuple(_kind(spec, r.block_dims) for r in spec.results)
    return translate(trace, geometry, result_kinds, spec.name, spec.location)


_SOURCE_COUNTER = iter(range(1 << 62))


def _execute(source: str, name: str, where: str, interpreted: bool) -> Callable[..., Any]:
    """Runs the generated module and returns its kernel function, guarded against autodiff.

    The guard adds no computation: it only turns JAX's "no differentiation rule" failure into
    a statickernel error, and the outer jit keeps the call on JAX's fast dispatch path. An
    interpreted kernel launches through `interpreted_launch`, one launch at a time.
    """
    filename = f"<statickernel:{name}:{next(_SOURCE_COUNTER)}>"
    # Registering the text lets tracebacks and JAX's source info show the generated lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"__name__": f"statickernel_generated_{name}"}
    exec(compile(source, filename, "exec"), namespace)
    generated = namespace[name]
    launch = interpreted_launch(generated, name) if interpreted else generated

    @jax.custom_jvp
    def guarded(*args: Any) -> Any:
        return launch(*args)

    @guarded.defjvp
    def _no_derivative(primals: Any, tangents: Any) -> Any:
        raise NotDifferentiableError(
            "it was differentiated, but Mosaic GPU kernels have no derivative rule",
            kernel=name,
            where=call_site() or where,
            expected="a kernel used outside jax.grad, jax.jvp and jax.vjp",
            actual="a differentiation transform",
            fix="differentiate the kernel's reference (kernel.reference) instead, or wrap the "
            "kernel in jax.custom_vjp with a backward pass of your own",
        )

    return jax.jit(guarded)


# --- the declaration-time check ---------------------------------------------------------------


def check_declaration(
    spec: KernelSpec,
    consts: Mapping[str, Any],
    error: type[StaticKernelError] = HardwareLimitError,
    where: str | None = None,
) -> None:
    """Checks hardware rules for `consts` and traces the body once, with no data."""
    err: dict[str, Any] = dict(kernel=spec.name, where=where or spec.location)
    tile = spec.tile_map
    options = {o.name: o.dtypes for o in spec.operands + spec.results}
    widest = {n: max(opts, key=hw.itemsize) for n, opts in options.items()}
    # Whole dims take their smallest block here; their real size is only known at the call.
    extents: dict[str, tuple[int, int]] = {}
    blocks = spec.block_map
    for d in spec.dim_names():
        if d in spec.batch:
            extents[d] = (1, 1)
            continue
        block = int(consts[blocks[d]]) if d in blocks else quantum(spec, d, options)[0]
        extents[d] = (block, block)
    check_blocks(spec, extents, options, error, err)
    probe_sizes = {d: 2 * b + 1 if d in tile else b for d, (b, _) in extents.items()}
    probe_sizes.update({d: 2 for d in spec.batch})
    for d, const in spec.loop_map.items():
        # Enough steps that every declared stage is in use.
        probe_sizes[d] = int(consts[const]) * max(2, spec.stage_count(consts)) + 1
    smem = smem_bytes(spec, extents, widest, {o.name for o in spec.operands})
    if smem > hw.SMEM_BYTES and not spec.loop:
        cls = SharedMemoryError if error is HardwareLimitError else error
        raise cls(
            f"the blocks need {smem:,} B of shared memory with the widest dtypes allowed, over "
            f"the {hw.SMEM_BYTES:,} B a block has",
            **err,
            expected=f"<= {hw.SMEM_BYTES:,} B",
            actual=f"{smem:,} B ("
            + ", ".join(f"{n}: {widest[n]}" for n in widest)
            + ", "
            + ", ".join(f"{k}={consts[k]}" for k in tile.values())
            + ")",
            fix=smem_fix(spec, extents, widest, {o.name for o in spec.operands}),
        )
    preferred = {n: opts[0] for n, opts in options.items()}
    logical = _logical_blocks(spec, probe_sizes, consts)
    trace = trace_body(
        spec,
        {o.name: tuple(logical[d] for d in o.block_dims) for o in spec.operands},
        preferred,
        {o.name: tuple(probe_sizes[d] for d in o.block_dims) for o in spec.operands},
        consts,
        probe_sizes,
        dims_are_bound=False,
    )
    result_dtypes = check_outputs(
        spec, trace, _result_blocks(spec, logical, probe_sizes), spec.location, {}
    )
    translation = _translate(spec, trace, probe_sizes, extents, ragged_everywhere=True)
    if spec.loop:
        _check_loops(spec, translation, extents, options, error, err)
        dtypes = dict(widest)
        dtypes.update({r.name: dt for r, dt in zip(spec.results, result_dtypes, strict=True)})
        fills = {
            n: f
            for n, f in zip([o.name for o in spec.operands], trace.fills, strict=True)
            if f is not None
        }
        cls = SharedMemoryError if error is HardwareLimitError else error
        make_plan(
            spec,
            probe_sizes,
            dtypes,
            consts,
            "interpret",
            extents,
            fills,
            translation.masks,
            where,
            loops=translation.loops,
            error=cls,
            dims_are_bound=False,
        )


@overload
def kernel[**P, R](fn: Callable[P, R], /) -> Kernel[P, R]: ...
@overload
def kernel[**P, R](
    *,
    tile: Mapping[str, str] | None = None,
    loop: Mapping[str, str] | None = None,
    stages: str | int | None = None,
    batch: str | tuple[str, ...] = (),
    reference: Callable[..., Any] | None = None,
    backend: str | None = None,
    name: str | None = None,
) -> Callable[[Callable[P, R]], Kernel[P, R]]: ...
def kernel[**P, R](
    fn: Callable[P, R] | None = None,
    /,
    *,
    tile: Mapping[str, str] | None = None,
    loop: Mapping[str, str] | None = None,
    stages: str | int | None = None,
    batch: str | tuple[str, ...] = (),
    reference: Callable[..., Any] | None = None,
    backend: str | None = None,
    name: str | None = None,
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
      reference: a plain jnp function computing the same result, for tests and tools.
      backend: "mosaic_gpu" or "interpret"; by default the process-wide choice.
      name: the kernel's name in plans and generated code; the function's name by default.
    """

    def decorate(f: Callable[P, R]) -> Kernel[P, R]:
        try:
            spec = build_spec(
                f,
                tile if tile is not None else {},
                reference,
                name,
                loop=loop,
                stages=stages,
                batch=(batch,) if isinstance(batch, str) else tuple(batch),
            )
            chosen = resolve_backend(backend, None) if backend else None
            check_declaration(spec, spec.const_defaults)
        except StaticKernelError as exc:
            raise _at_entry_point(exc) from None
        return Kernel(spec, spec.const_defaults, chosen)

    if fn is None:
        return decorate
    try:
        return decorate(fn)
    except StaticKernelError as exc:  # `@sk.kernel` without arguments: one entry frame, not two
        raise _at_entry_point(exc) from None


_ = jax
