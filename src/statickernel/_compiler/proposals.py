"""Strategies asked in order: the first that proposes itself is taken (the register forms in
`forms/choose.py`, the launch schedules in `schedules/choose.py`)."""

from collections.abc import Iterable
from typing import Protocol

__all__ = ["Proposes", "first_proposal"]


class Proposes[In, Out](Protocol):
    def propose(self, inputs: In, /) -> Out | None: ...


def first_proposal[In, Out](strategies: Iterable[Proposes[In, Out]], inputs: In, last: str) -> Out:
    """The proposal of the first strategy that makes one. `last` says which strategy takes
    every input, so that one always does."""
    for strategy in strategies:
        choice = strategy.propose(inputs)
        if choice is not None:
            return choice
    raise AssertionError(f"{last} takes every input")  # pragma: no cover
