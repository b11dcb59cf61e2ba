"""Choosing a backend: the warning on a GPU machine whose jax cannot use the GPU, kernels
that differ only in their backend sharing one cache, and a jax too old to run the generated
modules refusing every run with the same error."""

import warnings
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from markers import line_finder
from softmax import softmax, softmax_reference
from statickernel import _compat
from statickernel.runtime import backend as _backend

line_of = line_finder(__file__)


@pytest.fixture
def gpu_without_cuda_jax(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine with an NVIDIA driver whose jax has no CUDA backend (a CPU-only jaxlib)."""
    monkeypatch.setattr(_backend, "has_cuda", lambda: False)
    monkeypatch.setattr(_backend, "has_nvidia_gpu", lambda: True)
    monkeypatch.delenv(_backend.ENV_VAR, raising=False)
    _backend._warn_interpreter_fallback.cache_clear()
    yield
    _backend._warn_interpreter_fallback.cache_clear()


@pytest.mark.usefixtures("gpu_without_cuda_jax")
def test_the_default_interpreter_on_a_gpu_machine_warns_once_at_the_users_line() -> None:
    with pytest.warns(sk.InterpreterFallbackWarning) as caught:
        assert sk.default_backend() == "interpret"
        assert sk.default_backend() == "interpret"
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "NVIDIA GPU" in text and "interpreter" in text
    assert "jax[cuda13]" in text and "STATICKERNEL_BACKEND=interpret" in text
    assert caught[0].filename == __file__


@pytest.mark.usefixtures("gpu_without_cuda_jax")
@pytest.mark.parametrize(
    "choose",
    [
        lambda mp: mp.setenv(_backend.ENV_VAR, "interpret"),
        lambda mp: sk.set_backend("interpret"),
    ],
    ids=["environment", "set_backend"],
)
def test_an_interpreter_chosen_on_purpose_does_not_warn(
    monkeypatch: pytest.MonkeyPatch, choose
) -> None:
    choose(monkeypatch)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", sk.InterpreterFallbackWarning)
            assert sk.default_backend() == "interpret"
            with sk.backend("interpret"):
                assert sk.default_backend() == "interpret"
    finally:
        sk.set_backend(None)


def test_no_warning_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "has_cuda", lambda: False)
    monkeypatch.setattr(_backend, "has_nvidia_gpu", lambda: False)
    monkeypatch.delenv(_backend.ENV_VAR, raising=False)
    _backend._warn_interpreter_fallback.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", sk.InterpreterFallbackWarning)
        assert sk.default_backend() == "interpret"


def test_gpu_detection_does_not_start_jax_or_cuda() -> None:
    assert isinstance(_backend.has_nvidia_gpu(), bool)


def test_with_backend_shares_the_kernels_specializations() -> None:
    x = jax.random.normal(jax.random.key(1), (37, 50))
    interpreted = softmax.with_backend("interpret")
    first = interpreted.specialize(x)
    assert interpreted.with_backend("interpret").specialize(x) is first
    assert softmax.specialize(x, backend="interpret") is first
    np.testing.assert_allclose(
        np.asarray(interpreted(x)), np.asarray(softmax_reference(x)), rtol=1e-5, atol=1e-6
    )
    # Other constants are another kernel, with a cache of its own.
    assert softmax.bind(BM=128).with_backend("interpret").specialize(x) is not first


@sk.kernel(tile={"M": "BM"})
def _doubled(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return sk.load(x) * 2


@pytest.fixture
def jax_without_mosaic_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A jax whose Pallas Mosaic GPU cannot run what statickernel generates (jax 0.10.2)."""
    monkeypatch.setattr(_compat, "runs_mosaic_gpu", lambda: False)


def _refused(exc: sk.BackendError, kernel: str, line: int) -> None:
    assert "cannot run or be lowered on this jax" in exc.what
    assert exc.kernel == kernel
    assert exc.where is not None and exc.where.endswith(f"test_backends.py:{line}")
    oldest = ".".join(map(str, _compat.MOSAIC_GPU_MIN_JAX))
    assert exc.expected == f"jax>={oldest}"
    assert exc.actual == f"jax {jax.__version__}"


@pytest.mark.usefixtures("jax_without_mosaic_gpu")
def test_a_jax_without_mosaic_gpu_plans_and_emits_but_refuses_a_run() -> None:
    kernel = _doubled.bind().with_backend("interpret")  # a cache of its own
    x = jax.ShapeDtypeStruct((24, 40), np.float32)
    assert kernel.plan(x) is not None
    assert "def _doubled" in str(kernel.emit(x))
    with pytest.raises(sk.BackendError) as info:
        kernel(jnp.ones((24, 40), jnp.float32))  # @refused-call
    _refused(info.value, "_doubled", line_of("refused-call"))
    with pytest.raises(sk.BackendError) as info:
        kernel.lower(x)  # @refused-lowering
    _refused(info.value, "_doubled", line_of("refused-lowering"))


class _Duck:
    """Has the `.shape` and `.dtype` of an array, and nothing else of one."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape, self.dtype = shape, jnp.dtype(jnp.float32)


@pytest.mark.usefixtures("jax_without_mosaic_gpu")
def test_a_jax_without_mosaic_gpu_refuses_first_what_a_call_refuses_before_its_launch() -> None:
    """Only the launch is refused: a derivative the kernel lacks, or an operand that is not an
    array at a cached shape, is refused as on a jax that runs the module."""
    kernel = _doubled.bind().with_backend("interpret")
    x = jnp.ones((24, 40), jnp.float32)
    with pytest.raises(sk.NotDifferentiableError):
        jax.grad(lambda x: kernel(x).sum())(x)
    kernel.plan(jax.ShapeDtypeStruct((24, 40), np.float32))
    with pytest.raises(sk.OperandError) as info:
        kernel(_Duck((24, 40)))  # type: ignore[arg-type]
    assert info.value.operand == "x"


@pytest.mark.usefixtures("jax_without_mosaic_gpu")
def test_a_jax_without_mosaic_gpu_refuses_the_race_detector() -> None:
    """`detect_races` runs the generated module in the interpreter: refused like a call, not an
    AttributeError from a Pallas name that jax lacks."""
    x = np.ones((24, 40), np.float32)
    with pytest.raises(sk.BackendError) as info:
        sk.testing.detect_races(_doubled, x)  # @refused-races
    _refused(info.value, "_doubled", line_of("refused-races"))
