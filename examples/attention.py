"""Flash attention, forward and backward: each block of queries walks the keys in blocks, with
an online softmax, so the (Sq, Skv) scores never leave registers; the backward recomputes the
probabilities from each query's log-sum-exp. Exact at any Sq and Skv.

The variants are constants of one family: `causal` (query i sees keys up to i), a sliding
window (`window_left`, `window_right`: query i sees keys i - left .. i + right, as
`jax.nn.dot_product_attention`'s `local_window_size`; the loops walk only the blocks inside it)
and Gemma 2's logit soft-capping (`softcap`: scores become softcap * tanh(scores / softcap)).
A query that sees no key gets zeros and a log-sum-exp of -inf.

The kernels take approximate math (`approx_math=True`): on the GPU, exp2 and log run as PTX's
`ex2`/`lg2` `.approx.ftz`, a few units in float32's last place, as FlashAttention's kernels
do; with a soft cap, whose tanh approximates coarsely, a kernel stays exact (its plan's
`math:` line says so). The scale folds into each exponent's multiply-add where no soft cap or
bias comes between (`Scores.folds_scale`)."""

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, TypedDict

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


LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)
# A window this wide is unbounded for any sequence under 2**30 tokens; capped there, a bound
# computed from int32 positions (a position plus the window) cannot wrap.
WINDOW_LIMIT = 2**30


class Variant(TypedDict):
    """The constants that say which attention it is, as the kernels and backwards take them."""

    causal: bool
    sm_scale: float | None
    window_left: int | None
    window_right: int | None
    softcap: float | None


@dataclasses.dataclass(frozen=True)
class Scores:
    """What a query's scores are: the scale, the keys it sees and the soft cap. Shared by the
    kernels' bodies (on blocks of positions) and the references (on whole arrays)."""

    scale: float
    causal: bool = False
    left: int | None = None
    right: int | None = None
    softcap: float | None = None
    # In a kernel's body, of a block of scores (transposed: keys by queries): which keys each
    # query sees besides the positions' rule (packed sequences' segments), and a bias added
    # to the scaled scores (ALiBi's).
    seen_in_block: Callable[[bool], jax.Array] | None = None
    bias_in_block: Callable[[bool], jax.Array] | None = None
    # A key position no row of the block sees at or past (a decoded sequence's length): the
    # loop over keys stops there.
    keys_stop: jax.Array | None = None
    # The kernels' dims of the queries (the blocks' rows) and of the keys (the loop's).
    queries: str = "Sq"
    keys: str = "Skv"

    @classmethod
    def of(
        cls,
        dim: int,
        causal: bool = False,
        sm_scale: float | None = None,
        window_left: int | None = None,
        window_right: int | None = None,
        softcap: float | None = None,
    ) -> "Scores":
        # By default, the usual 1 / sqrt(D).
        scale = 1 / math.sqrt(dim) if sm_scale is None else sm_scale
        left, right = (
            None if w is None else min(w, WINDOW_LIMIT) for w in (window_left, window_right)
        )
        # None is no cap, as jax's attention kernels take it (splash attention's
        # `attn_logits_soft_cap`); a cap of 0 would divide the scores by zero.
        if softcap is not None and not (math.isfinite(softcap) and softcap > 0):
            raise sk.OverrideError(
                f"constant `softcap` must be a positive soft cap or None, not {softcap!r}",
                constant="softcap",
                expected="a positive, finite float (Gemma 2 caps at 50.0), or None for no cap",
                actual=repr(softcap),
                fix="pass softcap=None for no soft cap (what FlashAttention's softcap=0.0 "
                "means); a cap c > 0 makes the scores c * tanh(scores / c)",
            )
        return cls(scale, causal, left, right, softcap)

    @property
    def right_bound(self) -> int | None:
        """How far past its own position a query sees: 0 when causal."""
        if self.causal:
            return 0 if self.right is None else min(self.right, 0)
        return self.right

    @property
    def causal_alone(self) -> bool:
        """Whether causality alone masks the keys: no window, segment or decoded length."""
        return (
            self.causal
            and self.left is None
            and self.right is None
            and self.seen_in_block is None
            and self.keys_stop is None
        )

    @property
    def bounded(self) -> bool:
        """Whether the positions bound the keys a query sees (causal or a window)."""
        return self.right_bound is not None or self.left is not None

    @property
    def may_see_no_key(self) -> bool:
        """Whether a block's row can have no key in a block walked (a window's edges, another
        segment's keys)."""
        return self.left is not None or self.right is not None or self.seen_in_block is not None

    def logits2(
        self, product: jax.Array, transposed: bool = False
    ) -> tuple[jax.Array, jax.Array | None]:
        """q . k as the softmax's scores in base 2 (exp2 is one instruction), and the tanh of
        the soft cap (its derivative is 1 - tanh^2), or None."""
        capped = None
        if self.softcap is None:  # the scale folds into one multiply
            s = product * (self.scale * LOG2_E)
        else:
            capped = jnp.tanh(product * (self.scale / self.softcap))
            s = capped * (self.softcap * LOG2_E)
        if self.bias_in_block is not None:
            s = s + self.bias_in_block(transposed) * LOG2_E
        return s, capped

    @property
    def folds_scale(self) -> bool:
        """Whether the scale folds into the exponent's argument: scaled scores are q . k times
        a positive constant alone (no soft cap, no bias), so their row max is the scaled max
        of q . k, and each exponent is one fused multiply-add, q . k * scale - max."""
        return self.softcap is None and self.bias_in_block is None and self.scale > 0

    def visible(self, queries: jax.Array, keys: jax.Array) -> jax.Array | None:
        """Which keys each query sees (positions broadcast against each other), or None for
        all of them."""
        seen = None
        right = self.right_bound
        if right is not None:
            seen = queries >= keys if right == 0 else queries + right >= keys
        if self.left is not None:
            after = keys >= queries - self.left
            seen = after if seen is None else seen & after
        return seen

    def masked(self, s: jax.Array, queries: jax.Array, keys: jax.Array) -> jax.Array:
        seen = self.visible(queries, keys)
        return s if seen is None else jnp.where(seen, s, -jnp.inf)

    def masked_block(self, s: jax.Array, transposed: bool = False) -> jax.Array:
        """A kernel's block of scores, (queries, keys) or `transposed`, masked by the
        positions of its rows and columns and by `seen_in_block`."""
        if self.bounded and transposed:
            s = self.masked(s, sk.position(self.queries)[None, :], sk.position(self.keys)[:, None])
        elif self.bounded:
            s = self.masked(s, sk.position(self.queries)[:, None], sk.position(self.keys)[None, :])
        if self.seen_in_block is not None:
            s = jnp.where(self.seen_in_block(transposed), s, -jnp.inf)
        return s

    def key_bounds(self, queries: jax.Array) -> tuple[jax.Array | None, jax.Array | None]:
        """The keys a block of queries sees, as a loop over keys' start and stop: the blocks
        outside them are skipped."""
        right = self.right_bound
        start = None if self.left is None else queries.min() - self.left
        stop = None if right is None else queries.max() + (right + 1)
        return start, stop

    def query_bounds(self, keys: jax.Array) -> tuple[jax.Array | None, jax.Array | None]:
        """The queries that see a block of keys, as a loop over queries' start and stop."""
        right = self.right_bound
        start = None if right is None else keys.min() - right
        stop = None if self.left is None else keys.max() + self.left + 1
        return start, stop


def _scores_reference(
    q: jax.Array, k: jax.Array, scores: Scores
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """The scores of whole arrays in float32 (natural units), each query's mask of the keys it
    sees, and the soft cap's tanh."""
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32))
    s = s * scores.scale
    capped = None
    if scores.softcap is not None:
        capped = jnp.tanh(s / scores.softcap)
        s = scores.softcap * capped
    queries = jnp.arange(q.shape[-2])[:, None]
    keys = jnp.arange(k.shape[-2])[None, :]
    seen = scores.visible(queries, keys)
    seen = jnp.ones(s.shape[-2:], bool) if seen is None else seen
    return s, seen, capped


def attention_lse_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    causal: bool = False,
    sm_scale: float | None = None,
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Attention in jnp on whole arrays, float32, and each query's log-sum-exp; a query that
    sees no key gets zeros and -inf."""
    scores = Scores.of(q.shape[-1], causal, sm_scale, window_left, window_right, softcap)
    s, seen, _ = _scores_reference(q, k, scores)
    s = jnp.where(seen, s, -jnp.inf)
    lse = jax.nn.logsumexp(s, axis=-1)
    p = jnp.where(seen, jnp.exp(s - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None]), 0.0)
    out = jnp.einsum("bhqk,bhkd->bhqd", p, v.astype(jnp.float32))
    return out.astype(q.dtype), lse


def attention_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    causal: bool = False,
    sm_scale: float | None = None,
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
) -> jax.Array:
    if window_left is not None or window_right is not None or softcap is not None:
        return attention_lse_reference(
            q, k, v, causal, sm_scale, window_left, window_right, softcap
        )[0]

    # jax.nn.dot_product_attention takes (B, S, H, D); compute in float32.
    def heads_last(x: jax.Array) -> jax.Array:
        return jnp.swapaxes(x, 1, 2).astype(jnp.float32)

    out = jax.nn.dot_product_attention(
        heads_last(q), heads_last(k), heads_last(v), scale=sm_scale, is_causal=causal
    )
    return jnp.swapaxes(out, 1, 2).astype(q.dtype)


def flash_forward(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    scores: Scores,
    BQ: int,
    dtype: jnp.dtype | type | None = None,
    BKV: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The forward kernels' body: the output block (in `dtype`, by default q's) and its rows'
    log-sum-exp. Given the key blocks' size `BKV`, a causal body masks only the blocks on the
    diagonal: those wholly before the block's first query are seen whole by every query."""

    def step(carry, masked=True):
        running_max, running_sum, acc = carry
        # The scores of this block of keys, (BQ, BKV), contracting D, in base 2; keys past
        # Skv are left out of the softmax's max and sum. Where the scale folds, the block
        # holds q . k unscaled and each exponent scales it in its multiply-add.
        if scores.folds_scale:
            s, factor = sk.dot(q, k), scores.scale * LOG2_E
        else:
            s, factor = scores.logits2(sk.dot(q, k))[0], None
        if masked:
            s = scores.masked_block(s)
        block_max = sk.max(s, axis=1) if factor is None else sk.max(s, axis=1) * factor
        new_max = jnp.maximum(running_max, block_max)
        if scores.may_see_no_key:  # a row with no key yet: exp2(-inf - -inf) would be NaN
            new_max_or_0 = jnp.where(new_max == -jnp.inf, 0.0, new_max)
        else:
            new_max_or_0 = new_max
        rescale = jnp.exp2(running_max - new_max_or_0)
        exponent = s if factor is None else s * factor
        p = jnp.exp2(exponent - new_max_or_0[:, None])
        running_sum = running_sum * rescale + sk.sum(p, axis=1)
        # WGMMA adds p @ v into the rescaled accumulator; p's columns past Skv count as zeros.
        acc = acc * rescale[:, None] + sk.dot(p.astype(q.dtype), v)
        return new_max, running_sum, acc

    init = (
        jnp.full((BQ,), -jnp.inf, jnp.float32),
        jnp.zeros((BQ,), jnp.float32),
        jnp.zeros((BQ, sk.dim("D")), jnp.float32),
    )
    # Causal or windowed: the keys outside [start, stop) are masked for every query of the
    # block, so the loop walks only the blocks between them.
    start, stop = None, scores.keys_stop
    if scores.bounded:
        start, stop = scores.key_bounds(sk.position(scores.queries))
    if BKV is not None and scores.causal_alone:
        # The blocks of keys wholly at or before the first query (none for the first block
        # of queries) unmasked, then the diagonal's, from the first it holds, masked.
        diagonal = (jnp.min(sk.position(scores.queries)) + 1) // BKV * BKV
        unmasked = functools.partial(step, masked=False)
        init = sk.loop(scores.keys, unmasked, init=init, stop=diagonal)
        start = diagonal
    row_max, row_sum, acc = sk.loop(scores.keys, step, init=init, start=start, stop=stop)
    # A row that saw no key has a zero sum and accumulator: zeros, not 0 / 0.
    denominator = jnp.where(row_sum > 0, row_sum, 1.0) if scores.may_see_no_key else row_sum
    # The lse in base e from the max in base 2; an infinite max is the lse, as in jax.nn.logsumexp.
    lse = jnp.where(jnp.abs(row_max) == jnp.inf, row_max, row_max * LN_2 + jnp.log(row_sum))
    return (acc / denominator[:, None]).astype(q.dtype if dtype is None else dtype), lse


def saved_lse2(lse: jax.Array, scores: Scores) -> jax.Array:
    """A backward's saved log-sum-exp in base 2. A query that saw no key has an lse of -inf
    (a window's edge, a segment without keys): taken as +inf, so that its probabilities are
    exp2(s - inf) = 0, not exp2(-inf - -inf) = NaN, and its gradients zeros."""
    if scores.may_see_no_key:
        lse = jnp.where(lse == -jnp.inf, jnp.inf, lse)
    return lse * LOG2_E


def dq_body(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    dout: jax.Array,
    lse: jax.Array,
    delta: jax.Array,
    scores: Scores,
    BQ: int,
) -> jax.Array:
    """The dq kernels' body, over a block of queries."""
    lse2 = saved_lse2(sk.load(lse), scores)  # the log-sum-exp in base 2, as the scores are
    row_delta = sk.load(delta)

    def step(dq):
        s, capped = scores.logits2(sk.dot(q, k))
        s = scores.masked_block(s)
        p = jnp.exp2(s - lse2[:, None])
        ds = p * (sk.dot(dout, v) - row_delta[:, None])
        if capped is not None:
            ds = ds * (1.0 - capped * capped)
        return dq + sk.dot(ds.astype(q.dtype), k)

    start, stop = None, scores.keys_stop
    if scores.bounded:
        start, stop = scores.key_bounds(sk.position(scores.queries))
    init = jnp.zeros((BQ, sk.dim("D")), jnp.float32)
    dq = sk.loop(scores.keys, step, init=init, start=start, stop=stop)
    return (dq * scores.scale).astype(q.dtype)


def dkdv_body(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    dout: jax.Array,
    lse: jax.Array,
    delta: jax.Array,
    scores: Scores,
    BKV: int,
    bias_factor: Callable[[], jax.Array] | None = None,
) -> tuple[jax.Array, ...]:
    """The dk, dv kernels' body, over a block of keys. With `bias_factor`, the derivative of a
    bias linear in one parameter (ALiBi's slope) for a transposed block, each key's sum over
    the queries of ds times it is returned third: that parameter's cotangent, summed."""

    def step(carry):
        dk, dv, *factor_sums = carry
        st, capped = scores.logits2(sk.dot(k, q), transposed=True)  # (keys, queries)
        st = scores.masked_block(st, transposed=True)
        # A query past Sq reads an lse of +inf: probability 0.
        pt = jnp.exp2(st - saved_lse2(sk.load(lse, fill=jnp.inf), scores)[None, :])
        dv = dv + sk.dot(pt.astype(q.dtype), dout)
        dst = pt * (sk.dot(v, dout) - sk.load(delta)[None, :])
        if capped is not None:
            dst = dst * (1.0 - capped * capped)
        dk = dk + sk.dot(dst.astype(q.dtype), q)
        if bias_factor is None:
            return dk, dv
        # ds is the scores' cotangent in natural units, as the bias is added to them.
        return dk, dv, factor_sums[0] + sk.sum(dst * bias_factor(), axis=1)

    zeros = jnp.zeros((BKV, sk.dim("D")), jnp.float32)
    init = (zeros, zeros) if bias_factor is None else (zeros, zeros, jnp.zeros((BKV,), jnp.float32))
    bounds = scores.query_bounds(sk.position(scores.keys)) if scores.bounded else (None, None)
    dk, dv, *rest = sk.loop(scores.queries, step, init=init, start=bounds[0], stop=bounds[1])
    return (dk * scores.scale).astype(k.dtype), dv.astype(v.dtype), *rest


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
    window_left: int | None,
    window_right: int | None,
    softcap: float | None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The declared backward of `attention_lse`, FlashAttention-2's: a pre-pass for each query's
    delta = rowsum(dout * out) (jnp; XLA fuses it into one read of each), then dq looping
    over the keys and dk, dv looping over the queries, each recomputing the probabilities
    from the saved log-sum-exp. A cotangent of the lse adds p * dlse to the scores': it enters
    as delta - dlse. A query that saw no key (lse -inf) has probabilities 0 in the kernels
    (`saved_lse2`). Deterministic: every gradient block is summed by one CTA, no atomics."""
    delta = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), axis=-1) - dlse
    consts = Variant(
        causal=causal,
        sm_scale=sm_scale,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
    )
    dq = attention_dq(q, k, v, dout, lse, delta, **consts)
    dk, dv = attention_dkdv(q, k, v, dout, lse, delta, **consts)
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
    window_left: int | None,
    window_right: int | None,
    softcap: float | None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The declared backward of `attention`, which saves no log-sum-exp: the backward runs the
    forward again for it (`attention_lse`). Training code that can keep the lse calls
    `attention_lse`, whose backward reuses it."""
    del out
    consts = Variant(
        causal=causal,
        sm_scale=sm_scale,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
    )
    out, lse = attention_lse(q, k, v, **consts)
    return attention_lse_vjp(q, k, v, out, lse, dout, jnp.zeros_like(lse), **consts)


@sk.kernel(
    approx_math=True,
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
    window_left: sk.Const[int | None] = None,
    window_right: sk.Const[int | None] = None,
    softcap: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Half[Array, "B H Sq D"]:
    scores = Scores.of(sk.dim("D"), causal, sm_scale, window_left, window_right, softcap)
    out, _ = flash_forward(q, k, v, scores, BQ, BKV=BKV)
    return out


@sk.kernel(
    approx_math=True,
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
    window_left: sk.Const[int | None] = None,
    window_right: sk.Const[int | None] = None,
    softcap: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B H Sq D"], Float32[Array, "B H Sq"]]:
    """`attention`, and the log-sum-exp of each query's scaled scores, float32: what a backward
    pass recomputes the probabilities from."""
    scores = Scores.of(sk.dim("D"), causal, sm_scale, window_left, window_right, softcap)
    return flash_forward(q, k, v, scores, BQ, BKV=BKV)


def attention_backward_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    dout: jax.Array,
    lse: jax.Array,
    delta: jax.Array,
    causal: bool = False,
    sm_scale: float | None = None,
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """dq, dk and dv in jnp from the saved log-sum-exp and delta, as the two kernels compute
    them: p = exp(s - lse), ds = p * (dout @ v.T - delta) (times 1 - tanh^2 under a soft
    cap), dq = ds @ k * scale, dk = ds.T @ q * scale, dv = p.T @ dout."""
    f32 = jnp.float32
    scores = Scores.of(q.shape[-1], causal, sm_scale, window_left, window_right, softcap)
    s, seen, capped = _scores_reference(q, k, scores)
    p = jnp.where(seen, jnp.exp(s - lse[..., None]), 0.0)
    dp = jnp.einsum("bhqd,bhkd->bhqk", dout.astype(f32), v.astype(f32))
    ds = p * (dp - delta[..., None])
    if capped is not None:
        ds = ds * (1 - capped * capped)
    dq = jnp.einsum("bhqk,bhkd->bhqd", ds, k.astype(f32)) * scores.scale
    dk = jnp.einsum("bhqk,bhqd->bhkd", ds, q.astype(f32)) * scores.scale
    dv = jnp.einsum("bhqk,bhqd->bhkd", p, dout.astype(f32))
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


def _dq_reference(*args: jax.Array, **consts: object) -> jax.Array:
    return attention_backward_reference(*args, **consts)[0]  # type: ignore[arg-type]


def _dkdv_reference(*args: jax.Array, **consts: object) -> tuple[jax.Array, jax.Array]:
    _, dk, dv = attention_backward_reference(*args, **consts)  # type: ignore[arg-type]
    return dk, dv


Forward = Callable[..., tuple[jax.Array, jax.Array]]


def backward_test_data(forward: Forward, *operands: str) -> dict[str, Callable[..., jax.Array]]:
    """Test data for a backward's `lse` and `delta` (`@sk.kernel(test_data=...)`): the
    forward's, on the case's q, k, v and `operands`, with the case's constants, as training
    saves them. Random values would make exp(s - lse) overflow or vanish everywhere."""
    names = ("q", "k", "v", *operands)
    taken = inspect.signature(forward).parameters

    def saved(d: sk.testing.Draw) -> tuple[jax.Array, jax.Array]:
        consts = {n: v for n, v in d.consts.items() if n in taken}
        return forward(*(d.operands[n] for n in names), **consts)

    def delta(d: sk.testing.Draw) -> jax.Array:
        out = saved(d)[0].astype(jnp.float32)
        return jnp.sum(d.operands["dout"].astype(jnp.float32) * out, axis=-1)

    return {"lse": lambda d: saved(d)[1], "delta": delta}


@sk.kernel(
    approx_math=True,
    batch=("B", "H"),
    tile={"Sq": "BQ"},
    loop={"Skv": "BKV"},
    reference=_dq_reference,
    test_data=backward_test_data(attention_lse_reference),
)
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
    window_left: sk.Const[int | None] = None,
    window_right: sk.Const[int | None] = None,
    softcap: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> Half[Array, "B H Sq D"]:
    """The backward's dq: each block of queries walks the keys it sees, recomputing its
    probabilities from its log-sum-exp, and adds ds @ k."""
    scores = Scores.of(sk.dim("D"), causal, sm_scale, window_left, window_right, softcap)
    return dq_body(q, k, v, dout, lse, delta, scores, BQ)


@sk.kernel(
    approx_math=True,
    batch=("B", "H"),
    tile={"Skv": "BKV"},
    loop={"Sq": "BQ"},
    reference=_dkdv_reference,
    test_data=backward_test_data(attention_lse_reference),
)
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
    window_left: sk.Const[int | None] = None,
    window_right: sk.Const[int | None] = None,
    softcap: sk.Const[float | None] = None,
    BQ: sk.Const[int] = 64,
    BKV: sk.Const[int] = 64,
    stages: sk.Const[int] = 2,
) -> tuple[Half[Array, "B H Skv D"], Half[Array, "B H Skv D"]]:
    """The backward's dk and dv: each block of keys walks the queries that see it (causal:
    from its first key's position on), transposed scores in registers; each query's lse and
    delta are vectors along the loop."""
    scores = Scores.of(sk.dim("D"), causal, sm_scale, window_left, window_right, softcap)
    dk, dv = dkdv_body(q, k, v, dout, lse, delta, scores, BKV)
    return dk, dv


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
