"""Flash attention, forward: each block of queries walks the keys in blocks, with an online
softmax, so the (Sq, Skv) scores never leave registers. Exact at any Sq and Skv, causal or not."""

import math
from typing import TYPE_CHECKING, ClassVar

import jax
import jax.numpy as jnp
import jaxtyping
from jaxtyping import Array, Float, Float32

import statickernel as sk

if TYPE_CHECKING:  # to a type checker, an array annotation like any other
    Half = Float
else:

    class Half(jaxtyping.AbstractDtype):
        """bfloat16 or float16: the inputs WGMMA multiplies with p in registers."""

        dtypes: ClassVar[list[str]] = ["bfloat16", "float16"]


def attention_reference(
    q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False, sm_scale: float | None = None
) -> jax.Array:
    # jax.nn.dot_product_attention takes (B, S, H, D); compute in float32.
    def heads_last(x: jax.Array) -> jax.Array:
        return jnp.swapaxes(x, 1, 2).astype(jnp.float32)

    out = jax.nn.dot_product_attention(
        heads_last(q), heads_last(k), heads_last(v), scale=sm_scale, is_causal=causal
    )
    return jnp.swapaxes(out, 1, 2).astype(q.dtype)


LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)


def _flash(
    q: jax.Array, k: jax.Array, v: jax.Array, causal: bool, sm_scale: float | None, BQ: int
) -> tuple[jax.Array, jax.Array]:
    """The body both kernels share: the output block and its rows' log-sum-exp."""
    # By default, the usual 1 / sqrt(D).
    scale = 1 / math.sqrt(sk.dim("D")) if sm_scale is None else sm_scale

    def step(carry):
        running_max, running_sum, acc = carry
        # The scores of this block of keys, (BQ, BKV), contracting D; keys past Skv are left
        # out of the softmax's max and sum.
        # In base 2: exp2 is one instruction, and the scale folds into one multiply.
        s = sk.dot(q, k) * (scale * LOG2_E)
        if causal:
            s = jnp.where(sk.position("Sq")[:, None] >= sk.position("Skv")[None, :], s, -jnp.inf)
        new_max = jnp.maximum(running_max, sk.max(s, axis=1))
        rescale = jnp.exp2(running_max - new_max)
        p = jnp.exp2(s - new_max[:, None])
        running_sum = running_sum * rescale + sk.sum(p, axis=1)
        # WGMMA adds p @ v into the rescaled accumulator; p's columns past Skv count as zeros.
        acc = acc * rescale[:, None] + sk.dot(p.astype(q.dtype), v)
        return new_max, running_sum, acc

    init = (
        jnp.full((BQ,), -jnp.inf, jnp.float32),
        jnp.zeros((BQ,), jnp.float32),
        jnp.zeros((BQ, sk.dim("D")), jnp.float32),
    )
    # Causal: the keys past this block's last query are masked for every query of it, so the
    # loop stops there and skips their blocks.
    stop = sk.position("Sq").max() + 1 if causal else None
    row_max, row_sum, acc = sk.loop("Skv", step, init=init, stop=stop)
    # The running max is in base 2; the log-sum-exp is in base e.
    return (acc / row_sum[:, None]).astype(q.dtype), row_max * LN_2 + jnp.log(row_sum)


def attention_lse_reference(
    q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False, sm_scale: float | None = None
) -> tuple[jax.Array, jax.Array]:
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
    if causal:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
    return attention_reference(q, k, v, causal, sm_scale), jax.nn.logsumexp(s, axis=-1)


def attention_lse_vjp(
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
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The declared backward of `attention_lse`, FlashAttention-2's: a pre-pass for each query's
    delta = rowsum(dout * out) (jnp; XLA fuses it into one read of each), then dq looping
    over the keys and dk, dv looping over the queries, each recomputing the probabilities
    from the saved log-sum-exp. A cotangent of the lse adds p * dlse to the scores': it enters
    as delta - dlse. Deterministic: every gradient block is summed by one CTA, no atomics."""
    delta = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), axis=-1) - dlse
    dq = attention_dq(q, k, v, dout, lse, delta, causal=causal, sm_scale=sm_scale)
    dk, dv = attention_dkdv(q, k, v, dout, lse, delta, causal=causal, sm_scale=sm_scale)
    return dq, dk, dv


def attention_vjp(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    out: jax.Array,
    dout: jax.Array,
    *,
    causal: bool,
    sm_scale: float | None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The declared backward of `attention`, which saves no log-sum-exp: the backward runs the
    forward again for it (`attention_lse`). Training code that can keep the lse calls
    `attention_lse`, whose backward reuses it."""
    del out
    out, lse = attention_lse(q, k, v, causal=causal, sm_scale=sm_scale)
    return attention_lse_vjp(
        q, k, v, out, lse, dout, jnp.zeros_like(lse), causal=causal, sm_scale=sm_scale
    )


@sk.kernel(
    batch=("B", "H"),
    tile={"Sq": "BQ"},
    loop={"Skv": "BKV"},
    reference=attention_reference,
    vjp=attention_vjp,
)
def attention(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Half[Array, "B H Sq D"]:
    out, _ = _flash(q, k, v, causal, sm_scale, BQ)
    return out


@sk.kernel(
    batch=("B", "H"),
    tile={"Sq": "BQ"},
    loop={"Skv": "BKV"},
    reference=attention_lse_reference,
    vjp=attention_lse_vjp,
)
def attention_lse(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B H Sq D"], Float32[Array, "B H Sq"]]:
    """`attention`, and the log-sum-exp of each query's scaled scores, float32: what a backward
    pass recomputes the probabilities from."""
    return _flash(q, k, v, causal, sm_scale, BQ)


def attention_backward_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    dout: jax.Array,
    lse: jax.Array,
    delta: jax.Array,
    causal: bool = False,
    sm_scale: float | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """dq, dk and dv in jnp from the saved log-sum-exp and delta, as the two kernels compute
    them: p = exp(s - lse), ds = p * (dout @ v.T - delta), dq = ds @ k * scale,
    dk = ds.T @ q * scale, dv = p.T @ dout."""
    f32 = jnp.float32
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(f32), k.astype(f32)) * scale
    if causal:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
    p = jnp.exp(s - lse[..., None])
    dp = jnp.einsum("bhqd,bhkd->bhqk", dout.astype(f32), v.astype(f32))
    ds = p * (dp - delta[..., None])
    dq = jnp.einsum("bhqk,bhkd->bhqd", ds, k.astype(f32)) * scale
    dk = jnp.einsum("bhqk,bhqd->bhkd", ds, q.astype(f32)) * scale
    dv = jnp.einsum("bhqk,bhqd->bhkd", p, dout.astype(f32))
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


def _dq_reference(*args: jax.Array, **consts: object) -> jax.Array:
    return attention_backward_reference(*args, **consts)[0]  # type: ignore[arg-type]


def _dkdv_reference(*args: jax.Array, **consts: object) -> tuple[jax.Array, jax.Array]:
    _, dk, dv = attention_backward_reference(*args, **consts)  # type: ignore[arg-type]
    return dk, dv


@sk.kernel(batch=("B", "H"), tile={"Sq": "BQ"}, loop={"Skv": "BKV"}, reference=_dq_reference)
def attention_dq(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    dout: Half[Array, "B H Sq D"],
    lse: Float32[Array, "B H Sq"],
    delta: Float32[Array, "B H Sq"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Half[Array, "B H Sq D"]:
    """The backward's dq: each block of queries walks the keys, recomputing its probabilities
    from its log-sum-exp, and adds ds @ k."""
    scale = 1 / math.sqrt(sk.dim("D")) if sm_scale is None else sm_scale
    lse2 = sk.load(lse) * LOG2_E  # the log-sum-exp in base 2, as the scores are
    row_delta = sk.load(delta)

    def step(dq):
        s = sk.dot(q, k) * (scale * LOG2_E)
        if causal:
            s = jnp.where(sk.position("Sq")[:, None] >= sk.position("Skv")[None, :], s, -jnp.inf)
        p = jnp.exp2(s - lse2[:, None])
        ds = p * (sk.dot(dout, v) - row_delta[:, None])
        return dq + sk.dot(ds.astype(q.dtype), k)

    stop = sk.position("Sq").max() + 1 if causal else None
    dq = sk.loop("Skv", step, init=jnp.zeros((BQ, sk.dim("D")), jnp.float32), stop=stop)
    return (dq * scale).astype(q.dtype)


@sk.kernel(batch=("B", "H"), tile={"Skv": "BKV"}, loop={"Sq": "BQ"}, reference=_dkdv_reference)
def attention_dkdv(
    q: Half[Array, "B H Sq D"],
    k: Half[Array, "B H Skv D"],
    v: Half[Array, "B H Skv D"],
    dout: Half[Array, "B H Sq D"],
    lse: Float32[Array, "B H Sq"],
    delta: Float32[Array, "B H Sq"],
    *,
    causal: sk.Const[bool] = False,
    sm_scale: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B H Skv D"], Half[Array, "B H Skv D"]]:
    """The backward's dk and dv: each block of keys walks the queries (causal: from its first
    key's position on, the queries before it see none of its keys), transposed scores in
    registers; each query's lse and delta are vectors along the loop."""
    scale = 1 / math.sqrt(sk.dim("D")) if sm_scale is None else sm_scale

    def step(carry):
        dk, dv = carry
        st = sk.dot(k, q) * (scale * LOG2_E)  # (keys, queries)
        if causal:
            st = jnp.where(sk.position("Skv")[:, None] <= sk.position("Sq")[None, :], st, -jnp.inf)
        # A query past Sq reads an lse of +inf: probability 0.
        pt = jnp.exp2(st - (sk.load(lse, fill=jnp.inf) * LOG2_E)[None, :])
        dv = dv + sk.dot(pt.astype(q.dtype), dout)
        dst = pt * (sk.dot(v, dout) - sk.load(delta)[None, :])
        dk = dk + sk.dot(dst.astype(q.dtype), q)
        return dk, dv

    zeros = jnp.zeros((BKV, sk.dim("D")), jnp.float32)
    start = sk.position("Skv").min() if causal else None
    dk, dv = sk.loop("Sq", step, init=(zeros, zeros), start=start)
    return (dk * scale).astype(k.dtype), dv.astype(v.dtype)


if __name__ == "__main__":
    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(kq, (1, 2, 100, 64), jnp.bfloat16)
    k = jax.random.normal(kk, (1, 2, 300, 64), jnp.bfloat16)
    v = jax.random.normal(kv, (1, 2, 300, 64), jnp.bfloat16)
    print(attention.plan(q, k, v))
    for causal in (False, True):
        out = attention(q, k, v, causal=causal)
        ref = attention_reference(q, k, v, causal=causal)
        err = jnp.max(jnp.abs(out.astype(jnp.float32) - ref.astype(jnp.float32)))
        print(f"causal={causal}: max abs error {float(err):.4f}")
