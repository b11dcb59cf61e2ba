"""Operands that carry some of the batch dims, not a run from the first (GroupNorm's weight
`"G"` under batch=("B", "G"), a per-head block shared by every batch entry, a matmul's weight
per group `"G K N"` shared by every B): each grid step reads them at its entry of the dims
they have, in every schedule (one block a CTA, pipelined loops, the warp-specialized
matmul; the row form takes no batch dims); against jnp, and cross-lowered."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float, Float32

import statickernel as sk


@sk.kernel(batch=("B", "G"), tile={"C": "BC"})
def group_affine(
    x: Float[Array, "B G C L"],
    w: Float32[Array, " G"],
    shift: Float32[Array, "G L"],
    *,
    BC: sk.Const[int] = 64,
) -> Float[Array, "B G C L"]:
    """Each group's scale, and a per-position shift of each group, shared by every B."""
    return sk.load(x) * sk.load(w) + sk.load(shift)[None, :]


@sk.kernel(batch=("B", "G"), tile={"C": "BC"}, loop={"L": "BL"})
def group_sums(
    x: Float[Array, "B G C L"],
    w: Float32[Array, " G"],
    *,
    BC: sk.Const[int] = 64,
    BL: sk.Const[int] = 128,
) -> Float32[Array, "B G C"]:
    def step(total: jax.Array) -> jax.Array:
        return total + jnp.sum(sk.load(x).astype(jnp.float32), axis=1)

    return sk.loop("L", step, init=jnp.zeros((BC,), jnp.float32)) * sk.load(w)


@sk.kernel(batch=("B", "G"), tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def grouped_matmul(
    a: BFloat16[Array, "B G M K"],
    b: BFloat16[Array, "G K N"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
) -> Float32[Array, "B G M N"]:
    """Each group's weight, shared by every batch entry."""
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))


def _normal(key: int, shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, dtype)


@pytest.mark.parametrize("shape", [(2, 3, 100, 40), (1, 1, 1, 8), (3, 2, 64, 72)])
def test_a_weight_per_group_in_one_block_a_cta(shape: tuple[int, ...]) -> None:
    _, g, _, length = shape
    x, w, shift = _normal(0, shape), _normal(1, (g,)), _normal(2, (g, length))
    want = x * w[None, :, None, None] + shift[None, :, None, :]
    np.testing.assert_allclose(group_affine(x, w, shift), want, rtol=1e-6, atol=1e-6)
    assert "one block per CTA" in str(group_affine.plan(x, w, shift))


def test_a_weight_per_group_in_pipelined_loops() -> None:
    x, w = _normal(5, (2, 3, 100, 300)), _normal(6, (3,))
    want = x.sum(-1) * w[None, :, None]
    np.testing.assert_allclose(group_sums(x, w), want, rtol=1e-5, atol=1e-4)
    assert "pipelined loops" in str(group_sums.plan(x, w))


def test_a_weight_per_group_in_the_warp_specialized_matmul() -> None:
    a, b = _normal(7, (2, 3, 200, 96), jnp.bfloat16), _normal(8, (3, 96, 130), jnp.bfloat16)
    want = jnp.einsum("bgmk,gkn->bgmn", a.astype(jnp.float32), b.astype(jnp.float32))
    np.testing.assert_allclose(grouped_matmul(a, b), want, rtol=1e-4, atol=1e-3)
    assert "warp-specialized" in str(grouped_matmul.plan(a, b))


def test_batch_subsets_cross_lower_for_the_gpu() -> None:
    f32, bf16 = jnp.float32, jnp.bfloat16
    lowered = [
        group_affine.lower(
            jax.ShapeDtypeStruct((8, 32, 256, 128), f32),
            jax.ShapeDtypeStruct((32,), f32),
            jax.ShapeDtypeStruct((32, 128), f32),
        ),
        group_sums.lower(
            jax.ShapeDtypeStruct((2, 8, 1024, 4096), f32), jax.ShapeDtypeStruct((8,), f32)
        ),
        grouped_matmul.lower(
            jax.ShapeDtypeStruct((2, 8, 1024, 1024), bf16),
            jax.ShapeDtypeStruct((8, 1024, 1024), bf16),
        ),
    ]
    assert all("mosaic_gpu" in low.as_text() for low in lowered)


@sk.kernel(batch=("B", "H"), tile={"M": "BM"})
def per_head_first(
    bias: Float[Array, "H M N"], x: Float[Array, "B H M N"], *, BM: sk.Const[int] = 64
) -> Float[Array, "B H M N"]:
    """A per-head operand named before the one with every batch dim."""
    return sk.load(x) + sk.load(bias)


def test_an_operand_with_the_later_batch_dim_named_first() -> None:
    """The grid leads with the batch dims in the order of batch= (B, H), though the first
    operand names H alone."""
    bias = jax.random.normal(jax.random.key(0), (3, 100, 64))
    x = jax.random.normal(jax.random.key(1), (2, 3, 100, 64))
    np.testing.assert_allclose(per_head_first(bias, x), x + bias[None], rtol=1e-6)
    assert per_head_first.plan(bias, x).grid[:2] == (2, 3)
