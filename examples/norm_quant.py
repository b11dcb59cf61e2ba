"""A residual add, an RMS norm and a per-row fp8 quantization in one pass: each row of
`x + residual` is normalized, scaled by a learned weight per column, and stored as
float8_e4m3fn with its scale (the row's largest magnitude over 448), ready for an fp8 matmul.

The cast to fp8 in a body saturates: a value past the format's largest finite magnitude (448
for e4m3fn, 57344 for e5m2) becomes that magnitude, as Hopper's conversion gives it, where
`jnp`'s astype would give NaN. The reference clips before its cast to match."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float8e4m3fn, Float32

import statickernel as sk

# The largest finite float8_e4m3fn, and the smallest scale: a row of zeros is stored as
# zeros with this scale, not divided by zero.
FP8_MAX = 448.0
MIN_SCALE = 1e-12


def norm_quant_reference(
    x: jax.Array, residual: jax.Array, weight: jax.Array, eps: float = 1e-6
) -> tuple[jax.Array, jax.Array]:
    h = x.astype(jnp.float32) + residual.astype(jnp.float32)
    y = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + eps)
    y = y * weight.astype(jnp.float32)
    scale = jnp.maximum(jnp.max(jnp.abs(y), axis=-1) / FP8_MAX, MIN_SCALE)
    q = jnp.clip(y / scale[:, None], -FP8_MAX, FP8_MAX).astype(jnp.float8_e4m3fn)
    return q, scale


@sk.kernel(tile={"M": "BM"}, reference=norm_quant_reference)
def norm_quant(
    x: Float[Array, "M N"],
    residual: Float[Array, "M N"],
    weight: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-6,
) -> tuple[Float8e4m3fn[Array, "M N"], Float32[Array, " M"]]:
    """q = y / scale in float8_e4m3fn and scale per row, for y the RMS-normed x + residual."""
    h = sk.load(x).astype(jnp.float32) + sk.load(residual).astype(jnp.float32)
    y = h * jax.lax.rsqrt(jnp.mean(h * h, axis=1, keepdims=True) + eps)
    y = y * sk.load(weight).astype(jnp.float32)
    scale = jnp.maximum(jnp.max(jnp.abs(y), axis=1) / FP8_MAX, MIN_SCALE)
    return (y / scale[:, None]).astype(jnp.float8_e4m3fn), scale


if __name__ == "__main__":
    kx, kr = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (1000, 4096), jnp.bfloat16)
    residual = jax.random.normal(kr, (1000, 4096), jnp.bfloat16)
    w = jnp.ones((4096,), jnp.bfloat16)
    print(norm_quant.plan(x, residual, w))
    q, scale = norm_quant(x, residual, w)
    q_ref, scale_ref = norm_quant_reference(x, residual, w)
    err = jnp.max(jnp.abs(q.astype(jnp.float32) - q_ref.astype(jnp.float32)))
    print(
        "max abs error of q:", float(err), "of scale:", float(jnp.max(jnp.abs(scale - scale_ref)))
    )
