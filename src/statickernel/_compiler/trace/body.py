"""Abstract tracing of a kernel body on tile-shaped values, flattened into a list of equations.

The body describes the work of one block. It is traced with `jax.make_jaxpr` on values of the
*logical* block shape: a tiled dim has its block size and a whole dim has its true size. The
traced equations are what code generation turns back into Pallas source, so the checks made
here at import time (ops, result shapes and dtypes) and the code that later runs come from
the same trace.
"""

import dataclasses
import functools
import linecache
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex_core

from ..._compat import jnp_counting_function, user_frames
from ..._errors import BodyError, StaticKernelError
from ..._targets import TargetLimits
from ..._where import display_path, is_user_file
from ...language.context import LoadRecord, LoopDim, TraceContext, tracing
from ...language.tile import Tile
from ..declare.blocks import split_blocks
from ..declare.joined import piece_operands
from ..declare.spec import KernelSpec
from .results import check_result_structure

__all__ = [
    "Atom",
    "BodyTrace",
    "Count",
    "Eqn",
    "Step",
    "misplaced_load_error",
    "trace_body",
]


# Primitives that only wrap another jaxpr; their bodies are inlined.
_CALL_PARAMS = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "remat": "jaxpr",
    "checkpoint": "jaxpr",
}


@dataclasses.dataclass(frozen=True)
class Atom:
    """An equation operand: a variable name, or a scalar literal."""

    var: str | None
    value: Any = None
    dtype: str = ""
    weak_type: bool = False


@dataclasses.dataclass(frozen=True)
class Count:
    """The literal input `operand` of an equation is a count that jnp read from a block's
    shape: the elements of `source` over `axes` (jnp.mean's divisor, jnp.var's before its
    correction). Where a tiled or looped dim ends inside the block, fewer of them exist, and
    translation counts those."""

    operand: int
    source: Atom
    axes: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Eqn:
    prim: str
    inputs: tuple[Atom, ...]
    outputs: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]
    line: str | None  # "path:line" in the user's code
    source: str  # that line's text
    count: Count | None = None  # a count jnp took from the shape, among the inputs

    def param(self, name: str) -> Any:
        return dict(self.params)[name]


@dataclasses.dataclass(frozen=True)
class Step:
    """The traced step of a loop over `axis`: its carry variables, equations and results.

    The step reads the enclosing body's variables and operands by their names directly."""

    axis: str
    carries: tuple[str, ...]
    eqns: tuple[Eqn, ...]
    outputs: tuple[Atom, ...]
    loop: int = 0
    """The loop's place among the body's loops; its loads are recorded under it."""
    reverse: bool = False
    """True when the loop walks its blocks from the last to the first."""


LOOP_PRIMITIVES = {"sk_loop", "sk_map_blocks"}


@dataclasses.dataclass(frozen=True)
class BodyTrace:
    """A flattened body: operand tile variables, their loads, the equations and the results."""

    inputs: tuple[str | None, ...]  # variable of each operand's loaded tile; None if not loaded
    loads: tuple[LoadRecord, ...]  # every load that takes effect, in the order of the body
    eqns: tuple[Eqn, ...]
    outputs: tuple[Atom, ...]
    avals: tuple[tuple[str, tuple[tuple[int, ...], str]], ...]  # variable -> (shape, dtype)
    misplaced: tuple[tuple[str, str | None], ...] = ()  # (operand, line) loaded off the frame

    @functools.cached_property
    def _avals_by_var(self) -> dict[str, tuple[tuple[int, ...], str]]:
        # Translation reads an aval for every equation: looked up, not searched.
        return dict(self.avals)

    def aval(self, var: str) -> tuple[tuple[int, ...], str]:
        return self._avals_by_var[var]

    def traces(self, var: str) -> bool:
        """Whether `var` is one of the body's values (not one the translation added)."""
        return var in self._avals_by_var

    def loop_fills(self, loop: int) -> dict[str, Any]:
        """What the blocks the loop `loop` copies read past the edge, by operand."""
        return {r.operand: r.fill for r in self.loads if r.loop == loop}

    @functools.cached_property
    def multiplies(self) -> bool:
        """Whether the body takes `sk.dot` anywhere (its loops' steps included)."""

        def found(eqns: tuple[Eqn, ...]) -> bool:
            return any(
                e.prim == "sk_dot" or (e.prim in LOOP_PRIMITIVES and found(e.param("step").eqns))
                for e in eqns
            )

        return found(self.eqns)


def misplaced_load_error(spec: KernelSpec, trace: "BodyTrace") -> BodyError:
    """The error for the first operand loaded into registers though laid out unlike the blocks."""
    name, line = trace.misplaced[0]
    dims = next(o.block_dims for o in spec.operands if o.name == name)
    frame = f"'{spec.rows} {spec.cols}'" if spec.cols else f"'{spec.rows}'"
    return BodyError(
        f"`{name}` ('{' '.join(dims)}') is not laid out like the kernel's blocks ({frame}), so "
        "it cannot be loaded into registers",
        kernel=spec.name,
        where=line or spec.location,
        operand=name,
        expected=f"an operand with the dims {frame}, or 1-D along one of them",
        actual=f"'{' '.join(dims)}'",
        fix=f"multiply it with sk.dot({name}, ...) inside the loop step, or pass it transposed "
        "from outside the kernel",
    )


_NO_MESH = jax.sharding.AbstractMesh((), ())


def _trace_context(
    spec: KernelSpec, consts: Mapping[str, Any], dims: Mapping[str, int], limits: TargetLimits
) -> TraceContext:
    """What the language reads of the trace: the dims, the loops' blocks, the target's limits."""
    blocks = split_blocks(spec, consts)
    return TraceContext(
        dict(dims),
        {d: LoopDim(dims[d], blocks[d]) for d in spec.loop_map},
        limits,
        frame=(spec.rows, spec.cols),
        batch=spec.batch,
        blocks={d: blocks.get(d, size) for d, size in dims.items()},
        tiled=frozenset(spec.tile_map),
    )


def trace_body(
    spec: KernelSpec,
    block_shapes: Mapping[str, tuple[int, ...]],
    dtypes: Mapping[str, str],
    true_shapes: Mapping[str, tuple[int, ...]],
    consts: Mapping[str, Any],
    dims: Mapping[str, int],
    *,
    limits: TargetLimits,
    dims_are_bound: bool = True,
) -> BodyTrace:
    """Traces the body once on logical block shapes and flattens the result.

    At declaration the dims are probe sizes, not the user's: `dims_are_bound=False` keeps them
    out of the error messages.
    """
    bindings = dict(dims) if dims_are_bound else {}
    names = [o.name for o in spec.operands]
    op_dims = {o.name: o.block_dims for o in spec.operands}
    # An operand with a group dim is read in the steps of the loop that dim numbers (a
    # ragged group's operand in the steps of the loop its block runs along, as any operand).
    loop_groups = spec.group_map
    groups = {
        o.name: loop_groups[o.groups[0]]
        for o in spec.operands
        if o.groups and o.groups[0] in loop_groups
    }
    loads: list[LoadRecord] = []
    misplaced: list[tuple[str, str | None]] = []
    context = _trace_context(spec, consts, dims, limits)

    # A parameter vector is laid out along a dim of its own, and read by index: not misplaced.
    params = set(spec.parameter_operands())
    # Nor is an operand along a part of a joined dim: a block of its own width.
    params |= piece_operands(list(spec.operands), spec.joined)

    def body(*values: Any) -> Any:
        tiles = {
            n: Tile(
                n,
                v,
                true_shapes[n],
                loads,
                op_dims[n],
                (spec.rows, spec.cols),
                misplaced if n not in params else None,
                groups.get(n),
            )
            for n, v in zip(names, values, strict=True)
        }
        with tracing(context):
            out = spec.fn(**tiles, **consts)
        check_result_structure(spec, out)
        return out

    avals = [jax.ShapeDtypeStruct(block_shapes[n], dtypes[n]) for n in names]
    try:
        # One block's work, whatever mesh the call runs under: traced in a shard_map (or under
        # jax.set_mesh) the body would see that mesh, and jnp would add sharding ops that mean
        # nothing in a block (a `reshard` of the tile in jnp.where(c, v, -jnp.inf)).
        with jax.sharding.use_abstract_mesh(_NO_MESH):
            closed = jax.make_jaxpr(body)(*avals)
    except StaticKernelError as exc:
        # Their class (a body refuses a constant's value by sk.OverrideError), with context.
        exc.kernel = exc.kernel or spec.name
        exc.where = exc.where or _innermost_user_line(exc.__traceback__) or spec.location
        raise type(exc)(
            exc.what,
            kernel=exc.kernel,
            where=exc.where,
            operand=exc.operand if not exc.constant else None,
            constant=exc.constant,
            dim=exc.dim,
            expected=exc.expected,
            actual=exc.actual,
            bindings=exc.bindings or bindings,
            fix=exc.fix,
        ) from None
    except Exception as exc:
        where = _innermost_user_line(exc.__traceback__) or spec.location
        raise BodyError(
            f"the body failed to trace on tile-shaped values: {type(exc).__name__}: "
            f"{_first_line(exc)}",
            kernel=spec.name,
            where=where,
            expected="a body that maps the loaded tiles to result tiles",
            actual=", ".join(f"{n}: {dtypes[n]}{list(block_shapes[n])}" for n in names),
            bindings=bindings,
            fix="check the line above; the body sees one block, with tiled dims at their block "
            "size and whole dims at their full size",
        ) from None
    flat = _Flattener(spec)
    return _scalar_reductions_unshared(flat.run(closed, names, loads, tuple(misplaced)))


# The reductions a block can compute its part of, for a result reduced across blocks.
_PARTIAL_REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min")


def _scalar_reductions_unshared(trace: BodyTrace) -> BodyTrace:
    """The trace with each reduction to a scalar that is read more than once computed once per
    reader, as if the body had written `jnp.sum(v), jnp.sum(v) * 2` for `s, s * 2`.

    A scalar result lacks every tiled dim: each block writes its part of the reduction, and one
    reduction after the launch combines them, following the result's own ops back to its
    reduction. Two results read from one sum then each have their own; a block computes it
    twice, in registers. A scalar read inside the body stays refused, as before."""
    avals = dict(trace.avals)
    readers: dict[str, int] = {}
    for eqn in trace.eqns:
        for atom in eqn.inputs:
            if atom.var is not None:
                readers[atom.var] = readers.get(atom.var, 0) + 1
    for atom in trace.outputs:
        if atom.var is not None:
            readers[atom.var] = readers.get(atom.var, 0) + 1
    shared = {
        eqn.outputs[0]: eqn
        for eqn in trace.eqns
        if eqn.prim in _PARTIAL_REDUCTIONS
        and avals[eqn.outputs[0]][0] == ()
        and readers.get(eqn.outputs[0], 0) > 1
    }
    if not shared:
        return trace
    seen: dict[str, int] = {}  # a shared scalar -> the readers given it so far

    def reread(atom: Atom, before: list[Eqn]) -> Atom:
        """The atom, or for a shared scalar's second and later readers, a copy of it."""
        if atom.var not in shared:
            return atom
        n = seen[atom.var] = seen.get(atom.var, 0) + 1
        if n == 1:
            return atom
        copy = f"{atom.var}_copy{n}"
        avals[copy] = avals[atom.var]
        before.append(dataclasses.replace(shared[atom.var], outputs=(copy,)))
        return Atom(copy)

    eqns: list[Eqn] = []
    for eqn in trace.eqns:
        copies: list[Eqn] = []
        inputs = tuple(reread(atom, copies) for atom in eqn.inputs)
        eqns.extend(copies)
        eqns.append(dataclasses.replace(eqn, inputs=inputs))
    outputs = tuple(reread(atom, eqns) for atom in trace.outputs)
    return dataclasses.replace(trace, eqns=tuple(eqns), outputs=outputs, avals=tuple(avals.items()))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _innermost_user_line(tb: Any) -> str | None:
    found = None
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if is_user_file(path):
            found = f"{display_path(path)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


class _Flattener:
    """Inlines call-like primitives and renames variables to v0, v1, ... in program order."""

    def __init__(self, spec: KernelSpec):
        self.spec = spec
        self.eqns: list[Eqn] = []
        self.avals: dict[str, tuple[tuple[int, ...], str]] = {}
        self.count = 0
        self.loops: dict[int, int] = {}  # a loop's trace id -> its place among the loops

    def run(
        self,
        closed: Any,
        names: list[str],
        loads: list[LoadRecord],
        misplaced: tuple[tuple[str, str | None], ...] = (),
    ) -> BodyTrace:
        env: dict[Any, Atom] = {}
        inputs: list[str | None] = []
        used = _used_vars(closed.jaxpr)
        recorded = {r.operand for r in loads}
        for name, var in zip(names, closed.jaxpr.invars, strict=True):
            loaded = name in recorded and var in used
            if loaded:
                env[var] = Atom(name)
                self.avals[name] = _aval(var.aval)
            inputs.append(name if loaded else None)
        self._bind_consts(closed.jaxpr.constvars, closed.consts, env, _first_use_line(closed.jaxpr))
        self._eqns(closed.jaxpr.eqns, env)
        outputs = tuple(self._read(env, v) for v in closed.jaxpr.outvars)
        # A load whose value the body never uses takes no effect; a loop's load is recorded
        # under the loop's place.
        taking_effect = [
            r if r.loop is None else dataclasses.replace(r, loop=self.loops[r.loop])
            for r in loads
            if r.operand in inputs and (r.loop is None or r.loop in self.loops)
        ]
        return BodyTrace(
            inputs=tuple(inputs),
            loads=tuple(taking_effect),
            eqns=tuple(self.eqns),
            outputs=outputs,
            avals=tuple(self.avals.items()),
            misplaced=misplaced,
        )

    def _bind_consts(self, constvars: Any, consts: Any, env: dict[Any, Atom], line: Any) -> None:
        for var, value in zip(constvars, consts, strict=True):
            arr = np.asarray(value)
            where = line.get(var) if isinstance(line, dict) else line
            if arr.shape != ():
                raise BodyError(
                    f"the body captures an array of shape {arr.shape} from outside the kernel",
                    kernel=self.spec.name,
                    where=where or self.spec.location,
                    expected="only scalars captured from the enclosing scope",
                    actual=f"{arr.dtype}{list(arr.shape)}",
                    fix="pass the array as an operand of the kernel instead",
                )
            env[var] = Atom(None, arr.item(), str(arr.dtype), False)

    def _fresh(self, aval: Any) -> str:
        new = f"v{self.count}"
        self.count += 1
        self.avals[new] = _aval(aval)
        return new

    def _loop(self, eqn: Any, env: dict[Any, Atom], where: tuple[str | None, str]) -> None:
        _flatten_loop(self, eqn, env, where)

    def _read(self, env: dict[Any, Atom], v: Any) -> Atom:
        if isinstance(v, jex_core.Literal):
            arr = np.asarray(v.val)
            aval: Any = v.aval
            return Atom(None, arr.item(), str(aval.dtype), bool(getattr(aval, "weak_type", 0)))
        return env[v]

    def _eqns(
        self, eqns: Any, env: dict[Any, Atom], outer: tuple[str | None, str] = (None, "")
    ) -> None:
        for eqn in eqns:
            name = eqn.primitive.name
            line, source = _user_line(eqn)
            if line is None:
                # Inside a jnp function that is itself jitted: the user's line is the call's.
                line, source = outer
            if name in LOOP_PRIMITIVES:
                self._loop(eqn, env, (line, source))
                continue
            if name in _CALL_PARAMS and _CALL_PARAMS[name] in eqn.params:
                inner = eqn.params[_CALL_PARAMS[name]]
                jaxpr = getattr(inner, "jaxpr", inner)
                consts = getattr(inner, "consts", ())
                inner_env: dict[Any, Atom] = {}
                self._bind_consts(jaxpr.constvars, consts, inner_env, line)
                for iv, ov in zip(jaxpr.invars, eqn.invars, strict=False):
                    inner_env[iv] = self._read(env, ov)
                self._eqns(jaxpr.eqns, inner_env, (line, source))
                for outer_out, inner_out in zip(eqn.outvars, jaxpr.outvars, strict=True):
                    env[outer_out] = self._read(inner_env, inner_out)
                continue
            inputs = tuple(self._read(env, v) for v in eqn.invars)
            outputs = []
            for out in eqn.outvars:
                new = self._fresh(out.aval)
                env[out] = Atom(new)
                outputs.append(new)
            params = tuple(sorted(eqn.params.items()))
            flat = Eqn(name, inputs, tuple(outputs), params, line, source)
            if name == "div" and jnp_counting_function(eqn) is not None:
                flat = mark_count(flat, self.eqns, self.avals)
            self.eqns.append(flat)


def _flatten_loop(self: "_Flattener", eqn: Any, env: dict[Any, Atom], where: Any) -> None:
    """A loop becomes one equation whose `step` holds the step's own flattened equations."""
    closed = eqn.params["jaxpr"]
    jaxpr = closed.jaxpr
    n_consts = eqn.params["num_consts"]
    inner_env: dict[Any, Atom] = {}
    for iv, ov in zip(jaxpr.invars[:n_consts], eqn.invars[:n_consts], strict=True):
        inner_env[iv] = self._read(env, ov)
    carries = []
    for iv in jaxpr.invars[n_consts:]:
        new = self._fresh(iv.aval)
        inner_env[iv] = Atom(new)
        carries.append(new)
    outer_eqns, self.eqns = self.eqns, []
    try:
        self._eqns(jaxpr.eqns, inner_env, where)
        step_eqns = tuple(self.eqns)
    finally:
        self.eqns = outer_eqns
    step = Step(
        axis=eqn.params["axis"],
        carries=tuple(carries),
        eqns=step_eqns,
        outputs=tuple(self._read(inner_env, v) for v in jaxpr.outvars),
        loop=self.loops.setdefault(eqn.params["loop_id"], len(self.loops)),
        reverse=bool(eqn.params.get("reverse", False)),
    )
    started = eqn.params.get("started", False)
    stopped = eqn.params.get("stopped", False)
    bounds = int(started) + int(stopped)
    invars = eqn.invars[n_consts : len(eqn.invars) - bounds]
    inputs = tuple(self._read(env, v) for v in invars)
    outputs = []
    for out in eqn.outvars:
        new = self._fresh(out.aval)
        env[out] = Atom(new)
        outputs.append(new)
    params: dict[str, Any] = {"axis": step.axis, "step": step}
    if started:  # where the loop begins, read in the body around it
        params["start"] = self._read(env, eqn.invars[len(eqn.invars) - bounds])
    if stopped:  # where the loop ends, read in the body around it
        params["stop"] = self._read(env, eqn.invars[-1])
    if "axis_sizes" in eqn.params:
        params["axis_sizes"] = eqn.params["axis_sizes"]
    line, source = where
    self.eqns.append(
        Eqn(eqn.primitive.name, inputs, tuple(outputs), tuple(sorted(params.items())), line, source)
    )


# What jnp puts between a reduction and the count it divides by: keepdims, a cast.
_AROUND_A_SUM = frozenset({"broadcast_in_dim", "reshape", "squeeze", "expand_dims"})
_AROUND_A_SUM |= {"convert_element_type"}


def mark_count(
    div: Eqn, before: list[Eqn], avals: Mapping[str, tuple[tuple[int, ...], str]]
) -> Eqn:
    """`div`, jnp's division of a sum by the count of what it sums, with that count marked
    (see `Count`): on `div` itself (jnp.mean, jnp.average), or on the `sub` that takes the
    correction from it (jnp.var, and jnp.std through it), which `before` holds."""
    producers = {out: i for i, eqn in enumerate(before) for out in eqn.outputs}

    def producer(atom: Atom) -> tuple[int, Eqn] | tuple[None, None]:
        i = producers.get(atom.var or "")
        return (None, None) if i is None else (i, before[i])

    _, sum_eqn = producer(div.inputs[0])
    while sum_eqn is not None and sum_eqn.prim in _AROUND_A_SUM:
        _, sum_eqn = producer(sum_eqn.inputs[0])
    if sum_eqn is None or sum_eqn.prim != "reduce_sum" or sum_eqn.inputs[0].var is None:
        return div
    source, axes = sum_eqn.inputs[0], tuple(sum_eqn.param("axes"))
    shape = avals[source.var or ""][0]
    elements = float(np.prod([shape[a] for a in axes]))
    divisor = div.inputs[1]
    if divisor.var is None:
        counted = divisor.value == elements
        return dataclasses.replace(div, count=Count(1, source, axes)) if counted else div
    i, sub = producer(divisor)
    if i is not None and sub is not None and sub.prim == "sub":
        first = sub.inputs[0]
        if first.var is None and first.value == elements:
            before[i] = dataclasses.replace(sub, count=Count(0, source, axes))
    return div


def _first_use_line(jaxpr: Any) -> dict[Any, str | None]:
    """The user's line of the first equation that reads each constant of a jaxpr."""
    lines: dict[Any, str | None] = {}
    for eqn in jaxpr.eqns:
        for var in eqn.invars:
            if var in jaxpr.constvars and var not in lines:
                lines[var] = _user_line(eqn)[0]
    return lines


def _used_vars(jaxpr: Any) -> set[Any]:
    used: set[Any] = set()
    for eqn in jaxpr.eqns:
        used.update(v for v in eqn.invars if not isinstance(v, jex_core.Literal))
    used.update(v for v in jaxpr.outvars if not isinstance(v, jex_core.Literal))
    return used


def _aval(aval: Any) -> tuple[tuple[int, ...], str]:
    return tuple(int(d) for d in aval.shape), str(aval.dtype)


def _user_line(eqn: Any) -> tuple[str | None, str]:
    for frame in user_frames(eqn):
        if is_user_file(frame.file_name):
            text = linecache.getline(frame.file_name, frame.start_line).strip()
            return f"{display_path(frame.file_name)}:{frame.start_line}", text
    return None, ""
