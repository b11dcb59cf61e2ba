"""Strategies asked in order: the first that proposes itself is taken (the register forms in
`forms/choose.py`, the launch schedules in `schedules/choose.py`)."""

from collections.abc import Iterable
from typing import Protocol, TypeVar

__all__ = ["Proposes", "first_proposal"]


_In = TypeVar("_In", contravariant=True)
_Out = TypeVar("_Out", covariant=True)


class Proposes(Protocol[_In, _Out]):
    def propose(self, inputs: _In, /) -> _Out | None: ...


def first_proposal(strategies: Iterable[Proposes[_In, _Out]], inputs: _In, last: str) -> _Out:
    """The proposal of the first strategy that makes one. `last` says which strategy takes
    every input, so that one always does."""
    for strategy in strategies:
        choice = strategy.propose(inputs)
        if choice is not None:
            return choice
    raise AssertionError(f"{last} takes every input")  # pragma: no cover
