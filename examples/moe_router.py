"""A mixture-of-experts router: each token's K experts and their weights, in one kernel.

As Mixtral's and Qwen's routers compute it: the softmax of the router's logits over the E
experts, the K most probable, and their probabilities renormalized to sum to 1. The softmax
is increasing, so the K most probable experts are the K largest logits, and their
renormalized probabilities are the softmax of those K logits alone: the body ranks the logits
and takes the softmax of K values per token instead of E. The experts are those
`jax.lax.top_k` of the probabilities gives, the first index winning a tie.

The K columns of the results are a dim the constant K sizes: `"T K"` is declared with
`K: sk.Const[int]`, and a call may pass another K (at most E)."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float32, Int32

import statickernel as sk


def moe_router_reference(logits: jax.Array, K: int = 2) -> tuple[jax.Array, jax.Array]:
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    weights, experts = jax.lax.top_k(probs, K)
    return weights / jnp.sum(weights, axis=-1, keepdims=True), experts


@sk.kernel(tile={"T": "BT"}, reference=moe_router_reference)
def moe_router(
    logits: Float[Array, "T E"], *, BT: sk.Const[int] = 64, K: sk.Const[int] = 2
) -> tuple[Float32[Array, "T K"], Int32[Array, "T K"]]:
    """The weights and indices of each token's K experts, weights summing to 1 per token."""
    top, experts = jax.lax.top_k(sk.load(logits).astype(jnp.float32), K)
    return jax.nn.softmax(top, axis=1), experts


if __name__ == "__main__":
    logits = jax.random.normal(jax.random.key(0), (1000, 64), jnp.bfloat16)
    print(moe_router.plan(logits, K=8))
    weights, experts = moe_router(logits, K=8)
    want_weights, want_experts = moe_router_reference(logits, K=8)
    print("max abs error of the weights:", float(jnp.max(jnp.abs(weights - want_weights))))
    print("experts equal:", bool(jnp.all(experts == want_experts)))
