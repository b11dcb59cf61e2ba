"""A vector of a few learned parameters (PolyNorm's 3 weights) declared as a user first writes
it, `Float32[Array, "3"]` or along a dim of its own: the refusal's fix (0-d operands, one per
element) is written out and run against jnp, whole rows at a model width."""

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, BFloat16, Float, Float32

import statickernel as sk
from tolerances import assert_close, tolerance_for


@pytest.mark.parametrize("dims", ["3", " P"])
def test_a_parameter_vector_is_refused_with_a_fix_that_applies(dims: str) -> None:
    with pytest.raises(sk.AnnotationError) as info:

        @sk.kernel(tile={"M": "BM"})
        def polynorm(
            x: Float[Array, "M N"], w: Float32[Array, dims], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x)

    fix = info.value.fix or ""
    assert 'w0: Float32[Array, ""]' in fix and "sk.load(w0)" in fix


def polynorm_reference(
    x: jax.Array, w0: jax.Array, w1: jax.Array, w2: jax.Array, bias: jax.Array
) -> jax.Array:
    v = x.astype(jnp.float32)

    def norm(u: jax.Array) -> jax.Array:
        return u * jax.lax.rsqrt(jnp.mean(u * u, axis=-1, keepdims=True) + 1e-6)

    return (w0 * norm(v**3) + w1 * norm(v**2) + w2 * norm(v) + bias).astype(x.dtype)


# The fix, as written: each weight a 0-d operand read with sk.load.
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
