"""`sk.testing`: probe shapes from the tiling, and kernels checked against their references."""

import jax.numpy as jnp
import pytest
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
