"""The remainder of floats (`x % y`, `jnp.remainder`, `jnp.fmod`, `lax.rem`), exact.

Mosaic GPU has no float remainder, and the composite it suggests, x - y * trunc(x / y), is
not exact: x / y rounds, and a quotient one off leaves a value that can need a bit more than
the format holds. fmod's result is always representable, so it is computed exactly from the
operands' bits, in int32 (jax's `rem` is fmod, with x's sign; `jnp.remainder` adds y where
the signs differ, in the ops around it):

- |x| = mx * 2**ex and |y| = my * 2**ey with integer significands below 2**24 (a subnormal's
  exponent read as the smallest normal's);
- |x| mod |y| = ((mx * 2**(ex - ey)) mod my) * 2**ey: the significands' remainder, then, as in
  long division, 7 bits of the exponent difference a step, `r = (r << 7) % my`, which stays
  below 2**31; float32's exponents differ by at most 253, so 37 steps take any pair (a step
  past the difference shifts by 0 and changes nothing);
- the remainder's bits rebuilt from r and ey with integer ops (normal or subnormal), x's sign
  set; no float arithmetic rounds, and no subnormal is flushed.

x infinite or NaN, y zero or NaN give NaN; |x| < |y| (y infinite among them) gives x. A 16-bit
float is computed in float32 and cast back, exactly: its remainder fits it too.
"""

from ...ir.names import value_part
from ...ir.nodes import (
    BinOp,
    DType,
    Expr,
    FunctionDef,
    Kind,
    Literal,
    Name,
    Operator,
    Return,
)
from ...ir.nodes import call as ir_call
from ...trace.body import Eqn
from .context import CompositeLocals, Translator

__all__ = ["exact_float_remainder"]

_STEPS = 37  # ceil(253 / 7): the widest exponent difference of float32, 7 bits a step
_BITS = 7  # r < 2**24 shifted by 7 stays below 2**31


def _int(value: int) -> Literal:
    return Literal(value, "int32", weak_type=False)


def _op(op: Operator, left: Expr, right: Expr) -> Expr:
    return BinOp(op, left, right)


def _and(x: Expr, mask: int) -> Expr:
    return ir_call("lax.bitwise_and", x, _int(mask))


def _shr(x: Expr, bits: int) -> Expr:
    return ir_call("lax.shift_right_logical", x, _int(bits))


def _max(x: Expr, y: Expr) -> Expr:
    return ir_call("lax.max", x, y)


def _clip(x: Expr, low: int, high: int) -> Expr:
    return ir_call("lax.clamp", _int(low), x, _int(high))


def _ge(x: Expr, y: Expr) -> Expr:
    return ir_call("lax.ge", x, y)


def _or(x: Expr, y: Expr) -> Expr:
    return ir_call("lax.bitwise_or", x, y)


def _where(mask: Expr, value: Expr, other: Expr) -> Expr:
    return ir_call("jnp.where", mask, value, other)


def _significand(w: CompositeLocals, magnitude: Name, part: str) -> tuple[Name, Name]:
    """A magnitude's significand (the implicit bit set where it is normal) and exponent (1 for
    a subnormal, as for the smallest normal)."""
    exponent = w.local(f"{part}_exp", _max(_shr(magnitude, 23), _int(1)))
    implicit = _where(_ge(magnitude, _int(1 << 23)), _int(1 << 23), _int(0))
    significand = w.local(f"{part}_sig", _or(_and(magnitude, (1 << 23) - 1), implicit))
    return significand, exponent


def _long_division(w: CompositeLocals, mx: Name, my: Name, difference: Name) -> Name:
    """(mx * 2**difference) mod my, 7 bits of the difference a step, in a loop."""
    step, index, r = value_part(w.out, "step"), "i", "r"
    shift = _clip(
        _op(Operator.SUB, difference, _op(Operator.MUL, Name(index), _int(_BITS))), 0, _BITS
    )
    shifted = ir_call("lax.shift_left", Name(r), shift)
    w.tr.lines.append(FunctionDef(step, (index, r), (Return(ir_call("lax.rem", shifted, my)),)))
    first = ir_call("lax.rem", mx, my)
    return w.local("r", ir_call("lax.fori_loop", _int(0), _int(_STEPS), Name(step), first))


def _bits_of(w: CompositeLocals, r: Name, ey: Name) -> Expr:
    """The bits of r * 2**(ey - 150), exact: a normal float's exponent field and r's own
    mantissa (read from r as a float, exact below 2**24), or a subnormal's significand."""
    as_float = ir_call("lax.convert_element_type", r, DType("float32"))
    r_bits = w.local("r_bits", ir_call("lax.bitcast_convert_type", as_float, DType("int32")))
    exponent = w.local(
        "out_exp", _op(Operator.SUB, _op(Operator.ADD, _shr(r_bits, 23), ey), _int(150))
    )
    field = ir_call("lax.shift_left", _clip(exponent, 1, 254), _int(23))
    normal = w.local("normal", _or(_and(r_bits, (1 << 23) - 1), field))
    subnormal = w.local(
        "subnormal", ir_call("lax.shift_left", r, _clip(_op(Operator.SUB, ey, _int(1)), 0, 23))
    )
    magnitude = w.local("magnitude", _where(_ge(exponent, _int(1)), normal, subnormal))
    return _where(_op(Operator.EQ, r, _int(0)), _int(0), magnitude)


def exact_float_remainder(tr: Translator, eqn: Eqn, kind: Kind, x: Expr, y: Expr) -> None:
    """Assigns fmod(x, y) of the float operands `x` and `y`, already of the result's kind."""
    out = eqn.outputs[0]
    dtype = tr.dtype(eqn.inputs[0])
    w = CompositeLocals(tr, out)
    if dtype != "float32":
        x = ir_call("lax.convert_element_type", x, DType("float32"))
        y = ir_call("lax.convert_element_type", y, DType("float32"))
    xf, yf = w.local("x", x), w.local("y", y)
    x_bits = w.local("x_bits", ir_call("lax.bitcast_convert_type", xf, DType("int32")))
    y_bits = ir_call("lax.bitcast_convert_type", yf, DType("int32"))
    ax = w.local("ax", _and(x_bits, 0x7FFFFFFF))
    ay = w.local("ay", _and(y_bits, 0x7FFFFFFF))
    mx, ex = _significand(w, ax, "x")
    my, ey = _significand(w, ay, "y")
    # y = 0 would divide by zero: its result is NaN, chosen below.
    divisor = w.local("divisor", _max(my, _int(1)))
    difference = w.local("difference", _max(_op(Operator.SUB, ex, ey), _int(0)))
    r = _long_division(w, mx, divisor, difference)
    sign = _and(x_bits, -0x80000000)
    result_bits = _or(_bits_of(w, r, ey), sign)
    remainder = w.local(
        "remainder", ir_call("lax.bitcast_convert_type", result_bits, DType("float32"))
    )
    nan = w.local(
        "nan",
        _or(
            _or(_op(Operator.EQ, ay, _int(0)), _ge(ax, _int(0x7F800000))),
            _op(Operator.GT, ay, _int(0x7F800000)),
        ),
    )
    value: Expr = _where(
        nan,
        Literal(float("nan"), "float32", weak_type=False),
        _where(_op(Operator.LT, ax, ay), xf, remainder),
    )
    if dtype != "float32":
        value = ir_call("lax.convert_element_type", value, DType(dtype))
    tr.assign(eqn, kind, value)
