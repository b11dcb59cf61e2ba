"""The block form: the whole block in registers in the WGMMA layout. Every body the
translation accepts takes it, so it is asked last."""

from .base import FormChoice, FormInputs

__all__ = ["BlockForm"]


class BlockForm:
    def propose(self, inputs: FormInputs) -> FormChoice:
        return FormChoice.block(inputs.layout, inputs.translation)
