"""Turns a traced body into Pallas Mosaic GPU statements, one per equation.

Every value of a body lives in one of four register forms, its *kind*:
  tile    a 2-D block (rows, cols), in the WGMMA layout;
  row     a per-row vector (rows,), in the WGMMA layout reduced over columns;
  col     a per-column vector (cols,), in the WGMMA layout reduced over rows;
  scalar  a 0-d value.
jnp writes a per-row vector as (rows, 1) after `keepdims`; here it stays a vector and is
broadcast explicitly where it meets a tile, because Mosaic GPU cannot broadcast implicitly.

Import-time checks and code generation both run this translation, so an op the translation
accepts is an op the generated kernel contains.
"""

import dataclasses
import math

import numpy as np

from ._body import Atom, BodyTrace, Eqn
from ._errors import UnsupportedOpError
from ._printer import dtype_source, literal_source

__all__ = [
    "Carry",
    "DotUpdate",
    "Geometry",
    "LoopBlock",
    "Translation",
    "dtype_source",
    "full_source",
    "literal_source",
    "select_source",
    "translate",
]

TILE, ROW, COL, SCALAR = "tile", "row", "col", "scalar"
LOOP_PRIMS = frozenset({"sk_loop", "sk_map_blocks"})
LAYOUTS = {
    TILE: "plgpu.Layout.WGMMA",
    ROW: "plgpu.Layout.WGMMA.reduce(1)",
    COL: "plgpu.Layout.WGMMA.reduce(0)",
}

UNARY = {
    "neg": "lax.neg",
    "exp": "lax.exp",
    "exp2": "lax.exp2",
    "log": "lax.log",
    "tanh": "lax.tanh",
    "logistic": "lax.logistic",
    "rsqrt": "lax.rsqrt",
    "sqrt": "lax.sqrt",
    "sin": "lax.sin",
    "cos": "lax.cos",
    "abs": "lax.abs",
    "sign": "lax.sign",
    "erf": "lax.erf",
    "not": "lax.bitwise_not",
}
BINARY = {
    "add": "lax.add",
    "sub": "lax.sub",
    "mul": "lax.mul",
    "div": "lax.div",
    "max": "lax.max",
    "min": "lax.min",
    "rem": "lax.rem",
    "atan2": "lax.atan2",
    "and": "lax.bitwise_and",
    "or": "lax.bitwise_or",
    "xor": "lax.bitwise_xor",
    "lt": "lax.lt",
    "le": "lax.le",
    "gt": "lax.gt",
    "ge": "lax.ge",
    "eq": "lax.eq",
    "ne": "lax.ne",
    "shift_left": "lax.shift_left",
    "shift_right_logical": "lax.shift_right_logical",
    "shift_right_arithmetic": "lax.shift_right_arithmetic",
}
REDUCTIONS = {
    "reduce_sum": "lax.reduce_sum",
    "reduce_max": "lax.reduce_max",
    "reduce_min": "lax.reduce_min",
}
# stop_gradient is the identity in a forward pass (jax.nn.softmax calls it).
SHAPE_ONLY = {
    "broadcast_in_dim",
    "reshape",
    "squeeze",
    "expand_dims",
    "copy",
    "copy_p",
    "stop_gradient",
}
OTHER = {"integer_pow", "square", "convert_element_type", "select_n", "clamp", "round"}
SUPPORTED = frozenset(UNARY) | frozenset(BINARY) | frozenset(REDUCTIONS) | SHAPE_ONLY | OTHER
# Mosaic GPU computes on 8-bit integers only with bitwise ops and equality tests; the rest
# (arithmetic, order comparisons, selects) needs a 16- or 32-bit type.
EIGHT_BIT_OPS = frozenset({"and", "or", "xor", "not", "eq", "ne", "convert_element_type"})
_WRITTEN_AS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%", "neg": "-x"}
_WRITTEN_AS |= {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "select_n": "jnp.where"}
_WRITTEN_AS |= {"max": "jnp.maximum", "min": "jnp.minimum", "clamp": "jnp.clip"}

# What the user wrote, and what to write instead, for ops Mosaic GPU cannot lower.
_HINTS: dict[str, tuple[str, str]] = {
    "dot_general": (
        "jnp.dot / @ / jnp.einsum",
        "multiply the operands themselves with sk.dot(a, b) in the step of a loop over the "
        'contracted dim: acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), '
        'init=jnp.zeros((BM, BN), jnp.float32)), with loop={"K": "BK"} in the decorator',
    ),
    "transpose": ("transpose / .T", "pass a transposed operand from outside the kernel"),
    "cumsum": ("jnp.cumsum", "compute the prefix sum outside the kernel"),
    "cumprod": ("jnp.cumprod", "compute the prefix product outside the kernel"),
    "cummax": ("lax.cummax", "compute it outside the kernel"),
    "argmax": ("jnp.argmax", "compute the index outside the kernel, or compare with a max"),
    "argmin": ("jnp.argmin", "compute the index outside the kernel, or compare with a min"),
    "pow": ("x ** y with a float exponent", "use an integer exponent, or jnp.exp(y * jnp.log(x))"),
    "floor": (
        "jnp.floor",
        "compute it outside the kernel, or truncate toward zero with x.astype(jnp.int32)",
    ),
    "ceil": (
        "jnp.ceil",
        "compute it outside the kernel, or truncate toward zero with x.astype(jnp.int32)",
    ),
    "log1p": ("jnp.log1p", "use jnp.log(1 + x)"),
    "expm1": ("jnp.expm1", "use jnp.exp(x) - 1"),
    "iota": ("jnp.arange / lax.iota", "use sk.dim for sizes; position masks are built for you"),
    "concatenate": ("jnp.concatenate", "concatenate outside the kernel"),
    "slice": ("slicing x[a:b]", "slice the operand outside the kernel"),
    "dynamic_slice": ("dynamic slicing", "slice the operand outside the kernel"),
    "gather": ("indexing with arrays", "index the operand outside the kernel"),
    "sort": ("jnp.sort", "sort outside the kernel"),
    "reduce_prod": ("jnp.prod", "use jnp.exp(jnp.sum(jnp.log(x), axis=...)) for positive x"),
    "reduce_and": ("jnp.all", "use jnp.min over an int cast"),
    "reduce_or": ("jnp.any", "use jnp.max over an int cast"),
    "argsort": ("jnp.argsort", "sort outside the kernel"),
    "roll": ("jnp.roll", "roll the operand outside the kernel"),
}


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Physical register shapes and which axes have elements past the array's edge."""

    rows: int
    cols: int
    ragged_rows: bool
    ragged_cols: bool
    input_kinds: tuple[tuple[str, str], ...]  # operand name -> kind
    input_fills: tuple[tuple[str, float | int | bool], ...] = ()  # loaded operand -> its fill
    steps: tuple[tuple[str, "Geometry"], ...] = ()  # loop dim -> the geometry inside its steps
    looped_operands: tuple[tuple[str, str], ...] = ()  # operand -> the loop dim it has
    # For the interpreter: its reductions run on the CPU, where a row max or min can skip NaN;
    # Mosaic GPU's (max.NaN, min.NaN) carry it, as jnp's do. The interpreter's carry it too.
    interpreted: bool = False

    def step(self, axis: str) -> "Geometry":
        return dict(self.steps)[axis]

    def shape(self, kind: str) -> tuple[int, ...]:
        return {TILE: (self.rows, self.cols), ROW: (self.rows,), COL: (self.cols,), SCALAR: ()}[
            kind
        ]


@dataclasses.dataclass(frozen=True)
class Carry:
    """One carry of a folding loop: its variable inside the step, its first and last value."""

    var: str
    kind: str
    dtype: str
    init: str  # source of the initial value, in the carry's kind and layout
    update: str  # source of the step's new value; "" for an accumulator
    accumulator: bool  # updated only by WGMMA, held in an accumulator ref


@dataclasses.dataclass(frozen=True)
class DotUpdate:
    carry: str  # the accumulator carry's variable
    a: str
    b: str
    transpose_b: bool  # b is stored (N, K)


@dataclasses.dataclass(frozen=True)
class LoopBlock:
    """A loop of the body, translated: the step's statements and what flows in and out."""

    index: int
    axis: str
    mode: str  # "fold" (sk.loop) or "map" (sk.map_blocks)
    operands: tuple[str, ...]  # operands whose blocks the step reads, in order of first use
    loads: tuple[str, ...]  # of those, the ones loaded into registers
    fills: tuple[tuple[str, object], ...]  # what each load reads past the edge
    masks: frozenset[str]
    lines: tuple[str, ...]
    carries: tuple[Carry, ...]
    dots: tuple[DotUpdate, ...]
    finals: tuple[str, ...]  # the body's variables for the final carries
    blocks: tuple[str, ...]  # map: source of each output block, per step


@dataclasses.dataclass(frozen=True)
class Translation:
    lines: tuple["str | LoopBlock", ...]
    outputs: tuple[str, ...]  # source expressions of the results, in their declared kinds
    masks: frozenset[str]  # mask names the statements use: row_ok, col_ok
    streamed: tuple[tuple[int, int, int], ...] = ()  # (result, loop, block) written by a map

    @property
    def loops(self) -> tuple[LoopBlock, ...]:
        return tuple(line for line in self.lines if isinstance(line, LoopBlock))


def is_8bit(dtype: str) -> bool:
    return dtype != "bool" and np.dtype(dtype).itemsize == 1


def select_source(mask: str, value: str, other: str, dtype: str) -> str:
    """`jnp.where(mask, value, other)` for a `value` of `dtype`. Mosaic GPU cannot select
    between 8-bit integers, so those are selected as int32 and cast back."""
    if not is_8bit(dtype):
        return f"jnp.where({mask}, {value}, {other})"
    wide = f"lax.convert_element_type({value}, jnp.int32)"
    return f"lax.convert_element_type(jnp.where({mask}, {wide}, {other}), {dtype_source(dtype)})"


def full_source(value: str, shape: tuple[int, ...], dtype: str, kind: str) -> str:
    """A constant value of `kind`, in that kind's register layout. A bare `jnp.full` is a
    splat, which reductions and carries do not take."""
    return f"plgpu.layout_cast(jnp.full({shape}, {value}, {dtype_source(dtype)}), {LAYOUTS[kind]})"


def translate(
    trace: BodyTrace,
    geometry: Geometry,
    result_kinds: tuple[str, ...],
    kernel: str,
    where: str,
) -> Translation:
    return _Translator(trace, geometry, kernel, where).run(result_kinds)


class _Translator:
    def __init__(self, trace: BodyTrace, geometry: Geometry, kernel: str, where: str):
        self.trace = trace
        self.g = geometry
        self.kernel = kernel
        self.where = where
        self.kinds: dict[str, str] = {}
        self.lines: list[str | LoopBlock] = []
        self.masks: set[str] = set()
        self.aliases: dict[str, str] = {}
        self.dtypes: dict[str, str] = {}
        self.literals: dict[str, object] = {}
        self.loop_outputs: dict[str, tuple[int, int]] = {}  # map output var -> (loop, block)
        self.loop_count = 0

    def run(self, result_kinds: tuple[str, ...]) -> Translation:
        input_kinds = dict(self.g.input_kinds)
        for name in trace_inputs(self.trace):
            self.kinds[name] = input_kinds[name]
            self.dtypes[name] = self.trace.aval(name)[1]
        self._eqns(self.trace.eqns)
        outputs: list[str] = []
        streamed: list[tuple[int, int, int]] = []
        for i, (atom, kind) in enumerate(zip(self.trace.outputs, result_kinds, strict=True)):
            if atom.var in self.loop_outputs:
                streamed.append((i, *self.loop_outputs[atom.var]))
                outputs.append("")
            else:
                outputs.append(self._as_kind(atom, kind))
        return Translation(
            tuple(self.lines), tuple(outputs), frozenset(self.masks), tuple(streamed)
        )

    def _eqns(self, eqns: tuple[Eqn, ...]) -> None:
        last_line = None
        for eqn in eqns:
            if eqn.line != last_line and eqn.line and eqn.prim not in LOOP_PRIMS:
                self.lines.append(f"# {eqn.line}: {eqn.source}" if eqn.source else f"# {eqn.line}")
                last_line = eqn.line
            self._eqn(eqn)

    # --- helpers -----------------------------------------------------------------------------

    def _fail(self, eqn: Eqn, what: str, fix: str, actual: str | None = None) -> UnsupportedOpError:
        return UnsupportedOpError(
            what,
            kernel=self.kernel,
            where=eqn.line or self.where,
            expected="an op Mosaic GPU lowers on register tiles",
            actual=actual or f"`{eqn.prim}`" + (f" in: {eqn.source}" if eqn.source else ""),
            fix=fix,
        )

    def _src(self, atom: Atom) -> str:
        if atom.var is None:
            return literal_source(atom.value, atom.dtype, atom.weak_type)
        return self.aliases.get(atom.var, atom.var)

    def _kind(self, atom: Atom) -> str:
        if atom.var in self.loop_outputs:
            raise AssertionError("a map output is used")  # guarded in _check_map_use
        return SCALAR if atom.var is None else self.kinds[atom.var]

    def _dtype(self, atom: Atom) -> str:
        return atom.dtype if atom.var is None else self.dtypes[atom.var]

    def _as_kind(self, atom: Atom, kind: str) -> str:
        have = self._kind(atom)
        src = self._src(atom)
        if have == kind:
            return src
        shape = self.g.shape(kind)
        if have == SCALAR:
            return full_source(src, shape, self._dtype(atom), kind)
        if kind == TILE and have in (ROW, COL):
            return f"lax.broadcast_in_dim({src}, {shape}, ({0 if have == ROW else 1},))"
        raise AssertionError(f"cannot convert {have} to {kind}")

    def _assign(self, eqn: Eqn, kind: str, expr: str) -> None:
        out = eqn.outputs[0]
        self.kinds[out] = kind
        self.dtypes[out] = self.trace.aval(out)[1]
        self.lines.append(f"{out} = {expr}")

    def _alias(self, eqn: Eqn, atom: Atom, kind: str) -> None:
        out = eqn.outputs[0]
        self.kinds[out] = kind
        self.dtypes[out] = self.trace.aval(out)[1]
        if atom.var is None:
            self.lines.append(f"{out} = {self._src(atom)}")
            self.literals[out] = atom.value
        else:
            if atom.var in self.literals:
                self.literals[out] = self.literals[atom.var]
            self.aliases[out] = self._src(atom)

    # --- equations ---------------------------------------------------------------------------

    def _eqn(self, eqn: Eqn) -> None:
        prim = eqn.prim
        for atom in eqn.inputs:
            if atom.var in self.loop_outputs:
                raise self._fail(
                    eqn,
                    "the body computes with the value sk.map_blocks returns, which stands for "
                    "blocks already written",
                    "do the computation inside the function given to sk.map_blocks, and return "
                    "its value from the body as it is",
                )
        if prim in LOOP_PRIMS:
            from ._steps import translate_loop

            return translate_loop(self, eqn)
        if prim == "sk_dot":
            raise self._fail(
                eqn,
                "sk.dot's product is not added to the loop's carry",
                "write the step as `return acc + sk.dot(a, b)`, with acc the carry (init "
                "jnp.zeros((BM, BN), jnp.float32)), and use the product after the loop",
            )
        if prim not in SUPPORTED:
            user, fix = _HINTS.get(
                prim, (f"`{prim}`", "express it with elementwise ops and reductions")
            )
            raise self._fail(
                eqn,
                f"the body uses {user} (primitive `{prim}`), which Mosaic GPU cannot lower",
                fix,
            )
        if prim in REDUCTIONS:
            return self._reduce(eqn)
        if prim in SHAPE_ONLY:
            return self._reshape(eqn)
        self._elementwise(eqn)

    def _elementwise(self, eqn: Eqn) -> None:
        kinds = {self._kind(a) for a in eqn.inputs} - {SCALAR}
        if kinds == {ROW, COL} and len(self.trace.aval(eqn.outputs[0])[0]) == 2:
            # A (rows, 1) and a (1, cols) vector, as jnp writes an outer sum or product: lax
            # broadcasts both to the block, and so do the statements below.
            kinds = {TILE}
        if kinds == {ROW, COL}:
            raise self._fail(
                eqn,
                "the body combines a per-row and a per-column vector without broadcasting",
                "broadcast one of them to the block shape first",
            )
        kind = TILE if TILE in kinds else (kinds.pop() if kinds else SCALAR)
        kind = self._widened(kind, self.trace.aval(eqn.outputs[0])[0])
        narrow = [self._dtype(a) for a in eqn.inputs if a.var is not None]
        narrow = [d for d in narrow if is_8bit(d)]
        if narrow and eqn.prim not in EIGHT_BIT_OPS:
            raise self._fail(
                eqn,
                f"the body computes {_WRITTEN_AS.get(eqn.prim, eqn.prim)} (`{eqn.prim}`) on "
                f"{narrow[0]} values; Mosaic GPU computes on 8-bit integers only with &, |, ^, "
                "~, == and !=",
                f"cast to int32 after loading, e.g. sk.load(x).astype(jnp.int32), and cast the "
                f"result back with .astype(jnp.{narrow[0]})",
            )
        if eqn.prim == "rem" and "int" not in self._dtype(eqn.inputs[0]):
            raise self._fail(
                eqn,
                "the body takes a floating-point remainder (%, jnp.mod, jnp.fmod, lax.rem), "
                "which Mosaic GPU cannot lower",
                "compute it outside the kernel, or take the remainder of integers",
            )
        if eqn.prim == "select_n" and kind != SCALAR:
            # lax.select_n broadcasts nothing: every case, and a non-scalar predicate, must be a
            # value of the result's shape (jnp.where(c, x, 0.0) gives it a scalar case).
            args = [self._as_kind(a, kind) for a in eqn.inputs]
            if self._kind(eqn.inputs[0]) == SCALAR:
                args[0] = self._src(eqn.inputs[0])
        else:
            args = [
                self._as_kind(a, kind) if self._kind(a) != SCALAR else self._src(a)
                for a in eqn.inputs
            ]
        prim = eqn.prim
        if prim in UNARY:
            expr = f"{UNARY[prim]}({args[0]})"
        elif prim in BINARY:
            expr = f"{BINARY[prim]}({args[0]}, {args[1]})"
        elif prim == "integer_pow":
            expr = f"lax.integer_pow({args[0]}, {int(eqn.param('y'))})"
        elif prim == "square":
            expr = f"lax.mul({args[0]}, {args[0]})"
        elif prim == "convert_element_type":
            expr = f"lax.convert_element_type({args[0]}, {dtype_source(str(np.dtype(eqn.param('new_dtype'))))})"
        elif prim == "round":
            method = int(eqn.param("rounding_method"))
            expr = f"lax.round({args[0]}, lax.RoundingMethod({method}))"
        elif prim == "select_n":
            expr = f"lax.select_n({', '.join(args)})"
        else:  # clamp(lo, x, hi)
            expr = f"lax.clamp({', '.join(args)})"
        self._assign(eqn, kind, expr)

    def _reduce(self, eqn: Eqn) -> None:
        (atom,) = eqn.inputs
        kind = self._kind(atom)
        axes = tuple(eqn.param("axes"))
        if kind == TILE and axes in ((0,), (1,)):
            axis = axes[0]
            src = self._src(atom)
            ragged = self.g.ragged_cols if axis == 1 else self.g.ragged_rows
            # A loaded operand already holds its fill past the edge; if that is the identity,
            # no mask is needed.
            fill = dict(self.g.input_fills).get(atom.var or "")
            if ragged and not (
                fill is not None and fill == _identity_value(eqn.prim, self._dtype(atom))
            ):
                # Elements past the edge must not take part: they get the identity.
                mask = "col_ok" if axis == 1 else "row_ok"
                self.masks.add(mask)
                ident = _identity(eqn.prim, self._dtype(atom))
                src = select_source(mask, src, ident, self._dtype(atom))
            vector = ROW if axis == 1 else COL
            reduced = f"{REDUCTIONS[eqn.prim]}({src}, ({axis},))"
            dtype = self._dtype(atom)
            if self.g.interpreted and eqn.prim != "reduce_sum" and "float" in dtype:
                # A sum of the NaNs alone is NaN exactly where the vector holds one.
                if not src.isidentifier():
                    self.lines.append(f"{eqn.outputs[0]}_in = {src}")
                    src = f"{eqn.outputs[0]}_in"
                    reduced = f"{REDUCTIONS[eqn.prim]}({src}, ({axis},))"
                nans = f"{eqn.outputs[0]}_nans"
                zero = literal_source(0.0, dtype, weak_type=True)
                self.lines.append(
                    "# NaN where a NaN is reduced: the interpreter's max and min skip it."
                )
                self.lines.append(
                    f"{nans} = lax.reduce_sum(jnp.where({src} != {src}, {src}, {zero}), ({axis},))"
                )
                reduced = f"jnp.where({nans} != {nans}, {nans}, {reduced})"
            return self._assign(eqn, vector, reduced)
        if kind in (ROW, COL) and self._unit_axes_only(atom, kind, axes):
            return self._alias(eqn, atom, kind)
        if kind == SCALAR:
            shape = tuple(self.trace.aval(atom.var)[0]) if atom.var else ()
            if all(shape[a] == 1 for a in axes):
                return self._alias(eqn, atom, kind)
            if len(shape) == 2 and axes in ((0,), (1,)):
                # A constant block (jnp.ones_like(v), jnp.full_like(v, c)) held as its scalar:
                # its reduction counts every element inside the edge, so it needs the block.
                block = Atom(f"{eqn.outputs[0]}_block")
                self.kinds[block.var or ""] = TILE
                self.dtypes[block.var or ""] = self._dtype(atom)
                self.lines.append(f"{block.var} = {self._as_kind(atom, TILE)}")
                return self._reduce(dataclasses.replace(eqn, inputs=(block,)))
        raise self._fail(
            eqn,
            "the body reduces a block or a vector to a scalar, which Mosaic GPU cannot lower",
            "reduce a 2-D block over one axis (axis=0 or axis=1) and keep the vector",
            actual=f"`{eqn.prim}` over axes {axes} of a {kind}"
            + (f" in: {eqn.source}" if eqn.source else ""),
        )

    def _widened(self, kind: str, shape: tuple[int, ...]) -> str:
        """The kind of an elementwise result of logical `shape`. jnp broadcasts a vector against
        a constant block held as its scalar (`r[:, None] * jnp.ones_like(v)`): the result spans
        the block, so it is a block, not the vector."""
        if len(shape) == 2 and ((kind == ROW and shape[1] != 1) or (kind == COL and shape[0] != 1)):
            return TILE
        return kind

    def _vector_axis(self, atom: Atom, kind: str) -> int:
        """The axis of a vector value's logical shape that holds its elements."""
        shape = self.trace.aval(atom.var)[0] if atom.var else ()
        return 0 if len(shape) == 1 or kind == ROW else 1

    def _unit_axes_only(self, atom: Atom, kind: str, axes: tuple[int, ...]) -> bool:
        return self._vector_axis(atom, kind) not in axes

    def _reshape(self, eqn: Eqn) -> None:
        atom = eqn.inputs[0]
        kind = self._kind(atom)
        in_shape = self.trace.aval(atom.var)[0] if atom.var else ()
        out_shape = self.trace.aval(eqn.outputs[0])[0]
        if kind == SCALAR:
            return self._alias(eqn, atom, SCALAR)
        if kind == TILE:
            if tuple(in_shape) == tuple(out_shape):
                return self._alias(eqn, atom, TILE)
            raise self._fail(
                eqn,
                f"the body reshapes or broadcasts a block from {list(in_shape)} to "
                f"{list(out_shape)}, which the register layout cannot express",
                "keep blocks at their shape; reshape operands outside the kernel",
            )
        # A vector: jnp adds and drops unit dims around it (keepdims), or broadcasts it.
        vector_axis = self._vector_axis(atom, kind)
        if eqn.prim == "broadcast_in_dim":
            out_axis = tuple(eqn.param("broadcast_dimensions"))[vector_axis]
        else:
            out_axis = 0 if kind == ROW or len(out_shape) == 1 else 1
        expected_axis = 0 if kind == ROW or len(out_shape) == 1 else 1
        if out_axis != expected_axis:
            raise self._fail(
                eqn,
                "the body turns a per-row vector into a per-column one (or back), which needs a "
                "transpose",
                "keep per-row vectors along the rows; compute column statistics with axis=0",
                actual=f"{kind} vector {list(in_shape)} to {list(out_shape)}",
            )
        spread = len(out_shape) == 2 and out_shape[1 - out_axis] != 1
        if spread:
            return self._assign(eqn, TILE, self._as_kind(atom, TILE))
        return self._alias(eqn, atom, kind)


def trace_inputs(trace: BodyTrace) -> list[str]:
    return [name for name in trace.inputs if name is not None]


def _identity_value(prim: str, dtype: str) -> float | int:
    if prim == "reduce_sum":
        return 0
    if "int" in dtype:
        info = np.iinfo(np.dtype(dtype))
        return int(info.min if prim == "reduce_max" else info.max)
    return -math.inf if prim == "reduce_max" else math.inf


def _identity(prim: str, dtype: str) -> str:
    return literal_source(_identity_value(prim, dtype), dtype, weak_type=True)
