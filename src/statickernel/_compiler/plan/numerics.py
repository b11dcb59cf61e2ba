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

from ..lower.rules import SHAPE_ONLY
from ..trace.body import LOOP_PRIMITIVES, BodyTrace, Eqn

__all__ = ["TF32", "Numerics", "is_float", "plan_numerics"]

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
