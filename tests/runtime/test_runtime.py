"""The call path: caching, constant overrides, jit, backends, emitted source, threads, multiple
results and `sk.dim`."""

import concurrent.futures
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from add import add, add_reference
from jax_support import needs_mosaic_gpu
from layernorm import layernorm, layernorm_reference
from markers import line_finder
from rmsnorm import rmsnorm, rmsnorm_reference
from row_sum import row_sum, row_sum_reference
from scale_bias import scale_bias, scale_bias_reference
from softmax import softmax, softmax_reference
from statickernel.runtime.interpreter import _reset_interpreter as reset_interpreter


def _has_cuda() -> bool:
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


HAS_CUDA = _has_cuda()
DEVICE_BACKEND = "mosaic_gpu" if HAS_CUDA else "interpret"
OTHER_BACKEND = "interpret" if HAS_CUDA else "mosaic_gpu"
line_of = line_finder(__file__)


def rand(m: int, *rest: int, seed: int = 0, shift: float = 0.0, dtype: Any = jnp.float32) -> Any:
    rng = np.random.default_rng([seed, m, *rest])
    return jnp.asarray(rng.standard_normal((m, *rest), dtype=np.float32) + shift, dtype)


def assert_close(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, np.float32), np.asarray(expected, np.float32), rtol=rtol, atol=atol
    )


def expected(kernel: sk.Kernel[..., Any], *args: Any) -> Any:
    """The kernel's jnp reference on the same operands."""
    assert kernel.reference is not None
    return kernel.reference(*args)


def fresh(kernel: sk.Kernel[..., Any]) -> sk.Kernel[..., Any]:
    """The same kernel with an empty specialization cache."""
    return kernel.bind()


@pytest.fixture(autouse=True)
def _no_backend_settings(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("STATICKERNEL_BACKEND", raising=False)
    sk.set_backend(None)
    yield
    sk.set_backend(None)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each specialization built (by kernel name) while the test runs."""
    calls: list[str] = []
    original = sk.Kernel._build

    def spy(self: sk.Kernel[..., Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(self.spec.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(sk.Kernel, "_build", spy)
    return calls


# --- caching -----------------------------------------------------------------------------------


def test_second_call_reuses_the_specialization(builds: list[str]) -> None:
    k = fresh(softmax)
    x = rand(100, 100, shift=-10)
    first = k(x)
    second = k(x)
    assert builds == ["softmax"]
    assert len(k._cache) == 1
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))
    # New data of the same shape and dtype, and the default backend named explicitly.
    assert_close(k(rand(100, 100, seed=1)), softmax_reference(rand(100, 100, seed=1)))
    k(x, backend=DEVICE_BACKEND)
    # plan, emit and specialize read the same entry, from arrays or shape structs.
    spec = jax.ShapeDtypeStruct((100, 100), jnp.float32)
    assert k.plan(spec) is k.plan(x)
    assert k.emit(spec) == k.emit(x)
    assert k.specialize(spec) is k.specialize(x)
    assert builds == ["softmax"]
    assert len(k._cache) == 1


@pytest.mark.parametrize("variant", ["shape", "dtype", "override", "backend"])
def test_a_new_specialization_per_variant(builds: list[str], variant: str) -> None:
    k = fresh(softmax)
    x = rand(100, 100)
    k(x)
    if variant == "shape":
        k(rand(100, 101))
    elif variant == "dtype":
        k(x.astype(jnp.bfloat16))
    elif variant == "override":
        k(x, BM=128)
    else:
        k.plan(x, backend=OTHER_BACKEND)  # plan only: this machine may not run it
    assert len(builds) == 2
    assert len(k._cache) == 2
    k(x)
    assert len(builds) == 2


def _wrong_dtype(k: sk.Kernel[..., Any]) -> None:
    k(jnp.ones((100, 100), jnp.int32))


def _float64(k: sk.Kernel[..., Any]) -> None:
    k(np.ones((100, 100), np.float64))


def _wrong_rank(k: sk.Kernel[..., Any]) -> None:
    k(jnp.ones((100,), jnp.float32))


def _two_operands(k: sk.Kernel[..., Any]) -> None:
    k(jnp.ones((100, 100)), jnp.ones((100, 100)))


def _not_an_array(k: sk.Kernel[..., Any]) -> None:
    k([[1.0, 2.0]])


def _zero_rows(k: sk.Kernel[..., Any]) -> None:
    k(jnp.ones((0, 100)))


def _bad_block(k: sk.Kernel[..., Any]) -> None:
    k(jnp.ones((100, 100)), BM=100)


def _unknown_constant(k: sk.Kernel[..., Any]) -> None:
    k(jnp.ones((100, 100)), FOO=1)


def _unknown_backend(k: sk.Kernel[..., Any]) -> None:
    k(jnp.ones((100, 100)), backend="cuda")


def _too_wide(k: sk.Kernel[..., Any]) -> None:
    k(jnp.ones((2, 100_000)))


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (_wrong_dtype, sk.DtypeError),
        (_float64, sk.DtypeError),
        (_wrong_rank, sk.ShapeError),
        (_two_operands, sk.OperandError),
        (_not_an_array, sk.OperandError),
        (_zero_rows, sk.ShapeError),
        (_bad_block, sk.BlockAlignmentError),
        (_unknown_constant, sk.OverrideError),
        (_unknown_backend, sk.BackendError),
        (_too_wide, sk.SharedMemoryError),
    ],
    ids=lambda v: getattr(v, "__name__", "").lstrip("_"),
)
def test_a_failing_call_leaves_no_cache_entry(
    call: Callable[[sk.Kernel[..., Any]], None], error: type[sk.StaticKernelError]
) -> None:
    k = fresh(softmax)
    with pytest.raises(error) as info:
        call(k)
    assert isinstance(info.value, sk.CallError)
    assert info.value.kernel == "softmax"
    assert info.value.fix
    assert len(k._cache) == 0
    # The kernel is still usable, at the same shape.
    x = rand(100, 100, shift=-10)
    assert_close(k(x), softmax_reference(x))
    assert len(k._cache) == 1


# --- constant overrides ------------------------------------------------------------------------


def test_per_call_override() -> None:
    x = rand(300, 100, shift=-10)
    assert_close(softmax(x, BM=128), softmax_reference(x))
    plan = softmax.plan(x, BM=128)
    assert plan.dim("M").block == 128
    assert plan.grid == (3,)
    assert dict(plan.constants)["BM"] == 128
    # The kernel's own default is untouched.
    assert softmax.consts["BM"] == 64
    assert softmax.plan(x).dim("M").block == 64


def test_bind_returns_a_new_kernel() -> None:
    wide = softmax.bind(BM=128)
    assert isinstance(wide, sk.Kernel)
    assert wide is not softmax
    assert wide.consts["BM"] == 128
    assert softmax.consts["BM"] == 64
    assert wide.reference is softmax.reference
    assert wide.spec.name == "softmax"
    assert "BM=128" in repr(wide)
    x = rand(300, 100, shift=-10)
    plan = wide.plan(x)
    assert plan.dim("M").block == 128
    assert dict(plan.constants)["BM"] == 128
    assert_close(wide(x), softmax_reference(x))
    # A per-call override still wins over the bound default.
    assert wide.plan(x, BM=64).dim("M").block == 64
    # Binding again starts from the bound constants.
    assert wide.bind().consts["BM"] == 128


def test_bind_several_constants() -> None:
    k = add.bind(BM=128, BN=64)
    x, y = rand(300, 200), rand(300, 200, seed=1)
    assert k.plan(x, y).grid == (3, 4)
    assert_close(k(x, y), add_reference(x, y))


def test_float_constants_reach_the_body() -> None:
    x, w, b = rand(100, 130, shift=1), rand(130, seed=1), rand(130, seed=2)
    assert_close(layernorm(x, w, b, eps=0.5), layernorm_reference(x, w, b, eps=0.5))
    assert_close(rmsnorm.bind(eps=0.25)(x, w), rmsnorm_reference(x, w, eps=0.25))
    # An int is accepted for a float constant.
    assert_close(scale_bias(x, w, scale=-3), scale_bias_reference(x, w, scale=-3.0))


@sk.kernel(tile={"M": "BM"})
def divide(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, eps: sk.Const[float] = 1.0
) -> Float[Array, "M N"]:
    return sk.load(x) / eps


def test_signed_zeros_are_two_specializations(builds: list[str]) -> None:
    k = fresh(divide)
    x = jnp.ones((70, 30), jnp.float32)
    for eps, sign in [(0.0, 1), (-0.0, -1), (0.0, 1)]:
        np.testing.assert_array_equal(np.asarray(k(x, eps=eps)), sign * np.inf)
    assert len(builds) == 2
    # A bound default and an override compare the same way.
    negative = divide.bind(eps=-0.0)
    np.testing.assert_array_equal(np.asarray(negative(x)), -np.inf)
    np.testing.assert_array_equal(np.asarray(negative(x, eps=0.0)), np.inf)
    assert negative.specialize(x, eps=-0.0) is negative.specialize(x)
    assert dict(negative.plan(x, eps=0.0).constants)["eps"] == 0.0


def test_a_nan_constant_is_one_specialization(builds: list[str]) -> None:
    k = fresh(divide)
    x = jnp.ones((70, 30), jnp.float32)
    for _ in range(3):
        assert np.isnan(np.asarray(k(x, eps=float("nan")))).all()
    assert builds == ["divide"]
    assert len(k._cache) == len(k._by_consts) == 1
    bound = divide.bind(eps=float("nan"))
    assert bound.specialize(x) is bound.specialize(x, eps=float("nan"))
    assert len(bound._by_consts) == 1


BAD_OVERRIDES = [
    pytest.param({"BM": 100}, id="BM=100-not-a-multiple-of-64"),
    pytest.param({"BM": 512}, id="BM=512-over-the-tma-box"),
    pytest.param({"BM": 0}, id="BM=0"),
    pytest.param({"BM": -64}, id="BM=-64"),
    pytest.param({"BM": 1.5}, id="BM=1.5"),
    pytest.param({"BM": 64.0}, id="BM=64.0"),
    pytest.param({"BM": True}, id="BM=True"),
    pytest.param({"BM": "64"}, id="BM-str"),
    pytest.param({"BM": jnp.int32(64)}, id="BM-jax-array"),
    pytest.param({"FOO": 1}, id="FOO=1-unknown"),
]


@pytest.mark.parametrize("overrides", BAD_OVERRIDES)
def test_bad_override_per_call(overrides: dict[str, Any]) -> None:
    x = rand(100, 100)
    with pytest.raises(sk.StaticKernelError) as info:
        softmax(x, **overrides)
    assert isinstance(info.value, sk.CallError)
    assert info.value.fix
    assert next(iter(overrides)) in str(info.value)


@pytest.mark.parametrize("overrides", BAD_OVERRIDES)
def test_bad_override_bound(overrides: dict[str, Any]) -> None:
    with pytest.raises(sk.StaticKernelError) as info:
        softmax.bind(**overrides)
    assert info.value.fix


@pytest.mark.parametrize(
    "overrides",
    [{"BM": 0}, {"BM": 1.5}, {"BM": True}, {"BM": "64"}, {"FOO": 1}],
    ids=["zero", "float", "bool", "str", "unknown"],
)
def test_mistyped_or_unknown_override_is_an_override_error(overrides: dict[str, Any]) -> None:
    with pytest.raises(sk.OverrideError) as info:
        softmax(rand(100, 100), **overrides)
    assert info.value.operand == next(iter(overrides))


def test_unhashable_override_in_a_call_is_an_override_error() -> None:
    with pytest.raises(sk.OverrideError):
        softmax(rand(100, 100), BM=[64])  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize("method", ["plan", "emit", "specialize", "lower"])
def test_unhashable_override_in_plan_is_an_override_error(method: str) -> None:
    x = jax.ShapeDtypeStruct((100, 100), jnp.float32)
    with pytest.raises(sk.OverrideError):
        getattr(softmax, method)(x, BM=[64])


# --- jit ---------------------------------------------------------------------------------------


def test_inside_jit(builds: list[str]) -> None:
    k = fresh(softmax)
    x = rand(300, 100, shift=-10)
    ref = softmax_reference(x)
    assert_close(jax.jit(lambda v: k(v) * 2)(x), 2 * ref)
    # Another traced function with the same shapes reuses the specialization.
    assert_close(jax.jit(lambda v: k(v) + 1)(x), ref + 1)
    assert_close(k(x), ref)
    assert builds == ["softmax"]
    assert len(k._cache) == 1


def test_jit_with_an_override_and_static_constant() -> None:
    x = rand(300, 100, shift=-10)
    ref = softmax_reference(x)
    assert_close(jax.jit(lambda v: softmax(v, BM=128))(x), ref)
    f = jax.jit(lambda v, bm: softmax(v, BM=bm), static_argnames="bm")
    assert_close(f(x, bm=128), ref)


def test_traced_constant_is_an_override_error() -> None:
    x = rand(100, 100)
    with pytest.raises(sk.OverrideError) as info:
        jax.jit(lambda v, bm: softmax(v, BM=bm))(x, 128)
    assert "traced" in info.value.what


def test_jit_of_a_two_kernel_pipeline() -> None:
    x, w = rand(100, 130, shift=-10), rand(130, seed=1)

    @jax.jit
    def pipeline(v: Any, weight: Any) -> Any:
        return row_sum(softmax(rmsnorm(v, weight)))

    expected = row_sum_reference(softmax_reference(rmsnorm_reference(x, w)))
    assert_close(pipeline(x, w), expected, rtol=1e-5, atol=1e-5)


# --- backends ----------------------------------------------------------------------------------


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device makes mosaic_gpu the default")
def test_default_backend_is_interpret_without_a_gpu() -> None:
    assert sk.default_backend() == "interpret"
    assert "interpret" in sk.BACKENDS
    assert softmax.plan(rand(10, 10)).backend == "interpret"


def test_backend_per_call() -> None:
    x = rand(100, 100, shift=-10)
    assert_close(softmax(x, backend="interpret"), softmax_reference(x))  # pyright: ignore[reportCallIssue]
    assert softmax.plan(x, backend="interpret").backend == "interpret"
    assert softmax.plan(x, backend="mosaic_gpu").backend == "mosaic_gpu"


def test_with_backend() -> None:
    x = rand(100, 100, shift=-10)
    k = softmax.with_backend("interpret")
    assert isinstance(k, sk.Kernel)
    assert k is not softmax
    assert k.backend == "interpret"
    assert softmax.backend is None
    assert k.plan(x).backend == "interpret"
    assert_close(k(x), softmax_reference(x))
    gpu = softmax.with_backend("mosaic_gpu")
    assert gpu.plan(x).backend == "mosaic_gpu"
    # The call's backend wins over the kernel's.
    assert gpu.plan(x, backend="interpret").backend == "interpret"
    assert softmax.with_backend(None).backend is None


def test_set_backend() -> None:
    x = rand(100, 100, shift=-10)
    sk.set_backend(OTHER_BACKEND)
    assert sk.default_backend() == OTHER_BACKEND
    assert fresh(softmax).plan(x).backend == OTHER_BACKEND
    # The kernel's backend wins over the process's.
    assert softmax.with_backend(DEVICE_BACKEND).plan(x).backend == DEVICE_BACKEND
    sk.set_backend("interpret")
    assert sk.default_backend() == "interpret"
    assert_close(softmax(x), softmax_reference(x))
    sk.set_backend(None)
    assert sk.default_backend() == DEVICE_BACKEND


def test_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(100, 100, shift=-10)
    monkeypatch.setenv("STATICKERNEL_BACKEND", OTHER_BACKEND)
    assert sk.default_backend() == OTHER_BACKEND
    assert fresh(softmax).plan(x).backend == OTHER_BACKEND
    # The process setting wins over the environment.
    sk.set_backend(DEVICE_BACKEND)
    assert sk.default_backend() == DEVICE_BACKEND
    sk.set_backend(None)
    monkeypatch.setenv("STATICKERNEL_BACKEND", "interpret")
    assert sk.default_backend() == "interpret"
    assert_close(softmax(x), softmax_reference(x))
    monkeypatch.setenv("STATICKERNEL_BACKEND", "")
    assert sk.default_backend() == DEVICE_BACKEND


def test_unknown_backend_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATICKERNEL_BACKEND", "cuda")
    with pytest.raises(sk.BackendError) as info:
        sk.default_backend()  # @env-default
    assert "STATICKERNEL_BACKEND" in str(info.value)
    assert info.value.where is not None
    assert info.value.where.endswith(f"test_runtime.py:{line_of('env-default')}")
    for k in (fresh(softmax), fresh(softmax).plan):
        # Read at the call: the error names the kernel and the call's line, and its fix the
        # variable to change.
        with pytest.raises(sk.BackendError) as info:
            k(rand(10, 10))  # @env-call
        assert info.value.kernel == "softmax"
        assert info.value.where is not None
        assert info.value.where.endswith(f"test_runtime.py:{line_of('env-call')}")
        assert info.value.fix is not None and "STATICKERNEL_BACKEND=interpret" in info.value.fix
        assert info.value.expected == "'mosaic_gpu' or 'interpret'"


def _declare_with_unknown_backend() -> None:
    @sk.kernel(tile={"M": "BM"}, backend="cuda")  # @decorator-backend
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return sk.load(x)


def _backend_block() -> None:
    with sk.backend("cuda"):  # @block-backend
        pass


def _call_backend() -> None:
    softmax(rand(10, 10), backend="cuda")  # @call-backend  # pyright: ignore[reportCallIssue]


def _plan_backend() -> None:
    softmax.plan(rand(10, 10), backend="gpu")  # @plan-backend


def _with_backend() -> None:
    softmax.with_backend("cuda")  # @with-backend


def _set_backend() -> None:
    sk.set_backend("cuda")  # @set-backend


@pytest.mark.parametrize(
    ("call", "marker", "kernel"),
    [
        (_call_backend, "call-backend", "softmax"),
        (_plan_backend, "plan-backend", "softmax"),
        (_with_backend, "with-backend", "softmax"),
        (_set_backend, "set-backend", None),
        (_backend_block, "block-backend", None),
        (_declare_with_unknown_backend, "decorator-backend", "k"),
    ],
    ids=["call", "plan", "with_backend", "set_backend", "block", "decorator"],
)
def test_unknown_backend_is_a_backend_error(
    call: Callable[[], Any], marker: str, kernel: str | None
) -> None:
    with pytest.raises(sk.BackendError) as info:
        call()
    text = str(info.value)
    assert "'mosaic_gpu'" in text
    assert "'interpret'" in text
    # At the user's line that named the backend.
    assert info.value.where is not None
    assert info.value.where.endswith(f"test_runtime.py:{line_of(marker)}"), info.value.where
    assert info.value.kernel == kernel
    assert sk.default_backend() == DEVICE_BACKEND  # nothing was changed


@pytest.mark.skipif(HAS_CUDA, reason="needs a machine without a CUDA device")
def test_mosaic_gpu_without_a_gpu_is_a_backend_error() -> None:
    with pytest.raises(sk.BackendError):
        softmax(rand(100, 100), backend="mosaic_gpu")  # pyright: ignore[reportCallIssue]


def _export_jitted(k: sk.Kernel[..., Any], x: Any) -> Any:
    return jax.export.export(jax.jit(k))(x)  # @export


def _export_kernel(k: sk.Kernel[..., Any], x: Any) -> Any:
    return jax.export.export(k)(x)  # @export-kernel


def _export_for_cuda(k: sk.Kernel[..., Any], x: Any) -> Any:
    return jax.export.export(jax.jit(lambda v: k(v) * 2), platforms=("cuda",))(x)  # @export-cuda


@pytest.mark.parametrize(
    ("export", "marker"),
    [
        (_export_jitted, "export"),
        (_export_kernel, "export-kernel"),
        (_export_for_cuda, "export-cuda"),
    ],
    ids=["jitted", "kernel", "for-cuda"],
)
def test_exporting_the_interpreter_is_a_backend_error(
    export: Callable[[sk.Kernel[..., Any], Any], Any], marker: str
) -> None:
    k = softmax.with_backend("interpret")
    x = rand(100, 100, shift=-10)
    with pytest.raises(sk.BackendError) as info:
        export(k, x)
    assert info.value.kernel == "softmax"
    assert info.value.where is not None
    assert info.value.where.endswith(f"test_runtime.py:{line_of(marker)}"), info.value.where
    assert "cannot be exported" in info.value.what
    assert info.value.fix is not None and "with_backend('mosaic_gpu')" in info.value.fix
    assert_close(k(x), softmax_reference(x))  # the kernel still runs


@pytest.mark.parametrize("jitted", [True, False], ids=["jitted", "kernel"])
def test_export_for_cuda_with_the_mosaic_gpu_backend(jitted: bool) -> None:
    k = softmax.with_backend("mosaic_gpu")
    x = jax.ShapeDtypeStruct((300, 100), jnp.float32)
    exported = jax.export.export(jax.jit(k) if jitted else k, platforms=("cuda",))(x)
    assert exported.platforms == ("cuda",)
    assert [(a.shape, a.dtype) for a in exported.in_avals] == [((300, 100), jnp.float32)]
    assert "mosaic_gpu" in exported.mlir_module()


# --- emitted source ----------------------------------------------------------------------------


def _import_lines(source: str) -> list[str]:
    return [line for line in source.splitlines() if line.lstrip().startswith(("import ", "from "))]


def test_emit_is_standalone_source() -> None:
    x = rand(1000, 100)
    source = softmax.emit(x)
    assert isinstance(source, str)
    assert "plgpu.kernel" in source
    assert "def softmax(" in source
    imports = _import_lines(source)
    assert imports
    assert not any("statickernel" in line for line in imports)
    compile(source, "<emitted>", "exec")
    plan = softmax.plan(x)
    assert f"grid={plan.grid}" in source


def test_emit_is_deterministic() -> None:
    x = rand(1000, 100)
    source = softmax.emit(x)
    assert softmax.emit(x) == source
    assert softmax.emit(jax.ShapeDtypeStruct((1000, 100), jnp.float32)) == source
    # Rebuilt from scratch by a new kernel object: the same text.
    assert fresh(softmax).emit(x) == source


EMIT_CASES = {
    "softmax": lambda: (rand(1000, 100, shift=-10),),
    # f32 rows of 520 B: the emitted wrapper pads them on the host and slices the result.
    "layernorm": lambda: (rand(100, 130, shift=1), rand(130, seed=1), rand(130, seed=2)),
    "add": lambda: (rand(70, 777), rand(70, 777, seed=1)),
}
EMIT_KERNELS: dict[str, sk.Kernel[..., Any]] = {
    "softmax": softmax,
    "layernorm": layernorm,
    "add": add,
}


@needs_mosaic_gpu
@pytest.mark.parametrize("name", EMIT_CASES)
def test_emitted_source_runs_bit_for_bit(name: str) -> None:
    kernel = EMIT_KERNELS[name]
    args = EMIT_CASES[name]()
    source = kernel.emit(*args)
    namespace: dict[str, Any] = {"__name__": "emitted"}
    exec(compile(source, f"<emitted {name}>", "exec"), namespace)
    fn = namespace[name]
    assert fn.__name__ == name
    np.testing.assert_array_equal(np.asarray(fn(*args)), np.asarray(kernel(*args)))


@needs_mosaic_gpu
def test_emitted_source_runs_without_statickernel(tmp_path: Any) -> None:
    x, w, b = rand(100, 130, shift=1), rand(130, seed=1), rand(130, seed=2)
    (tmp_path / "emitted.py").write_text(layernorm.emit(x, w, b))
    for name, array in {"x": x, "w": w, "b": b}.items():
        np.save(tmp_path / f"{name}.npy", np.asarray(array))
    script = textwrap.dedent(
        """
        import pathlib
        import sys

        sys.modules["statickernel"] = None  # any import of statickernel now fails
        import numpy as np

        here = pathlib.Path(sys.argv[1])
        namespace = {"__name__": "emitted"}
        exec(compile((here / "emitted.py").read_text(), "emitted.py", "exec"), namespace)
        try:
            import statickernel  # noqa: F401
        except ImportError:
            pass
        else:
            raise SystemExit("statickernel was importable")
        args = [np.load(here / f"{name}.npy") for name in ("x", "w", "b")]
        np.save(here / "out.npy", np.asarray(namespace["layernorm"](*args)))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "STATICKERNEL_BACKEND"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.asarray(layernorm(x, w, b)))


# --- threads -----------------------------------------------------------------------------------


def _thread_jobs() -> list[tuple[sk.Kernel[..., Any], tuple[Any, ...]]]:
    shapes = [(10, 20), (70, 30), (129, 65), (3, 256), (64, 64), (200, 17), (33, 300), (1, 5)]
    jobs: list[tuple[sk.Kernel[..., Any], tuple[Any, ...]]] = []
    for i, (m, n) in enumerate(shapes):
        x = rand(m, n, seed=i, shift=-3)
        jobs.append(
            [
                (softmax, (x,)),
                (add, (x, x + 1)),
                (rmsnorm, (x, rand(n, seed=i + 100))),
                (row_sum, (x,)),
            ][i % 4]
        )
    return jobs


def test_concurrent_first_calls_build_each_specialization_once(builds: list[str]) -> None:
    jobs = [(fresh(k), args) for k, args in _thread_jobs()]
    tasks = jobs + jobs  # two threads race for every specialization
    start = threading.Barrier(len(tasks), timeout=120)

    def specialize(job: tuple[sk.Kernel[..., Any], tuple[Any, ...]]) -> Any:
        kernel, args = job
        start.wait()
        return kernel.specialize(*args)

    with concurrent.futures.ThreadPoolExecutor(len(tasks)) as pool:
        entries = list(pool.map(specialize, tasks))
    assert len(builds) == len(jobs)
    for (kernel, args), first, second in zip(jobs, entries, entries[len(jobs) :], strict=False):
        assert first is second
        assert len(kernel._cache) == 1
        assert_close(kernel(*args), expected(kernel, *args), rtol=1e-5, atol=1e-4)
    assert len(builds) == len(jobs)


def test_concurrent_calls_in_the_interpreter() -> None:
    jobs = _thread_jobs()
    for kernel, args in jobs:  # build first: only the launches run at once
        kernel.specialize(*args, backend="interpret")
    start = threading.Barrier(len(jobs), timeout=120)

    def call(job: tuple[sk.Kernel[..., Any], tuple[Any, ...]]) -> Any:
        kernel, args = job
        start.wait()
        return np.asarray(kernel(*args, backend="interpret"))

    try:
        for _ in range(3):
            start.reset()
            with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
                outs = list(pool.map(call, jobs))
            for (kernel, args), out in zip(jobs, outs, strict=True):
                assert_close(out, expected(kernel, *args), rtol=1e-5, atol=1e-4)
    finally:
        reset_interpreter()


# --- several results ---------------------------------------------------------------------------


@sk.kernel(tile={"M": "BM"})
def softmax_and_max(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64
) -> tuple[Float[Array, "M N"], Float[Array, " M"]]:
    # The default fill (0) is wrong for a max of negative rows; the reduction must ignore it.
    v = sk.load(x).astype(jnp.float32)
    m = sk.max(v, axis=1)
    e = jnp.exp(v - m[:, None])
    return (e / sk.sum(e, axis=1, keepdims=True)).astype(x.dtype), m.astype(x.dtype)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((128, 256), jnp.float32),
        ((100, 100), jnp.float32),
        ((65, 3), jnp.float32),
        ((1, 1), jnp.float32),
        ((130, 300), jnp.float32),
        ((100, 100), jnp.bfloat16),
    ],
    ids=["128x256", "100x100", "65x3", "1x1", "130x300", "100x100-bf16"],
)
def test_two_results(shape: tuple[int, int], dtype: Any) -> None:
    x = rand(*shape, shift=-10, dtype=dtype)
    out = softmax_and_max(x)
    assert isinstance(out, tuple)
    assert len(out) == 2
    probs, row_max = out
    assert probs.shape == shape
    assert row_max.shape == (shape[0],)
    assert probs.dtype == row_max.dtype == dtype
    tol = 1e-5 if dtype == jnp.float32 else 2e-2
    assert_close(probs, softmax_reference(x), rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.asarray(row_max), np.asarray(jnp.max(x, axis=1)))
    plan = softmax_and_max.plan(x)
    assert plan.tuple_result
    assert [r.shape for r in plan.results] == [shape, (shape[0],)]
    assert [r.kind for r in plan.results] == ["tile", "row"]


@sk.kernel(tile={"M": "BM"})
def one_tuple(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> tuple[Float[Array, "M N"]]:
    return (sk.load(x) * 2,)


def test_a_one_element_tuple_result() -> None:
    x = rand(70, 30)
    out = one_tuple(x)
    assert isinstance(out, tuple)
    assert len(out) == 1
    assert_close(out[0], 2 * x)


# --- sk.dim ------------------------------------------------------------------------------------

SEEN_DIMS: list[tuple[int, int]] = []


@sk.kernel(tile={"M": "BM"})
def row_mean(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
    SEEN_DIMS.append((sk.dim("M"), sk.dim("N")))
    return sk.sum(sk.load(x), axis=1) / sk.dim("N")


@sk.kernel(tile={"M": "BM"})
def divide_by_rows(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    # M is tiled: sk.dim gives the bound size, not the block.
    return sk.load(x) / sk.dim("M")


@pytest.mark.parametrize("shape", [(100, 30), (7, 3), (64, 256), (1, 300)])
def test_dim_gives_the_bound_size(shape: tuple[int, int]) -> None:
    x = rand(*shape)
    assert_close(row_mean(x), jnp.mean(x, axis=1), rtol=1e-5, atol=1e-6)
    assert SEEN_DIMS[-1] == shape
    assert all(type(v) is int for v in SEEN_DIMS[-1])
    assert_close(divide_by_rows(x), x / shape[0])


def test_dim_outside_a_body_is_a_body_error() -> None:
    with pytest.raises(sk.BodyError) as info:
        sk.dim("N")
    assert info.value.fix


def test_dim_of_an_undeclared_name_is_a_body_error() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x) * sk.dim("K")

    assert info.value.dim == "K"


def test_a_backend_block_sets_the_backend_of_the_calls_inside_it() -> None:
    x = rand(100, 100, shift=-10)
    with sk.backend(OTHER_BACKEND) as chosen:
        assert chosen == OTHER_BACKEND
        assert sk.default_backend() == OTHER_BACKEND
        assert fresh(softmax).plan(x).backend == OTHER_BACKEND
        # The call's and the kernel's own backend win over the block's.
        assert softmax.plan(x, backend=DEVICE_BACKEND).backend == DEVICE_BACKEND
        assert softmax.with_backend(DEVICE_BACKEND).plan(x).backend == DEVICE_BACKEND
    assert sk.default_backend() == DEVICE_BACKEND
    with sk.backend("interpret"):
        assert_close(softmax(x), softmax_reference(x))


def test_backend_blocks_nest_and_win_over_the_process_setting() -> None:
    sk.set_backend(OTHER_BACKEND)
    with sk.backend(DEVICE_BACKEND):
        assert sk.default_backend() == DEVICE_BACKEND
        with sk.backend(OTHER_BACKEND):
            assert sk.default_backend() == OTHER_BACKEND
        assert sk.default_backend() == DEVICE_BACKEND
    assert sk.default_backend() == OTHER_BACKEND


def test_a_backend_block_ends_on_an_exception_and_is_per_thread() -> None:
    with pytest.raises(ZeroDivisionError), sk.backend(OTHER_BACKEND):
        _ = 1 / 0
    assert sk.default_backend() == DEVICE_BACKEND
    seen: list[str] = []
    with sk.backend(OTHER_BACKEND):
        thread = threading.Thread(target=lambda: seen.append(sk.default_backend()))
        thread.start()
        thread.join()
    assert seen == [DEVICE_BACKEND]


def test_an_unknown_backend_block_is_refused_before_it_starts() -> None:
    with pytest.raises(sk.BackendError, match=r"unknown backend 'cuda' \(sk.backend\)"):
        sk.backend("cuda")
    assert sk.default_backend() == DEVICE_BACKEND
