"""A block of the rows and the loop dim (`w: "N K"` in a loop over K) loaded in the loop's step
and computed with before `sk.dot`: an int8 weight dequantized in registers (W8A16, as
`examples/matmul_int8_weights.py`). Against jnp on ragged N, K and M (one row of
activations), int8 extremes, a bfloat16 weight squared; a load of such an operand outside its loop
is refused; cross-lowered."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float, Float32, Int8

import statickernel as sk
from matmul_int8_weights import linear_w8a16, matmul_w8a16_reference
from tolerances import assert_close, tolerance_for


def _weights(n: int, k: int, seed: int) -> tuple[jax.Array, jax.Array]:
    kw, ks = jax.random.split(jax.random.key(seed))
    w = jax.random.randint(kw, (n, k), -128, 128, jnp.int32).astype(jnp.int8)
    return w, jax.random.uniform(ks, (n,), jnp.float32, 0.001, 0.01)


@pytest.mark.parametrize(
    ("n", "k", "m"), [(64, 128, 1), (300, 256, 16), (130, 200, 70), (1, 16, 3), (200, 640, 64)]
)
def test_int8_weights_dequantized_in_registers_match_jnp(n: int, k: int, m: int) -> None:
    w, scale = _weights(n, k, n + k + m)
    x = jax.random.normal(jax.random.key(m), (m, k), jnp.bfloat16)
    got = linear_w8a16(x, w, scale)
    want = matmul_w8a16_reference(w, scale, x).T
    # Each output sums k products of |x| ~ 1 and |w * scale| < 1.3: rounded once to bfloat16.
    assert_close(got, want, tolerance_for(jnp.bfloat16, k, scale=1.3))


def test_the_extreme_int8_values_convert_exactly() -> None:
    w = jnp.array([[-128, 127, 0, 1] * 16] * 64, jnp.int8)
    scale = jnp.ones((64,), jnp.float32)
    x = jnp.eye(64, dtype=jnp.bfloat16)
    got = linear_w8a16(x, w, scale)  # x @ w.T with x = I: w.T itself, exact in bfloat16
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(w.T, np.float32))


@sk.kernel(tile={"N": "BN", "M": "BM"}, loop={"K": "BK"})
def shifted_weights(
    w: BFloat16[Array, "N K"],
    x: BFloat16[Array, "M K"],
    *,
    BN: sk.Const[int] = 64,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "N M"]:
    """A 16-bit weight computed with in the step: its square, as a value `a`."""

    def step(acc: jax.Array) -> jax.Array:
        v = sk.load(w)
        return acc + sk.dot(v * v, x)

    return sk.loop("K", step, init=jnp.zeros((BN, BM), jnp.float32))


def test_a_16_bit_weight_computed_with_in_the_step() -> None:
    w = jax.random.normal(jax.random.key(1), (100, 200), jnp.bfloat16)
    x = jax.random.normal(jax.random.key(2), (30, 200), jnp.bfloat16)
    squared = (w * w).astype(jnp.float32)
    want = squared @ x.astype(jnp.float32).T
    assert_close(shifted_weights(w, x), want, tolerance_for(jnp.float32, 200, scale=10.0, ulps=64))


def test_loading_it_outside_its_loop_is_refused() -> None:
    with pytest.raises(sk.BodyError, match="outside any loop") as info:

        @sk.kernel(tile={"N": "BN", "M": "BM"}, loop={"K": "BK"})
        def outside(
            w: Int8[Array, "N K"],
            x: Float[Array, "M K"],
            *,
            BN: sk.Const[int] = 64,
            BM: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "N M"]:
            acc = sk.loop("K", lambda acc: acc + sk.dot(w, x), init=jnp.zeros((BN, BM)))
            return acc + jnp.sum(sk.load(w).astype(jnp.float32))

    assert info.value.operand == "w" and info.value.fix


def test_the_weight_only_matmul_cross_lowers_for_the_gpu() -> None:
    from matmul_int8_weights import matmul_w8a16

    structs = (
        jax.ShapeDtypeStruct((4096, 4096), jnp.int8),
        jax.ShapeDtypeStruct((4096,), jnp.float32),
        jax.ShapeDtypeStruct((16, 4096), jnp.bfloat16),
    )
    assert "mosaic_gpu" in matmul_w8a16.lower(*structs).as_text()


def test_another_fill_of_the_steps_block_is_refused() -> None:
    """Past its edge the step's block of the rows and the loop dim reads TMA's zeros."""
    with pytest.raises(sk.BodyError, match="reads 0 past its edge") as info:

        @sk.kernel(tile={"N": "BN", "C": "BC"}, loop={"K": "BK"})
        def filled(
            w: Float[Array, "N K"],
            y: Float[Array, "N C"],
            *,
            BN: sk.Const[int] = 64,
            BC: sk.Const[int] = 64,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "N C"]:
            def step(acc):
                return acc + jnp.sum(sk.load(w, fill=1.0), axis=1)

            return sk.loop("K", step, init=jnp.zeros((BN,), jnp.float32))[:, None] + sk.load(y)

    assert info.value.operand == "w" and "sk.position" in str(info.value.fix)
