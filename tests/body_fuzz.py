"""Random row-local kernel bodies for the differential fuzzer, and what it needs to run them.

A case is the text of a whole module, with one `@sk.kernel(tile={"M": "BM"})` whose rows are
whole in every block, a ragged shape to call it at (M up to 130, N up to 300, BM from 64 to
256), seeded data (float32, bfloat16 or float16; all-negative or all-positive rows; sometimes
±inf and nan), and how to call it. Its body is drawn from the ops statickernel documents:
elementwise math, `jnp.where` with scalar and block branches, constants and `*_like` blocks,
per-row and per-column vectors spread over blocks, row reductions with and without
`keepdims`, casts, `sk.dim`, and loads with fills of 0, -0.0, 1, ±inf and nan.

The reference is the same function, from the same file, run on the whole arrays with plain
jnp: its globals see a stand-in for `sk` whose `load` returns the array and whose reductions
are jnp's. For a row-local body over whole rows, the kernel must agree with it: the fill only
reaches elements past the array's edge, and those must never show in a result. Two
adjustments: the reference's max and min carry NaN as jnp documents (XLA's CPU max skips NaN
for some shapes), and `expected_results` measures how far rounding alone moves the reference.

Body values carry what the generator knows about them:
- a *kind*, their shape inside one block: "MN" a block, "M1" a per-row column kept with
  `keepdims`, "M" a per-row vector, "N" a per-column vector;
- their dtype;
- whether they are *exact*: computed without rounding (loads, signs, selects, row max/min,
  casts, constants), so that both sides hold the same bits and a comparison of them is safe
  to branch on; comparisons only read exact values;
- a bound on their magnitude, so that nothing overflows its dtype by accident, and whether
  they may hold an infinity or a nan (from a `-jnp.inf` branch or from the data); such values
  are multiplied only by exact ones, so that no `0 * inf` appears on one side only;
- whether their rows sum to about zero (centred), whose sums are rounding error alone and
  are not drawn.
"""

import builtins
import contextvars
import dataclasses
import math
import textwrap
import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

__all__ = [
    "KERNEL_NAME",
    "Case",
    "Expected",
    "Operand",
    "Problem",
    "cases",
    "compare",
    "expected_results",
    "make_args",
    "nan_max",
    "nan_min",
    "reference_function",
]

KERNEL_NAME = "fuzzed"
ROWS = (1, 2, 3, 5, 7, 8, 31, 63, 64, 65, 100, 127, 128, 129, 130)
COLS = (1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 100, 127, 128, 129, 255, 256, 257, 300)
MAX_COLS = max(COLS)
ROW_BLOCKS = (64, 64, 128, 192, 256)
FILLS = (
    "",
    "0.0",
    "0",
    "-0.0",
    "-jnp.inf",
    "jnp.inf",
    "jnp.nan",
    "float('nan')",
    "-float('inf')",
    "1.0",
)
# Bounds above these are refused for a new value: nothing reaches its dtype's overflow.
LIMITS = {"float32": 1e30, "bfloat16": 1e30, "float16": 3e4}
LIMIT = LIMITS["float32"]


@dataclasses.dataclass(frozen=True)
class Operand:
    name: str
    dims: str  # "M N", " M" or " N"
    annotation: str  # "Float", "Float32" or "BFloat16"
    dtype: str  # the dtype of the array passed
    fill: str  # source text of the load's fill; "" for the default


@dataclasses.dataclass(frozen=True)
class Case:
    """One kernel module, and the call to make with it."""

    source: str
    operands: tuple[Operand, ...]
    results: tuple[str, ...]  # "MN" or "M", in order
    consts: tuple[tuple[str, Any], ...]
    m: int
    n: int
    seed: int
    shift: float  # data are centred here: all negative or all positive rows expose padding
    specials: bool  # the data hold some -inf, +inf and nan
    precision: str  # the narrowest float that takes part: its tolerance applies
    how: str  # "direct", "jit" (inside jax.jit) or "vmap" (jax.vmap over two sets of data)
    ops: tuple[str, ...]  # the op forms used, for the coverage summary

    def describe(self) -> str:
        args = ", ".join(
            f"{o.name}: {o.dtype}{[self.m, self.n] if o.dims == 'M N' else [self.m if o.dims == ' M' else self.n]}"
            for o in self.operands
        )
        numbered = "\n".join(
            f"{i:3d}  {line}" for i, line in enumerate(self.source.splitlines(), 1)
        )
        data = f"seed={self.seed}, shift={self.shift}" + (
            ", with ±inf, nan" if self.specials else ""
        )
        if self.how != "direct":
            data += f", called {'inside jax.jit' if self.how == 'jit' else 'by jax.vmap'}"
        return f"{KERNEL_NAME}({args})   [{data}]\n{numbered}"


class Value(NamedTuple):
    name: str
    kind: str  # "MN", "M1", "M" or "N"
    dtype: str  # "float32" or "bfloat16"
    exact: bool
    bound: float  # a bound on the magnitude of its finite elements
    special: bool  # may hold ±inf or nan
    # Its rows sum to about 0 (a centred block): their sum is all rounding error, and the
    # reference's and the kernel's differ by more than any tolerance; it is not summed.
    centered: bool = False


def combine(*kinds: str) -> str | None:
    """The kind of an elementwise op on these kinds under jnp broadcasting, or None when the
    result would depend on the sizes (a per-row vector meeting a block, say)."""
    found = set(kinds)
    if len(found) == 1:
        return kinds[0]
    if "M" in found:
        return None
    return "MN"  # MN with M1 or N, or an outer M1 x N


def promote(*dtypes: str) -> str:
    found = set(dtypes)
    if len(found) == 1:
        return dtypes[0]
    return "float32"  # float32 with anything, or bfloat16 with float16


class Unary(NamedTuple):
    form: str
    exact: bool  # exact when its input is
    bound: Callable[[float], float]  # math.inf: not for inputs this large
    dtype: str | None = None  # the result's dtype; None: the input's
    # Its output jumps where its input moves by a rounding error: it takes exact values only.
    exact_input: bool = False


_ONE = 1.0
UNARY = (
    Unary("-{a}", True, lambda b: b),
    Unary("jnp.abs({a})", True, lambda b: b),
    Unary("2.0 * {a}", True, lambda b: 2 * b),
    Unary("{a} * 0.5", True, lambda b: b),
    Unary("{a} + 1.0", False, lambda b: b + 1),
    Unary("1.0 - {a}", False, lambda b: b + 1),
    Unary("{a} / 3.0", False, lambda b: b),
    Unary("jnp.exp({a})", False, lambda b: math.exp(b) if b < 60 else math.inf),
    Unary("jnp.exp(-jnp.abs({a}))", False, lambda b: _ONE),
    Unary("jnp.tanh({a})", False, lambda b: _ONE),
    Unary("jax.nn.sigmoid({a})", False, lambda b: _ONE),
    Unary("jax.lax.logistic({a})", False, lambda b: _ONE),
    Unary("jnp.log(1.0 + {a} * {a})", False, lambda b: math.log1p(b * b) + 1),
    Unary("jnp.log(jnp.abs({a}) + 1.0)", False, lambda b: math.log1p(b) + 1),
    Unary("jnp.sqrt(jnp.abs({a}))", False, lambda b: math.sqrt(b) + 1),
    Unary("jnp.sqrt(1.0 + {a} * {a})", False, lambda b: b + 1),
    Unary("jax.lax.rsqrt(1.0 + {a} * {a})", False, lambda b: _ONE),
    Unary("jax.lax.rsqrt(jnp.abs({a}) + 0.5)", False, lambda b: 2.0),
    Unary("{a} ** 2", False, lambda b: b * b),
    Unary("{a} ** 3", False, lambda b: b**3),
    Unary("jnp.square({a})", False, lambda b: b * b),
    Unary("jax.lax.integer_pow({a}, 4)", False, lambda b: b**4),
    Unary("(1.0 + {a} * {a}) ** -1", False, lambda b: _ONE),
    Unary("3.0 / (1.0 + {a} * {a})", False, lambda b: 3.0),
    Unary("jnp.maximum({a}, 0.0)", True, lambda b: b),
    Unary("jnp.minimum({a}, 1.0)", True, lambda b: max(b, 1.0)),
    Unary("jnp.clip({a}, -1.0, 1.0)", True, lambda b: _ONE),
    Unary("jnp.sign({a})", True, lambda b: _ONE, exact_input=True),
    Unary("jnp.round({a})", True, lambda b: b + 1, exact_input=True),
    Unary("({a} > 0).astype(jnp.float32)", True, lambda b: _ONE, "float32", exact_input=True),
    Unary("jnp.sin({a})", False, lambda b: _ONE if b < 100 else math.inf),
    Unary("jnp.cos({a})", False, lambda b: _ONE if b < 100 else math.inf),
    Unary("jax.lax.erf({a})", False, lambda b: _ONE),
    Unary("jnp.exp2(jnp.minimum({a}, 8.0))", False, lambda b: 256.0),
    # Written by statickernel with the ops above (lower/composites.py).
    Unary("jnp.log1p(jnp.abs({a}))", False, lambda b: math.log1p(b) + 1),
    Unary("jnp.expm1(jnp.minimum({a}, 8.0))", False, lambda b: math.exp(min(b, 8.0)) + 1),
    Unary("jnp.sinh(jnp.clip({a}, -8.0, 8.0))", False, lambda b: math.sinh(min(b, 8.0)) + 1),
    Unary("jnp.cosh(jnp.clip({a}, -8.0, 8.0))", False, lambda b: math.cosh(min(b, 8.0))),
    Unary("jnp.cbrt({a})", False, lambda b: b ** (1 / 3) + 1),
    Unary("jnp.arctan({a})", False, lambda b: 2.0),
    Unary("jax.lax.erfc({a})", False, lambda b: 2.0),
    Unary("jnp.floor({a})", True, lambda b: b + 1, exact_input=True),
    Unary("jnp.ceil({a})", True, lambda b: b + 1, exact_input=True),
    Unary("jnp.where(jnp.isfinite({a}), {a}, 0.0)", True, lambda b: b),
    # jax.nn's elementwise functions, made of the ops above.
    Unary("jax.nn.relu({a})", True, lambda b: b),
    Unary("jax.nn.silu({a})", False, lambda b: b),
    Unary("jax.nn.gelu({a})", False, lambda b: b + 1),
    Unary("jax.nn.softplus({a})", False, lambda b: b + 1),
    Unary("{a}.astype(jnp.float32)", True, lambda b: b, "float32"),
    Unary("{a}.astype(jnp.bfloat16)", True, lambda b: 1.01 * b, "bfloat16"),
    Unary("{a} * jnp.ones_like({a})", True, lambda b: b),
    Unary("{a} + jnp.zeros_like({a})", True, lambda b: b),
    # Literals that are not weakly typed: they promote a bfloat16 value to float32.
    Unary("{a} * jnp.float32(0.5)", True, lambda b: b, "float32"),
    # The bound sizes, as Python ints: a body may compute with them.
    Unary('{a} * (1.0 / sk.dim("N"))', False, lambda b: b),
    Unary('{a} + sk.dim("M")', False, lambda b: b + 200),
    Unary("jnp.float32(1.5) - {a}", False, lambda b: b + 2, "float32"),
)
# Blocks and vectors of one constant, from a value's shape.
LIKE = (
    ("jnp.ones_like({a})", 1.0, None),
    ("jnp.zeros_like({a})", 1.0, None),
    ("jnp.full_like({a}, 2.0)", 2.0, None),
    ("jnp.full_like({a}, -0.5)", 0.5, None),
    ("jnp.ones_like({a}, dtype=jnp.float32)", 1.0, "float32"),
    ("jnp.full({a}.shape, 3.0, jnp.float32)", 3.0, "float32"),
    ("jnp.zeros({a}.shape, {a}.dtype)", 1.0, None),
)
CONDITIONS = (
    "{c} > 0",
    "{c} < 0.5",
    "{c} != 0",
    "({c} > -1.0) & ({c} < 1.0)",
    "{c} >= sk.max({c}, axis=1, keepdims=True)",  # only for a block
    "{c} > {d}",  # two exact values
)
# Branches: {a} and {b} are values, the rest literals or blocks built from them.
WHERE = (
    ("{a}", "0.0"),
    ("0.0", "{a}"),
    ("{a}", "{b}"),
    ("{a}", "-jnp.inf"),
    ("{a}", "jnp.zeros_like({a})"),
    ("{a}", "jnp.full_like({a}, 2.0)"),
    ("1.0", "-1.0"),
    ("{a}", "0.1 * {a}"),
)
BINARY = (
    ("{a} + {b}", "add"),
    ("{a} - {b}", "add"),
    ("{a} * {b}", "mul"),
    ("{a} / (1.0 + {b} * {b})", "div"),
    ("{a} / (1.0 + jnp.abs({b}))", "div"),
    ("jnp.maximum({a}, {b})", "max"),
    ("jnp.minimum({a}, {b})", "max"),
)
# Row reductions: (function, whether the result is exact when its input is).
REDUCTIONS = (
    ("sk.sum", False),
    ("sk.max", True),
    ("sk.min", True),
    ("jnp.sum", False),
    ("jnp.max", True),
    ("jnp.min", True),
    ("jnp.mean", False),
    ("mean by sk.dim", False),  # sk.sum(t, axis=1) / sk.dim("N")
    ("jnp.var", False),
    ("jnp.std", False),
)


# Exact: a negation, a doubling and a reordering round nothing.
HALVES = (
    ("jnp.concatenate([-{a}[:, {a}.shape[1] // 2 :], {a}[:, : {a}.shape[1] // 2]], axis=1)", 1.0),
    ("jnp.concatenate(jnp.split({a}, 2, axis=1)[::-1], axis=1)", 1.0),
    (
        "jnp.concatenate([{a}[:, : {a}.shape[1] // 2] * 2, {a}[:, {a}.shape[1] // 2 :]], axis=1)",
        2.0,
    ),
)


def choose(draw: Any, options: Any) -> Any:
    """One of `options`, close to uniformly: `st.sampled_from` favours the first ones strongly
    when generating, and here the later ops matter as much. A shrink still moves to the first."""
    options = list(options)
    return options[draw(st.integers(0, 2**32 - 1)) % len(options)]


def _format(form: str, **names: str) -> str:
    return form.format(**names)


class Body:
    """Writes body statements, tracking each value's kind, dtype, exactness and bound."""

    def __init__(self, draw: Any, scale: float | None, one_block: bool = False):
        self.draw = draw
        self.scale = scale
        # Every row is in one block: a block's scalar is the whole array's, as the reference
        # computes it on whole arrays.
        self.one_block = one_block
        self.values: list[Value] = []
        self.lines: list[str] = []
        self.ops: list[str] = []
        self.dtypes: set[str] = set()
        # A value of a weakly typed float (jnp.where(c, 1.0, -1.0)) was drawn: its dtype is
        # float32 alone but bends to a narrower float, which this generator does not follow.
        self.weak = False
        self.used: set[str] = set()
        # A block was sliced at its middle column: N must be a multiple of 16, where the
        # halves lie on the register layout's 8-column tiles.
        self.sliced = False
        # jax.lax.top_k(v, k) was drawn: N holds at least k columns.
        self.min_columns = 1
        # A scan was drawn: its shared-memory buffer takes up to two blocks more.
        self.scanned = False

    # --- values ---------------------------------------------------------------------------

    def new(
        self,
        expr: str,
        kind: str,
        dtype: str,
        exact: bool,
        bound: float,
        special: bool,
        centered: bool = False,
    ) -> Value:
        name = f"t{sum(v.name.startswith('t') for v in self.values)}"
        value = Value(name, kind, dtype, exact, bound, special, centered)
        self.lines.append(f"{value.name} = {expr}")
        self.values.append(value)
        self.dtypes.add(dtype)
        return value

    def pick(self, ok: Callable[[Value], bool] = lambda v: True) -> Value | None:
        options = [v for v in self.values if ok(v)]
        if not options:
            return None
        # Mostly the latest value, else one not used yet, so that most values reach the result.
        unused = [v for v in options if v.name not in self.used]
        choice = self.draw(st.integers(0, 3))
        if choice < 2 and options[-1] is self.values[-1]:
            value = options[-1]
        elif choice < 3 and unused:
            value = choose(self.draw, unused)
        else:
            value = choose(self.draw, options)
        self.used.add(value.name)
        return value

    def has(self, kind: str) -> bool:
        return any(v.kind == kind for v in self.values)

    # --- statements ---------------------------------------------------------------------------

    def step(self) -> None:
        category = choose(self.draw, (
                ["unary"] * 4 + ["binary"] * 3 + ["where"] * 3 + ["reduce"] * 3 + ["like"] * 2
                + ["broadcast"] * 2 + ["normalize"] * 2 + ["vector"] + ["halves"] * 2 + ["total"] * 3
                + ["ranked"] * 2 + ["scan"] * 2
            )
        )  # fmt: skip
        done = getattr(self, category)()
        if not done:
            self.unary()

    def unary(self) -> bool:
        a = self.pick()
        assert a is not None
        ops = [
            op
            for op in UNARY
            if op.bound(a.bound) <= LIMITS[op.dtype or a.dtype]
            and ("{a} * {a}" not in op.form or a.bound**2 <= LIMITS[a.dtype])
            and (a.exact or not op.exact_input)
        ]
        if self.scale is not None:
            ops.append(Unary("{a} * scale", False, lambda b: b * abs(self.scale or 1)))
        op = choose(self.draw, ops)
        self.ops.append(op.form)
        self.new(
            _format(op.form, a=a.name),
            a.kind,
            op.dtype or a.dtype,
            a.exact and op.exact,
            op.bound(a.bound),
            a.special,
            a.centered,
        )
        return True

    def halves(self) -> bool:
        """A block's halves sliced, changed and joined again (RoPE's rotate-half)."""
        a = self.pick(lambda v: v.kind == "MN")
        if a is None:
            return False
        form, factor = choose(self.draw, HALVES)
        self.ops.append(form)
        self.sliced = True
        self.new(_format(form, a=a.name), a.kind, a.dtype, a.exact, a.bound * factor, a.special)
        return True

    def total(self) -> bool:
        """A value less the max (or min) of another, reduced to a scalar (its block's)."""
        if not self.one_block:
            return False
        a = self.pick(lambda v: v.kind in ("MN", "M", "N") and not v.special)
        if a is None:
            return False
        b = self.pick(lambda v: v.kind in ("MN", "M", "N") and not v.special)
        assert b is not None
        function = choose(self.draw, ["jnp.max", "jnp.min"])
        form = f"{{b}} - {function}({{a}})"
        dtype = promote(a.dtype, b.dtype)
        if a.bound + b.bound > LIMITS[dtype]:
            return False
        self.ops.append(form)
        self.new(_format(form, a=a.name, b=b.name), b.kind, dtype, False, a.bound + b.bound, False)
        return True

    def ranked(self) -> bool:
        """A per-row statistic of a block's k largest (jax.lax.top_k), whose k columns are
        padded in registers: their sum, largest or smallest (the k-th largest)."""
        a = self.pick(lambda v: v.kind == "MN" and not v.special)
        if a is None:
            return False
        k = choose(self.draw, [1, 2, 3])
        function = choose(self.draw, ["jnp.sum", "jnp.max", "jnp.min"])
        bound = a.bound * (k if function == "jnp.sum" else 1)
        if bound > LIMITS[a.dtype]:
            return False
        self.min_columns = max(self.min_columns, k)
        self.ops.append(f"{function}(top_k)")
        expr = f"{function}(jax.lax.top_k({a.name}, {k})[0], axis=1)"
        self.new(expr, "M", a.dtype, a.exact and function != "jnp.sum", bound, False)
        return True

    def scan(self) -> bool:
        """A running sum, max or min along a block's columns, forward or reversed."""
        a = self.pick(lambda v: v.kind == "MN" and not v.special)
        if a is None:
            return False
        form = choose(
            self.draw,
            [
                "jnp.cumsum({a}, axis=1)",
                "jax.lax.cumsum({a}, axis=1, reverse=True)",
                "jax.lax.cummax({a}, axis=1)",
                "jax.lax.cummin({a}, axis=1, reverse=True)",
            ],
        )
        summed = "cumsum" in form
        bound = a.bound * (MAX_COLS if summed else 1)
        if bound > LIMITS[a.dtype]:
            return False
        self.scanned = True
        self.ops.append(form.split("(")[0])
        self.new(_format(form, a=a.name), "MN", a.dtype, a.exact and not summed, bound, False)
        return True

    def like(self) -> bool:
        a = self.pick(lambda v: v.kind in ("MN", "M"))
        if a is None:
            return False
        form, bound, dtype = choose(self.draw, LIKE)
        self.ops.append(form)
        self.new(_format(form, a=a.name), a.kind, dtype or a.dtype, True, bound, False)
        return True

    def binary(self) -> bool:
        a = self.pick()
        assert a is not None
        partners = [v for v in self.values if combine(a.kind, v.kind) is not None]
        b = choose(self.draw, partners)
        self.used.add(b.name)
        if self.draw(st.booleans()):
            a, b = b, a
        kind = combine(a.kind, b.kind)
        assert kind is not None
        ops = [
            (form, what)
            for form, what in BINARY
            if _binary_bound(what, a.bound, b.bound) <= LIMITS[promote(a.dtype, b.dtype)]
            and ("{b} * {b}" not in form or b.bound**2 <= LIMITS[b.dtype])
            # An infinity times a value that may be rounded to 0 on one side only.
            and not (what == "mul" and ((a.special and not b.exact) or (b.special and not a.exact)))
        ]
        if not ops:
            return False
        form, what = choose(self.draw, ops)
        self.ops.append(form)
        self.new(
            _format(form, a=a.name, b=b.name),
            kind,
            promote(a.dtype, b.dtype),
            a.exact and b.exact and what == "max",
            _binary_bound(what, a.bound, b.bound),
            a.special or b.special,
        )
        return True

    def condition(self, kinds: tuple[str, ...]) -> tuple[str, str] | None:
        """A condition on exact values, and its kind, broadcastable with `kinds`."""
        c = self.pick(lambda v: v.exact and combine(v.kind, *kinds) is not None)
        if c is None:
            return None
        forms = [f for f in CONDITIONS if "sk.max" not in f or c.kind == "MN"]
        form = choose(self.draw, forms)
        if "{d}" in form:
            others = [
                v for v in self.values if v.exact and combine(v.kind, c.kind, *kinds) is not None
            ]
            d = choose(self.draw, others)
            self.used.add(d.name)
            kind = combine(c.kind, d.kind)
            assert kind is not None
            self.ops.append("where: " + form)
            return _format(form, c=c.name, d=d.name), kind
        self.ops.append("where: " + form)
        return _format(form, c=c.name), c.kind

    def where(self) -> bool:
        a = self.pick()
        assert a is not None
        then, other = choose(self.draw, WHERE)
        b = a
        if "{b}" in other:
            partners = [v for v in self.values if combine(a.kind, v.kind) is not None]
            b = choose(self.draw, partners)
            self.used.add(b.name)
        uses = [v for v, used in ((a, "{a}" in then + other), (b, "{b}" in other)) if used]
        found = self.condition(tuple(v.kind for v in uses))
        if found is None:
            return False
        cond, cond_kind = found
        kind = combine(cond_kind, *(v.kind for v in uses))
        if kind is None:
            return False
        form = f"jnp.where({cond}, {then}, {other})"
        self.ops.append(f"jnp.where(c, {then}, {other})")
        dtype = promote(*(v.dtype for v in uses)) if uses else "float32"
        self.weak |= not uses
        bound = max([v.bound for v in uses] + [2.0])
        special = other == "-jnp.inf" or any(v.special for v in uses)
        exact = all(v.exact for v in uses) and "0.1" not in other
        self.new(_format(form, a=a.name, b=b.name), kind, dtype, exact, bound, special)
        return True

    def reduce(self) -> bool:
        a = self.pick(lambda v: v.kind == "MN")
        if a is None:
            return False
        function, exact = _safe_reduction(choose(self.draw, REDUCTIONS), a)
        keepdims = choose(self.draw, [None, False, True])
        axis = choose(self.draw, [1, 1, -1])
        # The array methods (t.sum(axis=1)); not max and min, which the reference could not
        # make carry NaN (see nan_max).
        method = function in ("jnp.sum", "jnp.mean") and self.draw(st.integers(0, 3)) == 0
        expr = _reduction(function, a.name, axis, keepdims, method)
        self.ops.append(f"{function}(keepdims={bool(keepdims)})")
        bound = _reduced_bound(function, a.bound)
        self.new(expr, "M1" if keepdims else "M", a.dtype, a.exact and exact, bound, a.special)
        return True

    def broadcast(self) -> bool:
        """A vector spread over a block, as `r[:, None] * jnp.ones_like(v)`."""
        a = self.pick(lambda v: v.kind in ("M", "M1", "N"))
        t = self.pick(lambda v: v.kind == "MN")
        if a is None or t is None:
            return False
        col = {"M": f"{a.name}[:, None]", "M1": a.name, "N": a.name}[a.kind]
        if a.kind == "N":
            col = choose(self.draw, [a.name, f"{a.name}[None, :]", f"jnp.expand_dims({a.name}, 0)"])
        forms = [
            "{col} * jnp.ones_like({t})",
            "{col} + jnp.zeros_like({t})",
            "jnp.broadcast_to({col}, {t}.shape)",
            "jnp.full_like({t}, 1.0) * {col}",
        ]
        form = choose(self.draw, forms)
        self.ops.append(form.replace("{col}", "r" if a.kind != "N" else "w"))
        dtype = a.dtype if "broadcast_to" in form else promote(a.dtype, t.dtype)
        self.new(_format(form, col=col, t=t.name), "MN", dtype, a.exact, a.bound, a.special)
        return True

    def vector(self) -> bool:
        """A per-row vector gets or loses its unit column."""
        a = self.pick(lambda v: v.kind in ("M", "M1"))
        if a is None:
            return False
        if a.kind == "M":
            form = choose(self.draw, (["{a}[:, None]", "jnp.expand_dims({a}, 1)"]))
            kind = "M1"
        else:
            form = choose(
                self.draw,
                [
                    "jnp.squeeze({a}, axis=1)",
                    "sk.max({a}, axis=1)",
                    "sk.sum({a}, axis=1)",
                    "jnp.mean({a}, axis=-1)",
                    "sk.min({a}, axis=1, keepdims=True)",
                    "{a}.reshape(-1)",
                ],
            )
            kind = "M1" if "keepdims" in form else "M"
        self.ops.append(form)
        self.new(_format(form, a=a.name), kind, a.dtype, a.exact, a.bound, a.special)
        return True

    def normalize(self) -> bool:
        """A block combined with its own row statistics, as softmax and the norms do."""
        a = self.pick(lambda v: v.kind == "MN")
        if a is None:
            return False
        forms = ["softmax", "logsumexp", "center", "rmsnorm", "layernorm", "max-shift"]
        forms += ["jax.nn.softmax"]
        if a.special:
            forms = ["softmax", "max-shift"]
        if a.bound**2 * MAX_COLS > LIMITS[a.dtype]:
            forms = [f for f in forms if f not in ("rmsnorm", "layernorm")]
        if not forms:
            return False
        which = choose(self.draw, forms)
        self.ops.append("normalize: " + which)
        n = a.name
        red = choose(self.draw, ["sk", "jnp"])
        if which == "jax.nn.softmax":
            self.new(f"jax.nn.softmax({n}, axis=1)", "MN", a.dtype, False, 1.0, False)
        elif which == "softmax":
            e = self.new(f"jnp.exp({n} - {red}.max({n}, axis=1, keepdims=True))", "MN",
                         a.dtype, False, 1.0, a.special)  # fmt: skip
            self.new(f"{e.name} / {red}.sum({e.name}, axis=1, keepdims=True)", "MN", a.dtype,
                     False, 1.0, a.special)  # fmt: skip
        elif which == "logsumexp":
            m = self.new(f"sk.max({n}, axis=1, keepdims=True)", "M1", a.dtype, a.exact,
                         a.bound, False)  # fmt: skip
            self.new(f"{m.name} + jnp.log({red}.sum(jnp.exp({n} - {m.name}), axis=1, "
                     "keepdims=True))", "M1", a.dtype, False, a.bound + 10, False)  # fmt: skip
        elif which == "center":
            self.new(f"{n} - jnp.mean({n}, axis=1, keepdims=True)", "MN", a.dtype, False,
                     2 * a.bound, False, centered=True)  # fmt: skip
        elif which == "rmsnorm":
            self.new(f"{n} * jax.lax.rsqrt(jnp.mean({n} * {n}, axis=1, keepdims=True) + eps)",
                     "MN", a.dtype, False, 20.0, False)  # fmt: skip
        elif which == "layernorm":
            mean = self.new(f"jnp.mean({n}, axis=1, keepdims=True)", "M1", a.dtype, False,
                            a.bound, False)  # fmt: skip
            var = self.new(f"jnp.mean(jnp.square({n} - {mean.name}), axis=1, keepdims=True)",
                           "M1", a.dtype, False, 4 * a.bound * a.bound, False)  # fmt: skip
            self.new(f"({n} - {mean.name}) * jax.lax.rsqrt({var.name} + eps)", "MN", a.dtype,
                     False, 20.0, False, centered=True)  # fmt: skip
        else:
            self.new(f"{n} - {red}.max({n}, axis=1, keepdims=True)", "MN", a.dtype, False,
                     2 * a.bound, a.special)  # fmt: skip
        return True

    # --- results ------------------------------------------------------------------------------

    def result(self, kind: str) -> Value:
        """A value of `kind` ("MN" or "M") to return, made from the latest values."""
        fitting = [v for v in self.values if v.kind == kind]
        last = self.values[-1]
        if last.kind == kind:
            return last
        if kind == "M":
            if last.kind == "M1":
                form = choose(self.draw, ["jnp.squeeze({a}, axis=1)", "sk.max({a}, axis=1)"])
                self.ops.append(form)
                return self.new(_format(form, a=last.name), "M", last.dtype, last.exact,
                                last.bound, last.special)  # fmt: skip
            if last.kind == "MN":
                function, exact = _safe_reduction(choose(self.draw, REDUCTIONS), last)
                self.ops.append(f"{function}(keepdims=False)")
                bound = _reduced_bound(function, last.bound)
                expr = _reduction(function, last.name, 1, None, False)
                return self.new(expr, "M", last.dtype,
                                last.exact and exact, bound, last.special)  # fmt: skip
            if fitting:
                return fitting[-1]
            t = next(v for v in reversed(self.values) if v.kind == "MN")
            tame = not t.centered and t.bound * MAX_COLS <= LIMITS[t.dtype]
            function = "sk.sum" if tame else "sk.max"
            self.ops.append(f"{function}(keepdims=False)")
            return self.new(f"{function}({t.name}, axis=1)", "M", t.dtype, False,
                            t.bound * MAX_COLS, t.special)  # fmt: skip
        # A block: the latest vector spread over the latest block.
        t = fitting[-1]
        col = {"M": f"{last.name}[:, None]", "M1": last.name, "N": last.name}[last.kind]
        if last.special and t.special:
            expr = f"jnp.maximum({t.name}, {col})"
        else:
            expr = (
                f"{t.name} + {col}"
                if self.draw(st.booleans())
                else f"{col} * jnp.ones_like({t.name})"
            )
        self.ops.append("result: " + expr.replace(t.name, "t").replace(last.name, "r"))
        return self.new(expr, "MN", promote(last.dtype, t.dtype), False,
                        last.bound + t.bound, last.special or t.special)  # fmt: skip


def _safe_reduction(reduction: tuple[str, bool], value: Value) -> tuple[str, bool]:
    """`function`, or a row max where it would not be a fair test on `value`: a mean or a
    variance of infinities, a sum of a centred block (rounding error alone), an overflow."""
    function, _ = reduction
    unfair = (
        (value.special and function in ("jnp.mean", "jnp.var", "jnp.std"))
        or (value.centered and ("sum" in function or "mean" in function))
        or _reduced_bound(function, value.bound) > LIMITS[value.dtype]
        or (function in ("jnp.var", "jnp.std") and (2 * value.bound) ** 2 > LIMITS[value.dtype])
    )
    return ("sk.max", True) if unfair else reduction


def _reduced_bound(function: str, bound: float) -> float:
    if "sum" in function:
        return bound * MAX_COLS
    if function == "jnp.var":
        return (2 * bound) ** 2
    if function == "jnp.std":
        return 2 * bound
    return bound


def _reduction(function: str, name: str, axis: int, keepdims: bool | None, method: bool) -> str:
    args = f"axis={axis}" + ("" if keepdims is None else f", keepdims={keepdims}")
    if function == "mean by sk.dim":
        return f'sk.sum({name}, {args}) / sk.dim("N")'
    if method:  # the array method: t.sum(axis=1)
        return f"{name}.{function.split('.')[1]}({args})"
    return f"{function}({name}, {args})"


def _binary_bound(what: str, a: float, b: float) -> float:
    if what == "add":
        return a + b
    if what == "mul":
        return a * b
    if what == "div":
        return a
    return max(a, b)


def _smem_bytes(bm: int, n: int, blocks: int, columns: bool) -> int:
    """About what `blocks` float32 blocks of `bm` rows take in shared memory: rows wider than
    one TMA box (256) are copied in equal boxes of a multiple of 8 columns, or of 128 bytes of
    a per-column operand (`columns`); vectors add a little."""
    boxes = math.ceil(n / 256)
    step = 64 if columns else 8
    width = boxes * math.ceil(math.ceil(n / boxes) / step) * step
    return blocks * bm * width * 4 + 12_288


def _sizes(fixed: tuple[int, ...]) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(fixed), st.integers(1, max(fixed)))


def _operand(draw: Any, name: str, dims: str, dtype: str) -> Operand:
    specific = {"float32": "Float32", "bfloat16": "BFloat16", "float16": "Float16"}[dtype]
    annotation = choose(draw, ["Float", "Float", specific])
    return Operand(name, dims, annotation, dtype, choose(draw, FILLS))


@st.composite
def cases(draw: Any) -> Case:
    m = draw(_sizes(ROWS))
    n = draw(_sizes(COLS))
    # Blocks of more than 64 rows fit in shared memory next to each other for narrow rows only.
    bm = choose(draw, ROW_BLOCKS) if n <= 100 else 64
    dtype = choose(draw, ["float32"] * 4 + ["bfloat16"] * 3 + ["float16"])

    def other_dtype() -> str:
        return choose(draw, ([dtype] * 3 + ["float32", "bfloat16"]))

    operands = [_operand(draw, "x", "M N", dtype)]
    if draw(st.integers(0, 3)) == 0:
        operands.append(_operand(draw, "y", "M N", other_dtype()))
    if draw(st.integers(0, 2)) == 0:
        operands.append(_operand(draw, "w", " N", other_dtype()))
    if draw(st.integers(0, 4)) == 0:
        operands.append(_operand(draw, "r", " M", other_dtype()))
    shift = choose(draw, [0.0, 0.0, -8.0, 8.0])
    specials = draw(st.integers(0, 9)) == 0
    consts: dict[str, Any] = {"BM": bm}
    if draw(st.integers(0, 3)) == 0:
        consts["scale"] = choose(draw, [0.5, -1.5, 3.0])
    body = Body(draw, consts.get("scale"), one_block=m <= min(ROW_BLOCKS))

    loads: list[str] = []
    bound = abs(shift) + 8.0
    for o in operands:
        fill = f"fill={o.fill}" if o.fill else ""
        if draw(st.integers(0, 5)) == 0:
            loads.append(f"{o.name}v = {o.name}.load({fill})")
        else:
            loads.append(f"{o.name}v = sk.load({o.name}{', ' + fill if fill else ''})")
        kind = {"M N": "MN", " M": "M", " N": "N"}[o.dims]
        special = specials and o.name == "x"
        body.values.append(Value(f"{o.name}v", kind, o.dtype, True, bound, special))
        body.dtypes.add(o.dtype)
    if draw(st.integers(0, 7)) == 0:  # the same operand loaded again, with the same fill
        fill = f", fill={operands[0].fill}" if operands[0].fill else ""
        loads.append(f"xv2 = sk.load(x{fill})")
        body.values.append(Value("xv2", "MN", dtype, True, bound, specials))
    shifted = draw(st.integers(0, 5)) == 0
    if shifted:  # the block of x a few rows earlier or later (at most one block back)
        offset = choose(draw, [-1, -3, -64, 1, 5])
        fill = f", fill={operands[0].fill}" if operands[0].fill else ""
        loads.append(f'xs = sk.load(x, offset={{"M": {offset}}}{fill})')
        body.values.append(Value("xs", "MN", dtype, True, bound, specials))
        body.ops.append("shifted load")

    steps = draw(st.integers(1, 5)) if draw(st.integers(0, 7)) else draw(st.integers(6, 10))
    for _ in range(steps):
        body.step()
    if any("eps" in line for line in body.lines):
        consts["eps"] = choose(draw, [1e-5, 1e-3])

    results_kinds = choose(
        draw,
        [("MN",), ("MN",), ("M",), ("M",), ("MN", "M"), ("MN", "M"), ("M", "MN"), ("MN", "MN")],
    )
    returned: list[Value] = []
    for kind in results_kinds:
        returned.append(body.result(kind))
    result_types = []
    # The declaration traces a `Float` operand as float32: a result's dtype is known there only
    # when every operand's annotation names one dtype.
    concrete = all(o.annotation != "Float" for o in operands) and not body.weak
    for i, (value, kind) in enumerate(zip(returned, results_kinds, strict=True)):
        specific = {"float32": "Float32", "bfloat16": "BFloat16", "float16": "Float16"}[value.dtype]
        base = choose(draw, ["Float", "Float", specific]) if concrete else "Float"
        cast = draw(st.integers(0, 7)) == 0
        dims = "M N" if kind == "MN" else " M"
        result_types.append(f'{base}[Array, "{dims}"]')
        if cast and base == "Float":
            # As the gallery does: compute in float32, return the input's dtype.
            returned[i] = body.new(f"{value.name}.astype(x.dtype)", value.kind, dtype,
                                   value.exact, value.bound, value.special)  # fmt: skip
    annotation = result_types[0] if len(result_types) == 1 else f"tuple[{', '.join(result_types)}]"
    # The blocks must fit in shared memory: the 2-D operands' and the 2-D results'.
    blocks = sum(o.dims == "M N" for o in operands) + results_kinds.count("MN")
    blocks += 2 if body.scanned else 0
    blocks += 2 if shifted else 0  # the rows above and below x's block
    columns = any(o.dims == " N" for o in operands)
    # At the declaration, the whole dim N is one quantum wide (8 columns, or 128 bytes of a
    # per-column operand): the row block must fit there, then N at the call.
    while bm > 64 and _smem_bytes(bm, 1, blocks, columns) > 232_448:
        bm -= 64
    consts["BM"] = bm
    while _smem_bytes(bm, n, blocks, columns) > 232_448 and n > 8:
        n -= 8
    if body.sliced:
        n = max(16, n // 16 * 16)
    n = max(n, body.min_columns)

    params = [f'{o.name}: {o.annotation}[Array, "{o.dims}"],' for o in operands]
    params.append("*,")
    params.append(f"BM: sk.Const[int] = {bm},")
    for name in ("scale", "eps"):
        if name in consts:
            params.append(f"{name}: sk.Const[float] = {consts[name]!r},")
    statements = [*loads, *body.lines, f"return {', '.join(v.name for v in returned)}"]
    source = "\n".join(
        [
            "import jax",
            "import jax.numpy as jnp",
            "from jaxtyping import Array, BFloat16, Float, Float16, Float32",
            "",
            "import statickernel as sk",
            "",
            "",
            '@sk.kernel(tile={"M": "BM"})',
            f"def {KERNEL_NAME}(",
            *[f"    {p}" for p in params],
            f") -> {annotation}:",
            textwrap.indent("\n".join(statements), "    "),
            "",
        ]
    )
    return Case(
        source=source,
        operands=tuple(operands),
        results=tuple(results_kinds),
        consts=tuple(consts.items()),
        m=m,
        n=n,
        seed=draw(st.integers(0, 2**32 - 1)),
        shift=shift,
        specials=specials,
        precision=next(d for d in ("bfloat16", "float16", "float32") if d in body.dtypes),
        ops=tuple(body.ops),
        how=choose(draw, ["direct"] * 8 + ["jit", "vmap"]),
    )


# --- running a case ----------------------------------------------------------------------------


def make_args(case: Case, salt: int = 0) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng([case.seed, salt])
    args = []
    for o in case.operands:
        shape = {"M N": (case.m, case.n), " M": (case.m,), " N": (case.n,)}[o.dims]
        values = np.clip(2 * rng.standard_normal(shape), -8, 8) + case.shift
        if case.specials and o.name == "x":
            spots = rng.random(shape)
            values[spots < 0.03] = -np.inf
            values[spots > 0.99] = np.inf
            values[(spots > 0.5) & (spots < 0.505)] = np.nan
        args.append(jnp.asarray(values.astype(np.float32), o.dtype))
    return tuple(args)


class _Whole:
    """An operand as the reference sees it: the whole array, loaded as it is."""

    def __init__(self, array: jax.Array):
        self.array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def load(self, *, fill: Any = 0, offset: Mapping[str, int] | None = None) -> jax.Array:
        """The whole array, which has no elements past its edge; shifted along its rows by
        `offset`, the fill where a row lies outside it."""
        if not offset:
            return self.array
        ((_, k),) = offset.items()
        rows = self.array.shape[0]
        pad = jnp.full((abs(k), *self.array.shape[1:]), fill, self.array.dtype)
        if k < 0:
            return jnp.concatenate([pad, self.array])[:rows]
        return jnp.concatenate([self.array, pad])[k : k + rows]


_REFERENCE_DIMS: contextvars.ContextVar[Mapping[str, int] | None] = contextvars.ContextVar(
    "reference_dims", default=None
)


def _reference_load(
    operand: _Whole, *, fill: Any = 0, offset: Mapping[str, int] | None = None
) -> jax.Array:
    return operand.load(fill=fill, offset=offset)


def _reference_dim(name: str) -> int:
    dims = _REFERENCE_DIMS.get()
    assert dims is not None, "sk.dim outside the reference"
    return dims[name]


def nan_max(x: Any, *, axis: int | None = None, keepdims: bool = False) -> jax.Array:
    """jnp.max as jnp documents it, NaN wherever a NaN is reduced. On the CPU, XLA's max over
    rows skips NaN for some shapes (64 rows or more) and not for others."""
    return _nan_carrying(jnp.max, x, axis, keepdims)


def nan_min(x: Any, *, axis: int | None = None, keepdims: bool = False) -> jax.Array:
    """jnp.min as jnp documents it; see nan_max."""
    return _nan_carrying(jnp.min, x, axis, keepdims)


def _nan_carrying(reduce: Any, x: Any, axis: int | None, keepdims: bool) -> jax.Array:
    x = jnp.asarray(x)
    nans = jnp.any(jnp.isnan(x), axis=axis, keepdims=keepdims)
    return jnp.where(nans, jnp.nan, reduce(x, axis=axis, keepdims=keepdims)).astype(x.dtype)


class _ReferenceNumpy:
    """jax.numpy for the reference, with its row max and min carrying NaN (see nan_max)."""

    max = amax = staticmethod(nan_max)
    min = amin = staticmethod(nan_min)

    def __getattr__(self, name: str) -> Any:
        return getattr(jnp, name)


# What `sk` is to the reference: loads return the array, reductions are jnp's.
REFERENCE_SK = types.SimpleNamespace(
    load=_reference_load,
    sum=jnp.sum,
    max=nan_max,
    min=nan_min,
    dim=_reference_dim,
)


def reference_function(source: str, filename: str) -> Callable[..., Any]:
    """The kernel's body from `source`, as a plain function whose `sk` is REFERENCE_SK.

    It is the same code object the decorator received (compiled from the same text under the
    same file name), so its lines are the kernel's lines."""
    module = compile(source, filename, "exec")
    code = next(
        c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == KERNEL_NAME
    )
    namespace = {
        "__builtins__": builtins,
        "jax": jax,
        "jnp": _ReferenceNumpy(),
        "np": np,
        "sk": REFERENCE_SK,
    }
    function = types.FunctionType(code, namespace, KERNEL_NAME)

    def run(*args: jax.Array, **consts: Any) -> Any:
        dims = {"M": int(args[0].shape[0]), "N": int(args[0].shape[1])}
        token = _REFERENCE_DIMS.set(dims)
        try:
            return function(*(_Whole(a) for a in args), **consts)
        finally:
            _REFERENCE_DIMS.reset(token)

    return run


def permuted(case: Case, args: tuple[jax.Array, ...], perm: np.ndarray) -> tuple[jax.Array, ...]:
    """The arguments with their columns in the order `perm`; per-row vectors are unchanged."""
    # In NumPy: a gather in jnp would compile anew for every shape.
    return tuple(
        jnp.asarray(np.asarray(a)[:, perm] if o.dims == "M N" else np.asarray(a)[perm])
        if o.dims != " M"
        else a
        for o, a in zip(case.operands, args, strict=True)
    )


@dataclasses.dataclass(frozen=True)
class Expected:
    """A reference result, with how much rounding alone moves it."""

    value: np.ndarray
    noise: np.ndarray  # how far the reference moves when its columns come in another order
    unstable: np.ndarray  # where a nan or infinity comes and goes with that order


def expected_results(case: Case, run: Callable[..., Any], args: tuple[jax.Array, ...]):
    """The reference's results, and how far rounding alone moves them.

    Besides the reference itself (plain jnp, op by op), the same body is evaluated in ways that
    only round differently: on permuted columns, with the blocks permuted back (a row-local body
    is equivariant under a permutation of the columns, so only the order of the reductions
    changes), and under `jax.jit`, where XLA fuses the ops and may keep bfloat16 intermediates
    in float32, as the kernel's compiled body may. The kernel may differ from the reference by
    a few times as much as these differ from it."""
    consts = dict(case.consts)
    first = _parts(run(*args, **consts))
    jitted = jax.jit(lambda *a: run(*a, **consts))
    rng = np.random.default_rng([case.seed, 1])
    others = [_parts(jitted(*args))]
    for perm, how in ((np.arange(case.n)[::-1], run), (rng.permutation(case.n), jitted)):
        back = np.argsort(perm)
        parts = _parts(how(*permuted(case, args, perm), **({} if how is jitted else consts)))
        others.append([p[:, back] if p.ndim == 2 else p for p in parts])
    expected = []
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite: not compared
        for i, value in enumerate(first):
            expected.append(_expected(value, [other[i] for other in others]))
    return expected


def _expected(value: np.ndarray, others: list[np.ndarray]) -> Expected:
    """`value` with its noise: how far the other evaluations are from it."""
    noise = np.zeros(value.shape, np.float32)
    unstable = np.zeros(value.shape, bool)
    for other in others:
        a, b = np.asarray(value, np.float32), np.asarray(other, np.float32)
        both = np.isfinite(a) & np.isfinite(b)
        noise = np.maximum(noise, np.where(both, np.abs(a - b), 0.0))
        unstable |= (np.isnan(a) != np.isnan(b)) | (np.isposinf(a) != np.isposinf(b))
        unstable |= np.isneginf(a) != np.isneginf(b)
    return Expected(value, noise, unstable)


def _parts(result: Any) -> list[np.ndarray]:
    return [np.asarray(p) for p in (result if isinstance(result, tuple) else (result,))]


# Tolerances, relative to the largest magnitude in the same row of the result (at least 1), on
# top of a few times the rounding noise measured in that row.
TOLERANCE = {"float32": 2e-5, "bfloat16": 2e-2, "float16": 4e-3}
NOISE_FACTOR = 4.0


def _classes(a: np.ndarray) -> np.ndarray:
    return np.select(
        [np.isnan(a), np.isposinf(a), np.isneginf(a)], ["nan", "+inf", "-inf"], "finite"
    )


class Problem(NamedTuple):
    symptom: str  # what groups it with others: "values", "shape", "expected nan, got +inf", ...
    text: str


def compare(got: Any, want: Expected, precision: str) -> list[Problem]:
    """The differences between a kernel's result and the reference's."""
    problems: list[Problem] = []
    got = np.asarray(got)
    if got.shape != want.value.shape:
        return [Problem("shape", f"shape {got.shape}, expected {want.value.shape}")]
    if np.dtype(got.dtype) != np.dtype(want.value.dtype):
        problems.append(Problem("dtype", f"dtype {got.dtype}, expected {want.value.dtype}"))
    g = np.asarray(got, np.float32)
    w = np.asarray(want.value, np.float32)
    got_classes, want_classes = _classes(g), _classes(w)
    differ = (got_classes != want_classes) & ~want.unstable
    for expected, found in sorted(
        {(str(a), str(b)) for a, b in zip(want_classes[differ], got_classes[differ], strict=True)}
    ):
        where = np.argwhere(differ & (want_classes == expected) & (got_classes == found))
        problems.append(
            Problem(
                f"expected {expected}, got {found}",
                f"{len(where)} of {g.size} values are {found} where the reference has "
                f"{expected}, e.g. at {where[:4].tolist()}: got "
                f"{[float(g[tuple(i)]) for i in where[:4]]}",
            )
        )
    finite = np.isfinite(g) & np.isfinite(w)
    tol = TOLERANCE[precision]
    magnitude = np.where(np.isfinite(w), np.abs(w), 0.0)
    if w.ndim == 2:
        scale = np.maximum(1.0, magnitude.max(axis=1, keepdims=True, initial=0.0))
        noise = want.noise.max(axis=1, keepdims=True, initial=0.0)
    else:
        scale = np.maximum(1.0, magnitude)
        noise = want.noise
    error = np.where(finite, np.abs(g - w), 0.0)
    bad = error > tol * scale + NOISE_FACTOR * noise
    if bad.any():
        where = np.argwhere(bad)[:4].tolist()
        problems.append(
            Problem(
                "values",
                f"{int(bad.sum())} of {g.size} values differ beyond {tol} of the row's scale "
                f"(+ {NOISE_FACTOR}x the rounding noise), e.g. at {where}: got "
                f"{[float(g[tuple(i)]) for i in where]}, expected "
                f"{[float(w[tuple(i)]) for i in where]}",
            )
        )
    return problems
