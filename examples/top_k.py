"""The K largest logits of each row of a vocabulary, and their token ids, streamed.

A sampler's top-K (vLLM's, before top-p) ranks each row of logits over the whole vocabulary:
128256 columns for Llama 3, far more than a block holds. The kernel walks the vocabulary in
blocks of `BV` (`sk.loop` over V): each step ranks its block with `jax.lax.top_k`, joins its
K best with the K best so far (the carry), ranks the 2K again, and takes the ids of the
winners with `jnp.take_along_axis`. Each logit is read from HBM once.

As `jax.lax.top_k` over the whole row: descending, the first id winning a tie (the carry's
ids come first in the join, and are the smaller), NaN above +inf. K is a multiple of 8 (the
register layout's tile, where the two K join) and at most 32 (the join's 2K columns take
one reduction each in `take_along_axis`). Compiled for `sm_90a` with BV=128, K=8 and K=16
take 207 and 244 registers with no spills; K=32 spills (take BV=64 and expect a few bytes).
A batch of a few rows is one block of rows, which one CTA walks alone: `sampler_top_k`
first cuts each row into `parts` rows of V / parts (a reshape, no copy where parts divides V),
so that parts times as many CTAs rank them, then merges each row's parts' candidates."""

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float, Float32, Int32

import statickernel as sk


def top_k_reference(logits: jax.Array, K: int = 8) -> tuple[jax.Array, jax.Array]:
    return lax.top_k(logits.astype(jnp.float32), K)


@sk.kernel(tile={"M": "BM"}, loop={"V": "BV"}, reference=top_k_reference)
def top_k(
    logits: Float[Array, "M V"],
    *,
    BM: sk.Const[int] = 64,
    BV: sk.Const[int] = 128,
    K: sk.Const[int] = 8,
) -> tuple[Float32[Array, "M K"], Int32[Array, "M K"]]:
    """Each row's K largest logits, descending, and their column ids."""

    def step(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        best, ids = carry
        v = sk.load(logits, fill=-jnp.inf).astype(jnp.float32)
        step_best, step_ids = lax.top_k(v, K)  # the block's own ids, from 0
        step_ids = step_ids + jnp.min(sk.position("V"))  # the vocabulary's
        joined = jnp.concatenate([best, step_best], axis=1)
        joined_ids = jnp.concatenate([ids, step_ids], axis=1)
        best, where = lax.top_k(joined, K)
        return best, jnp.take_along_axis(joined_ids, where, axis=1)

    # -NaN ranks below every logit, -inf included: the first step's K replace it whole.
    init = (jnp.full((BM, K), -jnp.nan, jnp.float32), jnp.zeros((BM, K), jnp.int32))
    return sk.loop("V", step, init=init)


def sampler_top_k(logits: jax.Array, K: int = 8, parts: int = 32) -> tuple[jax.Array, jax.Array]:
    """`top_k` of a few long rows: each row ranked in `parts` pieces by CTAs of their own, and
    the pieces' K candidates ranked again (in XLA: parts x K columns a row, a few KB)."""
    m, v = logits.shape
    width = -(-v // parts)
    if width * parts != v:  # pad the last piece with -NaN, below every logit (one copy)
        logits = jnp.pad(logits, ((0, 0), (0, width * parts - v)), constant_values=-jnp.nan)
    best, ids = top_k(logits.reshape(m * parts, width), K=K)
    ids = ids + (jnp.arange(m * parts, dtype=jnp.int32) % parts * width)[:, None]
    best, where = lax.top_k(best.reshape(m, parts * K), K)
    return best, jnp.take_along_axis(ids.reshape(m, parts * K), where, axis=1)


if __name__ == "__main__":
    logits = jax.random.normal(jax.random.key(0), (16, 128256), jnp.bfloat16)
    print(top_k.plan(logits, K=16))
    values, ids = top_k(logits, K=16)
    want_values, want_ids = top_k_reference(logits, K=16)
    print("values equal:", bool(jnp.all(values == want_values)))
    print("ids equal:", bool(jnp.all(ids == want_ids)))
    # The same rows in 32 parts each: 16 x 32 rows of 4008 logits, 8 CTAs instead of 1.
    split_values, split_ids = sampler_top_k(logits, K=16, parts=32)
    print(
        "in parts, equal:",
        bool(jnp.all(split_values == want_values)),
        bool(jnp.all(split_ids == want_ids)),
    )
