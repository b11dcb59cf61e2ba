"""The register forms in the order they are asked: the first that proposes itself is the
form a specialization takes. A new form is a module of this package and one line here."""

from ..proposals import first_proposal
from .base import FormChoice, FormInputs, RegisterForm
from .block import BlockForm
from .rows import RowsForm
from .strided import StridedForm

__all__ = ["REGISTER_FORMS", "choose_form"]

# The row form first: it is taken only where whole rows are too wide for the block form.
# The strided block next, for elementwise bodies; the block form takes every other body.
REGISTER_FORMS: tuple[RegisterForm, ...] = (RowsForm(), StridedForm(), BlockForm())


def choose_form(inputs: FormInputs) -> FormChoice:
    return first_proposal(REGISTER_FORMS, inputs, "the block form")
