"""ALiBi attention (Press et al., "Train Short, Test Long"): no position embeddings; each
head h adds -slope[h] * |i - j| to the scaled score of query i and key j, so attention
decays with distance at a rate of its own per head. Causal, that is slope * (j - i), the
paper's bias; not causal, the symmetric form used by bidirectional models. Positions count
from 0 in both q and k, as `attention`'s causal mask does.

- `attention_alibi(q "B H Sq D", k, v, slopes "H")`: the output and each query's
  log-sum-exp; the slopes are a 0-d operand of each head, read by its grid steps.
- `alibi_slopes(heads)`: the paper's slopes, a geometric sequence from 2^(-8 / n).
- The declared backward gives dq, dk, dv and the slopes' cotangent: the dk/dv kernel sums,
  for each key, ds times -|i - j| over the queries, and the backward adds those sums up.
"""

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float32

import statickernel as sk
from attention import Half, Scores, backward_test_data, dkdv_body, dq_body, flash_forward

# --- the bias -------------------------------------------------------------------------------


def alibi_slopes(heads: int) -> jax.Array:
    """The paper's slopes for `heads` heads: 2^(-8 i / n) for i = 1..n with n the power of two
    at or below `heads`, then, for the heads past n, every other slope of 2n."""
    n = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8.0 * i / n) for i in range(1, n + 1)]
    slopes += [2.0 ** (-4.0 * i / n) for i in range(1, 2 * (heads - n), 2)]
    return jnp.asarray(slopes, jnp.float32)


def _distance(transposed: bool) -> jax.Array:
    """-|i - j| for the block's queries i and keys j: (queries, keys), or (keys, queries)."""
    queries = sk.position("Sq").astype(jnp.float32)
    keys = sk.position("Skv").astype(jnp.float32)
    if transposed:
        return -jnp.abs(keys[:, None] - queries[None, :])
    return -jnp.abs(queries[:, None] - keys[None, :])


def _alibi_scores(slope: jax.Array, causal: bool, sm_scale: float | None) -> Scores:
    """The scores of a kernel's block with its head's `slope` times the distance added."""
    scale = Scores.of(sk.dim("D"), sm_scale=sm_scale).scale
    return Scores(scale=scale, causal=causal, bias_in_block=lambda t: slope * _distance(t))


# --- references -----------------------------------------------------------------------------


def alibi_bias_reference(slopes: jax.Array, sq: int, skv: int) -> jax.Array:
    """The bias of whole arrays, (H, Sq, Skv), float32."""
    distance = -jnp.abs(jnp.arange(sq)[:, None] - jnp.arange(skv)[None, :]).astype(jnp.float32)
    return slopes.astype(jnp.float32)[:, None, None] * distance


def attention_alibi_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    slopes: jax.Array,
    causal: bool = False,
    sm_scale: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """ALiBi attention in jnp on whole arrays, float32, and each query's log-sum-exp; a query
    that sees no key (causal, Sq > Skv never: query 0 sees key 0) gets zeros and -inf."""
    f32 = jnp.float32
    scale = Scores.of(q.shape[-1], sm_scale=sm_scale).scale
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(f32), k.astype(f32)) * scale
    s = s + alibi_bias_reference(slopes, q.shape[-2], k.shape[-2])
    if causal:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
    lse = jax.nn.logsumexp(s, axis=-1)
    p = jnp.exp(s - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None])
    out = jnp.einsum("bhqk,bhkd->bhqd", p, v.astype(f32))
    return out.astype(q.dtype), lse


def _backward_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    dout: jax.Array,
    lse: jax.Array,
    delta: jax.Array,
    slopes: jax.Array,
    causal: bool = False,
    sm_scale: float | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """dq, dk, dv and each key's sum over the queries of ds * -|i - j|, in jnp."""
    f32 = jnp.float32
    scale = Scores.of(q.shape[-1], sm_scale=sm_scale).scale
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(f32), k.astype(f32)) * scale
    bias = alibi_bias_reference(slopes, q.shape[-2], k.shape[-2])
    p = jnp.exp(s + bias - lse[..., None])
    if causal:
        p = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), p, 0.0)
    dp = jnp.einsum("bhqd,bhkd->bhqk", dout.astype(f32), v.astype(f32))
    ds = p * (dp - delta[..., None])
    dq = jnp.einsum("bhqk,bhkd->bhqd", ds, k.astype(f32)) * scale
    dk = jnp.einsum("bhqk,bhqd->bhkd", ds, q.astype(f32)) * scale
    dv = jnp.einsum("bhqk,bhqd->bhkd", p, dout.astype(f32))
    distance = alibi_bias_reference(jnp.ones_like(slopes), q.shape[-2], k.shape[-2])
    slope_sums = jnp.sum(ds * distance, axis=-2)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), slope_sums


def _dq_reference(*args: jax.Array, **consts: object) -> jax.Array:
    return _backward_reference(*args, **consts)[0]  # type: ignore[arg-type]


def _dkdv_reference(*args: jax.Array, **consts: object) -> tuple[jax.Array, jax.Array, jax.Array]:
    return _backward_reference(*args, **consts)[1:]  # type: ignore[arg-type]


# --- the kernels ----------------------------------------------------------------------------


def attention_alibi_vjp(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    slopes: jax.Array,
    out: jax.Array,
    lse: jax.Array,
    dout: jax.Array,
    dlse: jax.Array,
    *,
    causal: bool,
    sm_scale: float | None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """FlashAttention-2's backward with the bias; the slopes' cotangent is the dk/dv
    kernel's per-key sums, added over the batch and the keys."""
    delta = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), axis=-1) - dlse
    lse = jnp.where(lse == -jnp.inf, jnp.inf, lse)
    args = (q, k, v, dout, lse, delta, slopes)
    dq = attention_alibi_dq(*args, causal=causal, sm_scale=sm_scale)
    dk, dv, slope_sums = attention_alibi_dkdv(*args, causal=causal, sm_scale=sm_scale)
    return dq, dk, dv, jnp.sum(slope_sums, axis=(0, 2)).astype(slopes.dtype)


@sk.kernel(
    approx_math=True,
    batch=("B", "H"),
    tile={"Sq": "BQ"},
    loop={"Skv": "BKV"},
    reference=attention_alibi_reference,
    vjp=attention_alibi_vjp,
)
def attention_alibi(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    slopes: Float32[Array, " H"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B H Sq D"], Float32[Array, "B H Sq"]]:
    """Attention with ALiBi's bias: each grid step reads its head's slope, and each step of
    the loop adds slope * -|i - j| to its block of scores."""
    scores = _alibi_scores(sk.load(slopes), causal, sm_scale)
    return flash_forward(q, k, v, scores, BQ, BKV=BKV)


@sk.kernel(
    approx_math=True,
    batch=("B", "H"),
    tile={"Sq": "BQ"},
    loop={"Skv": "BKV"},
    reference=_dq_reference,
    test_data=backward_test_data(attention_alibi_reference, "slopes"),
)
def attention_alibi_dq(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    dout: Half[Array, "B H Sq D"],
    lse: Float32[Array, "B H Sq"],
    delta: Float32[Array, "B H Sq"],
    slopes: Float32[Array, " H"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Half[Array, "B H Sq D"]:
    scores = _alibi_scores(sk.load(slopes), causal, sm_scale)
    return dq_body(q, k, v, dout, lse, delta, scores, BQ)


@sk.kernel(
    approx_math=True,
    batch=("B", "H"),
    tile={"Skv": "BKV"},
    loop={"Sq": "BQ"},
    reference=_dkdv_reference,
    test_data=backward_test_data(attention_alibi_reference, "slopes"),
)
def attention_alibi_dkdv(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    dout: Half[Array, "B H Sq D"],
    lse: Float32[Array, "B H Sq"],
    delta: Float32[Array, "B H Sq"],
    slopes: Float32[Array, " H"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B H Skv D"], Half[Array, "B H Skv D"], Float32[Array, "B H Skv"]]:
    """dk, dv, and each key's sum over the queries of ds * -|i - j|: its part of its head's
    slope's cotangent."""
    scores = _alibi_scores(sk.load(slopes), causal, sm_scale)
    dk, dv, slope_sums = dkdv_body(
        q, k, v, dout, lse, delta, scores, BKV, bias_factor=lambda: _distance(True)
    )
    return dk, dv, slope_sums


if __name__ == "__main__":
    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(kq, (1, 8, 100, 64), jnp.bfloat16)
    k = jax.random.normal(kk, (1, 8, 300, 64), jnp.bfloat16)
    v = jax.random.normal(kv, (1, 8, 300, 64), jnp.bfloat16)
    slopes = alibi_slopes(8)
    out, lse = attention_alibi(q, k, v, slopes, causal=True)
    ref, _ = attention_alibi_reference(q, k, v, slopes, causal=True)
    err = jnp.max(jnp.abs(out.astype(jnp.float32) - ref.astype(jnp.float32)))
    print(f"max abs error {float(err):.4f}")
