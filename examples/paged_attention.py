"""Paged attention for decoding, as inference servers store the KV cache (vLLM): one new
query token a sequence, its keys and values in pages of a shared pool, listed in order in the
sequence's row of `block_tables`, `lengths` tokens long.

`pages={"P": "block_tables"}` declares that `k_pages: "Hkv P S D"` holds pages of S rows,
and that the loop over S walks each sequence through the pages its table row lists: the
body sees `k_pages` as each step's block of BS tokens over "S D", as attention sees `k`, and
`sk.position("S")` gives the tokens' positions in the sequence. Each step's block is copied
page by page (a TMA copy a page). The loop stops at the sequence's length, so a sequence
reads only its own pages; a page outside the pool reads zeros. The rows of a sequence's last
page past its length are masked out of the scores; they must hold finite values (0 times NaN
is NaN in the product with v), as a cache JAX allocates and updates does.

The query heads that share a key head (GQA, H = Hkv * G) are the rows of one block, so each
page is read once for all of them. When the batch is too small to fill the GPU, the wrapper
splits each sequence into parts, attends each part in its own grid step and combines the
parts by their log-sum-exp, as FlashDecoding does.
"""

import math
from typing import TYPE_CHECKING, ClassVar

import jax
import jax.numpy as jnp
import jaxtyping
from jaxtyping import Array, Float, Float32, Int32

import statickernel as sk

if TYPE_CHECKING:  # to a type checker, an array annotation like any other
    Half = Float
else:

    class Half(jaxtyping.AbstractDtype):
        """bfloat16 or float16: the inputs WGMMA multiplies with p in registers."""

        dtypes: ClassVar[list[str]] = ["bfloat16", "float16"]


LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)
SMS = 132  # an H100's or H200's streaming multiprocessors


def _sequences(cache: jax.Array, block_tables: jax.Array) -> jax.Array:
    """Each sequence's rows, gathered from its pages in order: (B, Hkv, Pmax * S, D) in
    float32, a page outside the pool read as zeros."""
    kv_heads, pool, _, dim = cache.shape
    pages = jnp.where((block_tables >= 0) & (block_tables < pool), block_tables, pool)
    padded = jnp.concatenate([cache, jnp.zeros_like(cache[:, :1])], axis=1)
    rows = padded[:, pages].astype(jnp.float32)  # (Hkv, B, Pmax, S, D)
    return jnp.moveaxis(rows.reshape(kv_heads, block_tables.shape[0], -1, dim), 1, 0)


def paged_attention_heads_reference(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    block_tables: jax.Array,
    lengths: jax.Array,
    sm_scale: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Dense attention of each query (B, Hkv, G, D) over its sequence's first `lengths`
    tokens, gathered from the pages, and its log-sum-exp of the scaled scores; zeros and
    -inf for an empty sequence."""
    keys = _sequences(k_pages, block_tables)
    values = _sequences(v_pages, block_tables)
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    scores = jnp.einsum("bhgd,bhtd->bhgt", q.astype(jnp.float32), keys) * scale
    inside = (jnp.arange(keys.shape[2])[None, :] < lengths[:, None])[:, None, None, :]
    scores = jnp.where(inside, scores, -jnp.inf)
    weights = jnp.where(inside, jax.nn.softmax(scores, axis=-1), 0.0)
    out = jnp.einsum("bhgt,bhtd->bhgd", jnp.nan_to_num(weights), values)
    return out.astype(q.dtype), jax.nn.logsumexp(scores, axis=-1)


def paged_attention_reference(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    block_tables: jax.Array,
    lengths: jax.Array,
    sm_scale: float | None = None,
) -> jax.Array:
    """`paged_attention_heads_reference` of q (B, H, D), its heads grouped by key head."""
    batch, heads, dim = q.shape
    queries = q.reshape(batch, k_pages.shape[0], -1, dim)
    out, _ = paged_attention_heads_reference(
        queries, k_pages, v_pages, block_tables, lengths, sm_scale
    )
    return out.reshape(batch, heads, dim)


@sk.kernel(
    batch=("B", "Hkv"),
    tile={"G": "BG"},
    loop={"S": "BS"},
    pages={"P": "block_tables"},
    reference=paged_attention_heads_reference,
)
def paged_attention_heads(
    q: Half[Array, "B Hkv G D"],
    k_pages: Half[Array, "Hkv P S D"],
    v_pages: Half[Array, "Hkv P S D"],
    block_tables: Int32[Array, "B Pmax"],
    lengths: Int32[Array, " B"],
    *,
    sm_scale: sk.Const[float | None] = None,
    BG: sk.Const[int] = 64,
    BS: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B Hkv G D"], Float32[Array, "B Hkv G"]]:
    """Each query head's attention over its sequence's first `lengths` tokens, and the
    log-sum-exp of its scaled scores; zeros and -inf for an empty sequence."""
    scale = (1 / math.sqrt(sk.dim("D")) if sm_scale is None else sm_scale) * LOG2_E
    length = sk.load(lengths)

    def step(carry):
        running_max, running_sum, acc = carry
        # In base 2: exp2 is one instruction. Tokens past the length are left out.
        s = sk.dot(q, k_pages) * scale
        s = jnp.where(sk.position("S")[None, :] < length, s, -jnp.inf)
        new_max = jnp.maximum(running_max, sk.max(s, axis=1))
        # An empty sequence has no score: its max stays -inf, and exp2 of -inf is 0.
        shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)
        rescale = jnp.exp2(running_max - shift)
        p = jnp.exp2(s - shift[:, None])
        running_sum = running_sum * rescale + sk.sum(p, axis=1)
        acc = acc * rescale[:, None] + sk.dot(p.astype(q.dtype), v_pages)
        return new_max, running_sum, acc

    init = (
        jnp.full((BG,), -jnp.inf, jnp.float32),
        jnp.zeros((BG,), jnp.float32),
        jnp.zeros((BG, sk.dim("D")), jnp.float32),
    )
    # The loop reads the pages up to the sequence's length, and no further.
    row_max, row_sum, acc = sk.loop("S", step, init=init, stop=length)
    found = row_sum > 0
    out = jnp.where(found[:, None], acc / row_sum[:, None], 0.0).astype(q.dtype)
    lse = jnp.where(jnp.abs(row_max) == jnp.inf, row_max, row_max * LN_2 + jnp.log(row_sum))
    return out, lse


def paged_attention(
    q: Half[Array, "B H D"],
    k_pages: Half[Array, "Hkv P S D"],
    v_pages: Half[Array, "Hkv P S D"],
    block_tables: Int32[Array, "B Pmax"],
    lengths: Int32[Array, " B"],
    *,
    sm_scale: float | None = None,
    splits: int | None = None,
) -> Half[Array, "B H D"]:
    """Decode attention over a paged KV cache: q (B, H, D) with H a multiple of Hkv, pages
    (Hkv, P, S, D), each sequence's pages listed in its row of `block_tables`, its length in
    `lengths` (0 included). `splits` parts a sequence (default: enough to fill the GPU when
    B * Hkv grid steps do not), combined by their log-sum-exp."""
    batch, heads, dim = q.shape
    kv_heads, _, page, _ = k_pages.shape
    if heads % kv_heads:
        raise _heads_error(q, k_pages)
    group = heads // kv_heads
    queries = q.reshape(batch, kv_heads, group, dim)
    pmax = block_tables.shape[1]
    if splits is None:
        splits = max(1, min(SMS // max(1, batch * kv_heads), pmax * page // 256))
    if splits == 1:
        out, _ = paged_attention_heads(
            queries, k_pages, v_pages, block_tables, lengths, sm_scale=sm_scale
        )
        return out.reshape(batch, heads, dim)
    # Part s of a sequence: its pages from s * per on, and the tokens of them it has.
    per = -(-pmax // splits)
    tables = jnp.pad(block_tables, ((0, 0), (0, per * splits - pmax)), constant_values=-1)
    tables = tables.reshape(batch * splits, per)
    starts = jnp.arange(splits, dtype=jnp.int32) * (per * page)
    parts = jnp.clip(lengths[:, None] - starts[None, :], 0, per * page).reshape(-1)
    queries = jnp.repeat(queries, splits, axis=0)
    out, lse = paged_attention_heads(queries, k_pages, v_pages, tables, parts, sm_scale=sm_scale)
    out = out.reshape(batch, splits, kv_heads, group, dim).astype(jnp.float32)
    lse = lse.reshape(batch, splits, kv_heads, group)
    # Each part weighs by its share of the sequence's softmax sum; an empty part by 0.
    total = jax.nn.logsumexp(lse, axis=1, keepdims=True)
    weight = jnp.where(
        jnp.isfinite(lse), jnp.exp(lse - jnp.where(jnp.isfinite(total), total, 0.0)), 0.0
    )
    combined = jnp.sum(weight[..., None] * out, axis=1)
    return combined.reshape(batch, heads, dim).astype(q.dtype)


def _heads_error(q: jax.Array, k_pages: jax.Array) -> sk.ShapeError:
    """Query heads that the key heads do not divide: grouped-query attention gives each key
    head the same number of query heads, so there is no grouping to compute."""
    heads, kv_heads = q.shape[1], k_pages.shape[0]
    below, above = heads // kv_heads * kv_heads, -(-heads // kv_heads) * kv_heads
    dividing = [d for d in range(1, heads + 1) if heads % d == 0]
    counts = f"{below} or {above}" if below else f"{above}"
    return sk.ShapeError(
        f"paged_attention: q has {heads} query heads, not a multiple of the {kv_heads} key "
        f"heads of k_pages and v_pages, so the query heads cannot share the key heads in "
        f"equal groups (H = Hkv * G)",
        operand="q",
        dim="H",
        expected=f"H a multiple of Hkv = {kv_heads}",
        actual=f"H = {heads}: q {tuple(q.shape)} (B, H, D), k_pages {tuple(k_pages.shape)} "
        "(Hkv, P, S, D)",
        bindings={"H": heads, "Hkv": kv_heads},
        fix=f"pass q with {counts} heads, or k_pages and v_pages with a number of key heads "
        f"that divides {heads} ({', '.join(map(str, dividing))})",
    )


if __name__ == "__main__":
    batch, heads, kv_heads, dim, page, pool, pmax = 4, 32, 8, 128, 16, 512, 64
    keys = jax.random.split(jax.random.key(0), 5)
    q = jax.random.normal(keys[0], (batch, heads, dim), jnp.bfloat16)
    k_pages = jax.random.normal(keys[1], (kv_heads, pool, page, dim), jnp.bfloat16)
    v_pages = jax.random.normal(keys[2], (kv_heads, pool, page, dim), jnp.bfloat16)
    block_tables = jax.random.permutation(keys[3], pool)[: batch * pmax].reshape(batch, pmax)
    lengths = jnp.array([1, 100, 1024, 0], jnp.int32)
    queries = q.reshape(batch, kv_heads, heads // kv_heads, dim)
    print(paged_attention_heads.plan(queries, k_pages, v_pages, block_tables, lengths))
    got = paged_attention(q, k_pages, v_pages, block_tables, lengths).astype(jnp.float32)
    want = paged_attention_reference(q, k_pages, v_pages, block_tables, lengths)
    print("max abs error:", float(jnp.max(jnp.abs(got - want.astype(jnp.float32)))))
