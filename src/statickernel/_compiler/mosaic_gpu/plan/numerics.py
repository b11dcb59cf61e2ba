"""What a call's arithmetic rounds: the longest contraction of its products, and the float
types its body rounds computed values to. The testing helpers derive a kernel's default
tolerance from them (`statickernel.testing.compare`).

An operand's values are exact: the kernel and its reference read the same numbers, whatever
their dtype. Rounding enters where the body computes: each op's result is rounded to its
dtype (a bfloat16 product of two bfloat16 values, `p.astype(jnp.bfloat16)`), a product of
float32 blocks runs on the tensor cores as tf32 (inputs rounded to 10 bits of mantissa), and a
long contraction accumulates float32 roundings: about sqrt(K) units of float32's last place
over a length K in a different order from the reference's. Ops that return one of their inputs
or move values (a max, a select, a reshape, a widening cast) round nothing.
"""

import dataclasses
from collections.abc import Iterator, Mapping

import jax.numpy as jnp

from ...trace.body import LOOP_PRIMITIVES, BodyTrace, Eqn
from ..lower.rules import SHAPE_ONLY

__all__ = ["TF32", "ApproxMath", "Numerics", "is_float", "plan_approx_math", "plan_numerics"]

TF32 = "tf32"
"""A product's float32 inputs, as the tensor cores read them."""

# Ops whose results are one of their inputs, or exactly representable in the input's dtype.
_EXACT = SHAPE_ONLY | {
    "select_n",
    "max",
    "min",
    "reduce_max",
    "reduce_min",
    "neg",
    "abs",
    "clamp",
    "sign",
    "floor",
    "ceil",
    "round",
    "cummax",
    "cummin",
    "argmax",
    "argmin",
    "top_k",
    "sk_position",
    "debug_print",
}
_WIDTH = {"float64": 64, "float32": 32, TF32: 19, "float16": 16, "bfloat16": 16}


@dataclasses.dataclass(frozen=True)
class Numerics:
    """The roundings of one specialization's arithmetic."""

    contraction: int
    """The longest contraction (K) of the body's `sk.dot` products over the whole call; 0
    where the body has none."""
    rounds_to: tuple[str, ...]
    """The float types the body rounds a computed value to, narrowest first (`tf32` for a
    product's float32 inputs); operands' and results' dtypes are not among them unless the
    body computes in them."""

    def check_invariants(self) -> None:
        assert self.contraction >= 0
        assert list(self.rounds_to) == sorted(set(self.rounds_to), key=_width)


def _width(dtype: str) -> int:
    return _WIDTH.get(dtype, 8)  # an fp8 type


def _eqns(eqns: tuple[Eqn, ...]) -> Iterator[Eqn]:
    for eqn in eqns:
        if eqn.prim in LOOP_PRIMITIVES:
            yield from _eqns(eqn.param("step").eqns)
        else:
            yield eqn


def is_float(dtype: str) -> bool:
    """Whether `dtype` (a jnp dtype's name, or `TF32`) is a float type."""
    return dtype == TF32 or bool(jnp.issubdtype(jnp.dtype(dtype), jnp.floating))


def plan_numerics(trace: BodyTrace, sizes: Mapping[str, int]) -> Numerics:
    """The roundings of the body traced as `trace`, at the call's dim `sizes`."""
    contraction = 0
    rounds: set[str] = set()
    for eqn in _eqns(trace.eqns):
        if eqn.prim == "sk_dot":
            contraction = max(contraction, sizes[eqn.param("over")])
            inputs = [trace.aval(a.var)[1] for a in eqn.inputs if a.var is not None]
            if "float32" in inputs:
                rounds.add(TF32)
            continue
        if eqn.prim in _EXACT:
            continue
        for out in eqn.outputs:
            dtype = trace.aval(out)[1]
            if not is_float(dtype):
                continue
            widening = eqn.prim == "convert_element_type" and all(
                a.var is None or _width(trace.aval(a.var)[1]) <= _width(dtype) for a in eqn.inputs
            )
            if not widening:
                rounds.add(dtype)
    return Numerics(contraction, tuple(sorted(rounds, key=_width)))


# The transcendentals Mosaic GPU runs as PTX's approximate instructions under `approx_math`:
# ex2, lg2 and rsqrt `.approx.ftz`, within a few units in float32's last place, subnormal
# inputs and results flushed to zero; exp and log scale the argument or the result by a
# constant (exp(x) = ex2(x * log2(e)), whose rounding grows with |x|).
APPROXIMATED = ("exp", "exp2", "log", "log2", "rsqrt")
# The ones whose approximations are coarser: tanh.approx errs by up to 2^-11 relative, sin
# and cos.approx hold their accuracy near [-pi, pi] only, and sqrt's has no bound stated
# here. A body that takes one keeps its kernel exact.
COARSE = ("tanh", "sin", "cos", "sqrt")


@dataclasses.dataclass(frozen=True)
class ApproxMath:
    """What a kernel that asks for approximate math (`approx_math=True`) gets."""

    approximated: tuple[str, ...]
    """The body's transcendentals that run approximately; empty where it stays exact."""
    kept_exact_by: str | None = None
    """A coarse op the body takes (`COARSE`), which keeps the kernel exact; else None."""

    @property
    def applied(self) -> bool:
        """Whether the launch compiles with Mosaic GPU's `approx_math`."""
        return bool(self.approximated)

    def describe(self) -> str:
        if self.kept_exact_by is not None:
            return (
                f"exact: the body takes {self.kept_exact_by}, whose approximation is coarser "
                "than float32's last places (approx_math=True applies to exp, exp2, log, log2 "
                "and rsqrt alone)"
            )
        if not self.applied:
            return "exact: the body takes no exp, exp2, log, log2 or rsqrt"
        return (
            f"approximate {', '.join(self.approximated)} (PTX .approx.ftz: a few units in "
            "float32's last place, subnormals flushed to zero); the interpreter is exact"
        )

    def check_invariants(self) -> None:
        assert set(self.approximated) <= set(APPROXIMATED)
        assert self.kept_exact_by is None or (
            self.kept_exact_by in COARSE and not self.approximated
        )


def plan_approx_math(trace: BodyTrace, requested: bool) -> ApproxMath | None:
    """Whether the body's transcendentals run approximately: where the kernel asks for it
    and the body takes none whose approximation is coarse; None where it does not ask."""
    if not requested:
        return None
    prims = {eqn.prim for eqn in _eqns(trace.eqns)}
    coarse = [p for p in COARSE if p in prims]
    if coarse:
        return ApproxMath((), coarse[0])
    return ApproxMath(tuple(p for p in APPROXIMATED if p in prims))
