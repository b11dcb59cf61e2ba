"""RMS norm over each row, with a learned weight per column."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import statickernel as sk


def rmsnorm_reference(x: jax.Array, weight: jax.Array, eps: float = 1e-6) -> jax.Array:
    v = x.astype(jnp.float32)
    rms = jax.lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + eps)
    return (v * rms * weight.astype(jnp.float32)).astype(x.dtype)


@sk.kernel(tile={"M": "BM"}, reference=rmsnorm_reference, vjp="reference")
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


# Below the kernel, so that the kernel's lines, which its generated source cites, stay put.
def rmsnorm_backward_jnp(
    x: jax.Array, weight: jax.Array, y: jax.Array, dy: jax.Array, *, eps: float
) -> tuple[jax.Array, jax.Array]:
    """The backward of rmsnorm in plain jnp (run by XLA, not a kernel): the operands, the
    forward's result and its cotangent in; one cotangent per operand out.

    With r = rsqrt(mean(x**2) + eps) per row and g = dy * weight, dx = r * g - x * r**3 *
    mean(g * x); dweight sums dy * x * r over the rows. A backward kernel would need that sum
    across every block of rows, a cross-block reduction that kernels do not express yet.
    """
    del y  # r is recomputed from x: y / weight would divide by zero where a weight is 0
    v, w, g = x.astype(jnp.float32), weight.astype(jnp.float32), dy.astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + eps)
    gw = g * w
    dx = r * gw - v * r**3 * jnp.mean(gw * v, axis=-1, keepdims=True)
    dweight = jnp.sum(g * v * r, axis=0)
    return dx.astype(x.dtype), dweight.astype(weight.dtype)


# The same kernel, differentiated by the declared backward above: reverse mode only.
rmsnorm_with_backward = sk.kernel(
    tile={"M": "BM"},
    reference=rmsnorm_reference,
    vjp=rmsnorm_backward_jnp,
    name="rmsnorm_with_backward",
)(rmsnorm.spec.fn)


if __name__ == "__main__":
    x = jax.random.normal(jax.random.key(0), (1000, 200), jnp.bfloat16)
    w = jnp.ones((200,), jnp.bfloat16)
    print(rmsnorm.plan(x, w))
    err = jnp.max(jnp.abs(rmsnorm(x, w).astype(jnp.float32) - rmsnorm_reference(x, w)))
    print("max abs error:", float(err))
