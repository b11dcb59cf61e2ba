"""Rotary position embedding (RoPE), rotate-half form, on q and k in one kernel.

Each head's row of q (and of k) is split in halves x1, x2 and rotated by its position's angles:
`x * cos + concatenate([-x2, x1]) * sin`, with cos and sin laid out "T D" as Llama's and
GPT-NeoX's implementations build them (each angle twice: `concatenate([freqs, freqs])`), in
float32 or, to halve their shared memory at head dims of 256, bfloat16. The
body slices and joins the block in registers, so q and k are read once and written once; a
slice along the columns is free where its bounds are multiples of 8 (head dims of 64, 128 and
256 are).

The batch and head dims are grid axes; cos and sin, which have neither, are shared by every
head and every batch entry."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def rotate_half(x: jax.Array) -> jax.Array:
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def rope_reference(
    q: jax.Array, k: jax.Array, cos: jax.Array, sin: jax.Array
) -> tuple[jax.Array, jax.Array]:
    def rotate(x: jax.Array) -> jax.Array:
        v = x.astype(jnp.float32)
        c, s = cos.astype(jnp.float32), sin.astype(jnp.float32)
        return (v * c + rotate_half(v) * s).astype(x.dtype)

    return rotate(q), rotate(k)


@sk.kernel(batch=("B", "H"), tile={"T": "BT"}, reference=rope_reference)
def rope(
    q: Float[Array, "B H T D"],
    k: Float[Array, "B H T D"],
    cos: Float[Array, "T D"],
    sin: Float[Array, "T D"],
    *,
    BT: sk.Const[int] = 64,
) -> tuple[Float[Array, "B H T D"], Float[Array, "B H T D"]]:
    """q and k rotated by their positions' angles; one (BT, D) block of a head a grid step."""
    c, s = sk.load(cos).astype(jnp.float32), sk.load(sin).astype(jnp.float32)
    half = c.shape[1] // 2

    def rotate(x: jax.Array) -> jax.Array:
        v = sk.load(x).astype(jnp.float32)
        x1, x2 = v[:, :half], v[:, half:]
        # The halves of v * c + rotate_half(v) * s, each computed on its own columns.
        first = x1 * c[:, :half] - x2 * s[:, :half]
        second = x2 * c[:, half:] + x1 * s[:, half:]
        return jnp.concatenate([first, second], axis=1).astype(x.dtype)

    return rotate(q), rotate(k)


def mla_rope_reference(
    q_nope: jax.Array,
    q_pe: jax.Array,
    k_nope: jax.Array,
    k_pe: jax.Array,
    cos: jax.Array,
    sin: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    def rotate(x: jax.Array) -> jax.Array:
        v = x.astype(jnp.float32)
        c, s = cos.astype(jnp.float32), sin.astype(jnp.float32)
        return (v * c + rotate_half(v) * s).astype(x.dtype)

    heads = q_nope.shape[1]
    k_rotated = jnp.broadcast_to(rotate(k_pe)[:, None], (*k_nope.shape[:3], k_pe.shape[-1]))
    return (
        jnp.concatenate([q_nope, rotate(q_pe)], axis=-1),
        jnp.concatenate([k_nope, k_rotated.astype(k_nope.dtype)], axis=-1)[:, :heads],
    )


@sk.kernel(batch=("B", "H"), tile={"T": "BT"}, reference=mla_rope_reference)
def mla_rope(
    q_nope: Float[Array, "B H T Dn"],
    q_pe: Float[Array, "B H T Dr"],
    k_nope: Float[Array, "B H T Dn"],
    k_pe: Float[Array, "B T Dr"],
    cos: Float[Array, "T Dr"],
    sin: Float[Array, "T Dr"],
    *,
    BT: sk.Const[int] = 64,
) -> tuple[Float[Array, "B H T Dn+Dr"], Float[Array, "B H T Dn+Dr"]]:
    """Multi-head latent attention's (DeepSeek-V2/V3) queries and keys: each head's part
    without positions beside its rotated part, joined into one head of Dn + Dr columns. The
    keys' rotated part is shared by every head (k_pe has no H)."""
    c, s = sk.load(cos).astype(jnp.float32), sk.load(sin).astype(jnp.float32)
    half = c.shape[1] // 2

    def rotate(x: jax.Array) -> jax.Array:
        v = sk.load(x).astype(jnp.float32)
        x1, x2 = v[:, :half], v[:, half:]
        first = x1 * c[:, :half] - x2 * s[:, :half]
        second = x2 * c[:, half:] + x1 * s[:, half:]
        return jnp.concatenate([first, second], axis=1).astype(x.dtype)

    q = jnp.concatenate([sk.load(q_nope), rotate(q_pe)], axis=1)
    k = jnp.concatenate([sk.load(k_nope), rotate(k_pe)], axis=1)
    return q, k


def rope_angles(positions: jax.Array, head_dim: int, base: float = 10000.0) -> jax.Array:
    """The angles of each position, (T, D): each frequency twice, as Llama lays them out."""
    inv_freq = 1.0 / base ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    freqs = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.concatenate([freqs, freqs], axis=-1)


if __name__ == "__main__":
    kq, kk = jax.random.split(jax.random.key(0))
    q = jax.random.normal(kq, (2, 4, 300, 128), jnp.bfloat16)
    k = jax.random.normal(kk, (2, 4, 300, 128), jnp.bfloat16)
    angles = rope_angles(jnp.arange(300), 128)
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    print(rope.plan(q, k, cos, sin))
    for got, want in zip(rope(q, k, cos, sin), rope_reference(q, k, cos, sin), strict=True):
        err = jnp.max(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32)))
        print("max abs error:", float(err))
