"""What a type checker sees at a kernel's call sites; checked by pyright in the lint and by
tests/compiler/declare/test_typing.py. Each line that must be a type error carries a `pyright: ignore` for its
rule, and unnecessary ignores are errors here: a call that stops being refused fails the lint.
"""

# pyright: reportUnnecessaryTypeIgnoreComment=true

from typing import assert_type

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


@sk.kernel(tile={"M": "BM"}, reference=lambda x: jax.nn.softmax(x, axis=-1))
def softmax(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    v = sk.load(x, fill=-jnp.inf)
    e = jnp.exp(v - sk.max(v, axis=1, keepdims=True))
    return e / sk.sum(e, axis=1, keepdims=True)


@sk.kernel(tile={"M": "BM"})
def moments(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, eps: sk.Const[float] = 1e-6
) -> tuple[Float[Array, " M"], Float[Array, " M"]]:
    v = sk.load(x)
    mean = sk.sum(v, axis=1, keepdims=True) / x.shape[1]
    return mean[:, 0], jnp.sqrt(sk.sum((v - mean) ** 2, axis=1) / x.shape[1] + eps)


def typed_calls(x: Array) -> None:
    """Calls a type checker accepts, with the types it infers."""
    assert_type(softmax(x), Array)
    assert_type(softmax(x, BM=128), Array)
    assert_type(moments(x, eps=1e-5), tuple[Array, Array])
    assert_type(softmax.with_backend("interpret")(x), Array)
    assert_type(softmax.bind(BM=128)(x), Array)
    assert_type(softmax.lower(x), jax.stages.Lowered)
    assert_type(softmax.trace(x), jax.stages.Traced)
    assert_type(softmax.plan(x), sk.LaunchPlan)
    assert_type(softmax.emit(x), str)


def refused_calls(x: Array) -> None:
    """Calls a type checker refuses: overrides checked by name and type, operands by count."""
    softmax(x, BM="big")  # pyright: ignore[reportArgumentType]
    softmax(x, BN=128)  # pyright: ignore[reportCallIssue]
    softmax(x, 64)  # pyright: ignore[reportCallIssue]
    softmax()  # pyright: ignore[reportCallIssue]
    moments(x, eps="small")  # pyright: ignore[reportArgumentType]
    softmax(x).no_such_attribute  # pyright: ignore[reportAttributeAccessIssue]  # noqa: B018
