"""What the compile path asks of a back-end, and which back-end compiles for a target.

The front (declare, bind, trace, the cross-block rewrite, the IR) is the same for every
target; what comes after the trace is a back-end's: how the blocks are laid out and checked,
how the body is translated, which register form and launch schedule it takes, its plan and
its module. `build.py` runs the front's stages and asks the target's back-end for the rest,
through `Backend`; a back-end is a package of `_compiler/` (`mosaic_gpu/` today) whose
`backend` module names an instance as `BACKEND`. Nothing of the front imports a back-end but
`backend_for`, here, when a target is compiled for.
"""

import abc
import importlib
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import ErrorContext
from .._targets import BackendKind, GpuTarget
from .declare.spec import KernelSpec
from .unit import Compiled, CompileUnit, DeclaredProbe, Traced

__all__ = ["Backend", "backend_for"]


class Backend(abc.ABC):
    """A back-end's stages, in the order the compile path asks for them."""

    @abc.abstractmethod
    def probe(
        self,
        spec: KernelSpec,
        consts: Mapping[str, Any],
        options: Mapping[str, tuple[str, ...]],
        whole_blocks: int,
    ) -> DeclaredProbe:
        """The declaration's blocks with each whole dim `whole_blocks` of its smallest
        blocks, unchecked: their sizes are the probe's."""

    @abc.abstractmethod
    def check_probe(
        self,
        spec: KernelSpec,
        probe: DeclaredProbe,
        consts: Mapping[str, Any],
        options: Mapping[str, tuple[str, ...]],
        ctx: ErrorContext,
    ) -> None:
        """The probe's blocks checked against the target's rules, with every dtype the
        annotations allow."""

    @abc.abstractmethod
    def learn_partials(self, unit: CompileUnit, traced: Traced) -> Traced:
        """`traced`, whose results reduced across blocks take the kinds the body computes
        their partials in (a translation learns them)."""

    @abc.abstractmethod
    def lower_to_source(self, unit: CompileUnit, traced: Traced) -> Compiled:
        """The traced body laid out, translated, in its register form and launch schedule,
        planned and (at a call) emitted; or, at a call, a request for another value of a
        constant the call left at its default (`Compiled.request`)."""

    @abc.abstractmethod
    def specialize(
        self,
        unit: CompileUnit,
        compiled: Compiled,
        compile_unit: Callable[[CompileUnit], Compiled],
    ) -> Compiled:
        """At a call, `compiled` (the unit compiled), or the compile of other constants the
        target prefers (`compile_unit` runs the whole path on a unit)."""


_MODULES: Mapping[BackendKind, str] = {
    BackendKind.MOSAIC_GPU: "statickernel._compiler.mosaic_gpu.backend",
}


def backend_for(target: GpuTarget) -> Backend:
    """The back-end that compiles for `target`."""
    backend = importlib.import_module(_MODULES[target.backend]).BACKEND
    assert isinstance(backend, Backend)
    return backend
