"""Attention's other common forms, on the bodies of `examples/attention.py`: grouped-query
attention (GQA and MQA: key and value heads shared by groups of query heads) and packed
sequences (several sequences in one row, told apart by segment ids). Each returns its output
and each query's log-sum-exp, and declares a backward that reuses the lse.

- `attention_gqa(q "B Hkv G Sq D", k "B Hkv Skv D", v)`: the G query heads of a key head are
  a batch dim of q that k and v do not have; `grouped_query_attention(q "B H Sq D", k, v)`
  reshapes q so (free: H = Hkv * G in that order) and back.
- `attention_packed(q, k, v, q_segment_ids "B Sq", kv_segment_ids "B Skv")`: a query sees the
  keys of its own segment (and, causal, none after it); a query that sees no key gets zeros.
- `attention_decode(q "B H Sq D", k_cache "B Hkv Smax D", v_cache, lengths "B")`: a few new
  tokens a sequence (Sq = 1 to 16) against a KV cache holding `lengths` tokens (the new ones
  last), split across CTAs (flash-decoding): the cache is cut into parts, each part's
  queries' partial softmax is computed in a grid step of its own, and the parts are combined
  by their log-sum-exp.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float32, Int32

import statickernel as sk
from attention import (
    Half,
    Scores,
    Variant,
    attention_lse_reference,
    attention_lse_vjp,
    backward_test_data,
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
    approx_math=True,
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
    return flash_forward(q, k, v, scores, BQ, BKV=BKV)


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
    approx_math=True,
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
    return flash_forward(q, k, v, scores, BQ, BKV=BKV)


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


@sk.kernel(
    approx_math=True,
    batch=("B", "H"),
    tile={"Sq": "BQ"},
    loop={"Skv": "BKV"},
    reference=_packed_dq_reference,
    test_data=backward_test_data(attention_packed_reference, "q_segment_ids", "kv_segment_ids"),
)
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
    approx_math=True,
    batch=("B", "H"),
    tile={"Skv": "BKV"},
    loop={"Sq": "BQ"},
    reference=_packed_dkdv_reference,
    test_data=backward_test_data(attention_packed_reference, "q_segment_ids", "kv_segment_ids"),
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
    dk, dv = dkdv_body(q, k, v, dout, lse, delta, scores, BKV)
    return dk, dv


# --- decoding -----------------------------------------------------------------------------

SMS = 132  # an H100's or H200's streaming multiprocessors


def attention_decode_reference(
    q: jax.Array,
    k_cache: jax.Array,
    v_cache: jax.Array,
    lengths: jax.Array,
    sm_scale: float | None = None,
) -> jax.Array:
    """Each sequence's Sq new tokens (the last Sq of its `lengths`) against its cache's first
    `lengths` tokens, causal among themselves, in jnp; a sequence of no tokens gets zeros."""
    heads, sq, dim = q.shape[1:]
    groups = heads // k_cache.shape[1]
    keys = jnp.repeat(k_cache, groups, axis=1).astype(jnp.float32)
    values = jnp.repeat(v_cache, groups, axis=1).astype(jnp.float32)
    scale = Scores.of(dim, sm_scale=sm_scale).scale
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), keys) * scale
    positions = lengths[:, None] - sq + jnp.arange(sq)[None, :]  # (B, Sq)
    seen = jnp.arange(k_cache.shape[2])[None, None, :] <= positions[:, :, None]
    seen = seen[:, None] & (jnp.arange(k_cache.shape[2]) < lengths[:, None, None, None])
    p = jax.nn.softmax(jnp.where(seen, s, -jnp.inf), axis=-1)
    p = jnp.where(seen.any(axis=-1, keepdims=True), p, 0.0)
    return jnp.einsum("bhqk,bhkd->bhqd", p, values).astype(q.dtype)


def _decode_parts_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    lengths: jax.Array,
    part_starts: jax.Array,
    queries: int = 1,
    sm_scale: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Each part's normalized output and log-sum-exp, float32, in jnp."""
    f32 = jnp.float32
    scale = Scores.of(q.shape[-1], sm_scale=sm_scale).scale
    s = jnp.einsum("bhrd,bhpsd->bhprs", q.astype(f32), k.astype(f32)) * scale
    rows = jnp.arange(q.shape[2])
    positions = lengths[:, None] - queries + rows[None, :] % queries  # (B, R)
    keys = part_starts[:, None] + jnp.arange(k.shape[3])[None, :]  # (P, S)
    seen = keys[None, None, :, None, :] <= positions[:, None, None, :, None]
    s = jnp.where(seen, s, -jnp.inf)
    lse = jax.nn.logsumexp(s, axis=-1)
    p = jnp.where(seen, jnp.exp(s - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None]), 0.0)
    return jnp.einsum("bhprs,bhpsd->bhprd", p, v.astype(f32)), lse


def _cache_lengths(d: sk.testing.Draw) -> np.ndarray:
    """Test data for `lengths`: each sequence's cache, from its new tokens to every part full."""
    return d.rng.integers(d.consts["queries"], d.sizes["P"] * d.sizes["S"] + 1, d.shape)


def _part_starts(d: sk.testing.Draw) -> np.ndarray:
    """Test data for `part_starts`: the parts of the cache, in order."""
    return np.arange(d.sizes["P"]) * d.sizes["S"]


@sk.kernel(
    approx_math=True,
    batch=("B", "Hkv", "P"),
    tile={"R": "BR"},
    loop={"S": "BS"},
    reference=_decode_parts_reference,
    test_data={"lengths": _cache_lengths, "part_starts": _part_starts},
)
def attention_decode_parts(
    q: Half[Array, "B Hkv R D"],
    k: Half[Array, "B Hkv P S D"],
    v: Half[Array, "B Hkv P S D"],
    lengths: Int32[Array, " B"],
    part_starts: Int32[Array, " P"],
    *,
    queries: sk.Const[int] = 1,
    sm_scale: sk.Const[float | None] = None,
    BR: sk.Const[int] = 64,
    BS: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Float32[Array, "B Hkv P R D"], Float32[Array, "B Hkv P R"]]:
    """One part of each sequence's cache against the queries of a key head: the rows are its
    G query heads' `queries` new tokens each (row r is token r % queries), at positions
    length - queries + r % queries; the part's keys start at its `part_starts`. The loop
    stops at the part's last key a row sees, so the cache past a sequence's length is not
    read; a part no row sees gives zeros and a log-sum-exp of -inf."""
    first = sk.load(part_starts)
    rows = sk.position("R")
    positions = sk.load(lengths) - queries + rows % queries

    def seen(_: bool) -> jax.Array:
        return positions[:, None] >= first + sk.position("S")[None, :]

    scale = Scores.of(sk.dim("D"), sm_scale=sm_scale).scale
    stop = positions.max() + 1 - first
    scores = Scores(scale, seen_in_block=seen, keys_stop=stop, queries="R", keys="S")
    out, lse = flash_forward(q, k, v, scores, BR, dtype=jnp.float32)
    return out, lse


def decode_splits(batch: int, kv_heads: int, tokens: int, block: int = 64) -> int:
    """The parts a cache of `tokens` is cut into: enough grid steps to fill the GPU, parts of
    at least 4 blocks, and a count that divides the tokens (the split is a reshape)."""
    wanted = max(1, min(SMS // max(batch * kv_heads, 1), tokens // (4 * block)))
    return next(p for p in range(wanted, 0, -1) if tokens % p == 0)


def attention_decode(
    q: jax.Array,
    k_cache: jax.Array,
    v_cache: jax.Array,
    lengths: jax.Array,
    *,
    sm_scale: float | None = None,
    splits: int | None = None,
) -> jax.Array:
    """Decoding attention: q (B, H, Sq, D) the new tokens, k_cache and v_cache (B, Hkv, Smax,
    D) holding `lengths` tokens of each sequence (the new ones last), H a multiple of Hkv.
    The G = H // Hkv query heads of a key head and their tokens are the rows of one block,
    so each block of the cache is read once for all of them; the cache is cut into `splits`
    parts (by default, enough to fill the GPU) whose partial softmaxes are combined here."""
    b, heads, sq, dim = q.shape
    kv_heads, tokens = k_cache.shape[1], k_cache.shape[2]
    if heads % kv_heads:
        raise ValueError(
            f"attention_decode: q has {heads} heads, not a multiple of the {kv_heads} heads "
            "of the cache"
        )
    parts = splits or decode_splits(b, kv_heads, tokens)
    if tokens % parts:
        raise ValueError(f"attention_decode: splits={parts} does not divide the {tokens} tokens")
    per_part = tokens // parts
    rows = q.reshape(b, kv_heads, (heads // kv_heads) * sq, dim)
    cut = lambda x: x.reshape(b, kv_heads, parts, per_part, dim)  # noqa: E731
    starts = jnp.arange(parts, dtype=jnp.int32) * per_part
    out, lse = attention_decode_parts(
        rows, cut(k_cache), cut(v_cache), lengths, starts, queries=sq, sm_scale=sm_scale
    )
    # Combine the parts by their log-sum-exp (a part no row sees weighs 0).
    top = jnp.max(lse, axis=2, keepdims=True)
    weights = jnp.exp(lse - jnp.where(jnp.isfinite(top), top, 0.0))
    total = jnp.sum(weights, axis=2)
    combined = (
        jnp.sum(weights[..., None] * out, axis=2) / jnp.where(total > 0, total, 1.0)[..., None]
    )
    return combined.reshape(q.shape).astype(q.dtype)
