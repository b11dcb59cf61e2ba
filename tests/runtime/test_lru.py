"""The bounded specialization cache: least recently used first out, the bound from
STATICKERNEL_SPECIALIZATIONS, and a dropped specialization rebuilt when its shapes return."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from statickernel._compiler.mosaic_gpu.plan import schedule
from statickernel.runtime.lru import DEFAULT_SIZE, LruCache, configured_size


def test_the_least_recently_used_entry_leaves_first() -> None:
    cache: LruCache[str] = LruCache(2)
    cache["a"], cache["b"] = "A", "B"
    assert cache.get("a") == "A"  # a is now the most recent
    cache["c"] = "C"
    assert "b" not in cache and "a" in cache and "c" in cache and len(cache) == 2
    cache["c"] = "C2"  # rewriting an entry keeps the count
    assert len(cache) == 2 and cache.get("c") == "C2"


@pytest.mark.parametrize(
    ("value", "size"), [(None, DEFAULT_SIZE), ("8", 8), ("0", DEFAULT_SIZE), ("x", DEFAULT_SIZE)]
)
def test_the_bound_comes_from_the_environment(
    value: str | None, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv("STATICKERNEL_SPECIALIZATIONS", raising=False)
    else:
        monkeypatch.setenv("STATICKERNEL_SPECIALIZATIONS", value)
    assert configured_size() == size


def test_a_kernel_keeps_its_most_recent_specializations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATICKERNEL_SPECIALIZATIONS", "2")

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def double(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return sk.load(x) * 2

    xs = [jnp.full((rows, 8), rows, jnp.float32) for rows in (3, 5, 7)]
    for x in xs:
        double(x)
    assert len(double._cache) == 2 and len(double._by_consts) == 2

    def key(x: jax.Array) -> object:  # shapes, overrides, the backend, target named, SMs, tunings
        return (((x.shape, x.dtype),), (), ("interpret", None, schedule.sm_count(), 0))

    assert key(xs[0]) not in double._cache
    assert key(xs[1]) in double._cache and key(xs[2]) in double._cache
    # The first shapes come back: rebuilt, and right.
    np.testing.assert_array_equal(np.asarray(double(xs[0])), np.asarray(xs[0]) * 2)
    assert (
        len(double._cache) == 2 and key(xs[0]) in double._cache and key(xs[1]) not in double._cache
    )
