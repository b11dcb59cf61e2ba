"""The one place that reaches into jax's and jaxtyping's internals, or asks what the installed
jax has.

statickernel supports more than one jax release (see pyproject.toml and `constraints/`). Every
use of a non-public name (`jax._src...`, `jax.interpreters...`, the objects behind a jaxtyping
annotation) and every probe for a feature that differs between releases is a function here,
with a note of why it is needed and what it was checked on, so that a new jax or jaxtyping
release is ported by reading this module and running tests/project/test_compat.py. No other module of
the package imports these internals; that test enforces it.

Checked on jax 0.11.2 and 0.12.0.1, with jaxtyping 0.3.11; and on jax 0.10.2 (what Python
3.11 gets), where kernels are declared, planned and emitted but not run (`runs_mosaic_gpu`),
which tests/project/test_compat.py covers there too.
"""

import importlib
import importlib.util
import re
from collections.abc import Callable, Iterator
from typing import Any

import jax
from jax.interpreters import ad, batching, mlir, partial_eval

__all__ = [
    "CUDA_PLUGINS",
    "MOSAIC_GPU_MIN_JAX",
    "annotation_dtypes",
    "convert_constvars_jaxpr",
    "cuda_plugin_installed",
    "cupti_kernel_timer",
    "debug_print_arguments",
    "has_plgpu_store",
    "interpreter_races_found",
    "jnp_counting_function",
    "lowering_for_export",
    "mesh_manual_axes",
    "plain_dim_names",
    "public_type_name",
    "register_batching_rule",
    "register_jvp_rule",
    "register_lowering",
    "register_transpose_rule",
    "reset_mosaic_gpu_interpreter",
    "runs_mosaic_gpu",
    "user_frames",
    "varying_manual_axes",
]

# --------------------------------------------------------------------------------- jaxtyping


def plain_dim_names(
    hint: Any, *, fixed_sizes: bool = False, sums: bool = False
) -> tuple[str, ...] | None:
    """The dim names of a jaxtyping array annotation (a subclass of `jaxtyping.AbstractArray`)
    when every dim is a plain name, like "M N"; None when any is not: a fixed size ("4",
    "M=4"), an expression ("M+1"), anonymous ("_", "_M"), broadcastable ("#M") or variadic
    ("*batch", "..."). With `fixed_sizes`, a fixed size is taken too, named by its digits
    ("3", "4 C": parameters of a fixed count). With `sums`, a sum of names is taken too, named
    by its expression ("N1+N2": a result's columns joined from operands').

    `AbstractArray.dims` and `.index_variadic` are declared attributes of jaxtyping's public
    base class, but the objects in `dims` are private (`jaxtyping._array_types._NamedDim`,
    `_FixedDim`, `_SymbolicDim`, `_NamedVariadicDim` and sentinels for "_" and "..."). They are
    read by their fields instead of their classes: only `_NamedDim` and `_NamedVariadicDim` have
    a `name`, only `_FixedDim` an int `size`, only `_SymbolicDim` a str `elem` (its expression),
    and the variadic one sits at `index_variadic`.
    Checked on jaxtyping 0.3.11.
    """
    variadic = getattr(hint, "index_variadic", None)
    names: list[str] = []
    for index, dim in enumerate(hint.dims):
        size, name = getattr(dim, "size", None), getattr(dim, "name", None)
        if index == variadic or getattr(dim, "broadcastable", True):
            return None
        if fixed_sizes and isinstance(size, int):
            names.append(str(size))
        elif isinstance(name, str):
            names.append(name)
        elif sums and isinstance(getattr(dim, "elem", None), str) and _SUM.fullmatch(dim.elem):
            names.append(dim.elem)
        else:
            return None
    return tuple(names)


# A sum of two or more dim names, as jaxtyping keeps it (one token: dims split at spaces).
_SUM = re.compile(r"[A-Za-z_]\w*(\+[A-Za-z_]\w*)+")


def annotation_dtypes(hint: Any) -> tuple[Any, ...] | None:
    """The dtypes a jaxtyping array annotation allows (`AbstractArray.dtypes`: names, or the
    regular expressions of a custom `AbstractDtype`); None when it allows any (`Shaped`).

    jaxtyping marks "any dtype" with a private sentinel in place of the list
    (`jaxtyping._array_types._any_dtype`), so anything but a list or tuple reads as that.
    Checked on jaxtyping 0.3.11.
    """
    dtypes = hint.dtypes
    if not isinstance(dtypes, list | tuple):
        return None
    return tuple(dtypes)


def public_type_name(hint: Any) -> str | None:
    """The `__name__` of a class or a jaxtyping annotation as errors show it, with jax's array
    type spelled by its public name: `Array`, `Float[Array, 'M N']`. None when it has none.

    jaxlib 0.11.2 and 0.12.0.1 name `jax.Array` "Array". jaxlib 0.10.2 names it by its private
    module, "jaxlib._jax.Array" (a nanobind class whose `__module__` is "jax"), and jaxtyping
    builds an annotation's name from it ("Float[jaxlib._jax.Array, 'M N']"): the private
    module path is dropped, so a message reads the same on every jax. Checked on jax 0.10.2,
    0.11.2 and 0.12.0.1, with jaxtyping 0.3.11.
    """
    name = getattr(hint, "__name__", None)
    if not isinstance(name, str):
        return None
    return _JAXLIB_PRIVATE_PATH.sub("", name)


# A private module path of jaxlib before a class name: "jaxlib._jax." in "jaxlib._jax.Array".
_JAXLIB_PRIVATE_PATH = re.compile(r"\bjaxlib(\._\w+)+\.(?=\w)")


# ------------------------------------------------------------------------- tracing and jaxprs


def user_frames(eqn: Any) -> Iterator[Any]:
    """The frames of the Python stack that recorded a traced equation, innermost first, less
    jax's own frames; each has `file_name` and `start_line`.

    jax keeps the stack in `eqn.source_info.traceback` and filters its own frames out with
    `source_info_util.user_frames`, which jax.extend.source_info_util does not re-export.
    """
    from jax._src import source_info_util

    tb = getattr(eqn.source_info, "traceback", None)
    if tb is None:
        return iter(())
    return iter(source_info_util.user_frames(tb))


# The functions of jax.numpy's reductions that divide by the number of elements they reduce,
# which they take from the array's shape (`_count` without `where=`): what traces them, as the
# stack names it (`jnp.mean` is traced as `mean`, jnp.var's work as `_var`).
_COUNTING_REDUCTIONS = frozenset({"mean", "_mean", "average", "_average", "var", "_var"})


def jnp_counting_function(eqn: Any) -> str | None:
    """The function of jax.numpy's reductions that recorded a traced equation, innermost, if
    it is one that divides by a count it read from the shape (jnp.mean, jnp.average, jnp.var
    and jnp.std through it); None for any other equation.

    jax keeps its own frames in `eqn.source_info.traceback` (`user_frames` drops them); the
    module is `jax/_src/numpy/reductions.py` on every release checked.
    """
    tb = getattr(getattr(eqn, "source_info", None), "traceback", None)
    if tb is None:
        return None
    for frame in tb.frames:
        path = frame.file_name.replace("\\", "/")
        if path.endswith("/numpy/reductions.py") and "/jax/" in path:
            name = frame.function_name
            return name if name in _COUNTING_REDUCTIONS else None
    return None


def convert_constvars_jaxpr(jaxpr: Any) -> Any:
    """`jaxpr` with its constants turned into leading inputs, for a primitive that holds a traced
    step as a parameter and takes the step's constants as operands.

    From `jax.interpreters.partial_eval`, which has no counterpart in jax.extend; the way
    constants are attached to a jaxpr changes between releases, and this follows it. jax
    0.11.2 and 0.12.0.1 export it there (it detaches the constants a jaxpr holds); jax 0.10.2
    keeps it only in `jax._src.interpreters.partial_eval` (it moves the jaxpr's `constvars`
    to the front of its `invars`): either way the constants become the leading inputs, in the
    order of the closed jaxpr's `consts`. Checked on jax 0.10.2, 0.11.2 and 0.12.0.1.
    """
    convert = getattr(partial_eval, "convert_constvars_jaxpr", None)
    if convert is None:
        from jax._src.interpreters import partial_eval as private_partial_eval

        convert = private_partial_eval.convert_constvars_jaxpr
    return convert(jaxpr)


def debug_print_arguments(params: dict[str, Any], operands: list[Any]) -> tuple[Any, Any]:
    """The positional and keyword arguments a body gave `jax.debug.print` or `pl.debug_print`,
    from the parameters of their `debug_print` equation: its operands stand for the traced
    values, in order, and the arguments jax did not trace are themselves.

    Both spellings bind `debug_print` with `in_tree` (the tree of `(args, kwargs)`) and
    `static_args` ((flat index, value) pairs), which jax's own `merge_callback_args`
    reassembles; checked on jax 0.11.2.
    """
    static = dict(params["static_args"])
    operand = iter(operands)
    flat = [static[i] if i in static else next(operand) for i in range(len(static) + len(operands))]
    args, kwargs = jax.tree_util.tree_unflatten(params["in_tree"], flat)
    return args, kwargs


# ----------------------------------------------------------------- primitives of statickernel


def register_lowering(primitive: Any, rule: Callable[..., Any]) -> None:
    """Registers the MLIR lowering of a primitive of statickernel's own, for every platform.

    `jax.interpreters.mlir.register_lowering` is what jax's guide to new primitives uses; jax
    .extend has no equivalent yet.
    """
    mlir.register_lowering(primitive, rule)


def register_batching_rule(primitive: Any, rule: Callable[..., Any]) -> None:
    """Registers the vmap rule of a primitive: `rule(args, dims, **params)` returns the outputs
    and their batch dims. Through `jax.interpreters.batching.primitive_batchers`, as jax's guide
    to new primitives does."""
    batching.primitive_batchers[primitive] = rule


def register_jvp_rule(primitive: Any, rule: Callable[..., Any]) -> None:
    """Registers the forward-mode rule of a primitive: `rule(primals, tangents, **params)`
    returns the outputs and their tangents. Through `jax.interpreters.ad.primitive_jvps`, as
    jax's guide to new primitives does."""
    ad.primitive_jvps[primitive] = rule


def register_transpose_rule(primitive: Any, rule: Callable[..., Any]) -> None:
    """Registers the transpose rule of a primitive, which jax.linear_transpose and reverse mode
    call as `rule(cotangents, *operands, **params)`. Through
    `jax.interpreters.ad.primitive_transposes`, as jax's guide to new primitives does."""
    ad.primitive_transposes[primitive] = rule


def lowering_for_export(ctx: Any) -> bool:
    """Whether the lowering that called a rule with context `ctx` is for jax.export.

    Read from `ctx.module_context.lowering_parameters.for_export`, which jax does not document;
    an older or newer layout reads as False, so the check it guards is skipped, not failed.
    """
    params = getattr(ctx.module_context, "lowering_parameters", None)
    return bool(getattr(params, "for_export", False))


def mesh_manual_axes() -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The manual and the automatic axes of the current abstract mesh when it has both (a
    shard_map with `axis_names=` naming only some axes); None otherwise.

    `manual_axes` and `are_all_axes_manual` of `jax.sharding.AbstractMesh` are undocumented; a
    jax without them reads as a mesh with no manual axes.
    """
    mesh = jax.sharding.get_abstract_mesh()
    manual = tuple(getattr(mesh, "manual_axes", ()))
    if not manual or getattr(mesh, "are_all_axes_manual", True):
        return None
    return manual, tuple(a for a in mesh.axis_names if a not in manual)


def varying_manual_axes(value: Any) -> tuple[str, ...]:
    """The manual mesh axes along which `value` varies inside a shard_map (what jax's docs
    call its "vma"), sorted; () outside one.

    Read from `jax.typeof(value).manual_axis_type.varying`, which jax does not document (jax
    0.11.2 and 0.12.0.1); a jax without it reads as varying along none.
    """
    manual = getattr(jax.typeof(value), "manual_axis_type", None)
    return tuple(sorted(getattr(manual, "varying", ())))


# ------------------------------------------------------------------------------ Mosaic GPU

_GPU_CALLBACKS = "jax._src.pallas.mosaic_gpu.interpret.gpu_callbacks"


def reset_mosaic_gpu_interpreter() -> bool:
    """Discards the Mosaic GPU interpreter's process-wide simulated memory; False where this jax
    has no way to.

    The interpreter keeps its buffers and barriers in module state of `gpu_callbacks`, private
    to jax (`reset_gpu_interpret_mode_state`, present in jax 0.11.2 and 0.12.0.1); a launch that
    fails before the interpreter's own clean-up leaves them allocated.
    """
    try:
        callbacks = importlib.import_module(_GPU_CALLBACKS)
    except ImportError:
        return False
    reset = getattr(callbacks, "reset_gpu_interpret_mode_state", None)
    if reset is None:
        return False
    reset()
    return True


def interpreter_races_found() -> bool:
    """Whether the Mosaic GPU interpreter's race detector has seen a race since it was last
    reset. Its state is module state of `gpu_callbacks` (`get_races().races_found`, present in
    jax 0.11.2 and 0.12.0.1); jax has no public accessor. False where there is none."""
    try:
        callbacks = importlib.import_module(_GPU_CALLBACKS)
    except ImportError:
        return False
    get_races = getattr(callbacks, "get_races", None)
    return bool(get_races is not None and get_races().races_found)


# The oldest jax whose Pallas Mosaic GPU runs and lowers what statickernel generates: the
# interpreter (`plgpu.InterpretGPUParams`) and `plgpu.kernel` as emitted arrived in 0.11. jax
# 0.11 needs Python 3.12; on Python 3.11 pip installs jax 0.10.2, where kernels are declared,
# planned and emitted but not run.
MOSAIC_GPU_MIN_JAX = (0, 11, 2)


def runs_mosaic_gpu() -> bool:
    """Whether this jax runs the Mosaic GPU modules statickernel generates (its version is at
    least `MOSAIC_GPU_MIN_JAX`)."""
    return tuple(jax.__version_info__[:3]) >= MOSAIC_GPU_MIN_JAX


def has_plgpu_store() -> bool:
    """Whether this jax's Pallas Mosaic GPU stores through `plgpu.store`: jax 0.12.0.1 has it,
    and its default no longer suits untiled refs; jax 0.11.2 and 0.10.2 have not (0.10.2 then
    emits what 0.11.2 does)."""
    from jax.experimental.pallas import mosaic_gpu as plgpu

    return hasattr(plgpu, "store")


# The CUDA PJRT plugin's modules, newest CUDA first: deviceless compiles need one of them.
CUDA_PLUGINS = ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")


def cuda_plugin_installed() -> bool:
    """Whether jax's CUDA PJRT plugin is installed (it is looked up, not imported: importing it
    starts CUDA)."""
    for name in CUDA_PLUGINS:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def cupti_kernel_timer() -> tuple[Callable[[], None], Callable[[], list[tuple[str, float]]]] | None:
    """CUPTI's kernel timer, as jax's Mosaic GPU profiler (`mosaic.gpu.profiler.measure`) uses
    it: `start()` subscribes to kernel activity, `stop()` returns each kernel launched since as
    (name, milliseconds on the device) and unsubscribes. None where jaxlib has no Mosaic GPU
    bindings (a CPU-only install). The profiler's public `measure` runs a warm-up call between
    the caller's code and the timing, which would read the operands back into L2 after a
    flush; its two calls, here, do not. Checked on jax 0.11.2 and 0.12.0.1."""
    try:
        mosaic_gpu_lib = importlib.import_module("jax._src.lib.mosaic_gpu")
        ext = mosaic_gpu_lib._mosaic_gpu_ext
        start, stop = ext._cupti_init, ext._cupti_get_timings
    except (ImportError, AttributeError):
        return None

    def timings() -> list[tuple[str, float]]:
        return [(str(name), float(ms)) for name, ms in stop(True)]

    return start, timings
