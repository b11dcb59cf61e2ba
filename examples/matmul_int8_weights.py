"""A weight-only int8 matmul, as served language models run their linear layers (W8A16):
bfloat16 activations times int8 weights with a float32 scale per output channel, the weights
dequantized in registers.

The weight is stored as a PyTorch `Linear` stores it, `(N, K)`: out features by in features,
one int8 each, and a scale per row. In the step of the loop over K, the kernel loads the
weight's block into registers, converts it to bfloat16 and multiplies it on the tensor cores,
which take the product's `a` from registers, as jax's `hopper_mixed_type_matmul_mgpu` does;
the activations `x` are `b`, read K-major as they lie. So the product comes out transposed,
`(N, M)`: the weight's rows are the result's. `linear_w8a16` transposes it back, which XLA
fuses into the consumer; when decoding, M is a few rows. The scale applies once per output
row, after the loop. Each weight byte is read from HBM once: half the bytes of bfloat16
weights.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, BFloat16, Float32, Int8

import statickernel as sk


def matmul_w8a16_reference(w: jax.Array, scale: jax.Array, x: jax.Array) -> jax.Array:
    dequantized = w.astype(jnp.float32) * scale[:, None]
    product = jnp.dot(dequantized, x.astype(jnp.float32).T, precision=jax.lax.Precision.HIGHEST)
    return product.astype(x.dtype)


@sk.kernel(tile={"N": "BN", "M": "BM"}, loop={"K": "BK"}, reference=matmul_w8a16_reference)
def matmul_w8a16(
    w: Int8[Array, "N K"],
    scale: Float32[Array, " N"],
    x: BFloat16[Array, "M K"],
    *,
    BN: sk.Const[int] = 64,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 128,
) -> BFloat16[Array, "N M"]:
    """(x @ (w * scale).T).T: the int8 weight converted to bfloat16 in registers a step."""

    def step(acc: jax.Array) -> jax.Array:
        return acc + sk.dot(sk.load(w).astype(jnp.bfloat16), x)

    acc = sk.loop("K", step, init=jnp.zeros((BN, BM), jnp.float32))
    return (acc * sk.load(scale)[:, None]).astype(jnp.bfloat16)


def linear_w8a16(x: jax.Array, w: jax.Array, scale: jax.Array) -> jax.Array:
    """`x @ (w * scale).T` for x of (M, K): the kernel's product, transposed back."""
    return matmul_w8a16(w, scale, x).T


if __name__ == "__main__":
    kw, ks, kx = jax.random.split(jax.random.key(0), 3)
    w = jax.random.randint(kw, (1000, 512), -127, 128, jnp.int32).astype(jnp.int8)
    scale = jax.random.uniform(ks, (1000,), jnp.float32, 0.001, 0.01)
    x = jax.random.normal(kx, (16, 512), jnp.bfloat16)
    print(matmul_w8a16.plan(w, scale, x))
    got = linear_w8a16(x, w, scale).astype(jnp.float32)
    want = matmul_w8a16_reference(w, scale, x).T.astype(jnp.float32)
    print("max abs error:", float(jnp.max(jnp.abs(got - want))))
