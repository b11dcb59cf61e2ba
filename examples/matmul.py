"""Matrix product on the tensor cores: a loop over K folds WGMMA products into an accumulator."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, BFloat16, Float

import statickernel as sk


def matmul_reference(a: jax.Array, b: jax.Array, bf16_out: bool = False) -> jax.Array:
    product = jnp.dot(a, b, preferred_element_type=jnp.float32)
    return product.astype(jnp.bfloat16) if bf16_out else product


# Differentiated through the reference (XLA's dots) until the backward's products are kernels.
@sk.kernel(
    tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, reference=matmul_reference, vjp="reference"
)
def matmul(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "K N"],
    *,
    BM: sk.Const[int] = sk.tune(128, 64),
    BN: sk.Const[int] = sk.tune(128, 64, 256),
    BK: sk.Const[int] = 64,
    stages: sk.Const[int | None] = None,
    bf16_out: sk.Const[bool] = False,
    cluster: sk.Const[bool | None] = sk.tune(None, False),
) -> Float[Array, "M N"]:
    # Each step multiplies one (BM, BK) block of a by one (BK, BN) block of b; K past its
    # edge reads zeros, so a ragged K adds nothing. This body is generated warp-specialized
    # and persistent (on Hopper two consumer warpgroups share a CTA tile of 128 x 256; on
    # Blackwell a TMA warp and an MMA warp feed an epilogue warpgroup); stages=None fits the
    # stages shared memory holds. At large shapes, CTAs pair up to share b's block (clusters
    # on Hopper, 2-CTA MMAs on Blackwell; cluster=None lets the plan choose; False never).
    acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))
    # The accumulator is float32; a bfloat16 result halves the bytes written.
    return acc.astype(jnp.bfloat16) if bf16_out else acc


if __name__ == "__main__":
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (300, 200), jnp.bfloat16)
    b = jax.random.normal(kb, (200, 260), jnp.bfloat16)
    print(matmul.plan(a, b))
    err = jnp.max(jnp.abs(matmul(a, b) - matmul_reference(a, b)))
    print("max abs error:", float(err))
