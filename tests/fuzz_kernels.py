"""Random kernel declarations for the fuzzer: hypothesis strategies that write kernel modules.

A declaration is the text of a whole module: imports, one `@sk.kernel` with a random tiling,
constants and operands, and a small body drawn from the ops statickernel supports. Some
declarations carry one planted mistake (a bad tiling, a bad constant, a wrong result
annotation, an op Mosaic GPU cannot lower); many more fail on their own, for instance when a
body reduces over a dim that the result needs. The fuzzer only checks the invariant, so a
declaration need not know whether it is valid.

Body values have a *kind*, the shape they have inside one block: "MN" a 2-D block, "M1" and
"1N" a reduction kept with keepdims, "M" and "N" vectors; and a *class*, "f" for floats and
"i" for integers. The generator combines values only where jnp broadcasting is defined and
applies ops only to the classes they suit, so that valid bodies are common.
"""

import dataclasses
import textwrap
from typing import Any, NamedTuple

from hypothesis import strategies as st

__all__ = ["COL_BLOCKS", "KERNEL_NAME", "ROW_BLOCKS", "Declaration", "declarations"]

KERNEL_NAME = "fuzzed"
DIMS_OF_KIND = {"MN": "M N", "M": " M", "N": " N"}

# Constants: valid defaults, and the mistakes a user makes with them.
ROW_BLOCKS = (64, 128, 192, 256)
COL_BLOCKS = (8, 16, 32, 64, 128, 256)
BAD_CONSTANTS = (
    ("BM", "sk.Const[int]", "96"),  # not a multiple of 64
    ("BM", "sk.Const[int]", "100"),
    ("BM", "sk.Const[int]", "32"),
    ("BM", "sk.Const[int]", "512"),  # over the TMA box
    ("BM", "sk.Const[int]", "0"),  # not positive
    ("BM", "sk.Const[int]", "64.0"),  # not an int
    ("BM", "sk.Const[int]", '"64"'),
    ("BM", "int", "64"),  # not marked as a constant
    ("BM", "sk.Const[str]", '"a"'),
    ("BN", "sk.Const[int]", "12"),  # not a multiple of 8
    ("BN", "sk.Const[int]", "4"),
    ("BN", "sk.Const[int]", "512"),
)

# Module-level values a body may read: a weak Python scalar and a captured float32 scalar.
MODULE_SCALARS = ("OFFSET = 2", "CAPTURED = jnp.float32(0.75)")


class Op(NamedTuple):
    form: str
    accepts: str  # the classes of input it suits: "f", "i" or "fi"
    result: str | None = None  # the class of its result; None: the input's
    # Its output jumps (round, sign, comparisons) or turns slowly (sin of a large sum) where its
    # input moves by a rounding error, and the kernel and the reference round differently:
    # such an op only takes loaded values, which both see exactly.
    exact: bool = False


UNARY = (
    Op("jnp.exp({a})", "f"),
    Op("jnp.tanh({a})", "f"),
    Op("jax.nn.sigmoid({a})", "f"),
    Op("jnp.sqrt(jnp.abs({a}))", "f"),
    Op("jnp.log(1 + {a} * {a})", "f"),
    Op("jax.lax.rsqrt(1 + {a} * {a})", "f"),
    Op("jnp.sin({a})", "f", exact=True),
    Op("jnp.cos({a})", "f", exact=True),
    Op("jax.lax.erf({a})", "f"),
    Op("jnp.exp2(jnp.minimum({a}, 8))", "f"),
    Op("jnp.round({a})", "f", exact=True),
    Op("-{a}", "fi"),
    Op("{a} * {a}", "fi"),
    Op("jnp.abs({a})", "fi"),
    Op("jnp.sign({a})", "fi", exact=True),
    Op("jnp.maximum({a}, 0)", "fi"),
    Op("jnp.minimum({a}, 3)", "fi"),
    Op("jnp.where({a} > 0, {a}, -{a})", "fi"),
    Op("jnp.where({a} > 0, {a}, 0.1 * {a})", "f"),
    Op("{a} + 1", "fi"),
    Op("{a} * 3", "fi"),
    Op("2.0 * {a}", "fi", "f"),
    Op("{a} - 0.5", "fi", "f"),
    Op("{a} ** 2", "fi"),
    Op("jnp.square({a})", "fi"),
    Op("jnp.clip({a}, -2, 2)", "fi"),
    Op("{a} / 3.0", "fi", "f"),
    Op("{a} % 3.0", "f"),
    Op("jnp.fmod({a}, -0.7)", "f"),
    Op("{a}.astype(jnp.float32)", "fi", "f"),
    Op("jnp.clip({a}, -100, 100).astype(jnp.int32)", "f", "i", exact=True),
    Op("{a} // 3", "i"),
    Op("{a} % 5", "i"),
    Op("{a} >> 1", "i"),
    Op("{a} << 1", "i"),
    Op("({a} & 7) | 1", "i"),
    Op("{a} ^ 3", "i"),
    # Literals that are not weakly typed, and values read from the module or the bindings.
    Op("{a} * np.float32(1.5)", "fi", "f"),
    Op("jnp.bfloat16(0.25) + {a}", "fi", "f"),
    Op("{a} + np.int32(2)", "fi"),
    Op("{a} * CAPTURED", "fi", "f"),
    Op("{a} + OFFSET", "fi"),
    Op("{a} * (1.0 / sk.dim('N'))", "fi", "f"),
    Op("{a} + sk.dim('M')", "fi"),
)
SCALE = Op("{a} * s", "fi", "f")
BINARY = (
    Op("{a} + {b}", "fi"),
    Op("{a} - {b}", "fi"),
    Op("{a} * {b}", "fi"),
    Op("{a} / (1.0 + {b} * {b})", "fi", "f"),
    Op("{a} // (1 + {b} * {b})", "i"),
    Op("jnp.maximum({a}, {b})", "fi"),
    Op("jnp.minimum({a}, {b})", "fi"),
    Op("jnp.where({a} > {b}, {a}, {b})", "fi"),
    Op("jnp.where(({a} > 0) & ({b} < 1), {a}, {b})", "fi", exact=True),
    Op("({a} > {b}).astype(jnp.float32)", "fi", "f", exact=True),
    Op("jnp.arctan2({a}, {b})", "f"),
)
REDUCTIONS = ("sk.sum", "sk.max", "sk.min", "jnp.sum", "jnp.max", "jnp.min")
# Ops Mosaic GPU cannot lower, with the kind the result would have.
UNSUPPORTED = (
    ("jnp.dot({a}, {a}.T)", "MN"),
    ("jnp.cumsum({a}, axis=1)", "MN"),
    ("jnp.argmax({a}, axis=1).astype(jnp.float32)", "M"),
    ("{a}.T", "MN"),
    ("jnp.floor({a})", "MN"),
    ("{a} ** 1.5", "MN"),
    ("jnp.log1p({a})", "MN"),
    ("jnp.sum({a}) + {a}", "MN"),
)
MISTAKES = (
    "unknown-tile-dim",
    "tile-by-unknown-constant",
    "tile-by-float-constant",
    "bad-constant",
    "huge-blocks",
    "result-rank",
    "result-dtype",
    "result-not-derivable",
    "unsupported-op",
    "bad-broadcast",
    "operand-not-jaxtyping",
)


@dataclasses.dataclass(frozen=True)
class Declaration:
    """A kernel module's text and what the call generator needs to know about it."""

    source: str
    operands: tuple[tuple[str, tuple[str, ...]], ...]  # name, dims
    consts: tuple[tuple[str, str], ...]  # name, annotation
    mistake: str | None


class Value(NamedTuple):
    name: str
    kind: str
    cls: str


def combine(a: str, b: str) -> str | None:
    """The kind of `a <op> b` under jnp broadcasting, or None when it is not one of ours."""
    if a == b:
        return a
    pair = {a, b}
    if "MN" in pair and pair - {"MN"} <= {"M1", "1N", "N"}:
        return "MN"
    if pair == {"M1", "1N"}:
        return "MN"
    if pair == {"1N", "N"}:
        return "1N"
    return None


class _Body:
    """Writes body statements, tracking each value's kind and class."""

    def __init__(self, draw: Any, tile: dict[str, str], has_scale: bool):
        self.draw = draw
        self.tile = tile
        self.unary_ops = UNARY + ((SCALE,) if has_scale else ())
        self.values: list[Value] = []
        self.lines: list[str] = []

    def new(self, expr: str, kind: str, cls: str) -> Value:
        value = Value(f"t{len(self.lines)}", kind, cls)
        self.lines.append(f"{value.name} = {expr}")
        self.values.append(value)
        return value

    def pick(self, kinds: set[str] | None = None) -> Value | None:
        options = [v for v in self.values if kinds is None or v.kind in kinds]
        if not options:
            return None
        # Mostly the latest value, so that the ops form a chain that reaches the result.
        if self.draw(st.booleans()):
            return options[-1]
        return self.draw(st.sampled_from(options))

    def step(self) -> None:
        category = self.draw(
            st.sampled_from(
                ["unary"] * 4 + ["binary"] * 3 + ["reduce"] * 2 + ["normalize"] * 2 + ["reshape"]
            )
        )
        has_block = any(v.kind == "MN" for v in self.values)
        if category == "reduce" and has_block:
            self.reduce()
        elif category == "normalize" and has_block:
            self.normalize()
        elif category == "binary":
            self.binary()
        elif category == "reshape" and self.pick({"M1", "1N", "M", "N"}) is not None:
            self.reshape()
        else:
            self.unary()

    def unary(self) -> None:
        a = self.pick()
        assert a is not None
        ops = [op for op in self.unary_ops if a.cls in op.accepts and _suits(op, a)]
        op = self.draw(st.sampled_from(ops))
        self.new(op.form.format(a=a.name), a.kind, op.result or a.cls)

    def binary(self) -> None:
        a = self.pick()
        assert a is not None
        partners = [v for v in self.values if combine(a.kind, v.kind) is not None]
        b = self.draw(st.sampled_from(partners))
        if self.draw(st.booleans()):
            a, b = b, a
        cls = "f" if "f" in (a.cls, b.cls) else "i"
        ops = [op for op in BINARY if cls in op.accepts and _suits(op, a, b)]
        op = self.draw(st.sampled_from(ops))
        kind = combine(a.kind, b.kind)
        assert kind is not None
        self.new(op.form.format(a=a.name, b=b.name), kind, op.result or cls)

    def reduce(self) -> None:
        a = self.pick({"MN"})
        assert a is not None
        axis = self.draw(st.sampled_from([0, 1]))
        keepdims = self.draw(st.booleans())
        functions: list[str] = list(REDUCTIONS)
        # A mean divides by the block's extent along its axis: over a tiled dim that is the
        # block size, not the remainder, at the edge; the reference cannot follow that.
        if ("M" if axis == 0 else "N") not in self.tile:
            functions.append("jnp.mean")
        function = self.draw(st.sampled_from(functions))
        kind = ("1N" if keepdims else "N") if axis == 0 else ("M1" if keepdims else "M")
        cls = "f" if function == "jnp.mean" else a.cls
        self.new(f"{function}({a.name}, axis={axis}, keepdims={keepdims})", kind, cls)

    def normalize(self) -> None:
        """A block combined with its own reduction, as softmax and norms do."""
        a = self.pick({"MN"})
        assert a is not None
        axis = self.draw(st.sampled_from([0, 1]))
        function = self.draw(st.sampled_from(REDUCTIONS))
        ops = [op for op in BINARY if a.cls in op.accepts and not op.exact]
        op = self.draw(st.sampled_from(ops))
        reduced = f"{function}({a.name}, axis={axis}, keepdims=True)"
        self.new(op.form.format(a=a.name, b=reduced), "MN", op.result or a.cls)

    def reshape(self) -> None:
        a = self.pick({"M1", "1N", "M", "N"})
        assert a is not None
        if a.kind == "M1":
            form = self.draw(st.sampled_from(["jnp.squeeze({a}, axis=1)", "sk.max({a}, axis=1)"]))
            self.new(form.format(a=a.name), "M", a.cls)
        elif a.kind == "1N":
            form = self.draw(st.sampled_from(["jnp.squeeze({a}, axis=0)", "sk.sum({a}, axis=0)"]))
            self.new(form.format(a=a.name), "N", a.cls)
        elif a.kind == "M":
            form = self.draw(st.sampled_from(["{a}[:, None]", "jnp.expand_dims({a}, 1)"]))
            self.new(form.format(a=a.name), "M1", a.cls)
        else:
            self.new(f"{a.name}[None, :]", "1N", a.cls)

    def unsupported(self) -> None:
        a = self.pick({"MN"}) or self.pick()
        assert a is not None
        form, kind = self.draw(st.sampled_from(UNSUPPORTED))
        self.new(form.format(a=a.name), kind, "f")

    def bad_broadcast(self) -> None:
        """A per-row vector meeting a block as if it ran along the columns."""
        a = self.pick({"MN"}) or self.pick()
        assert a is not None
        reduced = self.new(f"sk.sum({a.name}, axis=1)", "M", a.cls)
        self.new(f"{a.name} + {reduced.name}", a.kind, a.cls)

    def result(self, allowed: set[str]) -> Value:
        """A value to return, turned into a declarable kind (MN, M or N) where needed."""
        blocks = [v for v in self.values if v.kind == "MN"]
        fitting = [
            v
            for v in self.values
            if _declared_kind(v.kind) in allowed or (v.kind in ("M1", "1N") and blocks)
        ]
        last = self.values[-1]
        if last in fitting and self.draw(st.booleans()):
            value = last  # usually the value the body computed last
        else:
            value = self.draw(st.sampled_from(fitting or self.values))
        if value.kind in ("M1", "1N"):
            squeezed = _declared_kind(value.kind)
            if blocks and (squeezed not in allowed or self.draw(st.booleans())):
                block = self.draw(st.sampled_from(blocks))
                expr = f"jnp.broadcast_to({value.name}, {block.name}.shape)"
                return self.new(expr, "MN", value.cls)
            axis = 1 if value.kind == "M1" else 0
            return self.new(f"jnp.squeeze({value.name}, axis={axis})", squeezed, value.cls)
        return value


def _suits(op: Op, *inputs: Value) -> bool:
    """Whether `op` may take these values: any, unless it needs exact (loaded) inputs. Integer
    values are always exact."""
    return not op.exact or all(v.name.startswith("a") or v.cls == "i" for v in inputs)


def _declared_kind(kind: str) -> str:
    return {"M1": "M", "1N": "N"}.get(kind, kind)


def _result_allowed(tile: dict[str, str]) -> set[str]:
    """Result kinds that hold every tiled dim."""
    allowed = {"MN"}
    if "N" not in tile:
        allowed.add("M")
    if "M" not in tile:
        allowed.add("N")
    return allowed


def _result_type(draw: Any, value: Value, mistake: str | None) -> str:
    floats = ["Float"] * 8 + ["Float32", "BFloat16"]
    ints = ["Int32"] * 3 + ["Int"]
    dtype = draw(st.sampled_from(floats if value.cls == "f" else ints))
    dims = DIMS_OF_KIND.get(value.kind, "M N")
    if mistake == "result-rank":
        dims = " M" if dims == "M N" else "M N"
    elif mistake == "result-dtype":
        dtype = "Int32" if value.cls == "f" else "Float"
    elif mistake == "result-not-derivable":
        dims = "M K"
    return f'{dtype}[Array, "{dims}"]'


@st.composite
def declarations(draw: Any) -> Declaration:
    mistake = draw(st.sampled_from([None] * 30 + list(MISTAKES)))

    # Operands: x0 is a 2-D block, and the others blocks or vectors along M or N; or, in an
    # "outer" kernel, x0 runs along M and x1 along N, and only the result is 2-D. A fifth of
    # the kernels take integers.
    outer = draw(st.integers(0, 7)) == 0
    count = draw(st.integers(1, 3))
    operand_dims = [("M",), ("N",)] if outer else [("M", "N")]
    operand_dims += [
        draw(st.sampled_from([("M", "N"), ("N",), ("M",)]))
        for _ in range(count - len(operand_dims))
    ]
    integers = draw(st.integers(0, 4)) == 0
    operand_types = [
        draw(
            st.sampled_from(
                ["Int32"] * 3 + ["Int", "Float"]
                if integers
                else ["Float"] * 6 + ["Float32", "BFloat16", "Float16"]
            )
        )
        for _ in operand_dims
    ]

    # Tiling and constants.
    tile = draw(st.sampled_from([{}, {"M": "BM"}, {"N": "BN"}, {"M": "BM", "N": "BN"}]))
    consts: dict[str, tuple[str, str]] = {}  # name -> (annotation, default source)
    if "BM" in tile.values() or draw(st.booleans()):
        consts["BM"] = ("sk.Const[int]", str(draw(st.sampled_from(ROW_BLOCKS))))
    if "BN" in tile.values() or draw(st.booleans()):
        consts["BN"] = ("sk.Const[int]", str(draw(st.sampled_from(COL_BLOCKS))))
    if draw(st.booleans()):
        consts["s"] = ("sk.Const[float]", repr(draw(st.sampled_from([0.5, 2.0, -1.25]))))
    if draw(st.integers(0, 3)) == 0:
        consts["flag"] = ("sk.Const[bool]", repr(draw(st.booleans())))

    if mistake == "unknown-tile-dim":
        tile = {**tile, "K": "BM"}
        consts.setdefault("BM", ("sk.Const[int]", "64"))
    elif mistake == "tile-by-unknown-constant":
        tile = {**tile, "M": "BQ"}
    elif mistake == "tile-by-float-constant":
        tile = {**tile, "M": "s"}
        consts["s"] = ("sk.Const[float]", "64.0")
    elif mistake == "bad-constant":
        name, annotation, default = draw(st.sampled_from(BAD_CONSTANTS))
        consts[name] = (annotation, default)
    elif mistake == "huge-blocks":
        tile = {"M": "BM", "N": "BN"}
        consts["BM"] = ("sk.Const[int]", "256")
        consts["BN"] = ("sk.Const[int]", "256")

    # The body.
    body = _Body(draw, tile, "s" in consts and mistake != "tile-by-float-constant")
    loads: list[str] = []
    for i, (dims, dtype) in enumerate(zip(operand_dims, operand_types, strict=True)):
        if i > (1 if outer else 0) and draw(st.integers(0, 5)) == 0:
            continue  # an operand the body never loads
        is_int = dtype.startswith("Int")
        fills = ["", "0", "-1", "7"] if is_int else ["", "0.0", "-jnp.inf", "jnp.inf", "1.0", "-1"]
        fill = draw(st.sampled_from(fills))
        argument = f"fill={fill}" if fill else ""
        if draw(st.booleans()):
            loads.append(f"a{i} = sk.load(x{i}{', ' + argument if argument else ''})")
        else:
            loads.append(f"a{i} = x{i}.load({argument})")
        kind = "MN" if len(dims) == 2 else dims[0]
        body.values.append(Value(f"a{i}", kind, "i" if is_int else "f"))
    if outer:
        classes = {v.cls for v in body.values[:2]}
        body.new("a0[:, None] * a1[None, :]", "MN", "f" if "f" in classes else "i")
    steps = draw(st.integers(0, 5))
    bad_step = draw(st.integers(0, steps))
    for i in range(steps + 1):
        if i == bad_step and mistake == "unsupported-op":
            body.unsupported()
        elif i == bad_step and mistake == "bad-broadcast":
            body.bad_broadcast()
        elif i < steps:
            body.step()
    if "flag" in consts and body.lines:
        last = body.values[-1].name
        body.lines.append(f"if flag:\n    {last} = -{last}")

    # The results: usually one, sometimes a tuple of two.
    allowed = {"MN"} if outer else _result_allowed(tile)
    returned = [body.result(allowed)]
    if draw(st.integers(0, 5)) == 0:
        returned.append(body.result(allowed))
    result_types = [_result_type(draw, value, mistake) for value in returned]
    annotation = result_types[0] if len(result_types) == 1 else f"tuple[{', '.join(result_types)}]"

    params = [
        f'x{i}: {t}[Array, "{" ".join(d) if len(d) == 2 else " " + d[0]}"],'
        for i, (d, t) in enumerate(zip(operand_dims, operand_types, strict=True))
    ]
    if mistake == "operand-not-jaxtyping":
        params[-1] = f"x{len(params) - 1}: jax.Array,"
    if consts:
        params.append("*,")
        params += [f"{name}: {ann} = {default}," for name, (ann, default) in consts.items()]
    statements = [*loads, *body.lines, f"return {', '.join(v.name for v in returned)}"]
    source = "\n".join(
        [
            "import jax",
            "import jax.numpy as jnp",
            "import numpy as np",
            "from jaxtyping import Array, BFloat16, Float, Float16, Float32, Int, Int32",
            "",
            "import statickernel as sk",
            "",
            *MODULE_SCALARS,
            "",
            "",
            f"@sk.kernel(tile={tile!r})",
            f"def {KERNEL_NAME}(",
            *[f"    {p}" for p in params],
            f") -> {annotation}:",
            textwrap.indent("\n".join(statements), "    "),
            "",
        ]
    )
    return Declaration(
        source=source,
        operands=tuple((f"x{i}", d) for i, d in enumerate(operand_dims)),
        consts=tuple((name, ann) for name, (ann, _) in consts.items()),
        mistake=mistake,
    )
