"""One operand or result of a declaration, as its annotation declares it."""

import dataclasses

__all__ = ["OperandSpec"]


@dataclasses.dataclass(frozen=True)
class OperandSpec:
    """One operand or result: its name, its named dims and the dtypes its annotation allows."""

    name: str
    dims: tuple[str, ...]
    dtypes: tuple[str, ...]
    annotation: str
    batch: tuple[str, ...] = ()
    """Its leading batch dims: one index of each per grid step, unseen by the body."""
    groups: tuple[str, ...] = ()
    """Its group dims, after the batch dims: one index per step of the loop each numbers,
    unseen by the body."""

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def block_dims(self) -> tuple[str, ...]:
        """The dims the body sees: all but the leading batch and group dims."""
        return self.dims[len(self.batch) + len(self.groups) :]
