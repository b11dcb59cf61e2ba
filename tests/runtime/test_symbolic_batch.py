"""A kernel under `jax.vmap` exported with a symbolic batch: the mapped axis never reaches the
kernel's binding (the call sees one element's static shapes), and the launch's own batching
rule put it on the grid, where Pallas stopped at a bare AssertionError. It is refused as a
SymbolicDimError naming the operand and the symbolic size, and the fix it gives, jax.lax.map,
exports with the batch still symbolic. A vmap of a static size still runs."""

import pathlib

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from markers import line_finder

line_of = line_finder(__file__)
S = jax.ShapeDtypeStruct


@sk.kernel(tile={"M": "BM", "N": "BN"})
def scale(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, "M N"]:
    return sk.load(x) * 2


@sk.kernel(tile={"M": "BM", "N": "BN"})
def shift(
    x: Float[Array, "M N"],
    b: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
) -> Float[Array, "M N"]:
    return sk.load(x) + sk.load(b)[None, :]


def _batched(shape: str) -> S:
    return S(jax.export.symbolic_shape(shape), jnp.float32)


@pytest.mark.parametrize("backend", ["mosaic_gpu", "interpret"])
def test_a_vmap_over_a_symbolic_batch_is_refused_naming_the_operand(backend: str) -> None:
    kernel = scale.with_backend(backend)
    export = jax.export.export(jax.jit(jax.vmap(kernel)), platforms=("cuda",))
    with pytest.raises(sk.SymbolicDimError) as info:
        export(_batched("b, 64, 32"))  # @vmapped
    error = info.value
    assert error.kernel == "scale"
    assert error.operand == "x" and error.dim == "b"
    assert error.where is not None
    assert error.where.endswith(f"{pathlib.Path(__file__).name}:{line_of('vmapped')}")
    assert "jax.vmap" in error.what and "(b, 64, 32)" in str(error.actual)
    assert error.fix is not None and "jax.lax.map(scale, x)" in error.fix


def test_the_fix_exports_with_the_batch_symbolic() -> None:
    kernel = scale.with_backend("mosaic_gpu")
    exported = jax.export.export(jax.jit(lambda x: jax.lax.map(kernel, x)), platforms=("cuda",))(
        _batched("b, 64, 32")
    )
    assert str(exported.in_avals[0].shape) == "(b, 64, 32)"
    assert str(exported.out_avals[0].shape) == "(b, 64, 32)"


def test_an_operand_shared_by_every_element_is_left_out_of_the_map() -> None:
    kernel = shift.with_backend("mosaic_gpu")
    mapped = jax.vmap(kernel, in_axes=(0, None))
    export = jax.export.export(jax.jit(mapped), platforms=("cuda",))
    with pytest.raises(sk.SymbolicDimError) as info:
        export(_batched("b, 64, 32"), S((32,), jnp.float32))
    assert info.value.operand == "x"
    fix = info.value.fix
    assert fix is not None and "jax.lax.map(lambda x: shift(x, b), x)" in fix

    # The fix as it says.
    exported = jax.export.export(
        jax.jit(lambda x, b: jax.lax.map(lambda x: kernel(x, b), x)), platforms=("cuda",)
    )(_batched("b, 64, 32"), S((32,), jnp.float32))
    assert str(exported.out_avals[0].shape) == "(b, 64, 32)"


def test_a_vmap_of_a_static_size_runs() -> None:
    xs = jax.random.normal(jax.random.key(0), (2, 5, 7), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (7,), jnp.float32)
    got = jax.jit(jax.vmap(shift, in_axes=(0, None)))(xs, b)
    assert bool(jnp.all(got == xs + b))
