"""A form trial declines only where the form cannot express the body (`NotInForm`): any
other error raised while trying a form surfaces, never hidden as a decline."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from statickernel._compiler.ir.nodes import Form
from statickernel._compiler.mosaic_gpu.forms import base
from statickernel._compiler.mosaic_gpu.lower.translate import NotInForm, Translation
from statickernel._errors import SharedMemoryError, UnsupportedOpError


def _add() -> sk.Kernel[..., Any]:
    """An elementwise add, which takes the strided block; a new kernel each call, so that no
    specialization cached by another test is planned again."""

    @sk.kernel(tile={"M": "BM", "N": "BN"})
    def add(
        x: Float[Array, "M N"],
        y: Float[Array, "M N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 128,
    ) -> Float[Array, "M N"]:
        return sk.load(x) + sk.load(y)

    return add


def _softmax() -> sk.Kernel[..., Any]:
    """A row softmax, whose whole rows take the row form where they are too wide."""

    @sk.kernel(tile={"M": "BM"})
    def softmax(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x, fill=-jnp.inf).astype(jnp.float32)
        e = jnp.exp(v - sk.max(v, axis=1, keepdims=True))
        return (e / sk.sum(e, axis=1, keepdims=True)).astype(x.dtype)

    return softmax


def _raising(monkeypatch: pytest.MonkeyPatch, error: Exception) -> list[int]:
    """Every form trial's translation raises `error` (the block form's is not a trial, and
    translates as it is); the list counts the trials."""
    trials: list[int] = []

    def translate(*args: Any) -> Translation:
        trials.append(1)
        raise error

    monkeypatch.setattr(base, "translate", translate)
    return trials


def _unsupported() -> UnsupportedOpError:
    return UnsupportedOpError(
        "the body does what no form lowers",
        kernel="k",
        where="the body",
        expected="an op Mosaic GPU lowers",
        actual="`op`",
        fix="leave it out",
    )


def test_the_plan_without_trials_takes_the_strided_block() -> None:
    a = jax.ShapeDtypeStruct((1000, 1000), jnp.float32)
    assert _add().plan(a, a).form is Form.STRIDED


def test_a_form_that_cannot_express_the_body_is_declined(monkeypatch: pytest.MonkeyPatch) -> None:
    trials = _raising(monkeypatch, NotInForm("the form cannot"))
    a = jax.ShapeDtypeStruct((1000, 1000), jnp.float32)
    assert _add().plan(a, a).form is Form.BLOCK
    assert trials


def test_an_error_raised_in_a_form_trial_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    trials = _raising(monkeypatch, _unsupported())
    a = jax.ShapeDtypeStruct((1000, 1000), jnp.float32)
    with pytest.raises(UnsupportedOpError, match="the body does what no form lowers"):
        _add().plan(a, a)
    assert trials


def test_an_error_raised_in_a_row_form_trial_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Blocks of whole rows too wide for shared memory: only the row form would hold them.
    _raising(monkeypatch, _unsupported())
    with pytest.raises(UnsupportedOpError, match="the body does what no form lowers"):
        _softmax().plan(jax.ShapeDtypeStruct((1001, 1000), jnp.float32))


def test_the_row_forms_decline_names_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    _raising(monkeypatch, NotInForm("the row form cannot"))
    with pytest.raises(SharedMemoryError, match="does not take the body: the row form cannot"):
        _softmax().plan(jax.ShapeDtypeStruct((1001, 1000), jnp.float32))
