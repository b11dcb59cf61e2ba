"""An embedding lookup: row `t` of the result is row `ids[t]` of the table, in one kernel.

`index={"V": "ids"}` declares that the table's rows V are addressed by the values of `ids`:
the body sees `table` as a block over `"T D"` whose row t is the table's row `ids[t]`, and
the plan copies those rows one at a time (a TMA copy a row, the id read from global memory
as the copy is issued). An id outside [0, V) reads a row of zeros, as a padding token's
row should: negative ids too (they do not count from the end, as jnp's indexing does).
Gemma scales its embeddings by sqrt(D); `scale` does it in the same pass.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int32

import statickernel as sk


def embedding_reference(table: jax.Array, ids: jax.Array, scale: float = 1.0) -> jax.Array:
    """jnp.take of the rows, with a row of zeros for an id outside [0, V)."""
    inside = (ids >= 0) & (ids < table.shape[0])
    rows = jnp.take(table, jnp.clip(ids, 0, table.shape[0] - 1), axis=0)
    scaled = rows.astype(jnp.float32) * scale
    return jnp.where(inside[:, None], scaled, 0.0).astype(table.dtype)


@sk.kernel(tile={"T": "BT", "D": "BD"}, index={"V": "ids"}, reference=embedding_reference)
def embedding(
    table: Float[Array, "V D"],
    ids: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BD: sk.Const[int] = 256,
    scale: sk.Const[float] = 1.0,
) -> Float[Array, "T D"]:
    """The table's rows at `ids`, times `scale`; zeros where an id is outside the table."""
    return (sk.load(table).astype(jnp.float32) * scale).astype(table.dtype)


if __name__ == "__main__":
    kt, ki = jax.random.split(jax.random.key(0))
    table = jax.random.normal(kt, (32000, 1000), jnp.bfloat16)
    ids = jax.random.randint(ki, (300,), -1, 32000, jnp.int32)  # -1: padding, a row of zeros
    print(embedding.plan(table, ids, scale=1000**0.5))
    got = embedding(table, ids, scale=1000**0.5).astype(jnp.float32)
    want = embedding_reference(table, ids, 1000**0.5).astype(jnp.float32)
    print("max abs error:", float(jnp.max(jnp.abs(got - want))))
