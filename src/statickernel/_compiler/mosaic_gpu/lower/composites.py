"""Elementwise ops Mosaic GPU has no lowering rule for, written with ops it lowers, and
`jnp.any` / `jnp.all` written with the reductions it lowers.

Each composite spells its ops with jnp in the generated module, one local per value it
reuses, so the module stays readable and needs only jax. Each builder states the accuracy
it reaches in float32 against float64, as tests/compiler/mosaic_gpu/lower/test_math.py measures it in
the interpreter.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping

from ...._errors import UnsupportedOpError
from ...ir.names import value_part
from ...ir.nodes import Assign, BinOp, DType, Expr, Literal, Name, Operator
from ...ir.nodes import call as ir_call
from ...trace.body import Atom, Eqn
from .context import CompositeLocals, Rule, Support, Translator, Where
from .totals import reduce_over_axes

__all__ = ["COMPOSITES", "COMPOSITE_RULES", "REDUCE_BOOL"]

ADD, SUB, MUL, DIV = Operator.ADD, Operator.SUB, Operator.MUL, Operator.DIV
LT, GT, EQ, NE = Operator.LT, Operator.GT, Operator.EQ, Operator.NE


@dataclasses.dataclass
class _Builder(CompositeLocals):
    """Writes a composite's locals into the translation and makes its literals."""

    dtype: str

    def num(self, value: float) -> Literal:
        # Weakly typed: the composite computes in its dtype (float32 for a 16-bit float).
        return Literal(value, self.dtype, weak_type=True)


def _where(mask: Expr, value: Expr, other: Expr) -> Expr:
    return ir_call("jnp.where", mask, value, other)


def _abs(x: Expr) -> Expr:
    return ir_call("jnp.abs", x)


def _odd_series(b: _Builder, x: Expr, square: Expr, coefficients: tuple[float, ...]) -> Expr:
    """x * (c0 + x**2 * (c1 + x**2 * (...))), by Horner's rule."""
    series: Expr = b.num(coefficients[-1])
    for step, coefficient in enumerate(reversed(coefficients[:-1])):
        series = BinOp(ADD, b.num(coefficient), BinOp(MUL, square, series))
        if step % 3 == 2:  # named every few terms: lines a reader (and a formatter) can follow
            series = b.local(f"series{step // 3}", series)
    return BinOp(MUL, x, series)


def _log1p(b: _Builder, x: Name) -> Expr:
    """log(1 + x). For |x| < 1/2, where rounding 1 + x would lose x's low bits, the series of
    2 atanh(s) = log1p(x) in s = x / (2 + x), |s| < 1/3, to s**13 (truncated below 2e-8
    relative); elsewhere log(1 + x), where 1 + x is exact or large. Within 3 ulp. (A series,
    not Goldberg's log(u) * x / (u - 1): XLA folds (x + 1) - 1 to x, which the interpreter
    would run.)"""
    s = b.local("s", BinOp(DIV, x, BinOp(ADD, b.num(2.0), x)))
    odd = tuple(2.0 / n for n in range(1, 15, 2))
    series = _odd_series(b, s, b.local("s2", BinOp(MUL, s, s)), odd)
    near_zero = BinOp(LT, _abs(x), b.num(0.5))
    return _where(near_zero, series, ir_call("jnp.log", BinOp(ADD, x, b.num(1.0))))


def _expm1(b: _Builder, x: Name) -> Expr:
    """exp(x) - 1. For |x| < 1/2, where exp(x) - 1 cancels, its Taylor series to x**10 / 10!
    (truncated below 1e-9 relative); elsewhere exp(x) - 1. Within 2 ulp."""
    series: Expr = b.num(1.0)
    for n in range(10, 1, -1):
        series = BinOp(ADD, b.num(1.0), BinOp(MUL, BinOp(MUL, x, b.num(1.0 / n)), series))
    near_zero = BinOp(LT, _abs(x), b.num(0.5))
    return _where(near_zero, BinOp(MUL, x, series), BinOp(SUB, ir_call("jnp.exp", x), b.num(1.0)))


def _half_exp(b: _Builder, x: Name) -> tuple[Expr, Expr]:
    """exp(x) / 2 and exp(-x) / 2 as (h / 2) * h with h = exp(x / 2) and exp(-x / 2): they
    overflow only where the result does."""
    up = b.local("half_up", ir_call("jnp.exp", BinOp(MUL, x, b.num(0.5))))
    down = b.local("half_down", ir_call("jnp.exp", BinOp(MUL, x, b.num(-0.5))))
    return BinOp(MUL, BinOp(MUL, up, b.num(0.5)), up), BinOp(
        MUL, BinOp(MUL, down, b.num(0.5)), down
    )


def _sinh(b: _Builder, x: Name) -> Expr:
    """(exp(x) - exp(-x)) / 2, which cancels for |x| < 1: there its Taylor series to x**9
    (truncated below 2.1e-8 relative). Within 3 ulp."""
    x2 = b.local("square", BinOp(MUL, x, x))
    series = _odd_series(b, x, x2, (1.0, 1 / 6, 1 / 120, 1 / 5040, 1 / 362880))
    up, down = _half_exp(b, x)
    return _where(BinOp(LT, _abs(x), b.num(1.0)), series, BinOp(SUB, up, down))


def _cosh(b: _Builder, x: Name) -> Expr:
    """(exp(x) + exp(-x)) / 2; a sum of positives, nothing cancels. Within 3 ulp."""
    up, down = _half_exp(b, x)
    return BinOp(ADD, up, down)


def _cbrt(b: _Builder, x: Name) -> Expr:
    """sign(x) * |x| ** (1/3): exp(log|x| / 3), then one Newton step y + (|x| / y**2 - y) / 3,
    which takes the error of the log back to about 1 ulp. At 0 and inf the step is NaN and the
    first estimate is exact."""
    magnitude = b.local("abs", _abs(x))
    first = b.local(
        "first", ir_call("jnp.exp", BinOp(MUL, ir_call("jnp.log", magnitude), b.num(1 / 3)))
    )
    correction = BinOp(SUB, BinOp(DIV, magnitude, BinOp(MUL, first, first)), first)
    step = b.local("step", BinOp(ADD, first, BinOp(MUL, correction, b.num(1 / 3))))
    root = _where(BinOp(NE, step, step), first, step)
    return BinOp(MUL, ir_call("jnp.sign", x), root)


def _erfc(b: _Builder, x: Name) -> Expr:
    """1 - erf(x), kept from going below 0 where erf rounds past 1: within 3e-7 absolute, so
    its relative error grows where erfc(x) is small (1e-2 at x = 3, and 0 past x ~ 3.9 where
    erfc is below 6e-8)."""
    return ir_call("jnp.maximum", BinOp(SUB, b.num(1.0), ir_call("lax.erf", x)), b.num(0.0))


def _atan(b: _Builder, x: Name) -> Expr:
    """atan2(x, 1), which Mosaic GPU lowers."""
    return ir_call("jnp.arctan2", x, b.num(1.0))


def _is_finite(b: _Builder, x: Name) -> Expr:
    """|x| < inf: false for both infinities and for NaN, which compares false."""
    return BinOp(LT, _abs(x), b.num(math.inf))


def _nearest(x: Name) -> Expr:
    return ir_call("lax.round", x, Name("lax.RoundingMethod.TO_NEAREST_EVEN"))


def _floor(b: _Builder, x: Name) -> Expr:
    """The nearest integer (ties to even), less one where that is above x. Exact."""
    nearest = b.local("nearest", _nearest(x))
    return _where(BinOp(GT, nearest, x), BinOp(SUB, nearest, b.num(1.0)), nearest)


def _ceil(b: _Builder, x: Name) -> Expr:
    """The nearest integer (ties to even), plus one where that is below x. Exact."""
    nearest = b.local("nearest", _nearest(x))
    return _where(BinOp(LT, nearest, x), BinOp(ADD, nearest, b.num(1.0)), nearest)


COMPOSITES: Mapping[str, Callable[[_Builder, Name], Expr]] = {
    "log1p": _log1p,
    "expm1": _expm1,
    "sinh": _sinh,
    "cosh": _cosh,
    "cbrt": _cbrt,
    "erfc": _erfc,
    "atan": _atan,
    "is_finite": _is_finite,
    "floor": _floor,
    "ceil": _ceil,
}


_COMPUTED_IN_FLOAT32 = frozenset({"bfloat16", "float16"})
_PREDICATES = frozenset({"is_finite"})  # a bool result, cast back to nothing


def composite(tr: Translator, eqn: Eqn) -> None:
    """An op of one operand, written with the ops of its `COMPOSITES` builder."""
    (atom,) = eqn.inputs
    out = eqn.outputs[0]
    kind = tr.kind(atom)
    source = tr.source(atom)
    dtype = tr.dtype(atom)
    # A 16-bit float is computed in float32 and rounded once, as XLA computes jnp's own:
    # each of a composite's steps rounded to bfloat16 would add an ulp or two.
    narrow = dtype in _COMPUTED_IN_FLOAT32
    builder = _Builder(tr, out, "float32" if narrow else dtype)
    if narrow:
        source = ir_call("lax.convert_element_type", source, DType("float32"))
    # The operand is read several times: a computed one gets a name, so it is computed once.
    x = source if isinstance(source, Name) else builder.local("in", source)
    value = COMPOSITES[eqn.prim](builder, x)
    if narrow and eqn.prim not in _PREDICATES:
        value = ir_call("lax.convert_element_type", value, DType(dtype))
    tr.assign(eqn, kind, value)


# jnp.any counts the true elements (a sum's identity, 0, is false past the edge); jnp.all
# takes their minimum (int32's largest, true past the edge).
_BOOL_REDUCTIONS = {"reduce_or": "reduce_sum", "reduce_and": "reduce_min"}


def reduce_bool(tr: Translator, eqn: Eqn) -> None:
    """jnp.any / jnp.all over an axis: the booleans as int32, reduced with the reduction
    Mosaic GPU lowers, then compared with 0."""
    (atom,) = eqn.inputs
    out = eqn.outputs[0]
    kind = tr.kind(atom)
    as_int = value_part(out, "int")
    tr.define(as_int, kind, "int32")
    if atom.var is not None:  # the reduction reads the shape of what it reduces
        shape = tr.trace.aval(atom.var)[0]
        tr.trace = dataclasses.replace(
            tr.trace, avals=(*tr.trace.avals, (as_int, (shape, "int32")))
        )
    wide = ir_call("lax.convert_element_type", tr.source(atom), DType("int32"))
    tr.lines.append(Assign((Name(as_int),), wide))
    as_int_reduction = dataclasses.replace(
        eqn, prim=_BOOL_REDUCTIONS[eqn.prim], inputs=(Atom(as_int),)
    )
    try:
        reduce_over_axes(tr, as_int_reduction)
    except UnsupportedOpError as error:
        # It names the int32 reduction; the user wrote jnp.any or jnp.all.
        actual = str(error.actual).replace(f"`{as_int_reduction.prim}`", f"`{eqn.prim}`")
        raise tr.fail(eqn, error.what, error.fix or "", actual) from None
    reduced = tr.aliases.pop(out, Name(out))
    tr.assign(eqn, tr.kinds[out], BinOp(NE, reduced, Literal(0, "int32", weak_type=True)))


REDUCE_BOOL = Rule(
    reduce_bool,
    support=((Where.STRIDED, Support.PARTLY), (Where.ROWS, Support.PARTLY)),
    note="as jnp.sum / jnp.min: over the columns in the row form; in the strided block only "
    "of an axis of one element; to a scalar in the block form",
)
COMPOSITE_RULES: Mapping[str, Rule] = {
    **{prim: Rule(composite) for prim in COMPOSITES},
    **dict.fromkeys(_BOOL_REDUCTIONS, REDUCE_BOOL),
}
