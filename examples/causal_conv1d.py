"""A causal depthwise convolution of width 4 along the sequence, with bias and SiLU: Mamba's
`causal_conv1d`, in one kernel, for both layouts of the sequence.

Each channel of each sequence is convolved with its own 4 taps, and output `t` reads inputs
`t - 3` to `t` only: those before the first read 0. `sk.load(x, offset={"L": k - 3})` reads
the block `3 - k` steps of the sequence earlier, each block reading x once from HBM:

- `causal_conv1d` takes the sequence along the rows, channels last (`"B L C"`, as flax's
  convolutions take it): the shifted blocks are windows of the rows its copy holds above the
  block. The taps are a stack of per-channel vectors, `"4 C"` (Mamba's weight transposed).
- `causal_conv1d_channels_first` takes Mamba's own layout, `"B C L"` with the weight `(C, 4)`
  as it is: the shifted blocks run along the columns, each a TMA copy of its own from the
  shifted columns (the block's neighbours come from L2).
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float32

import statickernel as sk

WIDTH = 4  # the taps of Mamba's convolution (d_conv)


def causal_conv1d_reference(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    """XLA's grouped convolution, one group a channel, padded on the left only."""
    channels = x.shape[-1]
    y = jax.lax.conv_general_dilated(
        x.astype(jnp.float32),
        w.astype(jnp.float32)[:, None, :],
        window_strides=(1,),
        padding=[(WIDTH - 1, 0)],
        dimension_numbers=("NWC", "WIO", "NWC"),
        feature_group_count=channels,
        precision=jax.lax.Precision.HIGHEST,
    )
    return jax.nn.silu(y + b).astype(x.dtype)


@sk.kernel(tile={"L": "BL", "C": "BC"}, batch="B", reference=causal_conv1d_reference)
def causal_conv1d(
    x: Float[Array, "B L C"],
    w: Float32[Array, "4 C"],
    b: Float32[Array, " C"],
    *,
    BL: sk.Const[int] = 64,
    BC: sk.Const[int] = 64,
) -> Float[Array, "B L C"]:
    """silu(b + sum over k of w[k] * x shifted by 3 - k rows), per channel."""
    taps = sk.load(w)
    acc = sk.load(b)[None, :]
    for k in range(WIDTH):
        shifted = sk.load(x, offset={"L": k - (WIDTH - 1)}).astype(jnp.float32)
        acc = acc + taps[k][None, :] * shifted
    return jax.nn.silu(acc).astype(x.dtype)


def causal_conv1d_channels_first_reference(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    """The same convolution with the sequence along the last dim, and the weight `(C, 4)`."""
    return jnp.swapaxes(causal_conv1d_reference(jnp.swapaxes(x, 1, 2), w.T, b), 1, 2)


@sk.kernel(
    tile={"C": "BC", "L": "BL"},
    batch="B",
    reference=causal_conv1d_channels_first_reference,
)
def causal_conv1d_channels_first(
    x: Float[Array, "B C L"],
    w: Float32[Array, "C 4"],
    b: Float32[Array, " C"],
    *,
    BC: sk.Const[int] = 64,
    BL: sk.Const[int] = 64,
) -> Float[Array, "B C L"]:
    """silu(b + sum over k of w[:, k] * x shifted by 3 - k columns), per channel."""
    taps = sk.load(w)
    acc = sk.load(b)[:, None]
    for k in range(WIDTH):
        shifted = sk.load(x, offset={"L": k - (WIDTH - 1)}).astype(jnp.float32)
        acc = acc + taps[:, k][:, None] * shifted
    return jax.nn.silu(acc).astype(x.dtype)


if __name__ == "__main__":
    kx, kw, kb = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (2, 1000, 320), jnp.bfloat16)
    w = jax.random.normal(kw, (WIDTH, 320), jnp.float32) / 2
    b = jax.random.normal(kb, (320,), jnp.float32) / 10
    print(causal_conv1d.plan(x, w, b))
    got = causal_conv1d(x, w, b).astype(jnp.float32)
    want = causal_conv1d_reference(x, w, b).astype(jnp.float32)
    print("max abs error:", float(jnp.max(jnp.abs(got - want))))
    x_cl = jnp.swapaxes(x, 1, 2)  # Mamba's layout: (batch, channels, sequence)
    print(causal_conv1d_channels_first.plan(x_cl, w.T, b))
    got = causal_conv1d_channels_first(x_cl, w.T, b).astype(jnp.float32)
    want = causal_conv1d_channels_first_reference(x_cl, w.T, b).astype(jnp.float32)
    print("max abs error:", float(jnp.max(jnp.abs(got - want))))
