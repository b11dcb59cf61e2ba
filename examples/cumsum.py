"""Mamba-2's chunked decay: the running sum of `dt * A` along each chunk of a sequence.

Mamba-2 cuts the sequence into chunks of L steps (128 or 256) and needs, for every step,
the log of the decay since the chunk's start: `cumsum(softplus(dt + dt_bias) * A)` along the
chunk, with dt clipped to its range. The rows here are the (batch, head, chunk) triples, laid
out as the reshape of `dt` from (B, H, chunks, L) gives them; `dt_bias` and `A` are per head,
repeated per row outside the kernel (a few KB).

The scan runs along the columns of the block in shared memory (`jnp.cumsum(v, axis=1)`), in
log2(L) rounds; the row's sum stays in float32.

`top_p_mask` is nucleus sampling's filter: over a row of logits sorted in descending order
(the candidates a sampler's top-k kept, thousands of them), it keeps the smallest prefix
whose probability reaches `p` and sets the rest to -inf. Rows that wide take the row form,
one row at a time in registers; the running sum of the probabilities is a scan of that row
in a buffer of its own."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float32

import statickernel as sk


def chunk_decay_reference(
    dt: jax.Array,
    dt_bias: jax.Array,
    a: jax.Array,
    dt_min: float = 0.0,
    dt_max: float = float("inf"),
) -> jax.Array:
    step = jax.nn.softplus(dt.astype(jnp.float32) + dt_bias[:, None])
    step = jnp.clip(step, dt_min, dt_max)
    return jnp.cumsum(step * a[:, None], axis=1)


@sk.kernel(tile={"R": "BR"}, reference=chunk_decay_reference)
def chunk_decay(
    dt: Float[Array, "R L"],
    dt_bias: Float32[Array, " R"],
    a: Float32[Array, " R"],
    *,
    BR: sk.Const[int] = 64,
    dt_min: sk.Const[float] = 0.0,
    dt_max: sk.Const[float] = float("inf"),
) -> Float32[Array, "R L"]:
    """The running sum of softplus(dt + dt_bias) * A along each chunk of L steps."""
    step = jax.nn.softplus(sk.load(dt).astype(jnp.float32) + sk.load(dt_bias)[:, None])
    step = jnp.clip(step, dt_min, dt_max)
    return jnp.cumsum(step * sk.load(a)[:, None], axis=1)


def top_p_mask_reference(sorted_logits: jax.Array, p: float = 0.9) -> jax.Array:
    v = sorted_logits.astype(jnp.float32)
    probs = jax.nn.softmax(v, axis=1)
    before = jnp.cumsum(probs, axis=1) - probs  # the mass of the logits ahead of each
    return jnp.where(before < p, v, -jnp.inf).astype(sorted_logits.dtype)


@sk.kernel(tile={"M": "BM"}, reference=top_p_mask_reference)
def top_p_mask(
    sorted_logits: Float[Array, "M V"], *, BM: sk.Const[int] = 64, p: sk.Const[float] = 0.9
) -> Float[Array, "M V"]:
    """Each row's logits (sorted, largest first) where the mass ahead of them is below p;
    -inf past the nucleus."""
    v = sk.load(sorted_logits).astype(jnp.float32)
    e = jnp.exp(v - sk.max(v, axis=1, keepdims=True))
    probs = e / sk.sum(e, axis=1, keepdims=True)
    before = jnp.cumsum(probs, axis=1) - probs
    return jnp.where(before < p, v, -jnp.inf).astype(sorted_logits.dtype)


if __name__ == "__main__":
    batch, heads, chunks, length = 2, 8, 4, 128
    kd, kb, ka = jax.random.split(jax.random.key(0), 3)
    dt = jax.random.normal(kd, (batch, heads, chunks, length), jnp.bfloat16)
    head_bias = jax.random.normal(kb, (heads,)) * 0.1
    head_a = -jnp.exp(jax.random.normal(ka, (heads,)))
    rows = batch * heads * chunks
    # One row per (batch, head, chunk): the per-head values repeated to match.
    dt_bias = jnp.broadcast_to(head_bias[None, :, None], (batch, heads, chunks)).reshape(rows)
    a = jnp.broadcast_to(head_a[None, :, None], (batch, heads, chunks)).reshape(rows)
    flat = dt.reshape(rows, length)
    print(chunk_decay.plan(flat, dt_bias, a))
    got = chunk_decay(flat, dt_bias, a).reshape(batch, heads, chunks, length)
    want = chunk_decay_reference(flat, dt_bias, a).reshape(batch, heads, chunks, length)
    print("max abs error:", float(jnp.max(jnp.abs(got - want))))

    # Nucleus sampling's filter over 8 rows of 4096 sorted candidates.
    logits = -jnp.sort(-jax.random.normal(kd, (8, 4096), jnp.float32) * 3, axis=1)
    print(top_p_mask.plan(logits))
    kept = jnp.sum(jnp.isfinite(top_p_mask(logits)), axis=1)
    print("kept per row:", [int(k) for k in kept])
    print(
        "reference:   ",
        [int(k) for k in jnp.sum(jnp.isfinite(top_p_mask_reference(logits)), axis=1)],
    )
