"""Test data a kernel declares (`@sk.kernel(test_data=...)`), draws that see the operands
drawn before them and the constants, the coverage a case reports, and the default
tolerance of a kernel with products (the plan's numerics)."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Float32, Int32

import statickernel as sk
from matmul import matmul
from statickernel.testing.compare import compare, product_tolerance, tolerance
from statickernel.testing.data import Draw


def masked_sum_reference(x: jax.Array, lengths: jax.Array, scale: float = 1.0) -> jax.Array:
    cols = jnp.arange(x.shape[1])[None, :]
    return jnp.where(cols < lengths[:, None], x, 0.0).sum(axis=1) * scale


def _lengths(d: Draw) -> Any:
    return d.rng.integers(1, d.sizes["N"] + 1, d.shape)


@sk.kernel(tile={"M": "BM"}, reference=masked_sum_reference, test_data={"lengths": _lengths})
def masked_sum(
    x: Float[Array, "M N"],
    lengths: Int32[Array, " M"],
    *,
    BM: sk.Const[int] = 64,
    scale: sk.Const[float] = 1.0,
) -> Float[Array, " M"]:
    keep = sk.position("N") < sk.load(lengths)[:, None]
    return jnp.sum(jnp.where(keep, sk.load(x), 0.0), axis=1) * scale


def test_the_kernels_generators_draw_its_operands_in_every_check() -> None:
    assert [name for name, _ in masked_sum.spec.test_data] == ["lengths"]
    results = sk.testing.check_kernel(masked_sum, [{"M": 70, "N": 40}], ["float32"])
    assert all(r.passed for r in results)
    # Lengths inside the rows: every row sums something.
    assert results[0].coverage == 1.0


def test_a_checks_own_generator_replaces_the_kernels() -> None:
    (result,) = sk.testing.run_checks(
        masked_sum,
        [{"M": 70, "N": 40}],
        ["float32"],
        operands={"lengths": lambda d: np.zeros(d.shape)},
    )
    # No row keeps a column: all zeros, reported as testing little.
    assert result.passed and result.coverage == 0.0
    table = sk.testing.format_results([result])
    assert table.splitlines()[-1].startswith("! masked_sum, ")
    assert "only 0.00% of the reference's 70 elements are finite and nonzero" in table
    assert "@sk.kernel(test_data=...)" in table


def test_a_draw_sees_the_operands_before_it_and_the_constants() -> None:
    seen: list[Draw] = []

    def lengths(d: Draw) -> Any:
        seen.append(d)
        # The lengths of the rows whose first element is positive are the whole row.
        return np.where(np.asarray(d.operands["x"])[:, 0] > 0, d.sizes["N"], 1)

    results = sk.testing.check_kernel(
        masked_sum.bind(scale=2.0),
        [{"M": 30, "N": 20}],
        ["float32"],
        operands={"lengths": lengths},
    )
    assert all(r.passed for r in results)
    draw = seen[0]
    assert set(draw.operands) == {"x", "lengths"} and draw.consts["scale"] == 2.0


@pytest.mark.parametrize(
    ("test_data", "match"),
    [
        ({"lengthz": _lengths}, "test_data= names 'lengthz', which is not an operand"),
        ({"lengths": 3}, "test_data= gives operand `lengths` a int, not a generator"),
        ([_lengths], "test_data= is not a mapping"),
    ],
)
def test_bad_test_data_is_refused_at_the_declaration(test_data: Any, match: str) -> None:
    with pytest.raises(sk.AnnotationError, match=match) as caught:

        @sk.kernel(tile={"M": "BM"}, test_data=test_data)
        def bad(
            x: Float[Array, "M N"], lengths: Int32[Array, " M"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, " M"]:
            return jnp.sum(sk.load(x), axis=1)

    assert caught.value.fix


# --- the default tolerance of products --------------------------------------------------------


def _plan(kernel: Any, *shapes: tuple[tuple[int, ...], Any], **consts: Any) -> Any:
    args = [jax.ShapeDtypeStruct(s, d) for s, d in shapes]
    return kernel.plan(*args, **consts)


def test_a_bf16_matmul_is_held_to_its_float32_results_tolerance() -> None:
    plan = _plan(matmul, ((100, 4096), jnp.bfloat16), ((4096, 60), jnp.bfloat16))
    # The accumulation rounds to float32; nothing is rounded to bfloat16.
    assert plan.numerics.contraction == 4096 and plan.numerics.rounds_to == ("float32",)
    # 2**-22 * sqrt(4096) = 1.5e-5 relative, above float32's 1e-5.
    atol = product_tolerance(plan.numerics, ["float32"], 100.0)
    assert atol == pytest.approx(2.0**-22 * 64 * 100)
    rounded = _plan(matmul, ((100, 4096), jnp.bfloat16), ((4096, 60), jnp.bfloat16), bf16_out=True)
    assert rounded.numerics.rounds_to == ("bfloat16", "float32")
    assert product_tolerance(rounded.numerics, ["bfloat16"], 1.0) == pytest.approx(2e-2)


def f32_product_reference(a: jax.Array, bt: jax.Array) -> jax.Array:
    return jnp.dot(a, bt.T, precision=jax.lax.Precision.HIGHEST)


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, reference=f32_product_reference)
def f32_product(
    a: Float32[Array, "M K"],
    bt: Float32[Array, "N K"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
    BK: sk.Const[int] = 32,
) -> Float32[Array, "M N"]:
    return sk.loop("K", lambda acc: acc + sk.dot(a, bt), init=jnp.zeros((BM, BN), jnp.float32))


def test_a_product_of_float32_blocks_is_tf32s() -> None:
    plan = _plan(f32_product, ((64, 96), jnp.float32), ((64, 96), jnp.float32))
    assert plan.numerics.rounds_to == ("tf32", "float32")
    assert product_tolerance(plan.numerics, ["float32"], 1.0) == 5e-3


@pytest.mark.parametrize("k", [1, 129, 4096])
def test_the_product_tolerance_catches_a_dropped_step_and_passes_the_kernel(k: int) -> None:
    ka, kb = jax.random.split(jax.random.key(k))
    a = jax.random.normal(ka, (70, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, 90), jnp.bfloat16)
    plan = matmul.plan(a, b)
    want = jnp.dot(a, b, preferred_element_type=jnp.float32)
    found = compare(matmul(a, b), want, plan, ["bfloat16"] * 2)
    assert found.mismatches == 0 and found.informative == want.size
    # The product without its last column of K: each element off by one term, about 1, which
    # the operands' bf16 tolerance (2e-2 x max|want|) would let pass at large K.
    short = jnp.dot(a[:, :-1], b[:-1], preferred_element_type=jnp.float32)
    assert compare(short, want, plan, ["bfloat16"] * 2).mismatches > 0


def test_an_operand_in_bfloat16_does_not_loosen_a_kernel_without_products() -> None:
    # The rule for kernels without products is unchanged: the operands' dtypes count.
    assert tolerance(["bfloat16", "float32"]) == 2e-2
