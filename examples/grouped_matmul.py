"""A grouped matmul (mixture-of-experts): rows of x sorted by group, each group's rows
multiplied by its own weight, as `jax.lax.ragged_dot` computes it.

`ragged={"M": "group_sizes"}` declares that the rows of M are split into consecutive groups,
`group_sizes[g]` rows in group g, and that `w: "G K N"` holds one weight a group: the body
sees `w` as group g's block "K N" wherever its rows are group g's. The launch is the
warp-specialized, persistent matmul's; its CTAs walk (group, row block) items, so a row
block that straddles two groups is computed once for each, each storing only its group's
rows (TMA stores of 2^i rows). A row past the sum of the sizes is in no group and is zeros,
as in `jax.lax.ragged_dot`; a negative size counts as 0, and sizes past M are cut there.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, BFloat16, Float, Int32

import statickernel as sk


def grouped_matmul_reference(
    x: jax.Array, w: jax.Array, group_sizes: jax.Array, bf16_out: bool = False
) -> jax.Array:
    """`jax.lax.ragged_dot` in float32, a negative size counted as 0."""
    sizes = jnp.maximum(group_sizes, 0).astype(jnp.int32)
    product = jax.lax.ragged_dot(x, w, sizes, preferred_element_type=jnp.float32)
    return product.astype(jnp.bfloat16) if bf16_out else product


@sk.kernel(
    tile={"M": "BM", "N": "BN"},
    loop={"K": "BK"},
    ragged={"M": "group_sizes"},
    reference=grouped_matmul_reference,
)
def grouped_matmul(
    x: BFloat16[Array, "M K"],
    w: BFloat16[Array, "G K N"],
    group_sizes: Int32[Array, " G"],
    *,
    BM: sk.Const[int] = 128,
    BN: sk.Const[int] = 128,
    BK: sk.Const[int] = 64,
    stages: sk.Const[int | None] = None,
    bf16_out: sk.Const[bool] = False,
) -> Float[Array, "M N"]:
    # Each step multiplies a (BM, BK) block of x's rows by the (BK, BN) block of their
    # group's weight; K past its edge reads zeros.
    acc = sk.loop("K", lambda acc: acc + sk.dot(x, w), init=jnp.zeros((BM, BN), jnp.float32))
    return acc.astype(jnp.bfloat16) if bf16_out else acc


if __name__ == "__main__":
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (300, 200), jnp.bfloat16)
    w = jax.random.normal(kw, (4, 200, 260), jnp.bfloat16)
    group_sizes = jnp.array([90, 0, 137, 73], jnp.int32)
    print(grouped_matmul.plan(x, w, group_sizes))
    got = grouped_matmul(x, w, group_sizes)
    err = jnp.max(jnp.abs(got - grouped_matmul_reference(x, w, group_sizes)))
    print("max abs error:", float(err))
