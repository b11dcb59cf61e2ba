"""An int8 matrix product, exact in int32: WGMMA multiplies int8 blocks into an int32
accumulator."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int8, Int32

import statickernel as sk


def matmul_int8_reference(a: jax.Array, b_t: jax.Array) -> jax.Array:
    return jnp.dot(a, b_t.T, preferred_element_type=jnp.int32)


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, reference=matmul_int8_reference)
def matmul_int8(
    a: Int8[Array, "M K"],
    b_t: Int8[Array, "N K"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 128,
    stages: sk.Const[int | None] = None,
) -> Int32[Array, "M N"]:
    # As for fp8, WGMMA reads a 1-byte b only K-major: b comes as (N, K). The int32
    # accumulator starts at zero, and K past its edge reads zeros, which add nothing.
    return sk.loop("K", lambda acc: acc + sk.dot(a, b_t), init=jnp.zeros((BM, BN), jnp.int32))


if __name__ == "__main__":
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.randint(ka, (300, 200), -128, 128, jnp.int32).astype(jnp.int8)
    b_t = jax.random.randint(kb, (260, 200), -128, 128, jnp.int32).astype(jnp.int8)
    print(matmul_int8.plan(a, b_t))
    exact = bool(jnp.all(matmul_int8(a, b_t) == matmul_int8_reference(a, b_t)))
    print("exact:", exact)
