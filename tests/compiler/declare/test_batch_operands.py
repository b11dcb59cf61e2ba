"""Operands that carry part of the batch dims, declared as GroupNorm's and ALiBi's are: read
at their entry of the batch dims they have, against jnp."""

from typing import Any

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

import statickernel as sk

SIZES = {"B": 2, "G": 3, "M": 70, "D": 24}


def _group_scale(w_dims: str) -> Any:
    def group_scale(
        x: Float[Array, "B G M D"], w: Float[Array, w_dims], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "B G M D"]:
        return sk.load(x) * sk.load(w)

    return sk.kernel(tile={"M": "BM"}, batch=("B", "G"), backend="interpret")(group_scale)


def test_a_per_group_weight_is_an_operand() -> None:
    """`w: "G"` under batch=("B", "G"): the batch dims it has lead it, so each grid step
    reads its entry of G, shared by every B (before, it was refused with a fix broadcasting
    it over B)."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal([SIZES[d] for d in "BGMD"]), jnp.float32)
    w = jnp.asarray(rng.standard_normal([SIZES["G"]]), jnp.float32)
    got = _group_scale("G")(x, w)
    np.testing.assert_allclose(got, x * w[None, :, None, None], rtol=0, atol=0)


def test_a_scalar_per_batch_entry_is_an_operand() -> None:
    """`w: "B G"` under batch=("B", "G"): 0-d after its batch dims, read by each grid step
    from global memory (before, it was refused)."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal([SIZES[d] for d in "BGMD"]), jnp.float32)
    w = jnp.asarray(rng.standard_normal([SIZES["B"], SIZES["G"]]), jnp.float32)
    got = _group_scale("B G")(x, w)
    np.testing.assert_allclose(got, x * w[:, :, None, None], rtol=0, atol=0)
