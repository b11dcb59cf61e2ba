"""What every register form reads and what it proposes: `FormInputs` in, a `FormChoice` out,
and the one way a form translates the body in its own geometry."""

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from ...._errors import ErrorContext
from ...declare.spec import KernelSpec
from ...trace.body import BodyTrace, Eqn
from ...trace.crossblock import CrossBlock
from ..layout.blocks import BlockLayout
from ..lower.translate import Geometry, NotInForm, Translation, translate
from ..plan.inputs import FormFacts

__all__ = ["Declined", "FormChoice", "FormInputs", "RegisterForm", "translate_in"]


@dataclasses.dataclass(frozen=True)
class FormInputs:
    """A specialization as the forms see it: the body traced, its block layout and dtypes,
    the results reduced across blocks, and the body translated in the block form."""

    spec: KernelSpec
    trace: BodyTrace
    layout: BlockLayout
    dtypes: Mapping[str, str]
    consts: Mapping[str, Any]
    crosses: tuple[CrossBlock, ...]
    translation: Translation
    interpreted: bool
    ctx: ErrorContext


@dataclasses.dataclass(frozen=True)
class FormChoice:
    """The form a specialization takes: its layout and translation in that form, and what
    the plan needs to know of it (its frame, and what it allows the launch schedules)."""

    layout: BlockLayout
    translation: Translation
    facts: FormFacts

    @classmethod
    def block(cls, layout: BlockLayout, translation: Translation) -> "FormChoice":
        """The block form: WGMMA-layout blocks, which a matmul-shaped body may multiply in
        the warp-specialized launch, and whose loop of sums may be split across CTAs."""
        return cls(layout, translation, FormFacts(specializes_warps=True, splits_loops=True))


@dataclasses.dataclass(frozen=True)
class Declined:
    """Why a form does not hold the body: what it cannot express, and the equation of the
    body that does it (None where no one equation does: a result the form cannot hold)."""

    reason: str
    eqn: Eqn | None = None


class RegisterForm(Protocol):
    """A register form: proposes itself for a specialization, or declines with None."""

    def propose(self, inputs: FormInputs) -> FormChoice | None: ...


def translate_in(
    inputs: FormInputs,
    trace: BodyTrace,
    layout: BlockLayout,
    geometry: Geometry,
    open_names: frozenset[str] = frozenset(),
) -> Translation | Declined:
    """The body in `geometry`, or why it does not fit it: the translator's `NotInForm`, and
    nothing else (an error of the body raised here is raised as it is). The results in
    `open_names` take the kind the body computes them in (a row the row form adds up)."""
    spec = inputs.spec
    try:
        return translate(
            trace,
            geometry,
            tuple(
                None if r.name in open_names else layout.kind(r.block_dims) for r in spec.results
            ),
            spec.name,
            spec.location,
        )
    except NotInForm as exc:  # an error of the body is the user's, in every form: it stands
        return Declined(exc.reason, exc.eqn)
