"""Casts every target writes the same way, in lax ops: fp8's saturating conversion."""

from .nodes import DType, Expr, Literal, call

__all__ = ["FP8_MAX", "to_fp8"]

FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def to_fp8(value: Expr, dtype: str, source: str | None) -> Expr:
    """A saturating cast of `value` (of dtype `source`; None if unknown) to the fp8 `dtype`:
    in float32, clipped to the format's largest finite magnitude (infinities too; NaN stays
    NaN), then rounded to nearest even. Hopper's conversion (`cvt.rn.satfinite`) saturates,
    and XLA's does not (465 becomes NaN in e4m3fn): the clip makes the interpreter, and the
    wrapper's XLA ops, give what the hardware does. Every source goes through float32, which
    converts to fp8 on any ptxas."""
    if source != "float32":
        value = call("lax.convert_element_type", value, DType("float32"))
    bound = FP8_MAX[dtype]
    low = Literal(-bound, "float32", weak_type=True)
    high = Literal(bound, "float32", weak_type=True)
    clipped = call("lax.clamp", low, value, high)
    return call("lax.convert_element_type", clipped, DType(dtype))
