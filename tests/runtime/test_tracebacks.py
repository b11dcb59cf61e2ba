"""A statickernel error's traceback starts at the user's code.

Its message already names the user's line and the fix, so the frames inside statickernel add
nothing: at most the public entry point's line remains, and no chained exception is shown.
"""

import pathlib
import traceback
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float

import statickernel as sk

PACKAGE_DIR = pathlib.Path(sk.__file__).resolve().parent
ENTRY_POINTS = {"decorate", "kernel", "__call__", "plan", "emit", "lower", "specialize", "bind"}


@sk.kernel(tile={"M": "BM"}, backend="interpret")
def double(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return 2 * sk.load(x)


def _declare_unknown_tile_dim() -> None:
    @sk.kernel(tile={"K": "BM"})
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return sk.load(x)


def _declare_unsupported_op_without_arguments() -> None:
    @sk.kernel
    def k(x: Float[Array, "M N"]) -> Float[Array, "M N"]:
        return jnp.sort(sk.load(x), axis=1)


def _declare_body_that_fails_to_trace() -> None:
    @sk.kernel(tile={"M": "BM"})
    def k(
        x: Float[Array, "M N"], b: Float[Array, " M"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        return sk.load(x) + sk.load(b)


X = jnp.ones((100, 30), jnp.float32)

CASES: dict[str, Callable[[], Any]] = {
    "declaration": _declare_unknown_tile_dim,
    "declaration-without-arguments": _declare_unsupported_op_without_arguments,
    "body": _declare_body_that_fails_to_trace,
    "call-wrong-rank": lambda: double(X[0]),
    "call-bad-override": lambda: double(X, BM=96),
    "call-inside-jit": lambda: jax.jit(lambda x: double(x, BM=96))(X),
    "plan": lambda: double.plan(X, BM=64.0),
    "emit": lambda: double.emit(X, X),
    "lower": lambda: double.lower(X.astype(jnp.int32)),
    "specialize": lambda: double.specialize(X[0]),
    "bind": lambda: double.bind(BM=100),
}


def _statickernel_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    return [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if pathlib.Path(frame.filename).resolve().is_relative_to(PACKAGE_DIR)
    ]


@pytest.mark.parametrize("case", CASES)
def test_the_traceback_has_no_internal_frames(case: str) -> None:
    with pytest.raises(sk.StaticKernelError) as info:
        CASES[case]()
    frames = _statickernel_frames(info.value)
    assert len(frames) <= 1, [f"{f.filename}:{f.lineno} in {f.name}" for f in frames]
    if frames:
        assert frames[0].name in ENTRY_POINTS, frames[0].name
    text = "".join(traceback.format_exception(info.value))
    assert "During handling of the above exception" not in text
    assert "The above exception was the direct cause" not in text
    assert str(info.value) in text  # under jax.jit, JAX appends a note of its own
    assert pathlib.Path(__file__).name in text  # the user's frame is kept


def test_other_exceptions_keep_their_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only statickernel's own errors are shortened: an internal failure stays debuggable."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("internal failure")

    kernel = double.bind()
    monkeypatch.setattr(sk.Kernel, "_build", broken)
    with pytest.raises(RuntimeError) as info:
        kernel(X)
    names = [f.name for f in _statickernel_frames(info.value)]
    assert names[:2] == ["__call__", "_specialize"], names
