"""Mean softmax cross-entropy over a large vocabulary, and its gradient, as two kernels.

The forward walks the vocabulary V in blocks with an online log-sum-exp, picks each row's
label logit with `sk.position`, and returns the mean loss: a scalar, reduced across the
blocks of rows. The backward recomputes the log-sum-exp and writes the logits' gradient,
`(softmax(logits) - one_hot(labels)) * g / M`, block by block.

A label outside [0, V) (such as -100, a common "ignore" label) marks a row that adds no loss
and gets no gradient; the mean still divides by M, every row.

`cross_entropy_rows` is the same loss written on whole rows: where a row of the vocabulary
fits in shared memory (up to about 100k bfloat16 or 50k float32 columns), the row form reads
each row of logits once, forward and backward, where the blocked loop reads it twice in the
backward; at a vocabulary whose rows are not a multiple of 16 bytes (50257) it addresses the
logits flat instead of padding them on the host.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float32, Int32

import statickernel as sk


def _labelled(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Per row: whether its label lies in [0, V)."""
    return (labels >= 0) & (labels < logits.shape[-1])


def cross_entropy_reference(logits: jax.Array, labels: jax.Array) -> jax.Array:
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    index = jnp.clip(labels, 0, logits.shape[-1] - 1).astype(jnp.int32)[:, None]
    picked = jnp.take_along_axis(log_probs, index, axis=-1)[:, 0]
    return -jnp.mean(jnp.where(_labelled(logits, labels), picked, 0.0))


def cross_entropy_backward_reference(
    logits: jax.Array, labels: jax.Array, g: jax.Array
) -> jax.Array:
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    one_hot = jax.nn.one_hot(labels, logits.shape[-1], dtype=jnp.float32)
    rows = jnp.where(_labelled(logits, labels), g / logits.shape[0], 0.0)[:, None]
    return ((probs - one_hot) * rows).astype(logits.dtype)


@sk.kernel(tile={"M": "BM"}, loop={"V": "BV"}, reference=cross_entropy_backward_reference)
def cross_entropy_backward(
    logits: Float[Array, "M V"],
    labels: Int32[Array, " M"],
    g: Float32[Array, ""],
    *,
    BM: sk.Const[int] = 64,
    BV: sk.Const[int] = 128,
    stages: sk.Const[int] = 4,
) -> Float[Array, "M V"]:
    def statistics(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        running_max, running_sum = carry
        v = sk.load(logits, fill=-jnp.inf).astype(jnp.float32)
        new_max = jnp.maximum(running_max, sk.max(v, axis=1))
        rescale = jnp.exp(running_max - new_max)
        return new_max, running_sum * rescale + sk.sum(jnp.exp(v - new_max[:, None]), axis=1)

    init = (jnp.full((BM,), -jnp.inf, jnp.float32), jnp.zeros((BM,), jnp.float32))
    row_max, row_sum = sk.loop("V", statistics, init=init)
    label = sk.load(labels)
    # A row whose label is outside [0, V) gets no gradient.
    labelled = (label >= 0) & (label < sk.dim("V"))
    scale = jnp.where(labelled, sk.load(g).astype(jnp.float32) / sk.dim("M"), 0.0)
    inverse = scale / row_sum

    def gradient() -> jax.Array:
        v = sk.load(logits).astype(jnp.float32)
        probs = jnp.exp(v - row_max[:, None]) * inverse[:, None]
        is_label = sk.position("V")[None, :] == label[:, None]
        return jnp.where(is_label, probs - scale[:, None], probs).astype(logits.dtype)

    return sk.map_blocks("V", gradient)


def cross_entropy_vjp(
    logits: jax.Array, labels: jax.Array, loss: jax.Array, g: jax.Array, **consts: int
) -> tuple[jax.Array, None]:
    """The declared backward: the logits' cotangent from the backward kernel; none for the
    integer labels."""
    del loss
    return cross_entropy_backward(logits, labels, g.astype(jnp.float32)), None


@sk.kernel(
    tile={"M": "BM"},
    loop={"V": "BV"},
    reference=cross_entropy_reference,
    vjp=cross_entropy_vjp,
)
def cross_entropy(
    logits: Float[Array, "M V"],
    labels: Int32[Array, " M"],
    *,
    BM: sk.Const[int] = 64,
    BV: sk.Const[int] = 128,
    stages: sk.Const[int] = 4,
) -> Float[Array, ""]:
    label = sk.load(labels)

    def step(carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        running_max, running_sum, picked = carry
        v = sk.load(logits, fill=-jnp.inf).astype(jnp.float32)  # columns past V read -inf
        new_max = jnp.maximum(running_max, sk.max(v, axis=1))
        rescale = jnp.exp(running_max - new_max)
        block_sum = sk.sum(jnp.exp(v - new_max[:, None]), axis=1)
        # The label's logit, from the block that holds it; `sk.position` gives V's indices.
        is_label = sk.position("V")[None, :] == label[:, None]
        block_pick = sk.sum(jnp.where(is_label, v, 0.0), axis=1)
        return new_max, running_sum * rescale + block_sum, picked + block_pick

    zeros = jnp.zeros((BM,), jnp.float32)
    init = (jnp.full((BM,), -jnp.inf, jnp.float32), zeros, zeros)
    row_max, row_sum, picked = sk.loop("V", step, init=init)
    # A row whose label is outside [0, V) adds no loss (no column matched it).
    labelled = (label >= 0) & (label < sk.dim("V"))
    loss = jnp.where(labelled, row_max + jnp.log(row_sum) - picked, 0.0)
    # The mean over every row: each block of rows writes its losses, one sum combines them.
    return sk.sum(loss, axis=0) / sk.dim("M")


def _whole_row_statistics(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The row's logits in float32 (-inf past V) and its log-sum-exp."""
    v = sk.load(logits, fill=-jnp.inf).astype(jnp.float32)
    row_max = sk.max(v, axis=1)
    return v, row_max + jnp.log(sk.sum(jnp.exp(v - row_max[:, None]), axis=1))


@sk.kernel(tile={"M": "BM"}, reference=cross_entropy_backward_reference)
def cross_entropy_rows_backward(
    logits: Float[Array, "M V"],
    labels: Int32[Array, " M"],
    g: Float32[Array, ""],
    *,
    BM: sk.Const[int] = 64,
) -> Float[Array, "M V"]:
    v, lse = _whole_row_statistics(logits)
    label = sk.load(labels)
    labelled = (label >= 0) & (label < sk.dim("V"))
    scale = jnp.where(labelled, sk.load(g).astype(jnp.float32) / sk.dim("M"), 0.0)
    probs = jnp.exp(v - lse[:, None]) * scale[:, None]
    is_label = sk.position("V")[None, :] == label[:, None]
    return jnp.where(is_label, probs - scale[:, None], probs).astype(logits.dtype)


def cross_entropy_rows_vjp(
    logits: jax.Array, labels: jax.Array, loss: jax.Array, g: jax.Array, **consts: int
) -> tuple[jax.Array, None]:
    del loss
    return cross_entropy_rows_backward(logits, labels, g.astype(jnp.float32)), None


# Whole rows (BM is the most rows a block takes; the plan fits fewer where a row is wide).
@sk.kernel(tile={"M": "BM"}, reference=cross_entropy_reference, vjp=cross_entropy_rows_vjp)
def cross_entropy_rows(
    logits: Float[Array, "M V"],
    labels: Int32[Array, " M"],
    *,
    BM: sk.Const[int] = 64,
) -> Float[Array, ""]:
    v, lse = _whole_row_statistics(logits)
    label = sk.load(labels)
    # The label's logit: its column, found by V's positions (each chunk's, in a wide row).
    picked = sk.sum(jnp.where(sk.position("V")[None, :] == label[:, None], v, 0.0), axis=1)
    labelled = (label >= 0) & (label < sk.dim("V"))
    return sk.sum(jnp.where(labelled, lse - picked, 0.0), axis=0) / sk.dim("M")


if __name__ == "__main__":
    k1, k2 = jax.random.split(jax.random.key(0))
    logits = jax.random.normal(k1, (1000, 32000), jnp.bfloat16)
    labels = jax.random.randint(k2, (1000,), 0, 32000, jnp.int32)
    print(cross_entropy.plan(logits, labels))
    loss, dlogits = jax.value_and_grad(cross_entropy)(logits, labels)
    want, want_d = jax.value_and_grad(cross_entropy_reference)(logits, labels)
    print("loss:", float(loss), "reference:", float(want))
    err = jnp.max(jnp.abs(dlogits.astype(jnp.float32) - want_d.astype(jnp.float32)))
    print("max abs gradient error:", float(err))
