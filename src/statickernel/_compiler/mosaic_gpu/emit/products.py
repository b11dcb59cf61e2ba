"""How a loop's accumulators are multiplied into, on the launch's tensor cores: one strategy
per instruction, behind one interface that `emit.loops` calls.

- WGMMA (Hopper): each accumulator is a `plgpu.ACC` ref in registers, zero at its scope's
  start; a step issues one WGMMA a product and waits for it (or, with two stages or more, for
  the previous step's, one in flight); after the loop the ref is read whole.
- tcgen05 (Blackwell): each accumulator is a `plgpu.TMEM` ref in tensor memory; a step's
  first product into it overwrites it on the loop's first step (`accumulate=step > 0`), the
  step's last one commits to a barrier that orders the tensor cores, and the step waits on it
  before the pipeline refills the slots; after the loop each accumulator is loaded into
  registers in the TCGEN05 layout, the layout of the block's values from then on.
"""

import dataclasses
from collections.abc import Mapping
from typing import Protocol

from ...._targets import TensorCores
from ...ir.names import accumulator_ref, loop_part, smem_ref
from ...ir.nodes import (
    Assign,
    BinOp,
    Comment,
    Const,
    DType,
    EllipsisIndex,
    Expr,
    ExprStmt,
    Module,
    Name,
    Operator,
    Stmt,
    Subscript,
    call,
    renamed,
)
from ..lower.translation import Carry, DotUpdate
from ..pallas import tensor_core_barrier

__all__ = ["AccumulatorProducts", "accumulator_products", "block_layouts"]


@dataclasses.dataclass(frozen=True)
class AccumulatorScope:
    """What the scope of a loop's accumulators allocates: its parameters' names and the
    allocations `pl.run_scoped` passes them, in order."""

    params: tuple[str, ...]
    allocations: tuple[Expr, ...]
    one_per_line: bool = False  # the allocations written one a line


class AccumulatorProducts(Protocol):
    """The tensor cores' part of a loop that folds `acc + sk.dot(a, b)` into accumulators."""

    overlaps: bool
    """Whether a step may leave its product in flight for the next step to wait for (the
    pipeline then releases each step's blocks one step later)."""

    def scope(
        self,
        loop: str,
        accumulators: tuple[Carry, ...],
        shape: tuple[int, int],
        dtypes: Mapping[str, str],
    ) -> AccumulatorScope: ...

    def step(self, loop: str, dots: tuple[DotUpdate, ...], overlap: bool) -> list[Stmt]: ...

    def after_loop(self, overlap: bool) -> list[Stmt]: ...

    def read(
        self, loop: str, accumulators: tuple[Carry, ...]
    ) -> tuple[list[Stmt], dict[str, Expr]]:
        """The statements that read each accumulator into registers after the loop, and the
        value of each, by carry."""
        ...


def _b_ref(dot: DotUpdate) -> Name:
    return Name(f"{smem_ref(dot.b)}.T" if dot.transpose_b else smem_ref(dot.b))


class WgmmaProducts:
    overlaps = True

    def scope(
        self,
        loop: str,
        accumulators: tuple[Carry, ...],
        shape: tuple[int, int],
        dtypes: Mapping[str, str],
    ) -> AccumulatorScope:
        del loop
        allocations = tuple(
            call("plgpu.ACC", Const(shape), DType(dtypes.get(c.var, "float32")))
            for c in accumulators
        )
        return AccumulatorScope(tuple(accumulator_ref(c.var) for c in accumulators), allocations)

    def step(self, loop: str, dots: tuple[DotUpdate, ...], overlap: bool) -> list[Stmt]:
        del loop
        step: list[Stmt] = [
            ExprStmt(
                call("plgpu.wgmma", Name(accumulator_ref(d.carry)), Name(smem_ref(d.a)), _b_ref(d))
            )
            for d in dots
        ]
        if dots and overlap:
            done = "the previous step's WGMMA is done; its blocks can go"
            step.append(ExprStmt(call("plgpu.wgmma_wait", Const(1)), comment=done))
        elif dots:
            # The pipeline refills this step's slots as soon as the step returns.
            step.append(ExprStmt(call("plgpu.wgmma_wait", Const(0))))
        return step

    def after_loop(self, overlap: bool) -> list[Stmt]:
        if not overlap:
            return []
        return [ExprStmt(call("plgpu.wgmma_wait", Const(0)), comment="the last step's WGMMA")]

    def read(
        self, loop: str, accumulators: tuple[Carry, ...]
    ) -> tuple[list[Stmt], dict[str, Expr]]:
        del loop
        return [], {
            c.var: Subscript(Name(accumulator_ref(c.var)), (EllipsisIndex(),)) for c in accumulators
        }


class Tcgen05Products:
    # A step waits for its own MMAs: the barrier is committed once a step.
    overlaps = False

    def scope(
        self,
        loop: str,
        accumulators: tuple[Carry, ...],
        shape: tuple[int, int],
        dtypes: Mapping[str, str],
    ) -> AccumulatorScope:
        allocations: list[Expr] = [
            call("plgpu.TMEM", Const(shape), DType(dtypes.get(c.var, "float32")))
            for c in accumulators
        ]
        params = (*(accumulator_ref(c.var) for c in accumulators), _mma_done(loop))
        return AccumulatorScope(params, (*allocations, tensor_core_barrier()), one_per_line=True)

    def step(self, loop: str, dots: tuple[DotUpdate, ...], overlap: bool) -> list[Stmt]:
        assert not overlap, "tcgen05 steps wait for their own products"
        if not dots:
            return []
        first_step = BinOp(
            Operator.GT, Subscript(Name(loop_part(loop, "indices")), (Const(0),)), Const(0)
        )
        barrier = Name(f"{_mma_done(loop)}.at[0]")
        started: set[str] = set()
        step: list[Stmt] = []
        for i, d in enumerate(dots):
            # The first product into an accumulator on the loop's first step overwrites it:
            # tensor memory starts with whatever it held.
            accumulate = Const(True) if d.carry in started else first_step
            started.add(d.carry)
            args: list[Expr] = [Name(accumulator_ref(d.carry)), Name(smem_ref(d.a)), _b_ref(d)]
            if i == len(dots) - 1:  # its barrier arrives once this MMA and those before it finish
                args.append(barrier)
            step.append(ExprStmt(call("plgpu.tcgen05_mma", *args, accumulate=accumulate)))
        # The pipeline refills this step's slots as soon as the step returns.
        step.append(Comment("the step's MMAs are done before the pipeline refills its slots"))
        step.append(ExprStmt(call("plgpu.barrier_wait", barrier)))
        return step

    def after_loop(self, overlap: bool) -> list[Stmt]:
        return []

    def read(
        self, loop: str, accumulators: tuple[Carry, ...]
    ) -> tuple[list[Stmt], dict[str, Expr]]:
        lines: list[Stmt] = []
        values: dict[str, Expr] = {}
        for c in accumulators:
            value = Name(loop_part(loop, f"{c.var}_value"))
            load = call("plgpu.async_load_tmem", Name(accumulator_ref(c.var)))
            lines.append(Assign((value,), load))
            values[c.var] = value
        if lines:
            # Tensor memory is freed when the scope ends: the loads must have read it.
            lines.append(ExprStmt(call("plgpu.wait_load_tmem"), comment="before the scope ends"))
        return lines, values


def _mma_done(loop: str) -> str:
    return loop_part(loop, "mma_done")


_STRATEGIES: dict[TensorCores, AccumulatorProducts] = {
    TensorCores.WGMMA: WgmmaProducts(),
    TensorCores.TCGEN05: Tcgen05Products(),
}


def accumulator_products(tensor_cores: TensorCores) -> AccumulatorProducts:
    """The strategy of a launch's tensor cores."""
    return _STRATEGIES[tensor_cores]


# The register layout of a block's values, per tensor cores: the one their accumulator loads
# into. The translation writes WGMMA's; a launch whose products are tcgen05's takes TCGEN05's,
# of the same shape (blocks of 128 rows, `plan.products`), its reductions included.
_BLOCK_LAYOUT = {
    TensorCores.WGMMA: "plgpu.Layout.WGMMA",
    TensorCores.TCGEN05: "plgpu.Layout.TCGEN05",
}


def block_layouts(module: Module, tensor_cores: TensorCores) -> Module:
    """`module` with its blocks' register layout the one `tensor_cores` accumulate in."""
    wgmma = _BLOCK_LAYOUT[TensorCores.WGMMA]
    layout = _BLOCK_LAYOUT[tensor_cores]
    if layout == wgmma:
        return module
    sections = tuple(
        tuple(renamed(s, {wgmma: layout}) for s in section) for section in module.sections
    )
    return Module(sections)
