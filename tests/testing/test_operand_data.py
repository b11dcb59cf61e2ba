"""Operand generators in the checks: the named operands drawn by the user's functions (seeded,
of the case's shape, cast to its dtype), so that a kernel whose data have a meaning is
checked where that meaning matters; and the refusals."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Int32

import statickernel as sk
from statickernel.testing.data import Draw


def prefix_sum_reference(x: jax.Array, lengths: jax.Array) -> jax.Array:
    cols = jnp.arange(x.shape[1])[None, :]
    return jnp.where(cols < lengths[:, None], x, 0.0).sum(axis=1)


@sk.kernel(tile={"M": "BM"}, reference=prefix_sum_reference)
def prefix_sum(
    x: Float[Array, "M N"], lengths: Int32[Array, " M"], *, BM: sk.Const[int] = 64
) -> Float[Array, " M"]:
    """Each row's sum over its first lengths[m] columns."""
    keep = sk.position("N") < sk.load(lengths)[:, None]
    return jnp.sum(jnp.where(keep, sk.load(x), 0.0), axis=1)


def _lengths(d: Draw) -> Any:
    return d.rng.integers(0, d.sizes["N"] + 1, d.shape)


def test_the_named_operand_is_drawn_by_its_generator() -> None:
    seen: list[Draw] = []

    def lengths(d: Draw) -> Any:
        seen.append(d)
        return _lengths(d)

    results = sk.testing.check_kernel(
        prefix_sum, [{"M": 130, "N": 100}], ["float32"], operands={"lengths": lengths}
    )
    assert all(r.passed for r in results)
    (draw,) = seen
    assert draw.name == "lengths" and draw.shape == (130,) and draw.sizes == {"M": 130, "N": 100}
    assert draw.dtype == np.dtype("int32")


def test_the_draws_are_seeded_and_inside_the_rows() -> None:
    case = sk.testing.probe_cases(prefix_sum, [{"M": 200, "N": 50}], ["float32"])[0]
    args = sk.testing.random_operands(case, 3)
    drawn = sk.testing.data.drawn_operands(prefix_sum.spec, args, {"lengths": _lengths}, 3)
    again = sk.testing.data.drawn_operands(prefix_sum.spec, args, {"lengths": _lengths}, 3)
    lengths = np.asarray(drawn[1])
    assert drawn[1].dtype == jnp.int32 and np.array_equal(lengths, np.asarray(again[1]))
    assert lengths.min() >= 0 and lengths.max() <= 50 and len(set(lengths.tolist())) > 10
    assert drawn[0] is args[0]  # the other operands keep the default data
    # The default data's lengths are mostly negative: most rows would check nothing.
    assert (np.asarray(args[1]) <= 0).mean() > 0.9


@pytest.mark.parametrize(
    ("operands", "match"),
    [
        ({"lengthz": _lengths}, "has no operand 'lengthz'; its operands: x, lengths"),
        ({"lengths": 5}, "give a function of a Draw"),
    ],
)
def test_a_generator_of_no_operand_is_refused(operands: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sk.testing.check_kernel(prefix_sum, [{"M": 8, "N": 8}], ["float32"], operands=operands)


def test_a_generator_of_the_wrong_shape_fails_its_case() -> None:
    (result,) = sk.testing.run_checks(
        prefix_sum,
        [{"M": 8, "N": 8}],
        ["float32"],
        operands={"lengths": lambda d: np.zeros((3,))},
    )
    assert not result.passed and "returned shape (3,), not the case's (8,)" in (result.error or "")
