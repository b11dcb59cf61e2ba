"""A compiled specialization: its plan, its generated source, and the function that runs it,
made from that source the first time it is asked for."""

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax

from .._compiler.declare.binding import call_site
from .._compiler.declare.spec import KernelSpec
from .._compiler.mosaic_gpu.plan.plan import LaunchPlan
from .autodiff import Derivative, differentiable
from .backend import mosaic_gpu_refusal
from .generated import execute_module, finished_when_eager

__all__ = ["Specialization", "specialization"]


@dataclasses.dataclass(frozen=True)
class Specialization:
    """One compiled specialization: its plan, its generated source and the function it defines.

    The source runs (and `fn` is made) on first use of `fn`: a plan or the source alone, which
    planning, emitting and their tests ask for, need neither the module run nor the Pallas
    back-end it imports."""

    plan: LaunchPlan
    source: str
    make_fn: Callable[[], Callable[..., Any]] = dataclasses.field(repr=False, compare=False)
    # Whether `fn` runs the interpreter; stored so that a failed call need not read the plan.
    interpreted: bool = False

    @functools.cached_property
    def fn(self) -> Callable[..., Any]:
        return self.make_fn()


def specialization(
    spec: KernelSpec,
    plan: LaunchPlan,
    source: str,
    consts: Mapping[str, Any],
    derivative: Derivative,
    backend: str,
) -> Specialization:
    """The specialization of `spec` that `plan` and `source` describe, run on `backend` with
    the derivative rule `derivative` gives it."""
    interpreted = backend == "interpret"

    def make_fn() -> Callable[..., Any]:
        launch = _launch(spec, source, interpreted)
        if interpreted:
            # An interpreted launch is a host callback that runs JAX computations of its own on
            # the CPU. If the caller dispatches more work on the same CPU client while one is in
            # flight (as an eager jax.grad does with its backward pass), the two can wait on
            # each other. So an eager interpreted launch finishes before the call returns, and
            # the derivative rule stays outside the jit, where the forward it runs is eager.
            return differentiable(
                finished_when_eager(jax.jit(launch)), derivative, spec, consts, backend
            )
        return jax.jit(differentiable(launch, derivative, spec, consts, backend))

    return Specialization(plan, source, make_fn, interpreted=interpreted)


def _launch(spec: KernelSpec, source: str, interpreted: bool) -> Callable[..., Any]:
    """The generated module's kernel function. On a jax too old to run the module, a stand-in
    that raises the BackendError saying so where the launch would be traced: whatever a call
    refuses before its launch (an operand a cached shape meets, a derivative the kernel lacks)
    is refused first, as on a jax that runs the module."""
    from .._compat import runs_mosaic_gpu  # looked up when used, as require_mosaic_gpu does

    if runs_mosaic_gpu():
        return execute_module(source, spec, interpreted)

    def refused(*args: Any) -> Any:
        raise mosaic_gpu_refusal(spec.name, call_site())

    return refused
