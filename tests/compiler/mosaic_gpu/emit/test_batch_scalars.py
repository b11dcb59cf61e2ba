"""A 0-d operand per batch entry (`s: "B"` under batch=("B",), an ALiBi slope per head under
("B", "H")), read by each grid step from its batch entry in every schedule: one block a CTA,
pipelined loops and the warp-specialized matmul; against jnp, and cross-lowered."""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, BFloat16, Float, Float32

import statickernel as sk


@sk.kernel(batch=("B", "H"), tile={"T": "BT"})
def alibi_bias(
    x: Float[Array, "B H T S"], slope: Float32[Array, "B H"], *, BT: sk.Const[int] = 64
) -> Float[Array, "B H T S"]:
    """Scores plus each head's slope times the key's position."""
    return sk.load(x) + sk.load(slope) * sk.position("S").astype(jnp.float32)[None, :]


@sk.kernel(batch=("B",), tile={"M": "BM"}, loop={"N": "BN"})
def scaled_row_sums(
    x: Float[Array, "B M N"],
    s: Float32[Array, " B"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
) -> Float32[Array, "B M"]:
    def step(total: jax.Array) -> jax.Array:
        return total + jnp.sum(sk.load(x).astype(jnp.float32), axis=1)

    return sk.loop("N", step, init=jnp.zeros((BM,), jnp.float32)) * sk.load(s)


@sk.kernel(batch=("B",), tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def scaled_matmul(
    a: BFloat16[Array, "B M K"],
    b: BFloat16[Array, "B K N"],
    s: Float32[Array, " B"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "B M N"]:
    acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
    return acc * sk.load(s)


def _normal(key: int, shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, dtype)


def test_a_slope_per_head_in_one_block_a_cta() -> None:
    x, slope = _normal(0, (2, 4, 100, 72)), _normal(1, (2, 4))
    want = x + slope[:, :, None, None] * jnp.arange(72.0)
    np.testing.assert_allclose(alibi_bias(x, slope), want, rtol=1e-6, atol=1e-6)
    assert "one block per CTA" in str(alibi_bias.plan(x, slope))


def test_a_scale_per_batch_entry_in_pipelined_loops() -> None:
    x, s = _normal(2, (3, 100, 300)), _normal(3, (3,))
    np.testing.assert_allclose(scaled_row_sums(x, s), x.sum(-1) * s[:, None], rtol=1e-5, atol=1e-4)
    assert "pipelined loops" in str(scaled_row_sums.plan(x, s))


def test_a_scale_per_batch_entry_in_the_warp_specialized_matmul() -> None:
    a, b = _normal(4, (3, 200, 96), jnp.bfloat16), _normal(5, (3, 96, 130), jnp.bfloat16)
    s = _normal(6, (3,))
    wide = jnp.einsum("bmk,bkn->bmn", a.astype(jnp.float32), b.astype(jnp.float32))
    np.testing.assert_allclose(
        scaled_matmul(a, b, s), wide * s[:, None, None], rtol=1e-4, atol=1e-3
    )
    assert "warp-specialized" in str(scaled_matmul.plan(a, b, s))


def test_scalars_per_batch_entry_cross_lower_for_the_gpu() -> None:
    f32, bf16 = jnp.float32, jnp.bfloat16
    lowered = [
        alibi_bias.lower(
            jax.ShapeDtypeStruct((1, 16, 4096, 256), f32), jax.ShapeDtypeStruct((1, 16), f32)
        ),
        scaled_row_sums.lower(
            jax.ShapeDtypeStruct((4, 1024, 4096), f32), jax.ShapeDtypeStruct((4,), f32)
        ),
        scaled_matmul.lower(
            jax.ShapeDtypeStruct((4, 1024, 1024), bf16),
            jax.ShapeDtypeStruct((4, 1024, 1024), bf16),
            jax.ShapeDtypeStruct((4,), f32),
        ),
    ]
    assert all("mosaic_gpu" in low.as_text() for low in lowered)
