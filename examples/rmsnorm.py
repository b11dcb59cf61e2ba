"""RMS norm over each row, with a learned weight per column."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float32

import statickernel as sk


def rmsnorm_reference(x: jax.Array, weight: jax.Array, eps: float = 1e-6) -> jax.Array:
    v = x.astype(jnp.float32)
    rms = jax.lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + eps)
    return (v * rms * weight.astype(jnp.float32)).astype(x.dtype)


def rmsnorm_vjp(
    x: jax.Array, weight: jax.Array, y: jax.Array, dy: jax.Array, *, eps: float
) -> tuple[jax.Array, jax.Array]:
    """The declared backward: dx, and dweight summed over every row.

    Where whole rows take the row form (the widths models use), one kernel reads x and dy
    once for both. Narrower rows take 64-row blocks, where the one pass would hold three
    blocks of float32 at once and spill: there dx comes first, with each row's r, and
    dweight from a second kernel."""
    del y  # r is recomputed from x: y / weight would divide by zero where a weight is 0
    if rmsnorm_backward.plan(x, weight, dy, eps=eps).form is sk.Form.ROWS:
        dx, dweight = rmsnorm_backward(x, weight, dy, eps=eps)
    else:
        dx, r = rmsnorm_backward_rows(x, weight, dy, eps=eps)
        dweight = rmsnorm_backward_weight(x, dy, r)
    return dx, dweight.astype(weight.dtype)


@sk.kernel(tile={"M": "BM"}, reference=rmsnorm_reference, vjp=rmsnorm_vjp)
def rmsnorm(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-6,
) -> Float[Array, "M N"]:
    v = sk.load(x).astype(jnp.float32)
    rms = jax.lax.rsqrt(jnp.mean(v * v, axis=1, keepdims=True) + eps)
    return (v * rms * sk.load(weight).astype(jnp.float32)).astype(x.dtype)


def rmsnorm_backward_reference(
    x: jax.Array, weight: jax.Array, dy: jax.Array, eps: float = 1e-6
) -> tuple[jax.Array, jax.Array]:
    """The backward of rmsnorm in plain jnp: with r = rsqrt(mean(x**2) + eps) per row and
    g = dy * weight, dx = r * g - x * r**3 * mean(g * x); dweight sums dy * x * r over the rows."""
    v, w, g = x.astype(jnp.float32), weight.astype(jnp.float32), dy.astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + eps)
    gw = g * w
    dx = r * gw - v * r**3 * jnp.mean(gw * v, axis=-1, keepdims=True)
    dweight = jnp.sum(g * v * r, axis=0)
    return dx.astype(x.dtype), dweight.astype(weight.dtype)


def _backward_reference(
    x: jax.Array, weight: jax.Array, dy: jax.Array, eps: float = 1e-6
) -> tuple[jax.Array, jax.Array]:
    v, g = x.astype(jnp.float32), dy.astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + eps)
    return rmsnorm_backward_reference(x, weight, dy, eps)[0], jnp.sum(g * v * r, axis=0)


@sk.kernel(tile={"M": "BM"}, reference=_backward_reference, vjp="reference")
def rmsnorm_backward(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    dy: Float[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-6,
) -> tuple[Float[Array, "M N"], Float32[Array, " N"]]:
    """dx of each row and dweight in one pass over x and dy, for rows the row form takes:
    each CTA adds up dy * x * r over its rows, and one sum combines the CTAs'."""
    v = sk.load(x).astype(jnp.float32)
    g = sk.load(dy).astype(jnp.float32)
    gw = g * sk.load(weight).astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(v * v, axis=1) + eps)
    correction = r * r * jnp.mean(gw * v, axis=1)
    dx = r[:, None] * (gw - v * correction[:, None])
    return dx.astype(x.dtype), sk.sum(g * v * r[:, None], axis=0)


def _rows_reference(
    x: jax.Array, weight: jax.Array, dy: jax.Array, eps: float = 1e-6
) -> tuple[jax.Array, jax.Array]:
    v = x.astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(v * v, axis=-1) + eps)
    return rmsnorm_backward_reference(x, weight, dy, eps)[0], r


@sk.kernel(tile={"M": "BM"}, reference=_rows_reference, vjp="reference")
def rmsnorm_backward_rows(
    x: Float[Array, "M N"],
    weight: Float[Array, " N"],
    dy: Float[Array, "M N"],
    *,
    BM: sk.Const[int] = 64,
    eps: sk.Const[float] = 1e-6,
) -> tuple[Float[Array, "M N"], Float32[Array, " M"]]:
    """dx of each row, and the row's r = rsqrt(mean(x**2) + eps) for dweight."""
    v = sk.load(x).astype(jnp.float32)
    gw = sk.load(dy).astype(jnp.float32) * sk.load(weight).astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(v * v, axis=1) + eps)
    # r * (gw - x * r**2 * mean(gw * x)): written so, the block form at mid widths does not
    # spill (the other grouping keeps one more block live through the products).
    correction = r * r * jnp.mean(gw * v, axis=1)
    dx = r[:, None] * (gw - v * correction[:, None])
    return dx.astype(x.dtype), r


def _weight_reference(x: jax.Array, dy: jax.Array, r: jax.Array) -> jax.Array:
    return jnp.sum(dy.astype(jnp.float32) * x.astype(jnp.float32) * r[:, None], axis=0)


@sk.kernel(tile={"M": "BM", "N": "BN"}, reference=_weight_reference, vjp="reference")
def rmsnorm_backward_weight(
    x: Float[Array, "M N"],
    dy: Float[Array, "M N"],
    r: Float32[Array, " M"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
) -> Float32[Array, " N"]:
    """dweight = sum over the rows of dy * x * r: each block of rows writes its part, and one
    sum after the launch combines them (a reduction across blocks)."""
    v = sk.load(x).astype(jnp.float32) * sk.load(r)[:, None]
    return sk.sum(sk.load(dy).astype(jnp.float32) * v, axis=0)


# The same kernel, differentiated by JAX through its reference: reverse and forward mode.
rmsnorm_by_reference = sk.kernel(
    tile={"M": "BM"}, reference=rmsnorm_reference, vjp="reference", name="rmsnorm_by_reference"
)(rmsnorm.spec.fn)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (1000, 200), jnp.bfloat16)
    w = jnp.ones((200,), jnp.bfloat16)
    print(rmsnorm.plan(x, w))
    err = jnp.max(jnp.abs(rmsnorm(x, w).astype(jnp.float32) - rmsnorm_reference(x, w)))
    print("max abs error:", float(err))
