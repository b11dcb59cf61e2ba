"""Translation of a loop's step: its statements, its carries and its tensor-core products.

A carry that the step only ever updates as `carry + sk.dot(a, b)` of two operands, from zero,
becomes a WGMMA accumulator: it lives in an accumulator ref for the whole loop and each step
issues one WGMMA into it. Every other carry is a register value threaded through the pipeline,
and every other product a value of the step (`lower.dots`); an `x + sk.dot(a, b)` is fused into one
equation first, so that the product can start at `x`. The step's other equations are
translated like the body's, with the geometry of one step (the loop dim at its block size). A
loop with a `stop` walks a trip count traced per block.
"""

import dataclasses
import itertools
from collections.abc import Mapping

from ...._errors import UnsupportedOpError
from ...ir.nodes import Comment, Expr, Kind, LoopMode, SourceLine
from ...trace.body import Atom, Eqn, Step
from ..pallas import full
from .context import NotInForm, Rule, Support, Translator, Where, source_line
from .translation import Carry, DotUpdate, Geometry, LoopBlock

__all__ = ["LOOP_RULES"]


def translate_loop(tr: Translator, eqn: Eqn) -> None:
    step: Step = eqn.param("step")
    mode = LoopMode.FOLD if eqn.prim == "sk_loop" else LoopMode.MAP
    index = tr.loop_count
    tr.loop_count += 1
    comment = source_line(eqn)
    previous = [line for line in tr.lines if isinstance(line, Comment | SourceLine)]
    if eqn.line and (not previous or previous[-1] != comment):
        tr.lines.append(comment)
    if tr.g.one_row:
        _check_row_loop(eqn, step)
    accumulators, skipped = _accumulators(tr, eqn, step)
    looped = dict(tr.g.looped_operands)
    used: list[str] = []
    for inner in step.eqns:
        for atom in inner.inputs:
            if atom.var in looped and atom.var not in used:
                used.append(atom.var)
    # A block the step returns as it is (a copy) is loaded too, though no equation reads it.
    for atom in step.outputs:
        if atom.var in looped and atom.var not in used:
            used.append(atom.var)
    loads = tuple(
        name
        for name in used
        if any(
            atom.var == name
            for inner in step.eqns
            if id(inner) not in skipped and inner.prim != "sk_dot"
            for atom in inner.inputs
        )
        or any(atom.var == name for atom in step.outputs)
    )
    # The row form's rows are one at a time: a carry is placed by the step's logical block.
    placing = tr.g.step(step.axis) if tr.g.one_row else tr.g
    guesses = _initial_kinds(tr, placing, eqn.inputs, step.axis)
    first_error: UnsupportedOpError | NotInForm | None = None
    for kinds in guesses:
        try:
            block = _translate_carries(
                tr, eqn, step, index, mode, accumulators, skipped, kinds, tuple(used), loads
            )
            break
        except (UnsupportedOpError, NotInForm) as exc:
            # A vector carry as long as both the rows and the columns of the block may be
            # either; the next guess reads it the other way. The first guess's error stands.
            first_error = first_error or exc
    else:
        assert first_error is not None
        raise first_error
    for kind, example in (("start", ".min()"), ("stop", ".max() + 1")):
        bound = dict(eqn.params).get(kind)
        if bound is None:
            continue
        if tr.kind(bound) != Kind.SCALAR:
            raise tr.fail(
                eqn,
                f"the {kind} of sk.loop({step.axis!r}) is not one number for the block",
                f'reduce a position to its block\'s bound, e.g. sk.position("M"){example}',
            )
        block = dataclasses.replace(block, **{kind: tr.source(bound)})
    tr.lines.append(block)
    outputs = eqn.outputs
    if mode == LoopMode.MAP:
        for i, out in enumerate(outputs[: len(block.blocks)]):
            tr.loop_outputs[out] = (index, i)
        outputs = outputs[len(block.blocks) :]  # a scan's carries follow its blocks
    for out, carry in zip(outputs, block.carries, strict=True):
        tr.define(out, Kind(carry.kind), carry.dtype)


def _check_row_loop(eqn: Eqn, step: Step) -> None:
    """The row form walks a loop over the columns of the row it holds in shared memory, a
    block a step, its carries in registers: no tensor-core products (whose operands are
    blocks of 64 rows), no bounds traced per block, no scan's carry."""
    params = dict(eqn.params)
    if any(e.prim == "sk_dot" for e in step.eqns):
        raise NotInForm("sk.dot multiplies blocks of 64 rows")
    if params.get("start") is not None or params.get("stop") is not None:
        raise NotInForm("a loop bounded per block walks blocks of rows")
    if eqn.prim != "sk_loop" and step.carries:
        raise NotInForm("a scan's step")


def _translate_carries(
    tr: Translator,
    eqn: Eqn,
    step: Step,
    index: int,
    mode: LoopMode,
    accumulators: dict[int, DotUpdate],
    skipped: set[int],
    kinds: list[Kind],
    used: tuple[str, ...],
    loads: tuple[str, ...],
) -> LoopBlock:
    """The loop's block, its carries in `kinds`, or in the kinds its step returns them in when
    they differ (a carry whose initial value is one constant takes the step's kind)."""
    for _attempt in range(2):
        block, out_kinds = _translate_step(
            tr, eqn, step, index, mode, accumulators, skipped, kinds, used, loads
        )
        if out_kinds == kinds:
            return block
        kinds = out_kinds
    what = "sk.loop" if mode == LoopMode.FOLD else "sk.map_blocks"
    raise tr.fail(
        eqn,
        f"the step of {what}({step.axis!r}) returns carries in other register forms than "
        "it receives",
        "keep each carry a per-row vector, a per-column vector or a block throughout",
    )


# Each carry whose initial value is one constant (jnp.zeros((n,))) and so has no register
# kind of its own, read the other way as the rows and the columns of the block: at most this
# many guesses are tried, each a translation of the step.
_MAX_GUESSES = 16


def _initial_kinds(
    tr: Translator, g: Geometry, inits: tuple[Atom, ...], axis: str
) -> list[list[Kind]]:
    """The carries' kinds to try, most likely first. A carry initialized from a constant has
    its kind from its shape; a vector as long as both the rows and the columns of the block
    (BM == BN) may be either. Such a carry most likely runs along the dim the loop does not
    walk (a loop over the rows sums columns), so it is tried that way first, then the other."""
    # The guess for a vector whose length is both the rows' and the columns'.
    either = (Kind.COL, Kind.ROW) if axis == g.row_dim else (Kind.ROW, Kind.COL)
    options: list[tuple[Kind, ...]] = []
    for atom in inits:
        kind = tr.kind(atom)
        shape = tr.trace.aval(atom.var)[0] if atom.var is not None else ()
        if kind != Kind.SCALAR or atom.var is None:
            options.append((kind,))
        elif len(shape) == 2:
            options.append((Kind.TILE,))
        elif len(shape) == 1 and shape[0] == g.rows == g.cols:
            options.append(either)
        elif len(shape) == 1:
            options.append((Kind.ROW if shape[0] == g.rows else Kind.COL,))
        else:
            options.append((Kind.SCALAR,))
    return [list(kinds) for kinds in itertools.islice(itertools.product(*options), _MAX_GUESSES)]


def _uses(step: Step) -> dict[str, list[Eqn | None]]:
    """Each variable's readers in the step; None for the step's result."""
    uses: dict[str, list[Eqn | None]] = {}
    for inner in step.eqns:
        for atom in inner.inputs:
            if atom.var is not None:
                uses.setdefault(atom.var, []).append(inner)
    for atom in step.outputs:
        if atom.var is not None:
            uses.setdefault(atom.var, []).append(None)
    return uses


def _accumulators(tr: Translator, eqn: Eqn, step: Step) -> tuple[dict[int, DotUpdate], set[int]]:
    """Carries updated only as `carry + sk.dot(a, b)` of two operands over the loop dim, from
    zero, and the equations that form them. Every other product is a value of the step."""
    uses = _uses(step)
    found: dict[int, DotUpdate] = {}
    skipped: set[int] = set()
    if eqn.prim != "sk_loop":
        return found, skipped
    for dot in (e for e in step.eqns if e.prim == "sk_dot"):
        # A computed `a` or `b` is a value of the step, staged or read from registers a step.
        if not dot.param("a") or not dot.param("b") or dot.param("over") != step.axis:
            continue
        product = dot.outputs[0]
        users = uses.get(product, [])
        add = users[0] if len(users) == 1 else None
        if add is None or add.prim != "add":
            continue
        others = [a.var for a in add.inputs if a.var != product]
        if len(others) != 1 or others[0] not in step.carries:
            continue
        position = step.carries.index(others[0])
        carry = step.carries[position]
        if (
            step.outputs[position].var != add.outputs[0]
            or len(uses.get(carry, [])) != 1
            or len(uses.get(add.outputs[0], [])) != 1
        ):
            continue
        init = eqn.inputs[position]
        value = init.value if init.var is None else tr.literals.get(init.var)
        shape, dtype = tr.trace.aval(carry)
        product_dtype = tr.trace.aval(product)[1]
        if value is None or value != 0 or dtype != product_dtype or len(shape) != 2:
            continue
        a, b = (atom.var or "" for atom in dot.inputs)
        transposed = dot.param("contract")[1] == 1
        found[position] = DotUpdate(carry, a, b, transposed, accumulator=dtype)
        skipped |= {id(dot), id(add)}
    return found, skipped


def _fused_products(step: Step, skipped: set[int]) -> tuple[Eqn, ...]:
    """The step's equations, with each `x + sk.dot(a, b)` whose product is read only there
    turned into one `sk_dot` equation that starts its accumulator at `x`."""
    uses = _uses(step)
    fused: dict[int, Eqn] = {}  # id of the add -> the fused product
    dropped: set[int] = set()
    for dot in (e for e in step.eqns if e.prim == "sk_dot" and id(e) not in skipped):
        users = uses.get(dot.outputs[0], [])
        add = users[0] if len(users) == 1 else None
        if add is None or add.prim != "add" or id(add) in skipped:
            continue
        others = [a for a in add.inputs if a.var != dot.outputs[0]]
        if len(others) != 1:
            continue
        fused[id(add)] = dataclasses.replace(
            dot,
            inputs=(*dot.inputs, others[0]),
            outputs=add.outputs,
            line=add.line or dot.line,
            source=add.source or dot.source,
        )
        dropped.add(id(dot))
    return tuple(
        fused.get(id(e), e) for e in step.eqns if id(e) not in skipped and id(e) not in dropped
    )


def _translate_step(
    tr: Translator,
    eqn: Eqn,
    step: Step,
    index: int,
    mode: LoopMode,
    accumulators: dict[int, DotUpdate],
    skipped: set[int],
    kinds: list[Kind],
    used: tuple[str, ...],
    loads: tuple[str, ...],
) -> tuple[LoopBlock, list[Kind]]:
    saved = (tr.lines, tr.masks, tr.g, tr.products)
    outer = tr.g
    geometry = tr.g.step(step.axis)
    fills = dict(geometry.input_fills) | tr.trace.loop_fills(step.loop)
    geometry = dataclasses.replace(
        geometry,
        input_fills=tuple(fills.items()),
        scan_step=mode == LoopMode.MAP and bool(step.carries),
        reversed_step=step.reverse,
    )
    tr.lines, tr.masks, tr.g, tr.products = [], set(), geometry, []
    try:
        for carry, kind in zip(step.carries, kinds, strict=True):
            tr.define(carry, kind, tr.trace.aval(carry)[1])
        # The step's blocks of (rows, the loop dim) and of (the loop dim, columns), and its
        # vectors along the loop dim.
        for name, kind in geometry.input_kinds:
            if kind in (Kind.LOOP_TILE, Kind.LOOP_COL, Kind.LOOP_ROWS) and tr.trace.traces(name):
                tr.define(name, Kind(kind), tr.trace.aval(name)[1])
        tr.eqns(_fused_products(step, skipped))
        carries: list[Carry] = []
        out_kinds: list[Kind] = []
        blocks: list[Expr] = []
        # A map's step returns its blocks, then (a scan's) its carries.
        n_blocks = len(step.outputs) - len(step.carries)
        for i, (var, atom, init) in enumerate(
            zip(step.carries, step.outputs[n_blocks:], eqn.inputs, strict=True)
        ):
            kind, dtype = kinds[i], tr.trace.aval(var)[1]
            if i in accumulators:
                carries.append(Carry(var, Kind.TILE, dtype, None, None, True))
                out_kinds.append(kind)
                continue
            got = tr.kind(atom)
            out_kinds.append(got if got != Kind.SCALAR or kind == Kind.SCALAR else kind)
            update = tr.as_kind(atom, kind) if got in (kind, Kind.SCALAR) else None
            init_value = _init(tr, init, kind, outer, geometry)
            carries.append(Carry(var, kind, dtype, init_value, update, False))
        if mode == LoopMode.MAP:
            for atom in step.outputs[:n_blocks]:
                if tr.kind(atom) not in (Kind.TILE, Kind.SCALAR):
                    raise tr.fail(
                        eqn,
                        f"the function of sk.map_blocks({step.axis!r}) returns a vector, not a "
                        "block",
                        "return a 2-D block of the result: broadcast the vector to the block",
                    )
                blocks.append(tr.as_kind(atom, Kind.TILE))
        block = LoopBlock(
            index=index,
            axis=step.axis,
            mode=mode,
            operands=used,
            loads=loads,
            masks=frozenset(tr.masks),
            lines=tuple(line for line in tr.lines if not isinstance(line, LoopBlock)),
            carries=tuple(carries),
            dots=tuple(accumulators[i] for i in sorted(accumulators)),
            finals=tuple(eqn.outputs[n_blocks:]),  # the carries' final values
            blocks=tuple(blocks),
            products=tuple(tr.products),
            reverse=step.reverse,
            fills=tuple((name, fills[name]) for name in loads if name in fills),
        )
        return block, out_kinds
    finally:
        tr.lines, tr.masks, tr.g, tr.products = saved


def _init(tr: Translator, atom: Atom, kind: Kind, outer: Geometry, step: Geometry) -> Expr:
    """A carry's initial value, in its kind: a value of another kind fills a constant of the
    carry's kind, with the shapes of the body around the loop (in the row form, the step's:
    a per-row carry is a scalar, a block one a vector of the step's columns)."""
    have = tr.kind(atom)
    if step.one_row:
        if have == kind and kind in (Kind.SCALAR, Kind.ROW):
            return tr.source(atom)
        if have != Kind.SCALAR:  # a vector of the whole row, not of a step's columns
            raise NotInForm("a carry starts from a vector of the row")
        return step.constant(tr.source(atom), kind, tr.dtype(atom))
    if have == kind:
        return tr.source(atom)
    # A block of its own width (a top-K's K values) starts in registers of that width.
    logical = tr.logical_shape(atom) or None
    return full(tr.source(atom), outer.register_shape(kind, logical), tr.dtype(atom), kind)


_LOOP = Rule(
    translate_loop,
    own_comment=True,
    support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.PARTLY), (Where.STEP, Support.NO)),
    note=(
        "loops do not nest; in the row form, a loop over the columns walks the row in shared "
        "memory (no sk.dot, start= or stop=, or scan's carry in its step)"
    ),
)
LOOP_RULES: Mapping[str, Rule] = {"sk_loop": _LOOP, "sk_map_blocks": _LOOP}
