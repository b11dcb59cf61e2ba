"""What the compile path's stages hand each other: the unit a compile starts from, the body
traced, and what the whole path produced. The back-ends take and give these; their own
types (a plan, a profiler's options) travel here as `object`, checked where they are read."""

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from .._errors import ErrorContext, Phase
from .._targets import DEFAULT_TARGET, TARGETS, GpuTarget
from .declare.spec import KernelSpec
from .trace.body import BodyTrace
from .trace.crossblock import CrossBlock

__all__ = ["CompileUnit", "Compiled", "ConstantRequest", "DeclaredProbe", "Traced"]


class DeclaredProbe(Protocol):
    """A declaration's blocks on probe sizes, as a back-end lays them out."""

    @property
    def sizes(self) -> Mapping[str, int]:
        """The probe's size of every dim."""
        ...


@dataclasses.dataclass(frozen=True)
class ConstantRequest:
    """A back-end's request, at a call, to compile with a constant the call left at its
    default set to another value, by name, and the note its plan then shows."""

    name: str
    value: Any
    note: str


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What the compile path produced: the trace, the plan and the module, for the stages
    that ran."""

    trace: BodyTrace
    plan: object
    """The back-end's plan (Mosaic GPU's `LaunchPlan`); None at a declaration without loops:
    nothing there depends on a plan."""
    source: str | None
    """The generated module; only at a call."""
    request: ConstantRequest | None = None
    """Where the back-end asks for another constant instead of planning (plan and source
    are then None): the compile path compiles once more with it."""


@dataclasses.dataclass(frozen=True)
class CompileUnit:
    """One specialization as the compile path takes it: the spec, the phase and where its
    errors point, the sizes (the call's, or the declaration's probes), the constants, the
    dtypes each array may take, the operands' shapes and the backend."""

    spec: KernelSpec
    phase: Phase
    ctx: ErrorContext
    sizes: Mapping[str, int]
    consts: Mapping[str, Any]
    options: Mapping[str, tuple[str, ...]]
    """Each array's dtypes: the one bound at a call, every one allowed at the declaration."""
    shapes: Mapping[str, tuple[int, ...]]
    backend: str
    declared: DeclaredProbe | None = None
    """At the declaration, the blocks checked before the trace on the probe sizes."""
    profile: object = None
    """At a call, the profiler's options for the launch (`sk.profile`), which the back-end
    reads (Mosaic GPU's `Profile`)."""
    narrowable: frozenset[str] = frozenset()
    """At a call, the tile constants left at their defaults, which the plan may narrow."""
    notes: tuple[str, ...] = ()
    """At a call, what the constants stage changed, for the plan's notes."""
    narrowing: object = None
    """At a call, the back-end's record of narrower constants it chose over the declared
    ones (Mosaic GPU's `Narrowing`), which the plan shows."""
    target: GpuTarget = TARGETS[DEFAULT_TARGET]
    """The GPU the launch is planned and generated for."""

    @property
    def interpreted(self) -> bool:
        """Whether the body runs in the interpreter (the declaration checks it as Mosaic
        GPU would take it)."""
        return self.phase is Phase.CALL and self.backend == "interpret"


@dataclasses.dataclass(frozen=True)
class Traced:
    """The body traced, its results reduced across blocks, and every array's dtype."""

    spec: KernelSpec
    """The spec, with the results reduced across blocks as their partials."""
    trace: BodyTrace
    crosses: tuple[CrossBlock, ...]
    dtypes: Mapping[str, str]
    learned: object = None
    """With results reduced across blocks: what the back-end learned of their partials (a
    translation it may take as it is)."""
