"""A KV-cache update, as vLLM's `reshape_and_cache` does it: each new token's keys (or
values) are written into the cache's slot that `slot_mapping` gives, in place.

The cache is laid out `(Slots, Hkv, D)`: a slot is one token's row of every KV head. Rows are
what the kernel moves, so `kv_cache_update` views the cache as `(Slots, Hkv * D)` (a free
reshape) and calls `kv_cache_rows`, whose result updates `cache` in place (`update="cache"`)
and whose rows are scattered by `slot_mapping` (`index={"Slots": "slot_mapping"}`): row t of
`new` goes to row `slot_mapping[t]`, by a copy of its own. A slot of -1 (a padding token's)
or past the cache's end is skipped, and the cache's other rows are never read nor written:
under `jax.jit` with the cache donated, the update moves only the new rows.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int32

import statickernel as sk


def kv_cache_rows_reference(cache: jax.Array, new: jax.Array, slot_mapping: jax.Array) -> jax.Array:
    """`cache.at[slot_mapping].set(new)`, the rows whose slot is outside the cache dropped."""
    inside = (slot_mapping >= 0) & (slot_mapping < cache.shape[0])
    slots = jnp.where(inside, slot_mapping, cache.shape[0])
    return cache.at[slots].set(new.astype(cache.dtype), mode="drop")


@sk.kernel(
    tile={"T": "BT", "E": "BE"},
    index={"Slots": "slot_mapping"},
    update="cache",
    reference=kv_cache_rows_reference,
)
def kv_cache_rows(
    cache: Float[Array, "Slots E"],
    new: Float[Array, "T E"],
    slot_mapping: Int32[Array, " T"],
    *,
    BT: sk.Const[int] = 64,
    BE: sk.Const[int] = 256,
) -> Float[Array, "Slots E"]:
    """The cache with row t of `new` written at row `slot_mapping[t]`, in place."""
    return sk.load(new).astype(cache.dtype)


def kv_cache_update(cache: jax.Array, new: jax.Array, slot_mapping: jax.Array) -> jax.Array:
    """`cache` (Slots, Hkv, D) with `new` (T, Hkv, D) written at the slots, in place."""
    slots, heads, dim = cache.shape
    rows = kv_cache_rows(
        cache.reshape(slots, heads * dim), new.reshape(new.shape[0], heads * dim), slot_mapping
    )
    return rows.reshape(slots, heads, dim)


if __name__ == "__main__":
    kc, kn, ks = jax.random.split(jax.random.key(0), 3)
    cache = jax.random.normal(kc, (4096, 8, 128), jnp.bfloat16)
    new = jax.random.normal(kn, (100, 8, 128), jnp.bfloat16)
    slot_mapping = jax.random.permutation(ks, 4096)[:100].astype(jnp.int32).at[7].set(-1)
    print(kv_cache_rows.plan(cache.reshape(4096, -1), new.reshape(100, -1), slot_mapping))
    want = kv_cache_rows_reference(cache.reshape(4096, -1), new.reshape(100, -1), slot_mapping)
    update = jax.jit(kv_cache_update, donate_argnums=0)
    got = update(cache, new, slot_mapping)  # `cache` is donated: do not use it after this
    print("equal:", bool(jnp.all(got.reshape(4096, -1) == want)))
