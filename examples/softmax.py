"""Row softmax with each row whole in its block; ragged rows read -inf past the edge."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def softmax_reference(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)


def softmax_vjp(x: jax.Array, y: jax.Array, dy: jax.Array) -> jax.Array:
    """The declared backward: dx from the backward kernel, which reads the forward's result."""
    del x
    return softmax_backward(y, dy).astype(y.dtype)


@sk.kernel(tile={"M": "BM"}, reference=softmax_reference, vjp=softmax_vjp)
def softmax(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    v = sk.load(x, fill=-jnp.inf).astype(jnp.float32)
    e = jnp.exp(v - sk.max(v, axis=1, keepdims=True))
    return (e / sk.sum(e, axis=1, keepdims=True)).astype(x.dtype)


def softmax_backward_reference(y: jax.Array, dy: jax.Array) -> jax.Array:
    y32, dy32 = y.astype(jnp.float32), dy.astype(jnp.float32)
    return (y32 * (dy32 - jnp.sum(dy32 * y32, axis=-1, keepdims=True))).astype(y.dtype)


@sk.kernel(tile={"M": "BM"}, reference=softmax_backward_reference, vjp="reference")
def softmax_backward(
    y: Float[Array, "M N"], dy: Float[Array, "M N"], *, BM: sk.Const[int] = 64
) -> Float[Array, "M N"]:
    """The backward of softmax from its result: dx = y * (dy - sum(dy * y)) per row."""
    y32 = sk.load(y).astype(jnp.float32)
    dy32 = sk.load(dy).astype(jnp.float32)
    return (y32 * (dy32 - sk.sum(dy32 * y32, axis=1, keepdims=True))).astype(y.dtype)


# The same kernel, differentiated by JAX through its reference: reverse and forward mode.
softmax_by_reference = sk.kernel(
    tile={"M": "BM"}, reference=softmax_reference, vjp="reference", name="softmax_by_reference"
)(softmax.spec.fn)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (1000, 100), jnp.float32)
    print(softmax.plan(x))
    print("max abs error:", float(jnp.max(jnp.abs(softmax(x) - softmax_reference(x)))))
