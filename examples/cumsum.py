"""Mamba-2's chunked decay: the running sum of `dt * A` along each chunk of a sequence.

Mamba-2 cuts the sequence into chunks of L steps (128 or 256) and needs, for every step,
the log of the decay since the chunk's start: `cumsum(softplus(dt + dt_bias) * A)` along the
chunk, with dt clipped to its range. The rows here are the (batch, head, chunk) triples, laid
out as the reshape of `dt` from (B, H, chunks, L) gives them; `dt_bias` and `A` are per head,
repeated per row outside the kernel (a few KB).

The scan runs along the columns of the block in shared memory (`jnp.cumsum(v, axis=1)`), in
log2(L) rounds; the row's sum stays in float32."""

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
