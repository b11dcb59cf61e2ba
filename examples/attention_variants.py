"""Attention's other common forms, on the bodies of `examples/attention.py`: grouped-query
attention (GQA and MQA: key and value heads shared by groups of query heads) and packed
sequences (several sequences in one row, told apart by segment ids). Each returns its output
and each query's log-sum-exp, and declares a backward that reuses the lse.

- `attention_gqa(q "B Hkv G Sq D", k "B Hkv Skv D", v)`: the G query heads of a key head are
  a batch dim of q that k and v do not have; `grouped_query_attention(q "B H Sq D", k, v)`
  reshapes q so (free: H = Hkv * G in that order) and back.
- `attention_packed(q, k, v, q_segment_ids "B Sq", kv_segment_ids "B Skv")`: a query sees the
  keys of its own segment (and, causal, none after it); a query that sees no key gets zeros.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float32, Int32

import statickernel as sk
from attention import (
    Half,
    Scores,
    Variant,
    attention_lse_reference,
    attention_lse_vjp,
    dkdv_body,
    dq_body,
    flash_forward,
)

# --- grouped-query attention --------------------------------------------------------------


def _as_heads(x: jax.Array) -> jax.Array:
    """(B, Hkv, G, S, D) as (B, H, S, D), H = Hkv * G: a reshape, no copy."""
    b, hkv, g, *rest = x.shape
    return x.reshape(b, hkv * g, *rest)


def attention_gqa_reference(
    q: jax.Array, k: jax.Array, v: jax.Array, **variant: Any
) -> tuple[jax.Array, jax.Array]:
    """Each query head against its group's key and value head, repeated, in jnp."""
    groups = q.shape[2]
    repeat = lambda x: jnp.repeat(x, groups, axis=1)  # noqa: E731
    out, lse = attention_lse_reference(_as_heads(q), repeat(k), repeat(v), **variant)
    return out.reshape(q.shape), lse.reshape(q.shape[:-1])


def attention_gqa_vjp(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    out: jax.Array,
    lse: jax.Array,
    dout: jax.Array,
    dlse: jax.Array,
    *,
    causal: bool,
    sm_scale: float | None,
    window_left: int | None,
    window_right: int | None,
    softcap: float | None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The backward of `attention`'s kernels on every query head, each against its group's
    key and value head (repeated in HBM: G copies of k and v), then dk and dv summed over
    each group's heads in float32."""
    variant = Variant(
        causal=causal,
        sm_scale=sm_scale,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
    )
    b, kv_heads, groups = q.shape[:3]
    repeat = lambda x: jnp.repeat(x, groups, axis=1)  # noqa: E731
    dq, dk, dv = attention_lse_vjp(
        _as_heads(q),
        repeat(k),
        repeat(v),
        _as_heads(out),
        _as_heads(lse),
        _as_heads(dout),
        _as_heads(dlse),
        **variant,
    )

    def summed(d: jax.Array, like: jax.Array) -> jax.Array:
        per_head = d.reshape(b, kv_heads, groups, *like.shape[2:]).astype(jnp.float32)
        return per_head.sum(axis=2).astype(like.dtype)

    return dq.reshape(q.shape), summed(dk, k), summed(dv, v)


@sk.kernel(
    batch=("B", "Hkv", "G"),
    tile={"Sq": "BQ"},
    loop={"Skv": "BKV"},
    reference=attention_gqa_reference,
    vjp=attention_gqa_vjp,
)
def attention_gqa(
    q: Half[Array, "B Hkv G Sq D"],
    k: Half[Array, "B Hkv Skv D"],
    v: Half[Array, "B Hkv Skv D"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    window_left: sk.Const[int | None] = None,
    window_right: sk.Const[int | None] = None,
    softcap: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B Hkv G Sq D"], Float32[Array, "B Hkv G Sq"]]:
    """Attention of each query head against its group's key and value head: k and v have no
    G, so every grid step of a group reads the same blocks of them (from L2 after the
    first)."""
    scores = Scores.of(sk.dim("D"), causal, sm_scale, window_left, window_right, softcap)
    return flash_forward(q, k, v, scores, BQ)


def grouped_query_attention(q: jax.Array, k: jax.Array, v: jax.Array, **variant: Any) -> jax.Array:
    """`attention` with q (B, H, Sq, D) and k, v (B, Hkv, Skv, D), H a multiple of Hkv: query
    head h uses key head h // (H // Hkv), as `jax.nn.dot_product_attention` groups them."""
    b, heads, sq, dim = q.shape
    kv_heads = k.shape[1]
    if heads % kv_heads:
        raise ValueError(
            f"grouped_query_attention: q has {heads} heads, not a multiple of the {kv_heads} "
            "heads of k and v"
        )
    grouped = q.reshape(b, kv_heads, heads // kv_heads, sq, dim)
    out, _ = attention_gqa(grouped, k, v, **variant)
    return out.reshape(q.shape)


# --- packed sequences ---------------------------------------------------------------------


def attention_packed_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    causal: bool = False,
    sm_scale: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Attention in jnp where a query sees only its own segment's keys: the masked scores'
    softmax, a query with no key zeros and -inf."""
    f32 = jnp.float32
    scale = Scores.of(q.shape[-1], sm_scale=sm_scale).scale
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(f32), k.astype(f32)) * scale
    seen = (q_segment_ids[:, :, None] == kv_segment_ids[:, None, :])[:, None]
    if causal:
        seen = seen & jnp.tril(jnp.ones(s.shape[-2:], bool))
    s = jnp.where(seen, s, -jnp.inf)
    lse = jax.nn.logsumexp(s, axis=-1)
    p = jnp.where(seen, jnp.exp(s - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None]), 0.0)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v.astype(f32)).astype(q.dtype), lse


def attention_packed_vjp(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    out: jax.Array,
    lse: jax.Array,
    dout: jax.Array,
    dlse: jax.Array,
    *,
    causal: bool,
    sm_scale: float | None,
) -> tuple[jax.Array, jax.Array, jax.Array, None, None]:
    """FlashAttention-2's backward with the segments' mask; none for the integer ids."""
    delta = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), axis=-1) - dlse
    lse = jnp.where(lse == -jnp.inf, jnp.inf, lse)
    ids = (q_segment_ids, kv_segment_ids)
    dq = attention_packed_dq(q, k, v, dout, lse, delta, *ids, causal=causal, sm_scale=sm_scale)
    dk, dv = attention_packed_dkdv(
        q, k, v, dout, lse, delta, *ids, causal=causal, sm_scale=sm_scale
    )
    return dq, dk, dv, None, None


def _packed_scores(
    causal: bool, sm_scale: float | None, seen: Callable[[bool], jax.Array]
) -> Scores:
    """The scores of a kernel's block, which sees the keys `seen` says (the segments')."""
    scale = Scores.of(sk.dim("D"), sm_scale=sm_scale).scale
    return Scores(scale=scale, causal=causal, seen_in_block=seen)


@sk.kernel(
    batch=("B", "H"),
    tile={"Sq": "BQ"},
    loop={"Skv": "BKV"},
    reference=attention_packed_reference,
    vjp=attention_packed_vjp,
)
def attention_packed(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    q_segment_ids: Int32[Array, "B Sq"],
    kv_segment_ids: Int32[Array, "B Skv"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B H Sq D"], Float32[Array, "B H Sq"]]:
    """Attention over packed sequences: each step reads its keys' segment ids, a vector
    along the loop, and compares them with the block's queries'."""
    query_ids = sk.load(q_segment_ids)
    seen = lambda _: query_ids[:, None] == sk.load(kv_segment_ids)[None, :]  # noqa: E731
    scores = _packed_scores(causal, sm_scale, seen)
    return flash_forward(q, k, v, scores, BQ)


def _packed_backward_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    dout: jax.Array,
    lse: jax.Array,
    delta: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    causal: bool = False,
    sm_scale: float | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    f32 = jnp.float32
    scale = Scores.of(q.shape[-1], sm_scale=sm_scale).scale
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(f32), k.astype(f32)) * scale
    seen = (q_segment_ids[:, :, None] == kv_segment_ids[:, None, :])[:, None]
    if causal:
        seen = seen & jnp.tril(jnp.ones(s.shape[-2:], bool))
    p = jnp.where(seen, jnp.exp(s - lse[..., None]), 0.0)
    dp = jnp.einsum("bhqd,bhkd->bhqk", dout.astype(f32), v.astype(f32))
    ds = p * (dp - delta[..., None])
    dq = jnp.einsum("bhqk,bhkd->bhqd", ds, k.astype(f32)) * scale
    dk = jnp.einsum("bhqk,bhqd->bhkd", ds, q.astype(f32)) * scale
    dv = jnp.einsum("bhqk,bhqd->bhkd", p, dout.astype(f32))
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


def _packed_dq_reference(
    *args: jax.Array, causal: bool = False, sm_scale: float | None = None
) -> jax.Array:
    return _packed_backward_reference(*args, causal=causal, sm_scale=sm_scale)[0]


def _packed_dkdv_reference(
    *args: jax.Array, causal: bool = False, sm_scale: float | None = None
) -> tuple[jax.Array, jax.Array]:
    _, dk, dv = _packed_backward_reference(*args, causal=causal, sm_scale=sm_scale)
    return dk, dv


@sk.kernel(batch=("B", "H"), tile={"Sq": "BQ"}, loop={"Skv": "BKV"}, reference=_packed_dq_reference)
def attention_packed_dq(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    dout: Half[Array, "B H Sq D"],
    lse: Float32[Array, "B H Sq"],
    delta: Float32[Array, "B H Sq"],
    q_segment_ids: Int32[Array, "B Sq"],
    kv_segment_ids: Int32[Array, "B Skv"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Half[Array, "B H Sq D"]:
    query_ids = sk.load(q_segment_ids)
    seen = lambda _: query_ids[:, None] == sk.load(kv_segment_ids)[None, :]  # noqa: E731
    scores = _packed_scores(causal, sm_scale, seen)
    return dq_body(q, k, v, dout, lse, delta, scores, BQ)


@sk.kernel(
    batch=("B", "H"), tile={"Skv": "BKV"}, loop={"Sq": "BQ"}, reference=_packed_dkdv_reference
)
def attention_packed_dkdv(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    dout: Half[Array, "B H Sq D"],
    lse: Float32[Array, "B H Sq"],
    delta: Float32[Array, "B H Sq"],
    q_segment_ids: Int32[Array, "B Sq"],
    kv_segment_ids: Int32[Array, "B Skv"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B H Skv D"], Half[Array, "B H Skv D"]]:
    key_ids = sk.load(kv_segment_ids)
    # (keys, queries): the queries' ids are a vector along the loop.
    seen = lambda _: key_ids[:, None] == sk.load(q_segment_ids)[None, :]  # noqa: E731
    scores = _packed_scores(causal, sm_scale, seen)
    return dkdv_body(q, k, v, dout, lse, delta, scores, BKV)
