"""Layer norm over each row, with a weight and a bias per column."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float32

import statickernel as sk


def layernorm_reference(
    x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float = 1e-5
) -> jax.Array:
    v = x.astype(jnp.float32)
    mean = jnp.mean(v, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(v - mean), axis=-1, keepdims=True)
    y = (v - mean) * jax.lax.rsqrt(var + eps)
    return (y * weight.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def layernorm_vjp(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array,
    y: jax.Array,
    dy: jax.Array,
    *,
    eps: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The declared backward: dx, and dweight and dbias summed over every row. One pass over
    x and dy where whole rows take the row form; for narrower rows, whose 64-row blocks
    would spill in one pass, dx (with each row's mean and rstd) and then the sums."""
    del y
    if layernorm_backward.plan(x, weight, dy, eps=eps).form is sk.Form.ROWS:
        dx, dweight, dbias = layernorm_backward(x, weight, dy, eps=eps)
    else:
        dx, mean, rstd = layernorm_backward_rows(x, weight, dy, eps=eps)
        dweight, dbias = layernorm_backward_params(x, dy, mean, rstd)
    return dx, dweight.astype(weight.dtype), dbias.astype(bias.dtype)


@sk.kernel(tile={"M": "BM"}, reference=layernorm_reference, vjp=layernorm_vjp)
def layernorm(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    bias: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-5,
) -> Float[Array, "M N"]:
    v = sk.load(x).astype(jnp.float32)
    mean = jnp.mean(v, axis=1, keepdims=True)
    # Columns past N are excluded from the reductions automatically, so the variance is exact.
    var = jnp.mean(jnp.square(v - mean), axis=1, keepdims=True)
    y = (v - mean) * jax.lax.rsqrt(var + eps)
    w = sk.load(weight).astype(jnp.float32)
    b = sk.load(bias).astype(jnp.float32)
    return (y * w + b).astype(x.dtype)


def layernorm_backward_reference(
    x: jax.Array, weight: jax.Array, dy: jax.Array, eps: float = 1e-5
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The backward of layernorm in plain jnp: with xhat = (x - mean) * rstd and
    g = dy * weight, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dweight sums
    dy * xhat over the rows, dbias sums dy."""
    v, w, g = x.astype(jnp.float32), weight.astype(jnp.float32), dy.astype(jnp.float32)
    mean = jnp.mean(v, axis=-1, keepdims=True)
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(v - mean), axis=-1, keepdims=True) + eps)
    xhat, gw = (v - mean) * rstd, g * w
    correction = xhat * jnp.mean(gw * xhat, axis=-1, keepdims=True)
    dx = rstd * (gw - jnp.mean(gw, axis=-1, keepdims=True) - correction)
    return dx.astype(x.dtype), jnp.sum(g * xhat, axis=0), jnp.sum(g, axis=0)


def _backward_reference(
    x: jax.Array, weight: jax.Array, dy: jax.Array, eps: float = 1e-5
) -> tuple[jax.Array, jax.Array, jax.Array]:
    return layernorm_backward_reference(x, weight, dy, eps)


@sk.kernel(tile={"M": "BM"}, reference=_backward_reference, vjp="reference")
def layernorm_backward(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    dy: Float[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-5,
) -> tuple[Float[Array, "M N"], Float32[Array, " N"], Float32[Array, " N"]]:
    """dx of each row, dweight and dbias in one pass over x and dy, for rows the row form
    takes: each CTA adds up dy * xhat and dy over its rows."""
    v = sk.load(x).astype(jnp.float32)
    mean = jnp.mean(v, axis=1)
    centered = v - mean[:, None]
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(centered), axis=1) + eps)
    xhat = centered * rstd[:, None]
    g = sk.load(dy).astype(jnp.float32)
    gw = g * sk.load(weight).astype(jnp.float32)
    inner = gw - jnp.mean(gw, axis=1)[:, None] - xhat * jnp.mean(gw * xhat, axis=1)[:, None]
    dx = (rstd[:, None] * inner).astype(x.dtype)
    return dx, sk.sum(g * xhat, axis=0), sk.sum(g, axis=0)


def _rows_reference(
    x: jax.Array, weight: jax.Array, dy: jax.Array, eps: float = 1e-5
) -> tuple[jax.Array, jax.Array, jax.Array]:
    v = x.astype(jnp.float32)
    mean = jnp.mean(v, axis=-1)
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(v - mean[:, None]), axis=-1) + eps)
    return layernorm_backward_reference(x, weight, dy, eps)[0], mean, rstd


@sk.kernel(tile={"M": "BM"}, reference=_rows_reference, vjp="reference")
def layernorm_backward_rows(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    dy: Float[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-5,
) -> tuple[Float[Array, "M N"], Float32[Array, " M"], Float32[Array, " M"]]:
    """dx of each row, and the row's mean and rstd for dweight."""
    v = sk.load(x).astype(jnp.float32)
    mean = jnp.mean(v, axis=1)
    centered = v - mean[:, None]
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(centered), axis=1) + eps)
    xhat = centered * rstd[:, None]
    gw = sk.load(dy).astype(jnp.float32) * sk.load(weight).astype(jnp.float32)
    inner = gw - jnp.mean(gw, axis=1)[:, None] - xhat * jnp.mean(gw * xhat, axis=1)[:, None]
    return (rstd[:, None] * inner).astype(x.dtype), mean, rstd


def _params_reference(
    x: jax.Array, dy: jax.Array, mean: jax.Array, rstd: jax.Array
) -> tuple[jax.Array, jax.Array]:
    g = dy.astype(jnp.float32)
    xhat = (x.astype(jnp.float32) - mean[:, None]) * rstd[:, None]
    return jnp.sum(g * xhat, axis=0), jnp.sum(g, axis=0)


@sk.kernel(tile={"M": "BM", "N": "BN"}, reference=_params_reference, vjp="reference")
def layernorm_backward_params(
    x: Float[Array, "M N"],
    dy: Float[Array, "M N"],
    mean: Float32[Array, " M"],
    rstd: Float32[Array, " M"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
) -> tuple[Float32[Array, " N"], Float32[Array, " N"]]:
    """dweight and dbias, sums over the rows: each block of rows writes its parts, and one
    sum after the launch combines each (reductions across blocks)."""
    g = sk.load(dy).astype(jnp.float32)
    xhat = (sk.load(x).astype(jnp.float32) - sk.load(mean)[:, None]) * sk.load(rstd)[:, None]
    return sk.sum(g * xhat, axis=0), sk.sum(g, axis=0)


# The same kernel, differentiated by JAX through its reference: reverse and forward mode.
layernorm_by_reference = sk.kernel(
    tile={"M": "BM"},
    reference=layernorm_reference,
    vjp="reference",
    name="layernorm_by_reference",
)(layernorm.spec.fn)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (1000, 130), jnp.float32)
    w, b = jnp.ones((130,)), jnp.zeros((130,))
    print(layernorm.plan(x, w, b))
    err = jnp.max(jnp.abs(layernorm(x, w, b) - layernorm_reference(x, w, b)))
    print("max abs error:", float(err))
