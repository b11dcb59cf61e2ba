"""A vector of a few learned parameters (PolyNorm's 3 weights) declared as a user first writes
it, `Float32[Array, "3"]` or along a dim of its own, `" P"`: a parameter vector, never loaded,
its elements read by index from global memory. Against jnp, whole rows at a model width, in
the block and row forms; what else is done to such a vector is refused with a fix; and the
0-d operands it replaces still work."""

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, BFloat16, Float, Float32

import statickernel as sk
from tolerances import assert_close, tolerance_for


def _polynorm_of_vector(dims: str) -> sk.Kernel:
    """PolyNorm with its 3 weights in one vector annotated `dims`: unpacked when its size is
    declared, indexed otherwise."""

    def polynorm_vector(
        x: BFloat16[Array, "M N"],
        w: Float32[Array, dims],
        bias: Float32[Array, ""],
        *,
        BM: sk.Const[int] = 64,
    ) -> BFloat16[Array, "M N"]:
        v = sk.load(x).astype(jnp.float32)

        def norm(u: jax.Array) -> jax.Array:
            return u * jax.lax.rsqrt(jnp.mean(u * u, axis=1, keepdims=True) + 1e-6)

        weights = sk.load(w)
        w0, w1, w2 = weights if dims == "3" else (weights[0], weights[1], weights[-1])
        return (w0 * norm(v * v * v) + w1 * norm(v * v) + w2 * norm(v) + sk.load(bias)).astype(
            x.dtype
        )

    return sk.kernel(tile={"M": "BM"})(polynorm_vector)


@pytest.mark.parametrize("dims", ["3", " P"])
@pytest.mark.parametrize("shape", [(3, 100), (70, 4096)])
def test_a_parameter_vector_is_read_by_index(dims: str, shape: tuple[int, int]) -> None:
    kernel = _polynorm_of_vector(dims)
    x = jax.random.normal(jax.random.key(0), shape, jnp.bfloat16)
    w, bias = jnp.array([0.3, -1.2, 0.7], jnp.float32), jnp.float32(0.05)
    want = polynorm_reference(x, w[0], w[1], w[2], bias)
    assert_close(kernel(x, w, bias), want, tolerance_for(jnp.bfloat16, shape[1]))
    plan = str(kernel.plan(x, w, bias))
    assert "parameters, each read by index from global memory" in plan
    if shape[1] == 4096:  # whole rows keep the row form beside it
        assert "row form" in plan


def test_a_parameter_vectors_size_is_checked_at_the_call() -> None:
    kernel = _polynorm_of_vector("3")
    with pytest.raises(sk.StaticKernelError):
        kernel(jnp.ones((8, 64), jnp.bfloat16), jnp.ones((4,), jnp.float32), jnp.float32(0))


def test_other_uses_of_a_parameter_vector_are_refused_with_a_fix() -> None:
    with pytest.raises(sk.UnsupportedOpError, match="vector of parameters") as info:

        @sk.kernel(tile={"M": "BM"})
        def summed(
            x: Float[Array, "M N"], w: Float32[Array, " P"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x) * jnp.sum(sk.load(w))

    assert "w[0], w[1]" in str(info.value.fix)


@pytest.mark.parametrize("dims", ["3", " P"])
def test_a_parameter_vector_cross_lowers_for_the_gpu(dims: str) -> None:
    structs = (
        jax.ShapeDtypeStruct((16384, 4096), jnp.bfloat16),
        jax.ShapeDtypeStruct((3,), jnp.float32),
        jax.ShapeDtypeStruct((), jnp.float32),
    )
    assert "mosaic_gpu" in _polynorm_of_vector(dims).lower(*structs).as_text()


def polynorm_reference(
    x: jax.Array, w0: jax.Array, w1: jax.Array, w2: jax.Array, bias: jax.Array
) -> jax.Array:
    v = x.astype(jnp.float32)

    def norm(u: jax.Array) -> jax.Array:
        return u * jax.lax.rsqrt(jnp.mean(u * u, axis=-1, keepdims=True) + 1e-6)

    return (w0 * norm(v**3) + w1 * norm(v**2) + w2 * norm(v) + bias).astype(x.dtype)


# Each weight a 0-d operand read with sk.load, as the refusal's fix said before.
@sk.kernel(tile={"M": "BM"}, reference=polynorm_reference)
def polynorm(
    x: BFloat16[Array, "M N"],
    w0: Float32[Array, ""],
    w1: Float32[Array, ""],
    w2: Float32[Array, ""],
    bias: Float32[Array, ""],
    *,
    BM: sk.Const[int] = 64,
) -> BFloat16[Array, "M N"]:
    v = sk.load(x).astype(jnp.float32)

    def norm(u: jax.Array) -> jax.Array:
        return u * jax.lax.rsqrt(jnp.mean(u * u, axis=1, keepdims=True) + 1e-6)

    weighted = sk.load(w0) * norm(v * v * v) + sk.load(w1) * norm(v * v) + sk.load(w2) * norm(v)
    return (weighted + sk.load(bias)).astype(x.dtype)


@pytest.mark.parametrize("shape", [(3, 100), (70, 4096)])
def test_the_fixed_polynorm_matches_jnp(shape: tuple[int, int]) -> None:
    x = jax.random.normal(jax.random.key(0), shape, jnp.bfloat16)
    weights = [jnp.float32(v) for v in (0.3, -1.2, 0.7, 0.05)]
    got = polynorm(x, *weights)
    assert_close(got, polynorm_reference(x, *weights), tolerance_for(jnp.bfloat16, shape[1]))
    # Whole rows of 4096 bf16 columns keep the row form with the 0-d operands beside them.
    if shape[1] == 4096:
        assert "row form" in str(polynorm.plan(x, *weights))


def test_the_testing_probes_keep_a_declared_size() -> None:
    """`statickernel test`'s probes and hypothesis cases give a "3" dim its size."""
    from hypothesis import given, settings

    kernel = _polynorm_of_vector("3")
    for probe in sk.testing.probe_shapes(kernel):
        assert dict(probe.dims)["3"] == 3

    @given(case=sk.testing.cases(kernel, max_size=40))
    @settings(max_examples=3, deadline=None)
    def check(case: sk.testing.ProbeCase) -> None:
        assert case.shapes[1] == (3,)
        sk.testing.check_case(kernel, case, reference=_vector_reference)

    check()


def _vector_reference(x: jax.Array, w: jax.Array, bias: jax.Array) -> jax.Array:
    return polynorm_reference(x, w[0], w[1], w[2], bias)


@sk.kernel(tile={"M": "BM"}, batch="B")
def quadratic_per_entry(
    x: Float[Array, "B M N"], w: Float32[Array, "B 3"], *, BM: sk.Const[int] = 64
) -> Float[Array, "B M N"]:
    """Each batch entry's 3 coefficients, read by index at the entry."""
    v = sk.load(x)
    w0, w1, w2 = sk.load(w)
    return w0 * v * v + w1 * v + w2


@sk.kernel(batch="B", tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def affine_matmul_per_entry(
    a: BFloat16[Array, "B M K"],
    b: BFloat16[Array, "B K N"],
    s: Float32[Array, "B 2"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "B M N"]:
    acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
    return acc * sk.load(s)[0] + sk.load(s)[1]


@pytest.mark.parametrize("shape", [(3, 100, 40), (1, 1, 8)])
def test_a_parameter_vector_per_batch_entry(shape: tuple[int, int, int]) -> None:
    x = jax.random.normal(jax.random.key(1), shape, jnp.float32)
    w = jax.random.normal(jax.random.key(2), (shape[0], 3), jnp.float32)
    c = [w[:, i, None, None] for i in range(3)]
    assert_close(
        quadratic_per_entry(x, w),
        c[0] * x * x + c[1] * x + c[2],
        tolerance_for(jnp.float32, 3, scale=100.0),
    )


def test_a_parameter_vector_per_batch_entry_beside_a_matmul() -> None:
    """The matmul takes pipelined loops: the warp-specialized walk reads no vector by index."""
    a = jax.random.normal(jax.random.key(3), (3, 200, 96), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(4), (3, 96, 136), jnp.bfloat16)
    s = jax.random.normal(jax.random.key(5), (3, 2), jnp.float32)
    product = jnp.einsum("bmk,bkn->bmn", a.astype(jnp.float32), b.astype(jnp.float32))
    want = product * s[:, 0, None, None] + s[:, 1, None, None]
    assert_close(
        affine_matmul_per_entry(a, b, s), want, tolerance_for(jnp.float32, 96, scale=100.0)
    )
    assert "pipelined loops" in str(affine_matmul_per_entry.plan(a, b, s))
    structs = (
        jax.ShapeDtypeStruct((4, 1024, 1024), jnp.bfloat16),
        jax.ShapeDtypeStruct((4, 1024, 1024), jnp.bfloat16),
        jax.ShapeDtypeStruct((4, 2), jnp.float32),
    )
    assert "mosaic_gpu" in affine_matmul_per_entry.lower(*structs).as_text()
