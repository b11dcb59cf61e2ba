"""A batch of matrix products: the batch dim B is a grid axis, and each grid step multiplies
one (M, K) by (K, N) pair with the same WGMMA loop over K as `matmul`."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, BFloat16, Float32

import statickernel as sk


def batched_matmul_reference(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.einsum("bmk,bkn->bmn", a, b, preferred_element_type=jnp.float32)


@sk.kernel(
    batch="B",
    tile={"M": "BM", "N": "BN"},
    loop={"K": "BK"},
    reference=batched_matmul_reference,
)
def batched_matmul(
    a: BFloat16[Array, "B M K"],
    b: BFloat16[Array, "B K N"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
    stages: sk.Const[int | None] = None,
) -> Float32[Array, "B M N"]:
    # The body sees one batch entry: a is (BM, BK) per step, b is (BK, BN).
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))


if __name__ == "__main__":
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (3, 300, 200), jnp.bfloat16)
    b = jax.random.normal(kb, (3, 200, 260), jnp.bfloat16)
    print(batched_matmul.plan(a, b))
    err = jnp.max(jnp.abs(batched_matmul(a, b) - batched_matmul_reference(a, b)))
    print("max abs error:", float(err))
