"""Approximate transcendentals (`@sk.kernel(approx_math=True)`): the plan's decision and its
`math:` line, the generated module's compiler parameters, a body that keeps its kernel exact
(a coarse op: tanh, sin, cos, sqrt), the interpreter's exact results, and a bad value."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from tolerances import assert_close, tolerance_for


def _kernel(body: Callable[[jax.Array], jax.Array], *, approx_math: bool = True) -> sk.Kernel:
    @sk.kernel(tile={"M": "BM"}, approx_math=approx_math)
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return body(sk.load(x))

    return k


def _softmax2(v: jax.Array) -> jax.Array:
    e = jnp.exp2(v - jnp.max(v, axis=1, keepdims=True))
    return e / jnp.sum(e, axis=1, keepdims=True)


def _x() -> jax.Array:
    return jax.random.normal(jax.random.key(0), (100, 128))


def test_a_softmax_in_base_2_takes_approximate_exp2() -> None:
    kernel = _kernel(_softmax2)
    plan = kernel.plan(_x())
    assert plan.approx_math is not None and plan.approx_math.applied
    assert plan.approx_math.approximated == ("exp2",)
    assert "  math: approximate exp2 (PTX .approx.ftz" in str(plan)
    assert "approx_math=True" in kernel.emit(_x())


def test_the_ops_approximated_are_listed_in_order() -> None:
    kernel = _kernel(lambda v: jnp.log(jnp.exp(v) + 1.0) * jax.lax.rsqrt(v * v + 1.0))
    plan = kernel.plan(_x())
    assert plan.approx_math is not None
    assert plan.approx_math.approximated == ("exp", "log", "rsqrt")


@pytest.mark.parametrize(
    ("op", "body"),
    [
        ("tanh", lambda v: jnp.exp(jnp.tanh(v))),
        ("sin", lambda v: jnp.exp2(jnp.sin(v))),
        ("cos", lambda v: jnp.log(jnp.cos(v) + 2.0)),
        ("sqrt", lambda v: jnp.exp(jnp.sqrt(v * v))),
    ],
)
def test_a_coarse_op_keeps_the_kernel_exact(op: str, body: Callable[[Any], Any]) -> None:
    kernel = _kernel(body)
    plan = kernel.plan(_x())
    assert plan.approx_math is not None and not plan.approx_math.applied
    assert plan.approx_math.kept_exact_by == op
    assert f"math: exact: the body takes {op}" in str(plan)
    assert "approx_math=True" not in kernel.emit(_x())


def test_a_body_without_transcendentals_says_so_and_compiles_exactly() -> None:
    kernel = _kernel(lambda v: v * 2.0 + 1.0)
    plan = kernel.plan(_x())
    assert plan.approx_math is not None and not plan.approx_math.applied
    assert "math: exact: the body takes no exp" in str(plan)
    assert "approx_math=True" not in kernel.emit(_x())


def test_a_kernel_that_does_not_ask_has_no_math_line() -> None:
    kernel = _kernel(_softmax2, approx_math=False)
    plan = kernel.plan(_x())
    assert plan.approx_math is None and "math:" not in str(plan)
    assert "approx_math=True" not in kernel.emit(_x())


def test_the_interpreter_is_exact_either_way() -> None:
    x = _x()
    want = jax.nn.softmax(x * jnp.log(2.0), axis=1)
    assert_close(_kernel(_softmax2)(x), want, tolerance_for(jnp.float32, terms=128))


def test_an_approximate_kernel_cross_lowers_with_its_parameter() -> None:
    lowered = _kernel(_softmax2).lower(jax.ShapeDtypeStruct((100, 128), jnp.float32))
    assert "mosaic_gpu" in lowered.as_text()


def test_a_value_other_than_a_bool_is_refused() -> None:
    with pytest.raises(sk.AnnotationError) as info:
        _kernel(_softmax2, approx_math="yes")  # pyright: ignore[reportArgumentType]
    error = info.value
    assert "approx_math= is not a bool" in error.what and error.actual == "'yes'"
