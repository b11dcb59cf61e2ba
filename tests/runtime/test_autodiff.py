"""Kernels inside jax.grad: `vjp="reference"`, a declared backward, and neither.

The gallery's softmax, rmsnorm and layernorm declare backwards that call backward kernels;
their `*_by_reference` twins declare `vjp="reference"`. Their derivatives are compared with JAX's
derivatives of the jnp references, in the Mosaic GPU interpreter. Each loss weighs the
kernel's result by a fixed random cotangent: a plain sum would give softmax a zero gradient.
"""

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jaxtyping import Array, Float, Int32

import statickernel as sk
from layernorm import layernorm, layernorm_by_reference, layernorm_reference
from rmsnorm import rmsnorm, rmsnorm_by_reference, rmsnorm_reference
from softmax import softmax, softmax_by_reference, softmax_reference

F32 = jnp.dtype(jnp.float32)
BF16 = jnp.dtype(jnp.bfloat16)

# name -> (kernel, reference)
KERNELS: dict[str, tuple[sk.Kernel[..., Any], Callable[..., Any]]] = {
    "softmax": (softmax, softmax_reference),
    "rmsnorm": (rmsnorm, rmsnorm_reference),
    "layernorm": (layernorm, layernorm_reference),
    "softmax_by_reference": (softmax_by_reference, softmax_reference),
    "rmsnorm_by_reference": (rmsnorm_by_reference, rmsnorm_reference),
    "layernorm_by_reference": (layernorm_by_reference, layernorm_reference),
}
FORWARD_MODE = ("softmax_by_reference", "rmsnorm_by_reference", "layernorm_by_reference")
# Launches of one jax.grad: the forward's, and those of the backward kernels.
LAUNCHES = {"softmax": 2, "rmsnorm": 3, "layernorm": 3}

SHAPES = {
    "64x128": (64, 128),  # multiples of the block
    "77x130": (77, 130),  # ragged rows and f32 rows TMA cannot address
    "1x5": (1, 5),  # one short row
}
BIG = (300, 777)  # several row blocks, the last ragged, and ragged columns
# The max abs error allowed, relative to the reference gradient's largest magnitude.
TOLERANCE = {F32: 1e-5, BF16: 2e-2}


def operands(name: str, shape: tuple[int, int], dtype: Any, seed: int = 0) -> tuple[Any, ...]:
    keys = jax.random.split(jax.random.key(seed), 3)
    m, n = shape
    x = jax.random.normal(keys[0], (m, n), jnp.float32).astype(dtype)
    w = (1 + 0.5 * jax.random.normal(keys[1], (n,), jnp.float32)).astype(dtype)
    b = jax.random.normal(keys[2], (n,), jnp.float32).astype(dtype)
    return {"softmax": (x,), "layernorm": (x, w, b)}.get(name.removesuffix("_by_reference"), (x, w))


def cotangent(shape: tuple[int, ...], dtype: Any, seed: int = 1) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


def weighted_loss(fn: Callable[..., Any], probe: jax.Array) -> Callable[..., jax.Array]:
    return lambda *args: jnp.sum(fn(*args).astype(jnp.float32) * probe.astype(jnp.float32))


def argnums(args: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(range(len(args)))


def assert_close(got: Any, want: Any, dtype: Any) -> None:
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        g32, w32 = np.asarray(g, np.float32), np.asarray(w, np.float32)
        scale = max(1.0, float(np.max(np.abs(w32))) if w32.size else 1.0)
        np.testing.assert_allclose(g32, w32, atol=TOLERANCE[dtype] * scale, rtol=0)


def launches(jaxpr: Any) -> int:
    """How many interpreted kernel launches a jaxpr makes (each is one host callback)."""
    return str(jaxpr).count("pure_callback[")


# --- reverse mode -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
@pytest.mark.parametrize("name", list(KERNELS))
def test_grad_matches_the_references(name: str, shape: tuple[int, int], dtype: Any) -> None:
    kernel, reference = KERNELS[name]
    args = operands(name, shape, dtype)
    probe = cotangent(shape, dtype)
    got = jax.grad(weighted_loss(kernel, probe), argnums=argnums(args))(*args)
    want = jax.grad(weighted_loss(reference, probe), argnums=argnums(args))(*args)
    assert_close(got, want, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "layernorm"])
def test_grad_at_a_large_ragged_shape(name: str) -> None:
    kernel, reference = KERNELS[name]
    args = operands(name, BIG, F32)
    probe = cotangent(BIG, F32)
    got = jax.jit(jax.grad(weighted_loss(kernel, probe), argnums=argnums(args)))(*args)
    want = jax.grad(weighted_loss(reference, probe), argnums=argnums(args))(*args)
    assert_close(got, want, F32)


@pytest.mark.parametrize("name", list(KERNELS))
def test_vjp_gives_the_kernels_output_and_the_references_cotangents(name: str) -> None:
    kernel, reference = KERNELS[name]
    args = operands(name, (77, 130), F32)
    out, pullback = jax.vjp(kernel, *args)
    np.testing.assert_array_equal(out, kernel(*args))
    ct = cotangent((77, 130), F32)
    assert_close(pullback(ct), jax.vjp(reference, *args)[1](ct), F32)


@pytest.mark.parametrize("name", list(KERNELS))
def test_value_and_grad(name: str) -> None:
    kernel, reference = KERNELS[name]
    args = operands(name, (77, 130), F32)
    probe = cotangent((77, 130), F32)
    value, grads = jax.value_and_grad(weighted_loss(kernel, probe), argnums=argnums(args))(*args)
    assert float(value) == float(weighted_loss(kernel, probe)(*args))
    want = jax.grad(weighted_loss(reference, probe), argnums=argnums(args))(*args)
    assert_close(grads, want, F32)


@pytest.mark.parametrize("name", list(KERNELS))
def test_grad_under_jit(name: str) -> None:
    kernel, reference = KERNELS[name]
    args = operands(name, (77, 130), BF16)
    probe = cotangent((77, 130), BF16)
    got = jax.jit(jax.grad(weighted_loss(kernel, probe), argnums=argnums(args)))(*args)
    want = jax.grad(weighted_loss(reference, probe), argnums=argnums(args))(*args)
    assert_close(got, want, BF16)


@pytest.mark.parametrize("name", list(KERNELS))
def test_grad_runs_the_kernel_once(name: str) -> None:
    kernel, _ = KERNELS[name]
    args = operands(name, (64, 128), F32)
    probe = cotangent((64, 128), F32)
    jaxpr = jax.make_jaxpr(jax.grad(weighted_loss(kernel, probe), argnums=argnums(args)))(*args)
    assert launches(jaxpr) == LAUNCHES.get(name, 1)


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "rmsnorm_by_reference"])
def test_grad_under_vmap(name: str) -> None:
    kernel, reference = KERNELS[name]
    stacked = [operands(name, (40, 24), F32, seed=s) for s in range(2)]
    batched = tuple(jnp.stack(parts) for parts in zip(*stacked, strict=True))
    probe = cotangent((40, 24), F32)
    grad = jax.grad(weighted_loss(kernel, probe), argnums=argnums(stacked[0]))
    got = jax.vmap(grad)(*batched)
    want = jax.vmap(jax.grad(weighted_loss(reference, probe), argnums=argnums(stacked[0])))(
        *batched
    )
    assert_close(got, want, F32)


def test_grad_of_a_vmapped_kernel() -> None:
    xs = jnp.stack([operands("softmax", (40, 24), F32, seed=s)[0] for s in range(2)])
    probe = cotangent((2, 40, 24), F32)
    got = jax.grad(weighted_loss(jax.vmap(softmax), probe))(xs)
    want = jax.grad(weighted_loss(jax.vmap(softmax_reference), probe))(xs)
    assert_close(got, want, F32)


@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm_by_reference"])
def test_a_per_call_override_reaches_the_derivative(name: str) -> None:
    kernel, reference = KERNELS[name]
    x, w = operands("rmsnorm", (77, 130), F32)
    x = 0.1 * x  # small rows, where eps weighs
    probe = cotangent((77, 130), F32)
    got = jax.grad(weighted_loss(functools.partial(kernel, eps=0.5), probe))(x, w)
    want = jax.grad(weighted_loss(functools.partial(reference, eps=0.5), probe))(x, w)
    default = jax.grad(weighted_loss(reference, probe))(x, w)
    assert_close(got, want, F32)
    assert float(jnp.max(jnp.abs(got - default))) > 1e-2


def test_a_bound_kernel_keeps_its_derivative() -> None:
    x, w = operands("rmsnorm", (64, 128), F32)
    x = 0.1 * x
    probe = cotangent((64, 128), F32)
    got = jax.grad(weighted_loss(rmsnorm.bind(eps=0.5), probe))(x, w)
    want = jax.grad(weighted_loss(functools.partial(rmsnorm_reference, eps=0.5), probe))(x, w)
    assert_close(got, want, F32)
    got = jax.grad(weighted_loss(rmsnorm_by_reference.with_backend("interpret"), probe))(x, w)
    assert_close(got, jax.grad(weighted_loss(rmsnorm_reference, probe))(x, w), F32)


@settings(max_examples=5, deadline=None)
@given(
    name=st.sampled_from(["softmax", "rmsnorm", "layernorm", "layernorm_by_reference"]),
    m=st.integers(1, 150),
    n=st.integers(1, 200),
)
def test_grad_matches_the_references_at_any_shape(name: str, m: int, n: int) -> None:
    # One column is a norm's worst cancellation: layernorm's dx is 0 times rsqrt(eps) ~ 316,
    # rmsnorm's r * g * w * (1 - x**2 / (x**2 + eps)), and a product that one side contracts
    # into a fused multiply-add and the other rounds first differs there by hundreds of ulps.
    assume(not (name != "softmax" and n == 1))
    kernel, reference = KERNELS[name]
    args = operands(name, (m, n), F32, seed=m * 1000 + n)
    probe = cotangent((m, n), F32)
    got = jax.grad(weighted_loss(kernel, probe), argnums=argnums(args))(*args)
    want = jax.grad(weighted_loss(reference, probe), argnums=argnums(args))(*args)
    assert_close(got, want, F32)


def test_a_small_model() -> None:
    """loss(x, w) = sum(softmax(rmsnorm(x, w) @ W)), weighted, against the same in jnp."""
    x, w = operands("rmsnorm", (96, 64), F32)
    proj = 0.2 * jax.random.normal(jax.random.key(5), (64, 48), jnp.float32)
    probe = cotangent((96, 48), F32)

    def loss(norm: Callable[..., Any], soft: Callable[..., Any]) -> Callable[..., jax.Array]:
        return lambda x, w: jnp.sum(soft(norm(x, w) @ proj) * probe)

    want = jax.grad(loss(rmsnorm_reference, softmax_reference), argnums=(0, 1))(x, w)
    for norm in (rmsnorm, rmsnorm_by_reference):
        got = jax.jit(jax.grad(loss(norm, softmax), argnums=(0, 1)))(x, w)
        assert_close(got, want, F32)


# --- forward mode -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("name", FORWARD_MODE)
def test_jvp_gives_the_kernels_output_and_the_references_tangent(name: str, dtype: Any) -> None:
    kernel, reference = KERNELS[name]
    args = operands(name, (77, 130), dtype)
    tangents = tuple(cotangent(a.shape, dtype, seed=7 + i) for i, a in enumerate(args))
    out, tangent = jax.jvp(kernel, args, tangents)
    np.testing.assert_array_equal(out, kernel(*args))
    assert_close(tangent, jax.jvp(reference, args, tangents)[1], dtype)
    out, tangent = jax.jit(lambda a, t: jax.jvp(kernel, a, t))(args, tangents)
    np.testing.assert_array_equal(out, kernel(*args))


def test_jacfwd_and_jacrev_agree() -> None:
    x = operands("softmax", (1, 5), F32)[0]
    assert_close(jax.jacfwd(softmax_by_reference)(x), jax.jacrev(softmax)(x), F32)
    assert_close(jax.jacfwd(softmax_by_reference)(x), jax.jacfwd(softmax_reference)(x), F32)


def test_jvp_through_a_declared_backward_is_a_static_kernel_error() -> None:
    x, w = operands("rmsnorm", (64, 128), F32)
    with pytest.raises(sk.NotDifferentiableError) as info:
        jax.jvp(lambda x: rmsnorm(x, w), (x,), (x,))
    assert info.value.kernel == "rmsnorm"
    assert info.value.where is not None and "test_autodiff.py" in info.value.where
    assert "forward mode" in info.value.what
    assert info.value.fix is not None and 'vjp="reference"' in info.value.fix


def test_jvp_of_a_jitted_function_of_a_declared_backward_is_jaxs_type_error() -> None:
    """jax.jit traces the function before jax.jvp meets the custom VJP, outside the kernel's
    call: what the user sees is JAX's own TypeError."""
    x, w = operands("rmsnorm", (64, 128), F32)
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        jax.jvp(jax.jit(lambda x: rmsnorm(x, w)), (x,), (x,))


# --- integer operands ---------------------------------------------------------------------------


def masked_reference(x: jax.Array, keep: jax.Array) -> jax.Array:
    return x * keep.astype(x.dtype)


def masked_backward(
    x: jax.Array, keep: jax.Array, y: jax.Array, dy: jax.Array
) -> tuple[jax.Array, None]:
    return dy * keep.astype(dy.dtype), None


def _masked(
    x: Float[Array, "M N"], keep: Int32[Array, "M N"], *, BM: sk.Const[int] = 64
) -> Float[Array, "M N"]:
    return sk.load(x) * sk.load(keep).astype(x.dtype)


@pytest.mark.parametrize("vjp", ["reference", masked_backward], ids=["reference", "backward"])
def test_an_integer_operand_has_no_gradient(vjp: Any) -> None:
    kernel = sk.kernel(tile={"M": "BM"}, reference=masked_reference, vjp=vjp)(_masked)
    x = operands("softmax", (70, 16), F32)[0]
    keep = (jnp.arange(70 * 16).reshape(70, 16) % 3 == 0).astype(jnp.int32)
    probe = cotangent((70, 16), F32)
    got = jax.grad(weighted_loss(kernel, probe))(x, keep)
    np.testing.assert_allclose(got, probe * keep)
    dx, dkeep = jax.grad(weighted_loss(kernel, probe), argnums=(0, 1), allow_int=True)(x, keep)
    np.testing.assert_allclose(dx, probe * keep)
    assert dkeep.dtype == jax.dtypes.float0


# --- declaration and backward errors -----------------------------------------------------------


def _scaled(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return sk.load(x) * 2


def _double(x: jax.Array) -> jax.Array:
    return x * 2


def test_vjp_reference_without_a_reference_is_a_declaration_error() -> None:
    with pytest.raises(sk.VjpError) as info:
        sk.kernel(tile={"M": "BM"}, vjp="reference")(_scaled)
    assert info.value.phase is sk.Phase.DECLARATION
    assert info.value.fix is not None and "reference=" in info.value.fix


def test_vjp_must_be_reference_or_a_function() -> None:
    with pytest.raises(sk.VjpError) as info:
        sk.kernel(tile={"M": "BM"}, reference=_double, vjp="backward")(_scaled)
    assert info.value.actual == "'backward'"


def test_a_backward_that_cannot_take_its_arguments_is_a_declaration_error() -> None:
    def backward(x: jax.Array, dy: jax.Array) -> jax.Array:
        return dy

    with pytest.raises(sk.VjpError) as info:
        sk.kernel(tile={"M": "BM"}, vjp=backward)(_scaled)
    assert "(x, result, dresult)" in str(info.value.expected)


def _kernel_with_backward(backward: Callable[..., Any]) -> sk.Kernel[..., Any]:
    return sk.kernel(tile={"M": "BM"}, vjp=backward, name="scaled")(_scaled)


@pytest.mark.parametrize(
    ("backward", "expected", "actual"),
    [
        (lambda x, y, dy: (2 * dy, 2 * dy), "a tuple of 1", 2),
        (lambda x, y, dy: (2 * dy[:-1],), "shape (70, 16), dtype float32", "shape (69, 16)"),
        (lambda x, y, dy: (2 * dy.astype(jnp.bfloat16),), "dtype float32", "dtype bfloat16"),
    ],
    ids=["count", "shape", "dtype"],
)
def test_a_backward_returning_the_wrong_cotangents(
    backward: Callable[..., Any], expected: str, actual: Any
) -> None:
    kernel = _kernel_with_backward(backward)
    x = operands("softmax", (70, 16), F32)[0]
    with pytest.raises(sk.BackwardError) as info:
        jax.grad(lambda x: kernel(x).sum())(x)
    error = info.value
    assert error.kernel == "scaled"
    assert expected in str(error.expected)
    assert (actual == error.actual) if isinstance(actual, int) else actual in str(error.actual)
    if not isinstance(actual, int):
        assert error.operand == "x"
    assert error.fix


def test_a_backward_returning_a_gradient_for_an_integer_operand() -> None:
    def backward(x: Any, keep: Any, y: Any, dy: Any) -> tuple[Any, Any]:
        return dy, dy

    kernel = sk.kernel(tile={"M": "BM"}, vjp=backward)(_masked)
    x = operands("softmax", (70, 16), F32)[0]
    keep = jnp.ones((70, 16), jnp.int32)
    with pytest.raises(sk.BackwardError) as info:
        jax.grad(lambda x: kernel(x, keep).sum())(x)
    assert info.value.operand == "keep"


def test_without_vjp_differentiating_is_a_not_differentiable_error() -> None:
    kernel = sk.kernel(tile={"M": "BM"})(_scaled)
    x = operands("softmax", (70, 16), F32)[0]
    for transform in (
        lambda: jax.grad(lambda x: kernel(x).sum())(x),
        lambda: jax.jvp(kernel, (x,), (x,)),
    ):
        with pytest.raises(sk.NotDifferentiableError) as info:
            transform()
        assert info.value.fix is not None
        assert 'vjp="reference"' in info.value.fix and "vjp=my_backward" in info.value.fix


# --- second derivatives -------------------------------------------------------------------------


def test_hessian_through_the_reference() -> None:
    x = operands("softmax", (1, 5), F32)[0]
    got = jax.hessian(lambda x: softmax_by_reference(x)[0, 1])(x)
    assert_close(got, jax.hessian(lambda x: softmax_reference(x)[0, 1])(x), F32)


@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm_by_reference", "layernorm", "softmax"])
def test_grad_of_grad(name: str) -> None:
    kernel, reference = KERNELS[name]
    x, *rest = operands(name, (3, 5), F32)

    def outer(fn: Callable[..., Any]) -> jax.Array:
        inner = jax.grad(lambda x: jnp.sum(fn(x, *rest) ** 3))
        return jax.grad(lambda x: jnp.sum(inner(x) ** 2))(x)

    assert_close(outer(kernel), outer(reference), F32)


# --- several results, a backward kernel, a reference of other shapes ----------------------------


def _scaled_and_row_sums(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64
) -> tuple[Float[Array, "M N"], Float[Array, " M"]]:
    v = sk.load(x)
    return 3 * v, sk.sum(v, axis=1)


def scaled_and_row_sums_reference(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return 3 * x, jnp.sum(x, axis=1)


def scaled_and_row_sums_backward(
    x: jax.Array, y: jax.Array, s: jax.Array, dy: jax.Array, ds: jax.Array
) -> jax.Array:
    return 3 * dy + ds[:, None]


@pytest.mark.parametrize(
    "vjp", ["reference", scaled_and_row_sums_backward], ids=["reference", "backward"]
)
def test_a_kernel_with_two_results(vjp: Any) -> None:
    kernel = sk.kernel(tile={"M": "BM"}, reference=scaled_and_row_sums_reference, vjp=vjp)(
        _scaled_and_row_sums
    )
    x = operands("softmax", (70, 16), F32)[0]
    probe_y, probe_s = cotangent((70, 16), F32), cotangent((70,), F32, seed=3)

    def loss(fn: Callable[..., Any]) -> Callable[..., jax.Array]:
        def of(x: jax.Array) -> jax.Array:
            y, s = fn(x)
            return jnp.sum(y * probe_y) + jnp.sum(s * probe_s)

        return of

    assert_close(jax.grad(loss(kernel))(x), jax.grad(loss(scaled_and_row_sums_reference))(x), F32)
    # Only one result used: the other's cotangent reaches the backward as zeros.
    only_y = jax.grad(lambda x: jnp.sum(kernel(x)[0] * probe_y))(x)
    assert_close(only_y, 3 * probe_y, F32)


def test_a_backward_may_call_a_kernel() -> None:
    """A backward kernel: the backward of `scaled` (2 x) is `scaled` itself, on dy."""
    forward = sk.kernel(tile={"M": "BM"})(_scaled)

    def scaled_backward(x: jax.Array, y: jax.Array, dy: jax.Array) -> jax.Array:
        return forward(dy)

    kernel = sk.kernel(tile={"M": "BM"}, vjp=scaled_backward)(_scaled)
    x = operands("softmax", (70, 16), F32)[0]
    probe = cotangent((70, 16), F32)
    grad = jax.grad(weighted_loss(kernel, probe))
    np.testing.assert_allclose(grad(x), 2 * probe, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(grad)(x), 2 * probe, rtol=1e-6)
    assert launches(jax.make_jaxpr(grad)(x)) == 2  # the forward's, and the backward's


def test_a_reference_of_other_shapes_is_a_backward_error() -> None:
    kernel = sk.kernel(tile={"M": "BM"}, reference=lambda x: x[:, :-1], vjp="reference")(_scaled)
    x = operands("softmax", (70, 16), F32)[0]
    with pytest.raises(sk.BackwardError) as info:
        jax.grad(lambda x: kernel(x).sum())(x)
    assert info.value.expected == [(70, 16)]
    assert info.value.actual == [(70, 15)]


@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm_by_reference"])
def test_a_differentiated_kernel_cross_lowers_for_cuda(name: str) -> None:
    """The derivative rules wrap the Mosaic GPU launch as they wrap the interpreter's."""
    kernel = KERNELS[name][0].with_backend("mosaic_gpu")
    x, w = jax.ShapeDtypeStruct((77, 130), F32), jax.ShapeDtypeStruct((130,), F32)
    grad = jax.jit(jax.grad(lambda x, w: jnp.sum(kernel(x, w) ** 2), argnums=(0, 1)))
    assert "mosaic_gpu" in grad.trace(x, w).lower(lowering_platforms=("cuda",)).as_text()
