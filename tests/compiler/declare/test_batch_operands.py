"""Operands that carry part of the batch dims, declared as GroupNorm's and ALiBi's are: the
refusal says what a grid step indexes, and its fix is a call that runs as written. Each fix
is evaluated here, the kernel annotated as it says, and compared with jnp."""

import re
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from markers import line_finder

line_of = line_finder(__file__)
_BROADCAST = re.compile(r"jnp\.broadcast_to\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")
SIZES = {"B": 2, "G": 3, "M": 70, "D": 24}


def _group_scale(w_dims: str) -> Any:
    def group_scale(  # @group-scale
        x: Float[Array, "B G M D"], w: Float[Array, w_dims], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "B G M D"]:
        return sk.load(x) * sk.load(w)

    return sk.kernel(tile={"M": "BM"}, batch=("B", "G"), backend="interpret")(group_scale)


def _fixed_call(fix: str, w: Any) -> Any:
    (call,) = _BROADCAST.findall(fix)
    return eval(call, {"jnp": jnp, "w": w, **SIZES})


def test_the_fix_for_a_per_group_weight_runs() -> None:
    """Before, "move G to the front" for a `w` whose G already leads: it did not apply. The
    fix broadcasts it over B, a scalar of each grid step."""
    w_dims = "G"
    with pytest.raises(sk.AnnotationError) as info:
        _group_scale(w_dims)
    error = info.value
    assert "carries the batch dim G but not B before it" in error.what
    assert error.operand == "w"
    assert error.where is not None and error.where.endswith(f":{line_of('group-scale')}")
    assert "front" not in str(error.fix) and "reshape" not in str(error.fix)
    (annotated,) = re.findall(r"annotate it '([^']*)'", str(error.fix))
    assert annotated == "B G"

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal([SIZES[d] for d in "BGMD"]), jnp.float32)
    w = jnp.asarray(rng.standard_normal([SIZES[d] for d in w_dims.split()]), jnp.float32)
    fixed = _group_scale(annotated)
    got = fixed(x, _fixed_call(str(error.fix), w))
    np.testing.assert_allclose(got, x * w[None, :, None, None], rtol=0, atol=0)


def test_a_scalar_per_batch_entry_is_an_operand() -> None:
    """`w: "B G"` under batch=("B", "G"): 0-d after its batch dims, read by each grid step
    from global memory (before, it was refused)."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal([SIZES[d] for d in "BGMD"]), jnp.float32)
    w = jnp.asarray(rng.standard_normal([SIZES["B"], SIZES["G"]]), jnp.float32)
    got = _group_scale("B G")(x, w)
    np.testing.assert_allclose(got, x * w[:, :, None, None], rtol=0, atol=0)
