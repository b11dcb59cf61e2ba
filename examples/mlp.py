"""A fused two-layer MLP, `relu(x @ w1) @ w2`: each block of rows walks the hidden dim in
blocks, and the hidden activations never leave the chip."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, BFloat16, Float

import statickernel as sk


def mlp_reference(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    hidden = jnp.dot(x, w1, preferred_element_type=jnp.float32)
    hidden = jax.nn.relu(hidden).astype(x.dtype)
    return jnp.dot(hidden, w2, preferred_element_type=jnp.float32)


@sk.kernel(tile={"M": "BM"}, loop={"H": "BH"}, reference=mlp_reference)
def mlp(
    x: BFloat16[Array, "M K"],
    w1: BFloat16[Array, "K H"],
    w2: BFloat16[Array, "H N"],
    *,
    BM: sk.Const[int] = 64,
    BH: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Float[Array, "M N"]:
    def step(acc):
        # One block of hidden units: (BM, BH), contracting the whole of K, in registers.
        hidden = jax.nn.relu(sk.dot(x, w1))
        # Its share of the output, added into the accumulator by WGMMA from registers.
        return acc + sk.dot(hidden.astype(x.dtype), w2)

    return sk.loop("H", step, init=jnp.zeros((BM, sk.dim("N")), jnp.float32))


if __name__ == "__main__":
    kx, k1, k2 = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (300, 256), jnp.bfloat16)
    w1 = jax.random.normal(k1, (256, 1000), jnp.bfloat16) / 16
    w2 = jax.random.normal(k2, (1000, 128), jnp.bfloat16) / 32
    print(mlp.plan(x, w1, w2))
    err = jnp.max(jnp.abs(mlp(x, w1, w2) - mlp_reference(x, w1, w2)))
    print("max abs error:", float(err))
