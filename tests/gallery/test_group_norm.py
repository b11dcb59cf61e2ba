"""The group norm of the gallery (examples/group_norm.py) against jnp: its normalized x and
each group's mean and rstd (one value a grid step), at groups of one channel, prime channel
and position counts, one sample, one group, and in torch's (N, C, H, W) layout against a
group norm computed there; cross-lowered for Mosaic GPU."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest

from group_norm import group_norm, group_norm_nchw, group_norm_reference
from tolerances import assert_close, tolerance_for

F32 = jnp.dtype(jnp.float32)
BF16 = jnp.dtype(jnp.bfloat16)

# (B, G, C, L): samples, groups, channels a group, positions.
SHAPES = {
    "one-channel-groups": (2, 5, 1, 9),
    "prime-channels": (1, 3, 7, 13),
    "one-sample-one-group": (1, 1, 13, 1),
    "one-element": (1, 1, 1, 1),
    "rows-past-a-block": (2, 2, 67, 31),
    "two-boxes-of-positions": (1, 2, 3, 300),
}


def _operands(
    shape: tuple[int, int, int, int], dtype: Any, seed: int = 0
) -> tuple[jax.Array, jax.Array, jax.Array]:
    kx, kw, kb = jax.random.split(jax.random.key(seed), 3)
    # A mean far from zero: zeros past the edge counted in would shift the mean and the rstd.
    x = (3 * jax.random.normal(kx, shape, jnp.float32) + 2).astype(dtype)
    weight = (1 + 0.1 * jax.random.normal(kw, shape[1:3], jnp.float32)).astype(dtype)
    bias = jax.random.normal(kb, shape[1:3], jnp.float32).astype(dtype)
    return x, weight, bias


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_group_norm_and_its_statistics_match_the_reference(
    shape: tuple[int, int, int, int], dtype: Any
) -> None:
    args = _operands(shape, dtype)
    y, mean, rstd = group_norm(*args)
    want_y, want_mean, want_rstd = group_norm_reference(*args)
    assert y.shape == shape and y.dtype == dtype
    assert mean.shape == rstd.shape == shape[:2] and mean.dtype == rstd.dtype == F32
    terms = shape[2] * shape[3]
    assert_close(mean, want_mean, tolerance_for(F32, terms=terms))
    assert_close(rstd, want_rstd, tolerance_for(F32, terms=terms))
    assert_close(y, want_y, tolerance_for(dtype, terms=terms))


@pytest.mark.parametrize(
    ("n", "channels", "groups", "spatial"), [(2, 6, 3, (5, 3)), (1, 7, 7, (4,))]
)
def test_torch_layout_matches_a_group_norm_computed_there(
    n: int, channels: int, groups: int, spatial: tuple[int, ...]
) -> None:
    """An independent oracle: jnp on (N, C, *spatial), each group's channels sliced out."""
    kx, kw, kb = jax.random.split(jax.random.key(1), 3)
    x = 2 * jax.random.normal(kx, (n, channels, *spatial), jnp.float32) - 1
    weight = jax.random.normal(kw, (channels,), jnp.float32)
    bias = jax.random.normal(kb, (channels,), jnp.float32)
    y, mean, rstd = group_norm_nchw(x, weight, bias, groups=groups)
    per = channels // groups
    ys, means, rstds = [], [], []
    for g in range(groups):
        part = x[:, g * per : (g + 1) * per]
        axes = tuple(range(1, part.ndim))
        m = jnp.mean(part, axis=axes, keepdims=True)
        r = 1 / jnp.sqrt(jnp.var(part, axis=axes, keepdims=True) + 1e-5)
        ys.append((part - m) * r)
        means.append(m.reshape(n))
        rstds.append(r.reshape(n))
    expand = (None, slice(None), *([None] * len(spatial)))
    want = jnp.concatenate(ys, axis=1) * weight[expand] + bias[expand]
    terms = per * int(jnp.prod(jnp.array(spatial)))
    assert_close(mean, jnp.stack(means, axis=1), tolerance_for(F32, terms=terms))
    assert_close(rstd, jnp.stack(rstds, axis=1), tolerance_for(F32, terms=terms))
    assert_close(y, want, tolerance_for(F32, terms=terms))


def test_the_plan_writes_the_statistics_from_registers() -> None:
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in _operands((2, 3, 7, 13), F32)]
    text = str(group_norm.plan(*structs))
    assert "grid: (2, 3) over (B, G)" in text
    assert "result1: float32[2, 3]  block []  its element written from registers" in text


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_group_norm_cross_lowers_for_the_gpu(dtype: Any) -> None:
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in _operands((2, 3, 7, 13), dtype)]
    assert "mosaic_gpu" in group_norm.lower(*structs).as_text()
