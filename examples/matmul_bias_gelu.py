"""A matmul with a fused epilogue: the accumulator gets a bias per column and a tanh GELU
before it is written, so the product never makes a round trip through global memory."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, BFloat16, Float

import statickernel as sk


def matmul_bias_gelu_reference(a: jax.Array, b: jax.Array, bias: jax.Array) -> jax.Array:
    product = jnp.dot(a, b, preferred_element_type=jnp.float32)
    return jax.nn.gelu(product + bias.astype(jnp.float32), approximate=True).astype(a.dtype)


# Differentiated through the reference (XLA's dots) until the backward's products are kernels.
@sk.kernel(
    tile={"M": "BM", "N": "BN"},
    loop={"K": "BK"},
    reference=matmul_bias_gelu_reference,
    vjp="reference",
)
def matmul_bias_gelu(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "K N"],
    bias: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
    stages: sk.Const[int | None] = None,
) -> BFloat16[Array, "M N"]:
    acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
    y = acc + sk.load(bias).astype(jnp.float32)
    return jax.nn.gelu(y, approximate=True).astype(jnp.bfloat16)


if __name__ == "__main__":
    ka, kb, kc = jax.random.split(jax.random.key(0), 3)
    a = jax.random.normal(ka, (300, 200), jnp.bfloat16)
    b = jax.random.normal(kb, (200, 260), jnp.bfloat16)
    bias = jax.random.normal(kc, (260,), jnp.float32)
    print(matmul_bias_gelu.plan(a, b, bias))
    out = matmul_bias_gelu(a, b, bias).astype(jnp.float32)
    ref = matmul_bias_gelu_reference(a, b, bias).astype(jnp.float32)
    print("max abs error:", float(jnp.max(jnp.abs(out - ref))))
