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


@sk.kernel(batch=("B", "H"), tile={"Sq": "BQ"}, loop={"Skv": "BKV"}, reference=attention_reference)
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


def attention_lse_reference(
    q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False, sm_scale: float | None = None
) -> tuple[jax.Array, jax.Array]:
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
    if causal:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
    return attention_reference(q, k, v, causal, sm_scale), jax.nn.logsumexp(s, axis=-1)


@sk.kernel(
    batch=("B", "H"), tile={"Sq": "BQ"}, loop={"Skv": "BKV"}, reference=attention_lse_reference
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
