"""Choosing a backend: the warning on a GPU machine whose jax cannot use the GPU, and
kernels that differ only in their backend sharing one cache."""

import warnings
from collections.abc import Iterator

import jax
import numpy as np
import pytest

import statickernel as sk
from softmax import softmax, softmax_reference
from statickernel.runtime import backend as _backend


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
    assert "statickernel[cuda13]" in text and "STATICKERNEL_BACKEND=interpret" in text
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
