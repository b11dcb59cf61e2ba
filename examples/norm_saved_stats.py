"""RMS norm and layer norm that save their per-row statistics, and backwards that read them.

The forward writes each row's rstd (and, for the layer norm, its mean) beside y, as
Liger-Kernel's, Triton's and jax's own fused norms do; the backward reads them instead of
reducing each row of x a second time. A per-row operand such as `rstd: Float32[Array, " M"]`
keeps whole rows in the row form: each row reads its element from global memory, so rows of
4096 to 16384 columns run in one pass, dx and the weight's (and bias') gradients together.

`rmsnorm_trained` and `layernorm_trained` wire them into `jax.custom_vjp`, so `jax.grad`
runs the saving forward and the reading backward."""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float32

import statickernel as sk

# --- RMS norm ---------------------------------------------------------------------------------


def rmsnorm_stats_reference(
    x: jax.Array, weight: jax.Array, eps: float = 1e-6
) -> tuple[jax.Array, jax.Array]:
    v = x.astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(v * v, axis=-1) + eps)
    return (v * rstd[:, None] * weight.astype(jnp.float32)).astype(x.dtype), rstd


@sk.kernel(tile={"M": "BM"}, reference=rmsnorm_stats_reference, vjp="reference")
def rmsnorm_with_rstd(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-6,
) -> tuple[Float[Array, "M N"], Float32[Array, " M"]]:
    """y = x * rstd * weight, and each row's rstd = rsqrt(mean(x**2) + eps) for the backward."""
    v = sk.load(x).astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(v * v, axis=1) + eps)
    return (v * rstd[:, None] * sk.load(weight).astype(jnp.float32)).astype(x.dtype), rstd


def rmsnorm_backward_saved_reference(
    x: jax.Array, weight: jax.Array, dy: jax.Array, rstd: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """With r the saved rstd and g = dy * weight: dx = r * g - x * r**3 * mean(g * x), and
    dweight sums dy * x * r over the rows."""
    v, g = x.astype(jnp.float32), dy.astype(jnp.float32)
    r = rstd[:, None]
    gw = g * weight.astype(jnp.float32)
    dx = r * gw - v * r**3 * jnp.mean(gw * v, axis=-1, keepdims=True)
    return dx.astype(x.dtype), jnp.sum(g * v * r, axis=0)


@sk.kernel(tile={"M": "BM"}, reference=rmsnorm_backward_saved_reference, vjp="reference")
def rmsnorm_backward_saved(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    dy: Float[Array, "M N"],
    rstd: Float32[Array, " M"],
    *,
    BM: sk.Const[int] = 64,
) -> tuple[Float[Array, "M N"], Float32[Array, " N"]]:
    """dx of each row and dweight, from the forward's rstd: one pass over x and dy."""
    v = sk.load(x).astype(jnp.float32)
    g = sk.load(dy).astype(jnp.float32)
    r = sk.load(rstd)
    gw = g * sk.load(weight).astype(jnp.float32)
    correction = r * r * jnp.mean(gw * v, axis=1)
    dx = r[:, None] * (gw - v * correction[:, None])
    return dx.astype(x.dtype), sk.sum(g * v * r[:, None], axis=0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def rmsnorm_trained(x: jax.Array, weight: jax.Array, eps: float = 1e-6) -> jax.Array:
    """RMS norm for training: the forward saves rstd, the backward reads it."""
    return rmsnorm_with_rstd(x, weight, eps=eps)[0]


def _rmsnorm_forward(
    x: jax.Array, weight: jax.Array, eps: float
) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    y, rstd = rmsnorm_with_rstd(x, weight, eps=eps)
    return y, (x, weight, rstd)


def _rmsnorm_backward(
    eps: float, saved: tuple[jax.Array, ...], dy: jax.Array
) -> tuple[jax.Array, jax.Array]:
    del eps  # in rstd already
    x, weight, rstd = saved
    dx, dweight = rmsnorm_backward_saved(x, weight, dy, rstd)
    return dx, dweight.astype(weight.dtype)


rmsnorm_trained.defvjp(_rmsnorm_forward, _rmsnorm_backward)

# --- layer norm -------------------------------------------------------------------------------


def layernorm_stats_reference(
    x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float = 1e-5
) -> tuple[jax.Array, jax.Array, jax.Array]:
    v = x.astype(jnp.float32)
    mean = jnp.mean(v, axis=-1)
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(v - mean[:, None]), axis=-1) + eps)
    y = (v - mean[:, None]) * rstd[:, None] * weight.astype(jnp.float32)
    return (y + bias.astype(jnp.float32)).astype(x.dtype), mean, rstd


@sk.kernel(tile={"M": "BM"}, reference=layernorm_stats_reference, vjp="reference")
def layernorm_with_stats(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    bias: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-5,
) -> tuple[Float[Array, "M N"], Float32[Array, " M"], Float32[Array, " M"]]:
    """y, and each row's mean and rstd = rsqrt(var + eps) for the backward."""
    v = sk.load(x).astype(jnp.float32)
    mean = jnp.mean(v, axis=1)
    # Columns past N are excluded from the reductions automatically, so the variance is exact.
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(v - mean[:, None]), axis=1) + eps)
    y = (v - mean[:, None]) * rstd[:, None] * sk.load(weight).astype(jnp.float32)
    return (y + sk.load(bias).astype(jnp.float32)).astype(x.dtype), mean, rstd


def layernorm_backward_saved_reference(
    x: jax.Array, weight: jax.Array, dy: jax.Array, mean: jax.Array, rstd: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """With xhat = (x - mean) * rstd and g = dy * weight:
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dweight sums dy * xhat, dbias dy."""
    v, dyf = x.astype(jnp.float32), dy.astype(jnp.float32)
    xhat = (v - mean[:, None]) * rstd[:, None]
    g = dyf * weight.astype(jnp.float32)
    inner = g - jnp.mean(g, axis=-1, keepdims=True)
    dx = rstd[:, None] * (inner - xhat * jnp.mean(g * xhat, axis=-1, keepdims=True))
    return dx.astype(x.dtype), jnp.sum(dyf * xhat, axis=0), jnp.sum(dyf, axis=0)


@sk.kernel(tile={"M": "BM"}, reference=layernorm_backward_saved_reference, vjp="reference")
def layernorm_backward_saved(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    dy: Float[Array, "M N"],
    mean: Float32[Array, " M"],
    rstd: Float32[Array, " M"],
    *,
    BM: sk.Const[int] = 64,
) -> tuple[Float[Array, "M N"], Float32[Array, " N"], Float32[Array, " N"]]:
    """dx of each row, dweight and dbias, from the forward's mean and rstd: one pass."""
    dyf = sk.load(dy).astype(jnp.float32)
    r = sk.load(rstd)
    xhat = (sk.load(x).astype(jnp.float32) - sk.load(mean)[:, None]) * r[:, None]
    g = dyf * sk.load(weight).astype(jnp.float32)
    g_mean = jnp.mean(g, axis=1)
    gx_mean = jnp.mean(g * xhat, axis=1)
    dx = r[:, None] * (g - g_mean[:, None] - xhat * gx_mean[:, None])
    return dx.astype(x.dtype), sk.sum(dyf * xhat, axis=0), sk.sum(dyf, axis=0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layernorm_trained(
    x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float = 1e-5
) -> jax.Array:
    """Layer norm for training: the forward saves mean and rstd, the backward reads them."""
    return layernorm_with_stats(x, weight, bias, eps=eps)[0]


def _layernorm_forward(
    x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float
) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    y, mean, rstd = layernorm_with_stats(x, weight, bias, eps=eps)
    return y, (x, weight, bias, mean, rstd)


def _layernorm_backward(
    eps: float, saved: tuple[jax.Array, ...], dy: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    del eps  # in rstd already
    x, weight, bias, mean, rstd = saved
    dx, dweight, dbias = layernorm_backward_saved(x, weight, dy, mean, rstd)
    return dx, dweight.astype(weight.dtype), dbias.astype(bias.dtype)


layernorm_trained.defvjp(_layernorm_forward, _layernorm_backward)


if __name__ == "__main__":
    kx, kd = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (1000, 4096), jnp.bfloat16)
    dy = jax.random.normal(kd, (1000, 4096), jnp.bfloat16)
    w = jnp.ones((4096,), jnp.bfloat16)
    y, rstd = rmsnorm_with_rstd(x, w)
    print(rmsnorm_backward_saved.plan(x, w, dy, rstd))
    dx, dw = rmsnorm_backward_saved(x, w, dy, rstd)
    dx_ref, dw_ref = rmsnorm_backward_saved_reference(x, w, dy, rstd)
    print(
        "max abs error of dx:",
        float(jnp.max(jnp.abs(dx.astype(jnp.float32) - dx_ref.astype(jnp.float32)))),
        "of dweight:",
        float(jnp.max(jnp.abs(dw - dw_ref))),
    )
