"""Row softmax for rows wider than one block: a running max and sum over the blocks of N, then
a second pass that writes each normalized block."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def softmax_online_reference(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"}, reference=softmax_online_reference)
def softmax_online(
    x: Float[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 256,
    stages: sk.Const[int] = 2,
) -> Float[Array, "M N"]:
    def statistics(carry):
        running_max, running_sum = carry
        v = sk.load(x, fill=-jnp.inf).astype(jnp.float32)  # columns past N read -inf
        new_max = jnp.maximum(running_max, sk.max(v, axis=1))
        rescale = jnp.exp(running_max - new_max)
        block_sum = sk.sum(jnp.exp(v - new_max[:, None]), axis=1)
        return new_max, running_sum * rescale + block_sum

    init = (jnp.full((BM,), -jnp.inf, jnp.float32), jnp.zeros((BM,), jnp.float32))
    row_max, row_sum = sk.loop("N", statistics, init=init)
    inverse = 1.0 / row_sum

    def normalize():
        v = sk.load(x).astype(jnp.float32)
        return (jnp.exp(v - row_max[:, None]) * inverse[:, None]).astype(x.dtype)

    return sk.map_blocks("N", normalize)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (130, 100_000), jnp.float32)
    print(softmax_online.plan(x))
    err = jnp.max(jnp.abs(softmax_online(x) - softmax_online_reference(x)))
    print("max abs error:", float(err))
