"""A weight-only int4 matmul with group scales, as GPTQ- and AWQ-quantized language models run
their linear layers (W4A16): bfloat16 activations times int4 weights, each group of 128
weights along K sharing a scale.

The weight is `(N, K)` int4 (values -8..7, two to a byte), as a PyTorch `Linear` lays out its
weight; the scales are `(G, N)`, a row of N scales for each group of K, as GPTQ stores them.
`groups={"G": "K"}` declares that G numbers the steps of the loop over K: the loop's block BK
is the group size, and each step copies the weight's block, the activations' block and its
group's row of scales. In the step the weight is converted to float32, scaled per output
row, rounded to bfloat16 and multiplied on the tensor cores, which take the product's `a`
from registers (as jax's `hopper_mixed_type_matmul_mgpu` does); the activations `x` are `b`,
read K-major as they lie. So the product comes out transposed, `(N, M)`, and
`linear_w4a16` transposes it back, which XLA fuses into the consumer. Each weight is read
from HBM once: a quarter of the bytes of bfloat16 weights.

`linear_int4` multiplies the other way round, for a weight laid out `(K, N)` as GPTQ and AWQ
store it: `x @ dequantize(w, scales)`, `(M, N)` as it comes. There the dequantized weight is
the product's `b`, which WGMMA reads only from shared memory: each step stores it into a
swizzled buffer of its own and multiplies from there, and no transpose follows.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, BFloat16, Float, Int4

import statickernel as sk


def matmul_w4a16_reference(
    w: jax.Array, scales: jax.Array, x: jax.Array, BK: int = 128
) -> jax.Array:
    """The dequantized weight (rounded to bfloat16, as the kernel multiplies it) times x.T."""
    per_element = jnp.repeat(scales.astype(jnp.float32).T, BK, axis=1)[:, : w.shape[1]]
    dequantized = (w.astype(jnp.float32) * per_element).astype(jnp.bfloat16)
    product = jnp.dot(
        dequantized.astype(jnp.float32),
        x.astype(jnp.float32).T,
        precision=jax.lax.Precision.HIGHEST,
    )
    return product.astype(x.dtype)


@sk.kernel(
    tile={"N": "BN", "M": "BM"},
    loop={"K": "BK"},
    groups={"G": "K"},
    reference=matmul_w4a16_reference,
)
def matmul_w4a16(
    w: Int4[Array, "N K"],
    scales: Float[Array, "G N"],
    x: BFloat16[Array, "M K"],
    *,
    BN: sk.Const[int] = 64,
    BM: sk.Const[int] = 64,
    BK: sk.Const[int] = 128,
) -> BFloat16[Array, "N M"]:
    """(x @ dequantize(w, scales).T).T, the int4 weight dequantized in registers a step."""

    def step(acc: jax.Array) -> jax.Array:
        scale = sk.load(scales).astype(jnp.float32)  # this group's row of scales, one per n
        dequantized = sk.load(w).astype(jnp.float32) * scale[:, None]
        return acc + sk.dot(dequantized.astype(jnp.bfloat16), x)

    acc = sk.loop("K", step, init=jnp.zeros((BN, BM), jnp.float32))
    return acc.astype(jnp.bfloat16)


def linear_int4_reference(
    x: jax.Array, w: jax.Array, scales: jax.Array, BK: int = 128
) -> jax.Array:
    """x times the dequantized (K, N) weight, rounded to bfloat16 as the kernel multiplies it."""
    per_element = jnp.repeat(scales.astype(jnp.float32), BK, axis=0)[: w.shape[0]]
    dequantized = (w.astype(jnp.float32) * per_element).astype(jnp.bfloat16)
    product = jnp.dot(
        x.astype(jnp.float32),
        dequantized.astype(jnp.float32),
        precision=jax.lax.Precision.HIGHEST,
    )
    return product.astype(x.dtype)


@sk.kernel(
    tile={"M": "BM", "N": "BN"},
    loop={"K": "BK"},
    groups={"G": "K"},
    reference=linear_int4_reference,
)
def linear_int4(
    x: BFloat16[Array, "M K"],
    w: Int4[Array, "K N"],
    scales: Float[Array, "G N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
    BK: sk.Const[int] = 128,
) -> BFloat16[Array, "M N"]:
    """x @ dequantize(w, scales), the (K, N) int4 weight dequantized in registers a step."""

    def step(acc: jax.Array) -> jax.Array:
        scale = sk.load(scales).astype(jnp.float32)  # this group's row of scales, one per n
        dequantized = sk.load(w).astype(jnp.float32) * scale[None, :]
        return acc + sk.dot(x, dequantized.astype(jnp.bfloat16))

    acc = sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32))
    return acc.astype(jnp.bfloat16)


def linear_w4a16(x: jax.Array, w: jax.Array, scales: jax.Array) -> jax.Array:
    """`x @ dequantize(w, scales).T` for x of (M, K): the kernel's product, transposed back."""
    return matmul_w4a16(w, scales, x).T


def quantize_int4(weight: jax.Array, group: int = 128) -> tuple[jax.Array, jax.Array]:
    """Symmetric round-to-nearest int4 quantization of an (N, K) weight in groups of `group`
    along K (K a multiple of `group`): the int4 weight and its (K / group, N) scales."""
    n, k = weight.shape
    grouped = weight.astype(jnp.float32).reshape(n, k // group, group)
    scales = jnp.maximum(jnp.max(jnp.abs(grouped), axis=2), 1e-8) / 7.0
    quantized = jnp.clip(jnp.round(grouped / scales[:, :, None]), -8, 7)
    return quantized.reshape(n, k).astype(jnp.int4), scales.T.astype(jnp.bfloat16)


if __name__ == "__main__":
    kw, kx = jax.random.split(jax.random.key(0))
    weight = jax.random.normal(kw, (1000, 512), jnp.float32) * 0.02
    w, scales = quantize_int4(weight)
    x = jax.random.normal(kx, (16, 512), jnp.bfloat16)
    print(matmul_w4a16.plan(w, scales, x))
    got = linear_w4a16(x, w, scales).astype(jnp.float32)
    want = matmul_w4a16_reference(w, scales, x).T.astype(jnp.float32)
    print("max abs error:", float(jnp.max(jnp.abs(got - want))))
    exact = x.astype(jnp.float32) @ weight.T
    print("max abs quantization error:", float(jnp.max(jnp.abs(got - exact))))
    # The same weight laid out (K, N), as GPTQ stores it: no transpose on either side.
    print(linear_int4.plan(x, w.T, scales))
    got_kn = linear_int4(x, w.T, scales).astype(jnp.float32)
    print("max abs difference, (K, N) against (N, K):", float(jnp.max(jnp.abs(got_kn - got))))
