"""`sk.testing`: probe shapes from the tiling, and kernels checked against their references."""

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from jaxtyping import Array, Float, Int

import statickernel as sk
from add import add
from scale_bias import scale_bias
from softmax import softmax
from statickernel import testing


def sizes(kernel: sk.Kernel) -> dict[str, dict[str, int]]:
    return {p.label: p.sizes for p in sk.testing.probe_shapes(kernel)}


def test_probe_shapes_of_a_kernel_tiled_on_both_dims() -> None:
    assert sizes(add) == {
        "aligned": {"M": 128, "N": 256},
        "ragged M": {"M": 129, "N": 256},
        "ragged N": {"M": 128, "N": 257},
        "smaller than one block": {"M": 33, "N": 65},
    }


def test_probe_shapes_of_a_kernel_with_a_whole_dim() -> None:
    assert sizes(softmax) == {
        "aligned": {"M": 128, "N": 128},
        "ragged M": {"M": 129, "N": 128},
        "ragged N (whole)": {"M": 128, "N": 95},
        "smaller than one block": {"M": 33, "N": 5},
    }


def test_probe_shapes_follow_the_constants() -> None:
    assert sizes(softmax.bind(BM=128))["ragged M"] == {"M": 257, "N": 128}


def test_probe_shapes_keep_whole_dims_inside_shared_memory() -> None:
    @sk.kernel(tile={"M": "BM"})
    def wide(
        x: Float[Array, "M N"], y: Float[Array, "M N"], *, BM: sk.Const[int] = 192
    ) -> Float[Array, "M N"]:
        return sk.load(x) + sk.load(y)

    probes = sk.testing.probe_shapes(wide)
    assert probes[0].sizes["N"] < 128  # 3 blocks of 192 x 128 f32 would not fit
    for case in sk.testing.probe_cases(wide):
        wide.plan(*case.structs())  # every probe plans without a shared-memory error


def test_probe_dtypes_follow_the_annotations() -> None:
    assert sk.testing.probe_dtypes(softmax) == [("float32",), ("bfloat16",)]

    @sk.kernel(tile={"M": "BM"})
    def shift(
        x: Float[Array, "M N"], k: Int[Array, " N"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        return sk.load(x) + sk.load(k).astype(jnp.float32)

    assert sk.testing.probe_dtypes(shift) == [("float32", "int32"), ("bfloat16", "int32")]
    with pytest.raises(ValueError, match="no operand that allows int8"):
        sk.testing.probe_dtypes(softmax, ["int8"])


def test_check_kernel_passes_and_returns_results() -> None:
    results = sk.testing.check_kernel(softmax, shapes=[{"M": 65, "N": 33}], dtypes=["float32"])
    assert len(results) == 1
    (result,) = results
    assert result.passed and result.error is None
    assert result.shapes == ((65, 33),) and result.dtypes == ("float32",)
    assert result.max_abs_error <= result.tolerance == pytest.approx(1e-5)


def test_check_kernel_passes_constants_to_the_reference() -> None:
    """scale_bias_reference takes `scale`: a kernel bound to another scale still matches."""
    tripled = scale_bias.bind(scale=3.0)
    results = sk.testing.check_kernel(tripled, shapes=[[(64, 128), (128,)]], dtypes=["float32"])
    assert results[0].passed


def test_check_kernel_raises_with_a_table() -> None:
    with pytest.raises(AssertionError) as info:
        sk.testing.check_kernel(
            softmax,
            shapes=[{"M": 64, "N": 8}],
            dtypes=["float32"],
            reference=lambda x: jnp.zeros_like(x),
        )
    text = str(info.value)
    assert "kernel `softmax`" in text and "1 of 1 case(s)" in text
    assert "max abs error" in text and "✗" in text


def test_a_raising_case_is_a_failed_result() -> None:
    def broken(x: object) -> object:
        raise RuntimeError("reference exploded")

    results = testing.run_checks(softmax, shapes=[{"M": 64, "N": 8}], reference=broken)
    assert results and not any(r.passed for r in results)
    assert "RuntimeError: reference exploded" in (results[0].error or "")
    assert "reference exploded" in sk.testing.format_results(results)


def test_a_kernel_without_reference_is_refused() -> None:
    @sk.kernel(tile={"M": "BM"})
    def copy(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return sk.load(x)

    with pytest.raises(ValueError, match="declares no reference"):
        sk.testing.check_kernel(copy)


def test_tolerance_by_dtype() -> None:
    assert sk.testing.tolerance(["float32"]) == pytest.approx(1e-5)
    assert sk.testing.tolerance(["float32"], scale=100) == pytest.approx(1e-3)
    assert sk.testing.tolerance(["float32", "bfloat16"]) == pytest.approx(2e-2)
    assert sk.testing.tolerance(["int32"]) == 0.0


def _softmax(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x.astype(jnp.float32), axis=1).astype(x.dtype)


def _wrong_on_last_rows(x: jax.Array) -> jax.Array:
    """Softmax, except on the last 4 rows: wrong only inside the last block along M."""
    want = _softmax(x)
    return want.at[-4:].add(1.0)


def test_a_failure_says_the_mismatches_lie_in_an_edge_block() -> None:
    (result,) = testing.run_checks(
        softmax, shapes=[{"M": 100, "N": 8}], dtypes=["float32"], reference=_wrong_on_last_rows
    )
    assert not result.passed
    assert result.elements == 800 and result.mismatches == 32
    assert result.worst is not None and result.worst.index[0] >= 96
    assert result.worst.result == "result"
    assert result.worst.abs_error == pytest.approx(1.0)
    assert result.placement is testing.Placement.EDGE_BLOCKS
    (block,) = result.edge_blocks
    assert (block.dim, block.start, block.stop, block.mismatches) == ("M", 64, 100, 32)
    text = testing.describe_failure(result)
    assert "32 of 800 elements differ" in text
    assert "all 32 mismatches lie in an edge block: the last block along M (M 64–99)" in text


def test_a_failure_says_the_mismatches_lie_in_interior_blocks_too() -> None:
    with pytest.raises(AssertionError) as info:
        sk.testing.check_kernel(
            softmax,
            shapes=[{"M": 100, "N": 8}],
            dtypes=["float32"],
            reference=lambda x: _softmax(x) + 1.0,
        )
    text = str(info.value)
    assert "800 of 800 elements differ" in text
    assert "interior blocks too" in text and "the last block along M (M 64–99): 288" in text


def test_an_aligned_shape_has_no_edge_block() -> None:
    (result,) = testing.run_checks(
        softmax, shapes=[{"M": 128, "N": 8}], dtypes=["float32"], reference=_wrong_on_last_rows
    )
    assert result.placement is testing.Placement.INTERIOR and result.edge_blocks == ()
    assert "no edge block differs" in testing.describe_failure(result)


def test_explicit_tolerances_replace_the_derived_one() -> None:
    def off_by_a_percent(x: jax.Array) -> jax.Array:
        return _softmax(x) * 1.01

    shape = [{"M": 64, "N": 8}]
    (strict,) = testing.run_checks(softmax, shape, ["float32"], reference=off_by_a_percent)
    assert not strict.passed and strict.tolerance == pytest.approx(1e-5) and strict.rtol == 0
    (loose,) = testing.run_checks(
        softmax, shape, ["float32"], reference=off_by_a_percent, rtol=0.02
    )
    assert loose.passed and loose.tolerance == 0 and loose.rtol == 0.02
    assert "0+0.02·|want|" in sk.testing.format_results([loose])
    sk.testing.check_kernel(softmax, shape, ["float32"], reference=off_by_a_percent, atol=0.05)
    with pytest.raises(AssertionError, match="elements differ"):
        sk.testing.check_kernel(
            softmax, shape, ["float32"], reference=off_by_a_percent, rtol=1e-4, atol=1e-6
        )


def test_the_table_names_every_column() -> None:
    results = testing.run_checks(softmax, shapes=[{"M": 64, "N": 8}], dtypes=["float32"])
    header = sk.testing.format_results(results).splitlines()[0]
    assert header.split()[-1] == "ok"


def test_a_result_of_several_leaves_names_the_worst_one() -> None:
    @sk.kernel(tile={"M": "BM"}, reference=lambda x: (x * 2, x + 1))
    def pair(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64
    ) -> tuple[Float[Array, "M N"], Float[Array, "M N"]]:
        v = sk.load(x)
        return v * 2, v + 1

    def wrong_second(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return x * 2, (x + 1).at[70, 3].add(5.0)

    (result,) = testing.run_checks(
        pair, shapes=[{"M": 80, "N": 8}], dtypes=["float32"], reference=wrong_second
    )
    assert result.mismatches == 1 and result.elements == 2 * 640
    assert result.worst is not None and result.worst.index == (70, 3)
    assert result.worst.result == pair.spec.results[1].name
    assert result.placement is testing.Placement.EDGE_BLOCKS


@sk.testing.parametrize(softmax, dtypes=["float32"])
def test_parametrize_makes_one_item_per_probe_case(case: testing.ProbeCase) -> None:
    result = sk.testing.check_case(softmax, case)
    assert result.passed and result.probe == case.label


def test_parametrize_ids_name_the_probe_and_dtype() -> None:
    ids = [testing.case_id(c) for c in sk.testing.probe_cases(softmax)]
    assert "aligned-float32" in ids and "ragged_M-bfloat16" in ids
    assert "smaller_than_one_block-float32" in ids


def test_check_case_raises_with_the_mismatch() -> None:
    (case,) = sk.testing.probe_cases(softmax, shapes=[{"M": 100, "N": 8}], dtypes=["float32"])
    with pytest.raises(AssertionError, match="an edge block"):
        sk.testing.check_case(softmax, case, reference=_wrong_on_last_rows)


@given(case=sk.testing.cases(scale_bias, max_size=40))
@settings(max_examples=5, deadline=None)
def test_cases_strategy_respects_the_annotations(case: testing.ProbeCase) -> None:
    x_shape, bias_shape = case.shapes
    assert x_shape[1] == bias_shape[0]  # the shared dim N has one size
    assert all(1 <= n <= 40 for s in case.shapes for n in s)
    assert case.dtypes in sk.testing.probe_dtypes(scale_bias)
    sk.testing.check_case(scale_bias, case)
