"""y = x * scale + bias, with a bias vector broadcast over the rows."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def scale_bias_reference(x: jax.Array, bias: jax.Array, scale: float = 2.0) -> jax.Array:
    return x * scale + bias[None, :]


@sk.kernel(tile={"M": "BM", "N": "BN"}, reference=scale_bias_reference)
def scale_bias(
    x: Float[Array, "M N"],
    bias: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
    scale: sk.Const[float] = 2.0,
) -> Float[Array, "M N"]:
    return sk.load(x) * scale + sk.load(bias)


if __name__ == "__main__":
    x = jnp.ones((300, 1000), jnp.float32)
    b = jnp.arange(1000, dtype=jnp.float32)
    print(scale_bias.plan(x, b))
    err = jnp.max(jnp.abs(scale_bias(x, b) - scale_bias_reference(x, b)))
    print("max abs error:", float(err))
