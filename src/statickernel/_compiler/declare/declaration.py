"""What `@sk.kernel(...)` was given, as one record, and the records the checks of it build on
the way to a `KernelSpec`: how its dims are split into blocks, and the frame the blocks share.

`Declaration` holds the decorator's arguments as the user wrote them: `spec.build_spec` checks
each, so a field holds what was given, not yet what its annotation promises (a `tile=` that is
no mapping is refused there, pointing at the user's decorator line).
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["BlockFrame", "Blocking", "Declaration"]


@dataclasses.dataclass(frozen=True)
class Declaration:
    """The decorated function and the arguments of `@sk.kernel(...)` that declare it (those
    of the call path, `backend=` and `vjp=`, are not part of it)."""

    fn: Callable[..., Any]
    tile: Mapping[str, str]
    """The tiled dims and the int constants that block them (`{"M": "BM"}`); {} for none."""
    reference: Callable[..., Any] | None = None
    name: str | None = None
    """The kernel's name in plans and generated code; None: the function's name."""
    loop: Mapping[str, str] | None = None
    stages: str | int | None = None
    batch: tuple[str, ...] = ()
    """The batch dims, a single name (`batch="B"`) already made a tuple of one."""
    groups: Mapping[str, str] | None = None
    index: Mapping[str, str] | None = None
    update: str | None = None
    pages: Mapping[str, str] | None = None
    ragged: Mapping[str, str] | None = None
    test_data: Mapping[str, Callable[..., Any]] | None = None
    approx_math: bool = False

    @property
    def kernel_name(self) -> str:
        """The name the kernel is known by: `name=`, else the function's."""
        return self.name or getattr(self.fn, "__name__", "kernel")


@dataclasses.dataclass(frozen=True)
class Blocking:
    """How a declaration walks its dims, each map checked to be one of names: tiled across
    the grid (`tile=`), walked in sequence inside each block (`loop=`), one index a grid step
    (`batch=`), and, once `groups=` is checked, the group dims numbering a loop's steps (the
    page dims of `pages=` among them)."""

    tile: Mapping[str, str]
    loop: Mapping[str, str]
    batch: tuple[str, ...]
    groups: Mapping[str, str] = dataclasses.field(default_factory=dict[str, str])

    @property
    def split(self) -> dict[str, str]:
        """Every dim split into blocks, across the grid or along a loop, and its constant."""
        return {**self.tile, **self.loop}


@dataclasses.dataclass(frozen=True)
class BlockFrame:
    """The frame every 2-D block of the kernel shares, (`rows`, `cols`), `cols` None where the
    blocks are vectors along the rows; and the dims of parameter vectors beside it (a
    PolyNorm's `"3"`), read by index rather than laid out as blocks."""

    rows: str
    cols: str | None
    parameters: tuple[str, ...]
