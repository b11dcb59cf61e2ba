"""What every register form reads and what it proposes: `FormInputs` in, a `FormChoice` out,
and the one way a form translates the body in its own geometry."""

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from ..._errors import ErrorContext, StaticKernelError
from ..declare.spec import KernelSpec
from ..ir.pallas import FlatFrame, RowFrame
from ..layout.blocks import BlockLayout
from ..lower.translate import Geometry, NotInForm, Translation, translate
from ..plan.schedule import Persistent
from ..trace.body import BodyTrace
from ..trace.crossblock import CrossBlock

__all__ = ["FormChoice", "FormInputs", "RegisterForm", "translate_in"]


@dataclasses.dataclass(frozen=True)
class FormInputs:
    """A specialization as the forms see it: the body traced, its block layout and dtypes,
    the results reduced across blocks, and the body translated in the block form."""

    spec: KernelSpec
    trace: BodyTrace
    layout: BlockLayout
    dtypes: Mapping[str, str]
    crosses: tuple[CrossBlock, ...]
    translation: Translation
    interpreted: bool
    ctx: ErrorContext


@dataclasses.dataclass(frozen=True)
class FormChoice:
    """The form a specialization takes: its layout and translation in that form, and what
    the plan needs to know of it."""

    layout: BlockLayout
    translation: Translation
    row_frame: RowFrame | None = None
    flat_frame: FlatFrame | None = None
    aliases: Mapping[str, str] | None = None
    block_form_smem: int = 0
    persistent: Persistent | None = None

    @classmethod
    def block(cls, layout: BlockLayout, translation: Translation) -> "FormChoice":
        return cls(layout, translation)

    def plan_options(self) -> dict[str, Any]:
        """The plan's parameters that this form sets."""
        return {
            "row_frame": self.row_frame,
            "flat_frame": self.flat_frame,
            "aliases": self.aliases,
            "block_form_smem": self.block_form_smem,
            "persistent": self.persistent,
        }


class RegisterForm(Protocol):
    """A register form: proposes itself for a specialization, or declines with None."""

    def propose(self, inputs: FormInputs) -> FormChoice | None: ...


def translate_in(
    inputs: FormInputs,
    trace: BodyTrace,
    layout: BlockLayout,
    geometry: Geometry,
    open_names: frozenset[str] = frozenset(),
) -> Translation | None:
    """The body in `geometry`, or None when it does not fit it; the results in `open_names`
    take the kind the body computes them in (a row the row form adds up)."""
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
    except (NotInForm, StaticKernelError):
        return None
