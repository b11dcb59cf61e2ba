"""Sum of each row: a rank-1 result from a rank-2 operand."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def row_sum_reference(x: jax.Array) -> jax.Array:
    return jnp.sum(x.astype(jnp.float32), axis=-1)


@sk.kernel(tile={"M": "BM"}, reference=row_sum_reference)
def row_sum(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
    return sk.sum(sk.load(x).astype(jnp.float32), axis=1)


if __name__ == "__main__":
    x = jnp.ones((1000, 100), jnp.float32)
    print(row_sum.plan(x))
    print("max abs error:", float(jnp.max(jnp.abs(row_sum(x) - row_sum_reference(x)))))
