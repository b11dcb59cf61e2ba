"""Elementwise add of two arrays of any shape (M, N)."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def add_reference(x: jax.Array, y: jax.Array) -> jax.Array:
    return x + y


@sk.kernel(tile={"M": "BM", "N": "BN"}, reference=add_reference)
def add(
    x: Float[Array, "M N"],
    y: Float[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
) -> Float[Array, "M N"]:
    return sk.load(x) + sk.load(y)


if __name__ == "__main__":
    a = jnp.arange(1000 * 777, dtype=jnp.float32).reshape(1000, 777)
    print(add.plan(a, a))
    print("max abs error:", float(jnp.max(jnp.abs(add(a, a) - add_reference(a, a)))))
