"""The translator's state and its dispatch: equations in, IR statements out, one rule per
primitive.

A rule reads its equation's inputs through the translator (their source, register kind and
dtype), and appends the statements that compute its outputs. The rules themselves live in
`lower.rules` (the body's ops) and `lower.steps` (loops); `lower.translate` puts them together, so data and
imports flow one way.
"""

import dataclasses
import enum
from collections.abc import Callable, Mapping

from ...._errors import JoinedColumnsError, UnsupportedOpError
from ...ir.names import value_part
from ...ir.nodes import Assign, Expr, Kind, Literal, Mask, Name, SourceLine
from ...trace.body import Atom, BodyTrace, Eqn
from .. import hardware as hw
from ..pallas import broadcast, full
from .translation import Geometry, Line, Product

__all__ = [
    "CompositeLocals",
    "NotInForm",
    "Refusal",
    "Rule",
    "Support",
    "Translator",
    "Where",
    "trace_inputs",
]


class NotInForm(Exception):
    """The body does something the register form being tried cannot express (the row form:
    it mixes rows; the strided block: it has a reduction or a vector): the compile path keeps
    the block form. Never reaches the user as it is; `reason` says why, and `eqn` is the
    equation the translator was at (the innermost, in a loop's step), for an error of the
    block form that the form tried would have avoided."""

    def __init__(self, reason: str, eqn: Eqn | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.eqn = eqn


class Where(enum.StrEnum):
    """Where a body's value lives: the register forms, and a loop's step."""

    BLOCK = "block"  # the block form: the whole block in the WGMMA layout
    STRIDED = "strided"  # an elementwise body's whole block in the warpgroup-strided layout
    ROWS = "rows"  # the row form: one whole row at a time
    STEP = "loop step"  # the step of sk.loop or sk.map_blocks, in the block form


class Support(enum.StrEnum):
    YES = "yes"
    PARTLY = "partly"  # the rule decides by the values (a reduction over the columns only)
    NO = "no"


@dataclasses.dataclass(frozen=True)
class Rule:
    """How one primitive translates, and where."""

    translate: Callable[["Translator", Eqn], None]
    # A loop writes the comment naming the user's line itself, above the loop's statements;
    # the translator writes it for every other equation.
    own_comment: bool = False
    # Where it lowers: every place not named here is `Support.YES`. A form that cannot hold
    # it is skipped for the next (the block form is the last); `note` says why.
    support: tuple[tuple[Where, Support], ...] = ()
    note: str = ""

    def support_in(self, where: Where) -> Support:
        return dict(self.support).get(where, Support.YES)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A primitive no form lowers: what the user wrote, and what to write instead."""

    written_as: str
    fix: str


class Translator:
    def __init__(
        self,
        trace: BodyTrace,
        geometry: Geometry,
        kernel: str,
        where: str,
        rules: Mapping[str, Rule],
        refusals: Mapping[str, Refusal],
        param_rule: Callable[[str], Rule] | None = None,
        chunkable: frozenset[str] = frozenset(),
        column_local: frozenset[str] = frozenset(),
    ):
        self.trace = trace
        self.g = geometry
        self.kernel = kernel
        self.where = where
        self.rules = rules
        self.refusals = refusals
        # The rules for an op of a parameter vector (`lower.params`), whatever the form.
        self.param_rule = param_rule
        # The primitives a row taken in chunks may hold: each chunk's values are its own
        # columns' alone (elementwise), or a reduction the chunks combine.
        self.chunkable = chunkable
        # The primitives whose values at a column are computed from that column's alone, or
        # reduce the columns through their edge masks: those a result's joined columns held
        # part by part may take (`Geometry.col_parts`).
        self.column_local = column_local
        self.row_reductions: list[tuple[str, str, str]] = []
        self.kinds: dict[str, Kind] = {}
        self.lines: list[Line] = []
        self.masks: set[Mask] = set()
        self.aliases: dict[str, Expr] = {}  # a variable -> the one it is
        self.dtypes: dict[str, str] = {}
        self.literals: dict[str, object] = {}
        self.loop_outputs: dict[str, tuple[int, int]] = {}  # map output var -> (loop, block)
        self.loop_count = 0
        self.products: list[Product] = []  # the sk.dot values of the step being translated
        self.scratch_bytes = 0  # shared memory the body scopes for itself (a scan's buffer)
        # A vector taken from a stack of parameter vectors, until `squeeze` loads it: the
        # variable -> (operand, axis of the parameters, kind of the vector, its index).
        self.stack_vectors: dict[str, tuple[str, int, Kind, int]] = {}

    def eqns(self, eqns: tuple[Eqn, ...]) -> None:
        last_line = None
        for eqn in eqns:
            rule = self.rules.get(eqn.prim)
            if eqn.line != last_line and eqn.line and not (rule and rule.own_comment):
                self.lines.append(source_line(eqn))
                last_line = eqn.line
            self.eqn(eqn)

    def eqn(self, eqn: Eqn) -> None:
        prim = eqn.prim
        for atom in eqn.inputs:
            if atom.var in self.loop_outputs:
                raise self.fail(
                    eqn,
                    "the body computes with the value sk.map_blocks returns, which stands for "
                    "blocks already written",
                    "do the computation inside the function given to sk.map_blocks, and return "
                    "its value from the body as it is",
                )
        packed = next(
            (self.dtype(a) for a in eqn.inputs if self.dtype(a) in hw.SUB_BYTE_DTYPES), None
        )
        if packed is not None and prim != "convert_element_type":
            raise self.fail(
                eqn,
                f"the body computes on {packed} values, which Mosaic GPU only converts",
                "cast the load first, e.g. sk.load(w).astype(jnp.bfloat16), and compute on that",
                expected=f"{packed} read only by .astype",
            )
        params = any(a.var is not None and self.kinds.get(a.var) is Kind.PARAMS for a in eqn.inputs)
        if params and self.param_rule is not None:
            return self.param_rule(prim).translate(self, eqn)
        rule = self.rules.get(prim)
        frame = self.g.row_frame
        if frame is not None and frame.chunks > 1 and prim not in self.chunkable:
            raise NotInForm(f"`{prim}` reads more of a row than its chunk", eqn)
        if rule is not None:
            form = self.form()
            if form in (Where.STRIDED, Where.ROWS) and rule.support_in(form) is Support.NO:
                raise NotInForm(rule.note, eqn)
            if self.g.col_parts and prim not in self.column_local:
                self._check_not_along_parts(eqn)
            try:
                return rule.translate(self, eqn)
            except NotInForm as exc:
                exc.eqn = exc.eqn or eqn
                raise
        refusal = self.refusals.get(prim)
        user = refusal.written_as if refusal else f"`{prim}`"
        fix = refusal.fix if refusal else "express it with elementwise ops and reductions"
        raise self.fail(
            eqn, f"the body uses {user} (primitive `{prim}`), which Mosaic GPU cannot lower", fix
        )

    def _check_not_along_parts(self, eqn: Eqn) -> None:
        """Refuses an op that moves values along a result's joined columns where a block holds
        the parts apart: its columns are not the array's, one after another."""
        for atom in eqn.inputs:
            kind = Kind.SCALAR if atom.var is None else self.kinds.get(atom.var, Kind.SCALAR)
            logical = self.logical_shape(atom)
            if kind not in (Kind.TILE, Kind.COL) or not logical:
                continue
            if self.g.own_width(kind, logical) is not None:
                continue  # a part's own columns, or a slice of them
            dim = self.g.col_dim or ""
            names = dim.split("+")
            first = next(
                i for i, (_, size) in enumerate(self.g.col_parts[:-1]) if size % hw.WGMMA_COLS
            )
            size = self.g.col_parts[first][1]
            raise self.fail(
                eqn,
                f"the body moves values along the joined columns {dim} (`{eqn.prim}`), which a "
                f"block holds part by part: {names[first]} = {size} is not a multiple of "
                f"{hw.WGMMA_COLS} columns, so {names[first + 1]} starts on a register tile of "
                f"its own, a few columns after {names[first]} ends",
                "do it on the parts before joining them (each part's columns are its "
                "operands'), or return the joined result and do it after the kernel",
                error=JoinedColumnsError,
                expected=f"elementwise ops and reductions along {dim}",
                dim=dim,
            )

    def form(self) -> Where:
        """The register form being tried (a loop's step is translated in the block form)."""
        if self.g.flat_frame is not None:
            return Where.STRIDED
        return Where.BLOCK if self.g.row_frame is None else Where.ROWS

    # --- what rules read and write -----------------------------------------------------------

    def fail(
        self,
        eqn: Eqn,
        what: str,
        fix: str,
        actual: str | None = None,
        *,
        error: type[UnsupportedOpError] = UnsupportedOpError,
        expected: str = "an op Mosaic GPU lowers on register tiles",
        dim: str | None = None,
        operand: str | None = None,
    ) -> UnsupportedOpError:
        return error(
            what,
            kernel=self.kernel,
            where=eqn.line or self.where,
            operand=operand,
            dim=dim,
            expected=expected,
            actual=actual or f"`{eqn.prim}`" + (f" in: {eqn.source}" if eqn.source else ""),
            fix=fix,
        )

    def source(self, atom: Atom) -> Expr:
        if atom.var is None:
            return Literal(atom.value, atom.dtype, atom.weak_type)
        return self.aliases.get(atom.var, Name(atom.var))

    def kind(self, atom: Atom) -> Kind:
        if atom.var in self.loop_outputs:
            raise AssertionError("a map output is used")  # guarded in eqn()
        return Kind.SCALAR if atom.var is None else self.kinds[atom.var]

    def dtype(self, atom: Atom) -> str:
        return atom.dtype if atom.var is None else self.dtypes[atom.var]

    def as_kind(self, atom: Atom, kind: Kind, like: tuple[int, ...] | None = None) -> Expr:
        """The atom's value in `kind`: a scalar made a constant of the kind, or a vector spread
        over the block. `like` is the logical shape wanted, where it may be a slice of the
        frame's (see `Geometry.own_width`)."""
        have = self.kind(atom)
        src = self.source(atom)
        if have == kind:
            return src
        shape = self.g.register_shape(kind, like)
        rows = self.g.row_frame or self.g.flat_frame
        if self.g.flat_frame is not None and Kind.TILE not in (have, kind):
            raise NotInForm("a vector has no place in an elementwise body's strided block")
        if have == Kind.SCALAR:
            return full(src, shape, self.dtype(atom), kind, rows)
        if kind == Kind.TILE and have in (Kind.ROW, Kind.COL):
            dimension = 0 if have == Kind.ROW else 1
            return broadcast(src, shape, dimension, self.g.row_frame, self.g.tensor_cores)
        if kind == Kind.LOOP_TILE and have in (Kind.ROW, Kind.LOOP_COL):
            return broadcast(
                src, shape, 0 if have == Kind.ROW else 1, tensor_cores=self.g.tensor_cores
            )
        if kind == Kind.LOOP_ROWS and have == Kind.COL:
            return broadcast(src, shape, 1, tensor_cores=self.g.tensor_cores)
        blocks = ({Kind.TILE, Kind.LOOP_TILE}, {Kind.TILE, Kind.LOOP_ROWS})
        if {have, kind} in blocks and shape == self.g.shape(have):
            return src  # the same shape and layout: a block broadcast from a vector, say
        raise AssertionError(f"cannot convert {have} to {kind}")

    def block_kind(self, shape: tuple[int, ...], vector: Kind) -> Kind:
        """The kind of a block of logical `shape` spread from a `vector` kind (or a scalar):
        along the loop dim when its columns are the loop block's and not the frame's."""
        if vector == Kind.LOOP_COL:
            return Kind.LOOP_TILE
        if self.g.loop_dim is None:
            return Kind.TILE
        frame, loop = self.g.shape(Kind.TILE), self.g.shape(Kind.LOOP_TILE)
        rows_of_loop = self.g.shape(Kind.LOOP_ROWS)
        if tuple(shape) == frame:
            return Kind.TILE
        if tuple(shape) == rows_of_loop and vector in (Kind.COL, Kind.SCALAR):
            return Kind.LOOP_ROWS  # a row of scales spread over a "K N" block
        if vector == Kind.COL:
            return Kind.TILE
        return Kind.LOOP_TILE if tuple(shape) == loop else Kind.TILE

    def logical_shape(self, atom: Atom) -> tuple[int, ...]:
        """The shape the body's trace gives the atom; `()` for a literal, and for a value the
        translation made (a constant block spread for its reduction), which has the frame's."""
        if atom.var is None or not self.trace.traces(atom.var):
            return ()
        return tuple(self.trace.aval(atom.var)[0])

    def define(self, var: str, kind: Kind, dtype: str) -> None:
        self.kinds[var] = kind
        self.dtypes[var] = dtype

    def assign(self, eqn: Eqn, kind: Kind, expr: Expr) -> None:
        out = eqn.outputs[0]
        # A value the translation adds (a step of a composite) has its input's dtype.
        dtype = self.trace.aval(out)[1] if self.trace.traces(out) else self.dtype(eqn.inputs[0])
        self.define(out, kind, dtype)
        self.lines.append(Assign((Name(out),), expr))

    def alias(self, eqn: Eqn, atom: Atom, kind: Kind) -> None:
        """The output is the input itself: a literal gets a variable, a variable a new name."""
        out = eqn.outputs[0]
        self.define(out, kind, self.trace.aval(out)[1])
        if atom.var is None:
            self.lines.append(Assign((Name(out),), self.source(atom)))
            self.literals[out] = atom.value
        else:
            if atom.var in self.literals:
                self.literals[out] = self.literals[atom.var]
            self.aliases[out] = self.source(atom)


@dataclasses.dataclass
class CompositeLocals:
    """Writes the statements of a value computed in several (a composite's), one local each,
    named after the value (`value_part`), so the generated module stays readable."""

    tr: Translator
    out: str

    def local(self, part: str, expr: Expr) -> Name:
        name = Name(value_part(self.out, part))
        self.tr.lines.append(Assign((name,), expr))
        return name


def source_line(eqn: Eqn) -> SourceLine:
    return SourceLine(eqn.line or "", eqn.source or "")


def trace_inputs(trace: BodyTrace) -> list[str]:
    return [name for name in trace.inputs if name is not None]
