"""Row softmax with each row whole in its block; ragged rows read -inf past the edge."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def softmax_reference(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)


@sk.kernel(tile={"M": "BM"}, reference=softmax_reference, vjp="reference")
def softmax(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    v = sk.load(x, fill=-jnp.inf).astype(jnp.float32)
    e = jnp.exp(v - sk.max(v, axis=1, keepdims=True))
    return (e / sk.sum(e, axis=1, keepdims=True)).astype(x.dtype)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (1000, 100), jnp.float32)
    print(softmax.plan(x))
    print("max abs error:", float(jnp.max(jnp.abs(softmax(x) - softmax_reference(x)))))
