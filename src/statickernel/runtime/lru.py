"""The bounded map of a kernel's specializations: the least recently used one is dropped when
a new one would pass the bound.

Each specialization holds its generated module and a jitted launch, and a kernel called at
many shapes (a serving loop's sequence lengths) would otherwise keep one for every shape it
ever met. The bound is `STATICKERNEL_SPECIALIZATIONS` (256 by default, read when a kernel is
declared); a dropped specialization is rebuilt, from jax's own caches where they still hold
it, when its shapes come back.
"""

import collections
import contextlib
import os
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

__all__ = ["DEFAULT_SIZE", "ENV_VAR", "LruCache", "configured_size"]

ENV_VAR = "STATICKERNEL_SPECIALIZATIONS"
DEFAULT_SIZE = 256


def configured_size() -> int:
    """The bound `STATICKERNEL_SPECIALIZATIONS` sets; the default for an unset, non-numeric or
    non-positive value (a cache must keep the specialization a call is running)."""
    try:
        size = int(os.environ.get(ENV_VAR, DEFAULT_SIZE))
    except ValueError:
        return DEFAULT_SIZE
    return size if size >= 1 else DEFAULT_SIZE


_V = TypeVar("_V")


class LruCache(Generic[_V]):
    """A map of at most `maxsize` entries; `get` marks an entry used. Writers hold the kernel's
    lock; a read needs none (each operation is one step under the interpreter's lock)."""

    def __init__(self, maxsize: int) -> None:
        assert maxsize >= 1
        self.maxsize = maxsize
        self._entries: collections.OrderedDict[Hashable, _V] = collections.OrderedDict()

    def get(self, key: Hashable) -> _V | None:
        entry = self._entries.get(key)
        if entry is not None:
            with contextlib.suppress(KeyError):  # dropped by a writer since the read above
                self._entries.move_to_end(key)
        return entry

    def __setitem__(self, key: Hashable, value: _V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __contains__(self, key: Any) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
