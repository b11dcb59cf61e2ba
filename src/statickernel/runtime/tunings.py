"""How many times each kernel declaration was tuned in this process.

The count is a part of the key of a kernel's cached specializations: a call after
`kernel.tune` misses the specialization an earlier call built with the constants it had then,
reads the new tuning, and takes the specialization of its constants (rebuilt only where they
changed). Every kernel of the declaration (`bind`, `with_backend`, `with_target`) sees it.
"""

import threading

from .._compiler.declare.spec import KernelSpec

__all__ = ["note_tuning", "tunings_of"]

# By the declaration's id: a spec holds dicts and is not hashable. An id reused after a
# declaration is collected only starts another at a count of its own.
_counts: dict[int, int] = {}
_lock = threading.Lock()


def tunings_of(spec: KernelSpec) -> int:
    """How many tunings of `spec` this process wrote or read since it started."""
    return _counts.get(id(spec), 0)


def note_tuning(spec: KernelSpec) -> None:
    """Records a tuning of `spec`: its calls look up their tuned constants again."""
    with _lock:
        _counts[id(spec)] = _counts.get(id(spec), 0) + 1
