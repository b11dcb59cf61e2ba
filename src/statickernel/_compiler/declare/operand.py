"""One operand or result of a declaration, as its annotation declares it."""

import dataclasses

__all__ = ["IndexedDim", "OperandSpec"]


@dataclasses.dataclass(frozen=True)
class IndexedDim:
    """An operand dim addressed by the values of an index operand (`index={"V": "ids"}`):
    row `t` of the body's block is the operand's row `ids[t]`."""

    dim: str
    """The operand's dim the values address ("V")."""
    along: str
    """The index's dim ("T"), which the body sees in its place."""
    index: str
    """The index operand's name ("ids")."""


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

    indexed: IndexedDim | None = None
    """Its rows gathered by an index operand's values; None for a block at the kernel's own
    block coordinates."""

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def layout_dims(self) -> tuple[str, ...]:
        """Its dims as its blocks are laid out: with an indexed dim, its index's."""
        if self.indexed is None:
            return self.dims
        return tuple(self.indexed.along if d == self.indexed.dim else d for d in self.dims)

    @property
    def block_dims(self) -> tuple[str, ...]:
        """The dims the body sees: all but the leading batch and group dims, with an indexed
        dim seen as its index's."""
        return self.layout_dims[len(self.batch) + len(self.groups) :]
