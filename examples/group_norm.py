"""Group normalization (torch.nn.GroupNorm's forward), one grid step a group of a sample.

x is laid out "B G C L": B samples, G groups of C channels each, and L positions (the spatial
dims flattened, H * W of an image). torch's (N, G * C, H, W) input is this layout by a
reshape, no copy: `x.reshape(N, G, C, H * W)`, which `group_norm_nchw` does. The grid walks
(B, G); each step holds its group's C x L block whole, takes its mean and rstd over the
block (a whole dim's `jnp.mean` divides by its true size), normalizes it and applies each
channel's weight and bias, "G C" (torch's (G * C,) weight reshaped).

The forward also returns each group's mean and rstd, "B G": one value a grid step, written
from registers, as torch's native_group_norm saves them for the backward. A group of one
channel, of a prime count of channels or positions, and a single sample are exact: the
block's rows are padded to 64 and its columns to 8, and the statistics leave the padding
out."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float32

import statickernel as sk


def group_norm_reference(
    x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float = 1e-5
) -> tuple[jax.Array, jax.Array, jax.Array]:
    v = x.astype(jnp.float32)
    mean = jnp.mean(v, axis=(2, 3))
    centred = v - mean[:, :, None, None]
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(centred), axis=(2, 3)) + eps)
    y = centred * rstd[:, :, None, None] * weight.astype(jnp.float32)[None, :, :, None]
    return (y + bias.astype(jnp.float32)[None, :, :, None]).astype(x.dtype), mean, rstd


@sk.kernel(batch=("B", "G"), reference=group_norm_reference)
def group_norm(
    x: Float[Array, "B G C L"],
    weight: Float[Array, "G C"],
    bias: Float[Array, "G C"],
    *,
    eps: sk.Const[float] = 1e-5,
) -> tuple[Float[Array, "B G C L"], Float32[Array, "B G"], Float32[Array, "B G"]]:
    """y = (x - mean) * rstd * weight + bias over one group's block, with its mean and rstd."""
    v = sk.load(x).astype(jnp.float32)
    mean = jnp.mean(v)
    centred = v - mean
    rstd = jax.lax.rsqrt(jnp.mean(centred * centred) + eps)
    w = sk.load(weight).astype(jnp.float32)[:, None]  # a channel's weight along its row
    b = sk.load(bias).astype(jnp.float32)[:, None]
    return (centred * rstd * w + b).astype(x.dtype), mean, rstd


def group_norm_nchw(
    x: jax.Array, weight: jax.Array, bias: jax.Array, groups: int, eps: float = 1e-5
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """torch's layout: x (N, C, *spatial), weight and bias (C,), C a multiple of `groups`;
    returns y in x's layout and the (N, groups) mean and rstd, as torch.native_group_norm."""
    n, channels = x.shape[:2]
    per_group = channels // groups
    grouped = x.reshape(n, groups, per_group, -1)
    y, mean, rstd = group_norm(
        grouped,
        weight.reshape(groups, per_group),
        bias.reshape(groups, per_group),
        eps=eps,
    )
    return y.reshape(x.shape), mean, rstd


if __name__ == "__main__":
    kx, kw, kb = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (2, 64, 15, 15), jnp.bfloat16)
    weight = 1 + 0.1 * jax.random.normal(kw, (64,), jnp.float32)
    bias = jax.random.normal(kb, (64,), jnp.float32)
    grouped = (x.reshape(2, 8, 8, 225), weight.reshape(8, 8), bias.reshape(8, 8))
    print(group_norm.plan(*grouped))
    got = group_norm_nchw(x, weight, bias, groups=8)
    want = group_norm_reference(*grouped)
    for g, w in zip(got, want, strict=True):
        err = jnp.max(jnp.abs(g.reshape(w.shape).astype(jnp.float32) - w.astype(jnp.float32)))
        print("max abs error:", float(err))
