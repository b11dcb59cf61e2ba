"""A block-scaled fp8 matmul, as DeepSeek-V3 trains and serves its linear layers (DeepGEMM):
float8_e4m3fn activations with a float32 scale per 1x128 of each row, and float8_e4m3fn weights
with a scale per 128x128 block, the scales applied to each K step's product in float32.

`groups={"Kb": "K"}` declares that Kb numbers the steps of the loop over K (BK = 128, the
scales' block): each step copies a's and b's blocks and the step's scales, multiplies the fp8
blocks on the tensor cores into a fresh float32 product, and adds it to the accumulator
scaled by `a_scale[m] * b_scale[n]`, as DeepGEMM promotes its products. A step's scales are a
vector along the rows of the block and one along its columns, so `matmul_fp8_blockwise` hands
the kernel `a_scales` transposed, `(Kb, M)`, and `b_scales` spread to every column of its
128-column block and transposed, `(Kb, N)`: M * Kb and N * Kb floats, against the M * K and
N * K bytes of a and b. The result is bfloat16.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, BFloat16, Float32

import statickernel as sk
from matmul_fp8 import Fp8

SCALE_BLOCK = 128  # the scales' block along K (a's 1x128, b's 128x128)


def matmul_fp8_blockwise_steps_reference(
    a: jax.Array, b: jax.Array, a_scales: jax.Array, b_scales: jax.Array
) -> jax.Array:
    """The kernel's own operands: each K block's float32 product, scaled per row by
    `a_scales[step]` and per column by `b_scales[step]`."""
    k = a.shape[1]
    out = jnp.zeros((a.shape[0], b.shape[0]), jnp.float32)
    for step, start in enumerate(range(0, k, SCALE_BLOCK)):
        part = jnp.dot(
            a[:, start : start + SCALE_BLOCK].astype(jnp.float32),
            b[:, start : start + SCALE_BLOCK].astype(jnp.float32).T,
            precision=jax.lax.Precision.HIGHEST,
        )
        out = out + part * a_scales[step][:, None] * b_scales[step][None, :]
    return out.astype(jnp.bfloat16)


def matmul_fp8_blockwise_reference(
    a: jax.Array, b: jax.Array, a_scales: jax.Array, b_scales: jax.Array
) -> jax.Array:
    """Each K block's float32 product, scaled per row by a's and per 128 columns by b's."""
    b_cols = jnp.repeat(b_scales, SCALE_BLOCK, axis=0)[: b.shape[0]]
    return matmul_fp8_blockwise_steps_reference(a, b, a_scales.T, b_cols.T)


@sk.kernel(
    tile={"M": "BM", "N": "BN"},
    loop={"K": "BK"},
    groups={"Kb": "K"},
    reference=matmul_fp8_blockwise_steps_reference,
)
def matmul_fp8_blockwise_steps(
    a: Fp8[Array, "M K"],
    b: Fp8[Array, "N K"],
    a_scales: Float32[Array, "Kb M"],
    b_scales: Float32[Array, "Kb N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = SCALE_BLOCK,
) -> BFloat16[Array, "M N"]:
    """sum over K steps of (a_k @ b_k.T) * a_scales[k][:, None] * b_scales[k][None, :]."""

    def step(acc: jax.Array) -> jax.Array:
        scale = sk.load(a_scales)[:, None] * sk.load(b_scales)[None, :]
        return acc + sk.dot(a, b) * scale

    acc = sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32))
    return acc.astype(jnp.bfloat16)


def matmul_fp8_blockwise(
    a: jax.Array, b: jax.Array, a_scales: jax.Array, b_scales: jax.Array
) -> jax.Array:
    """a (M, K) and b (N, K) in fp8, a_scales (M, Kb), b_scales (Nb, Kb); bf16 (M, N)."""
    n = b.shape[0]
    b_cols = jnp.repeat(b_scales, SCALE_BLOCK, axis=0)[:n]  # (N, Kb): each column's scale
    return matmul_fp8_blockwise_steps(a, b, a_scales.T, b_cols.T)


def quantize_blockwise(x: jax.Array, rows: int) -> tuple[jax.Array, jax.Array]:
    """x (R, K) in e4m3fn with a float32 scale per `rows` x 128 block: (q, scales)."""
    r, k = x.shape
    blocks = x.astype(jnp.float32).reshape(r // rows, rows, k // SCALE_BLOCK, SCALE_BLOCK)
    scales = jnp.maximum(jnp.max(jnp.abs(blocks), axis=(1, 3)), 1e-12) / 448.0
    q = (blocks / scales[:, None, :, None]).reshape(r, k).astype(jnp.float8_e4m3fn)
    return q, scales


if __name__ == "__main__":
    ka, kb = jax.random.split(jax.random.key(0))
    x = jax.random.normal(ka, (256, 512), jnp.float32)
    w = jax.random.normal(kb, (384, 512), jnp.float32) * 0.05
    a, a_scales = quantize_blockwise(x, 1)  # 1x128 blocks: (256, 4) scales
    b, b_scales = quantize_blockwise(w, SCALE_BLOCK)  # 128x128 blocks: (3, 4) scales
    got = matmul_fp8_blockwise(a, b, a_scales, b_scales).astype(jnp.float32)
    want = matmul_fp8_blockwise_reference(a, b, a_scales, b_scales).astype(jnp.float32)
    print("max abs error:", float(jnp.max(jnp.abs(got - want))))
    exact = x @ w.T
    print("max abs quantization error:", float(jnp.max(jnp.abs(got - exact))))
