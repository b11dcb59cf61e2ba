"""Which dtypes an operand's or a result's annotation allows: those of its jaxtyping dtype
that Mosaic GPU supports, with the fp8 dtypes only for an array annotated with fp8 alone."""

from typing import Any

from ... import _dtypes as hw
from ..._compat import annotation_dtypes
from ..._errors import AnnotationError
from .operand import OperandSpec

__all__ = ["allowed_dtypes", "check_packed_operands"]


def allowed_dtypes(name: str, hint: Any, err: dict[str, Any], role: str) -> tuple[str, ...]:
    """The dtypes of an annotation that statickernel supports; `Shaped` allows all of them.
    The fp8 dtypes count only for an array annotated with fp8 alone (`Float8e4m3fn`): an
    operand of them only `sk.dot` reads, a result of them the body casts to (a saturating
    cast); `Float` and `Shaped` keep the dtypes a body can load. So for int4 and uint4
    (`Int4`, `UInt4`): an operand the body only converts (a quantized weight)."""
    dtypes = annotation_dtypes(hint)
    narrow = (*hw.DOT_ONLY_DTYPES, *hw.SUB_BYTE_DTYPES)
    general = tuple(d for d in hw.SUPPORTED_DTYPES if d not in narrow)
    if dtypes is None:
        return general
    allowed = tuple(d for d in general if d in dtypes)
    if allowed:
        return allowed
    dot_only = tuple(d for d in hw.DOT_ONLY_DTYPES if d in dtypes)
    if dot_only:
        return dot_only
    packed = tuple(d for d in hw.SUB_BYTE_DTYPES if d in dtypes)
    if packed and role == "result":
        raise AnnotationError(
            f"result `{name}` is {' or '.join(packed)}, which the body cannot store",
            **err,
            operand=name,
            expected="a result of 8 bits or more (int8, uint8, fp8 and wider)",
            actual=", ".join(packed),
            fix="return int8 (values -8..7 fit) and cast it with .astype(jnp.int4) outside the "
            "kernel",
        )
    if packed:
        return packed
    shown = ", ".join(str(d) for d in dtypes)
    if any(str(d).startswith("float8") for d in dtypes):
        raise AnnotationError(
            f"{role} `{name}` allows only fp8 dtypes that WGMMA does not multiply",
            **err,
            operand=name,
            expected="float8_e4m3fn or float8_e5m2 (Float8e4m3fn, Float8e5m2)",
            actual=shown,
            fix="annotate it Float8e4m3fn or Float8e5m2 and cast outside the kernel, "
            "x.astype(jnp.float8_e4m3fn)",
        )
    raise AnnotationError(
        f"{role} `{name}` allows no dtype that Mosaic GPU supports",
        **err,
        operand=name,
        expected=f"one of {', '.join(hw.SUPPORTED_DTYPES)}",
        actual=shown,
        fix="use Float, Float32, BFloat16, Float16, Int or Int32 (float64 and bool are not "
        "supported by Mosaic GPU)",
    )


def check_packed_operands(operands: list[OperandSpec], err: dict[str, Any]) -> None:
    """A 4-bit operand is a 2-D block (a quantized weight): Mosaic GPU loads no 4-bit vector
    (a 1-D int4 load fails in its lowering)."""
    for op in operands:
        if not op.dtypes or any(d not in hw.SUB_BYTE_DTYPES for d in op.dtypes):
            continue
        if len(op.block_dims) == 2:
            continue
        raise AnnotationError(
            f"operand `{op.name}` is {' or '.join(op.dtypes)} with {len(op.block_dims)} dim(s) "
            "in its blocks; a 4-bit operand is a 2-D block",
            **err,
            operand=op.name,
            expected="a 2-D 4-bit operand (a quantized weight 'N K')",
            actual=f"'{' '.join(op.dims)}'",
            fix=f"pass `{op.name}` as int8 (or uint8): its values fit, and a vector is small",
        )
