"""An fp8 matrix product with per-tensor scales: WGMMA multiplies float8 blocks into a
float32 accumulator, and the scales are applied once, in the epilogue."""

from typing import TYPE_CHECKING, ClassVar

import jax
import jax.numpy as jnp
import jaxtyping
from jaxtyping import Array, Float, Float32

import statickernel as sk

if TYPE_CHECKING:  # to a type checker, an array annotation like any other
    Fp8 = Float
else:

    class Fp8(jaxtyping.AbstractDtype):
        """Either fp8 format: e4m3fn for weights and activations, e5m2 for gradients."""

        dtypes: ClassVar[list[str]] = ["float8_e4m3fn", "float8_e5m2"]


def matmul_fp8_reference(
    a: jax.Array, b_t: jax.Array, a_scale: jax.Array, b_scale: jax.Array
) -> jax.Array:
    product = jnp.dot(a, b_t.T, preferred_element_type=jnp.float32)
    return product * (a_scale * b_scale)


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, reference=matmul_fp8_reference)
def matmul_fp8(
    a: Fp8[Array, "M K"],
    b_t: Fp8[Array, "N K"],
    a_scale: Float32[Array, ""],
    b_scale: Float32[Array, ""],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 128,
    stages: sk.Const[int | None] = None,
) -> Float[Array, "M N"]:
    # WGMMA reads a 1-byte b only K-major, so b comes transposed, (N, K); sk.dot contracts
    # the loop dim K either way. A K block is 128 bytes: one swizzle row.
    acc = sk.loop("K", lambda acc: acc + sk.dot(a, b_t), init=jnp.zeros((BM, BN), jnp.float32))
    # The scales are scalars read from global memory, so new scales do not recompile.
    return acc * (sk.load(a_scale) * sk.load(b_scale))


if __name__ == "__main__":
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (300, 256), jnp.float32).astype(jnp.float8_e4m3fn)
    b_t = jax.random.normal(kb, (260, 256), jnp.float32).astype(jnp.float8_e4m3fn)
    a_scale, b_scale = jnp.float32(0.5), jnp.float32(0.25)
    print(matmul_fp8.plan(a, b_t, a_scale, b_scale))
    err = jnp.max(
        jnp.abs(
            matmul_fp8(a, b_t, a_scale, b_scale) - matmul_fp8_reference(a, b_t, a_scale, b_scale)
        )
    )
    print("max abs error:", float(err))
