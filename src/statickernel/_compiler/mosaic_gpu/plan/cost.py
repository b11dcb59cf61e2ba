"""The cost floor of a specialization: the least time an H200 could take for one call.

`plan_cost` counts, from the plan and the traced body, the bytes the whole call must move
through HBM and the arithmetic it must do; `Cost.floor_seconds` is the time the measured peaks
in `hardware.py` need for the larger of the two, a roofline floor. A kernel's measured time over
its floor says how far it is from what the hardware allows.

HBM bytes:

- each loaded operand's array, as the kernel addresses it (host padding included), once per
  pass that copies it: once when it is copied once per block, and once for each loop whose
  pipeline copies it (a two-pass softmax reads its rows twice);
- each result's array, once; a loop split across CTAs writes partial sums, which the sum
  after the launch reads back before it writes the result;
- rows gathered or scattered by an index (`index={"V": "ids"}`): a row of the array for
  each row of the index's dim, and the index itself;
- pages (`pages={"P": "block_tables"}`): every page each table row lists, as if each
  sequence were the table's whole length (a loop stopped at a shorter one reads fewer), and
  the table itself;
- host padding: a padded operand is read at its true shape and written padded before the
  launch, and a padded result is read padded and written at its true shape when sliced back.

A block that several grid blocks read (a matmul's `a`, read by every column of CTAs) counts
once: L2 serves the other reads, and this is a floor.

Arithmetic, over the true sizes of the whole call:

- `sk.dot` is 2 M N K per product; the `acc + sk.dot(a, b)` that accumulates it is part of it.
- Every other equation of the trace that computes counts one op per element of its result (of
  its input, for a reduction), transcendentals (exp, rsqrt) included. The body sees one block:
  along a dim the value spans, the whole call covers the dim's true size; along a dim it does
  not span, the equation runs once per block, or per loop step, along that dim.
- Shape-only equations (broadcasts, reshapes, dtype conversions) count nothing, nor do the
  edge masks the generator adds, which are not in the trace.
"""

import dataclasses
import enum
import math
from typing import Protocol

from ...trace.body import LOOP_PRIMITIVES, Atom, BodyTrace, Eqn
from .. import hardware as hw
from ..layout.blocks import DimLayout
from ..lower.rules import REDUCTIONS, SHAPE_ONLY
from .operands import PageCopies
from .pipelining import LoopPlan
from .schedule_config import ScheduleConfig

__all__ = ["Bound", "Cost", "plan_cost"]

# Equations that move or relabel values without arithmetic.
_FREE = SHAPE_ONLY | {"convert_element_type", "debug_print"}  # a print computes nothing


class Bound(enum.StrEnum):
    """Which roofline sets a specialization's floor."""

    MEMORY = "memory"
    COMPUTE = "compute"


@dataclasses.dataclass(frozen=True)
class Cost:
    """What one call must do at least, and the time an H200 needs for it: the roofline floor
    that measured times are compared with (measured time / `floor_seconds`).

    `str(cost)` is the `cost:` line of a printed plan."""

    hbm_bytes: int
    """Bytes the whole call reads and writes in HBM: every loaded operand once per pass that
    copies it (once per block, or once per loop whose pipeline reads it), every result once,
    and the host-padding copies. Reads that L2 serves (a block shared by grid blocks) are not
    counted."""
    flops: int
    """Arithmetic of the whole call over its true sizes, `dot_flops` included: one op per
    element of each computing equation's result (of its input, for a reduction)."""
    dot_flops: int
    """The part of `flops` done by `sk.dot` on the tensor cores: 2 M N K per product."""

    @property
    def memory_seconds(self) -> float:
        """The time to move `hbm_bytes` at `HBM_BYTES_PER_S`."""
        return self.hbm_bytes / hw.HBM_BYTES_PER_S

    @property
    def compute_seconds(self) -> float:
        """The time for `dot_flops` on the tensor cores and the rest on the CUDA cores."""
        vector = self.flops - self.dot_flops
        return self.dot_flops / hw.DOT_FLOPS_PER_S + vector / hw.VECTOR_FLOPS_PER_S

    @property
    def floor_seconds(self) -> float:
        """The roofline floor: the larger of `memory_seconds` and `compute_seconds`."""
        return max(self.memory_seconds, self.compute_seconds)

    @property
    def bound(self) -> Bound:
        """`Bound.MEMORY` ("memory") when moving the bytes takes longer than the arithmetic,
        else `Bound.COMPUTE` ("compute")."""
        return Bound.MEMORY if self.memory_seconds >= self.compute_seconds else Bound.COMPUTE

    def check_invariants(self) -> None:
        """Asserts that the counts are consistent; raises AssertionError if one is not."""
        for count in (self.hbm_bytes, self.flops, self.dot_flops):
            assert isinstance(count, int) and not isinstance(count, bool) and count >= 0
        assert self.hbm_bytes > 0  # every call writes its results
        assert self.dot_flops <= self.flops
        assert self.floor_seconds == max(self.memory_seconds, self.compute_seconds) > 0
        floor = self.memory_seconds if self.bound is Bound.MEMORY else self.compute_seconds
        assert floor == self.floor_seconds

    def __str__(self) -> str:
        work = f"{self.hbm_bytes:,} B HBM, {self.flops:,} flop"
        if self.dot_flops:
            share = "all" if self.dot_flops == self.flops else f"{self.dot_flops:,} in"
            work += f" ({share} sk.dot)"
        if self.bound is Bound.MEMORY:
            rate = f"{hw.HBM_BYTES_PER_S / 1e12:g} TB/s"
        else:
            rates = [f"{hw.DOT_FLOPS_PER_S / 1e12:g} TFLOP/s sk.dot"] if self.dot_flops else []
            if self.flops > self.dot_flops:
                rates.append(f"{hw.VECTOR_FLOPS_PER_S / 1e12:g} TFLOP/s vector")
            rate = " + ".join(rates)
        return f"{work}; floor {_duration(self.floor_seconds)} at {rate} ({self.bound}-bound)"


def _duration(seconds: float) -> str:
    """A time to 3 significant digits in the unit that keeps it in [1, 1000): `2.93 us`."""
    rounded = float(f"{seconds:.3g}")
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if rounded >= scale:
            return f"{rounded / scale:.3g} {unit}"
    return f"{rounded / 1e-9:.3g} ns"


class _Array(Protocol):
    """What the cost reads of an operand's or a result's plan (an `OperandPlan`)."""

    @property
    def name(self) -> str: ...
    @property
    def dims(self) -> tuple[str, ...]: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def gmem_shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def loaded(self) -> bool: ...
    @property
    def host_padded(self) -> bool: ...
    @property
    def index(self) -> str | None: ...
    @property
    def pages(self) -> PageCopies | None: ...
    @property
    def batch(self) -> tuple[str, ...]: ...


class _Planned(Protocol):
    """What the cost reads of a `LaunchPlan`. (The plan holds its cost, so this module reads it
    through this protocol, and imports run one way.)"""

    @property
    def operands(self) -> tuple[_Array, ...]: ...
    @property
    def results(self) -> tuple[_Array, ...]: ...
    @property
    def dims(self) -> tuple[DimLayout, ...]: ...
    @property
    def loops(self) -> tuple[LoopPlan, ...]: ...
    @property
    def rows(self) -> str: ...
    @property
    def cols(self) -> str | None: ...
    @property
    def schedule_variant(self) -> ScheduleConfig | None: ...
    def step_block(self, axis: str) -> int: ...


def plan_cost(plan: _Planned, trace: BodyTrace) -> Cost:
    """The cost floor of the specialization `plan` launches, whose body traced as `trace`."""
    counter = _Counter(plan, trace)
    counter.walk(trace.eqns, None)
    batch = math.prod(d.size for d in plan.dims if d.batched)
    dot, other = batch * counter.dot, batch * counter.other
    return Cost(hbm_bytes=_hbm_bytes(plan, trace), flops=dot + other, dot_flops=dot)


def _bytes(shape: tuple[int, ...], dtype: str) -> int:
    return hw.nbytes(math.prod(shape), dtype)


def _hbm_bytes(plan: _Planned, trace: BodyTrace) -> int:
    once = {r.operand for r in trace.loads if r.loop is None}
    sizes = {d.name: d.size for d in plan.dims}
    indices = {op.index for op in plan.operands if op.index is not None}
    indices |= {op.pages.table for op in plan.operands if op.pages is not None}
    total = 0
    for op in plan.operands:
        if op.name in indices and not op.loaded:  # read by the copies it addresses
            total += _bytes(op.gmem_shape, op.dtype)
        if not op.loaded:
            continue
        passes = (op.name in once) + sum(op.name in loop.operands for loop in plan.loops)
        # Rows gathered by an index: one row of the array for each row of the index's dim.
        read = (sizes[op.dims[0]], *op.gmem_shape[1:]) if op.index else op.gmem_shape
        if op.pages is not None:
            read = _pages_read(plan, op, op.pages)
        total += max(passes, 1) * _bytes(read, op.dtype)
        if op.host_padded:  # jnp.pad: the true array read, the padded one written
            total += _bytes(op.shape, op.dtype) + _bytes(op.gmem_shape, op.dtype)
    for op in plan.results:
        # Rows scattered by an index: one row of the array for each row of the index's dim.
        total += _bytes(
            (sizes[op.dims[0]], *op.gmem_shape[1:]) if op.index else op.gmem_shape, op.dtype
        )
        if op.host_padded:  # sliced back: the padded array read, the true one written
            total += _bytes(op.gmem_shape, op.dtype) + _bytes(op.shape, op.dtype)
    if plan.schedule_variant is not None:  # a split's partial sums, added after the launch
        total += plan.schedule_variant.after_launch_bytes(plan.results)
    return total


def _pages_read(plan: _Planned, op: _Array, pages: PageCopies) -> tuple[int, ...]:
    """The elements a paged operand's loop reads: for each grid step of the batch dims the
    pool or its table has (a sequence and a head), the table's length in pages."""
    table = next(o for o in plan.operands if o.name == pages.table)
    sizes = {d.name: d.size for d in plan.dims}
    entries = math.prod(sizes[d] for d in dict.fromkeys((*op.batch, *table.batch)))
    rest = op.gmem_shape[len(op.gmem_shape) - len(op.dims) + 1 :]  # after a page's rows
    return (entries, table.shape[-1] * pages.page_rows, *rest)


class _Counter:
    """Walks the trace, counting each equation's arithmetic over the whole call.

    A 2-D value's axes are the frame's (rows, cols); a 1-D value runs along one of them, which
    is followed from where it comes from (a reduction, an operand, a vector it is computed
    from). A vector with no such origin (`jnp.zeros((BM,))`) is placed by its length."""

    def __init__(self, plan: _Planned, trace: BodyTrace):
        self.plan = plan
        self.trace = trace
        self.rows, self.cols = plan.rows, plan.cols
        self.dims = {d.name: d for d in plan.dims}
        self.arrays = {op.name: op for op in plan.operands}
        self.along: dict[str, str] = {}  # a 1-D variable -> the dim it runs along
        self.placed: set[str] = set()  # of those, the ones placed by their length alone
        self.products: set[str] = set()  # the values of sk.dot
        self.dot = 0
        self.other = 0
        for op in plan.operands:
            if len(op.dims) == 1:
                self.along[op.name] = op.dims[0]

    def walk(self, eqns: tuple[Eqn, ...], axis: str | None) -> None:
        """Counts `eqns`, inside the steps of the loop over `axis` (None: once per block)."""
        for eqn in eqns:
            if eqn.prim in LOOP_PRIMITIVES:
                self._loop(eqn)
                continue
            for out in eqn.outputs:
                if len(self._shape(out)) == 1:
                    self._orient(out, eqn, axis)
            if eqn.prim == "sk_dot":
                self.dot += self._product(eqn)
                self.products.update(eqn.outputs)
            elif eqn.prim in _FREE:
                continue
            elif eqn.prim == "add" and any(a.var in self.products for a in eqn.inputs):
                continue  # the accumulation of a WGMMA, counted in its 2 M N K
            elif eqn.prim in REDUCTIONS:
                (atom,) = eqn.inputs
                shape = self._shape(atom.var) if atom.var else ()
                if any(shape[a] != 1 for a in eqn.param("axes")):
                    self.other += self._elements(atom.var, axis)
            else:
                self.other += self._elements(eqn.outputs[0], axis)

    def _loop(self, eqn: Eqn) -> None:
        step = eqn.param("step")
        for carry, init in zip(step.carries, eqn.inputs, strict=True):
            if len(self._shape(carry)) == 1:
                self._follow(carry, init, step.axis)
        self.walk(step.eqns, step.axis)
        for out, value in zip(eqn.outputs, step.outputs, strict=False):
            if len(self._shape(out)) == 1:
                self._follow(out, value, step.axis)

    def _follow(self, var: str, source: Atom, axis: str | None) -> None:
        """Places the 1-D `var` as the value it takes, `source`."""
        if source.var is not None and source.var in self.along:
            self.along[var] = self.along[source.var]
            if source.var in self.placed:
                self.placed.add(var)
        else:
            self._place(var, axis)

    def _orient(self, var: str, eqn: Eqn, axis: str | None) -> None:
        """Places the 1-D output `var` of `eqn` along the dim its inputs give it."""
        frame = (self.rows, self.cols)
        if eqn.prim == "sk_position":  # `sk.position(dim)` says its dim
            self.along[var] = eqn.param("dim")
            return
        reduced = eqn.inputs[0].var if eqn.prim in REDUCTIONS else None
        if reduced is not None and len(self._shape(reduced)) == 2:
            (axis_reduced,) = eqn.param("axes")
            dim = frame[1 - axis_reduced]
            if dim is not None:
                self.along[var] = dim
                return
        guess = None
        for atom in eqn.inputs:
            if atom.var is None:
                continue
            shape = self._shape(atom.var)
            if len(shape) == 1 and atom.var in self.along:
                if atom.var not in self.placed:
                    self.along[var] = self.along[atom.var]
                    return
                guess = guess or atom.var
            spread = [frame[i] for i, n in enumerate(shape) if len(shape) == 2 and n != 1]
            if len(spread) == 1 and spread[0] is not None:  # a (rows, 1) or (1, cols) vector
                self.along[var] = spread[0]
                return
        if guess is not None:
            self._follow(var, Atom(guess), axis)
        else:
            self._place(var, axis)

    def _place(self, var: str, axis: str | None) -> None:
        """Places a vector with no origin by its length: the rows' block, else the columns'."""
        (length,) = self._shape(var)
        cols = self.cols
        by_cols = (
            cols is not None
            and (not self.dims[cols].looped_by or cols == axis)  # a loop dim only in its steps
            and length != self.dims[self.rows].block
            and length == self.dims[cols].block
        )
        self.along[var] = cols if cols is not None and by_cols else self.rows
        self.placed.add(var)

    def _product(self, eqn: Eqn) -> int:
        m = self.arrays[eqn.param("a")].dims[0] if eqn.param("a") else self.rows
        k = eqn.param("over")
        n = next(d for d in eqn.param("b_dims") if d != k)  # b's dims, an operand's or not
        return 2 * self.dims[m].size * self.dims[n].size * self.dims[k].size

    def _elements(self, var: str | None, axis: str | None) -> int:
        """The elements of `var` over the whole call, inside the loop over `axis` if any."""
        spanned: set[str] = set()
        if var is not None:
            shape = self._shape(var)
            along_loop = (
                axis is not None
                and axis not in (self.rows, self.cols)
                and len(shape) == 2
                and shape[1] == self.dims[axis].block
            )
            if along_loop:  # a block along the loop dim: attention's scores
                axes: tuple[str | None, ...] = (self.rows, axis)
            elif len(shape) == 2:
                axes = (self.rows, self.cols)
            else:
                axes = (self.along[var],) if shape else ()
            spanned = {d for d, n in zip(axes, shape, strict=True) if d is not None and n != 1}
        # The dims a block walks: the frame's, less loop dims outside their loop, and the loop's.
        walked = [
            d
            for d in (self.rows, self.cols)
            if d is not None and (not self.dims[d].looped_by or d == axis)
        ]
        if axis is not None and axis not in walked:
            walked.append(axis)
        total = 1
        for name in walked:
            dim = self.dims[name]
            block = self.plan.step_block(name) if name == axis else dim.block
            total *= dim.size if name in spanned else hw.cdiv(dim.size, block)
        return total

    def _shape(self, var: str) -> tuple[int, ...]:
        return self.trace.aval(var)[0]
