"""The on-disk cache of tuned constants, and the setting that says whether calls read it.

One JSON file a tuning, under `$STATICKERNEL_CACHE_DIR/tune/` (by default the user's cache
directory: `$XDG_CACHE_HOME/statickernel`, else `~/.cache/statickernel`), named by a hash of
everything the choice depends on: the kernel's source, its name and module, the operands' shapes and
dtypes, the constants fixed by the caller, the GPU it was ranked for, and the jax and
statickernel versions. A change to any of them misses the cache; nothing is ever reused
across them.

`STATICKERNEL_AUTOTUNE` says what calls do with it:
- `1` (the default): a call whose tuned constants it does not give takes the cached best
  for its shapes when there is one, and the declared defaults otherwise; it never tunes.
- `0`: calls ignore the cache and take the declared defaults.
- `force`: a call that meets new shapes tunes them first (by the best measure available),
  then caches and takes the best.
"""

import enum
import hashlib
import inspect
import json
import os
import pathlib
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from .._compiler.declare.spec import KernelSpec
from .._errors import TuneError
from .result import Ranking, Status, TuneCandidate, TuneResult

__all__ = [
    "AUTOTUNE_ENV",
    "CACHE_ENV",
    "Autotune",
    "autotune_setting",
    "cache_dir",
    "load",
    "store",
    "tuning_key",
]

CACHE_ENV = "STATICKERNEL_CACHE_DIR"
AUTOTUNE_ENV = "STATICKERNEL_AUTOTUNE"
_FORMAT = 1


class Autotune(enum.Enum):
    """What a call does with the tuning cache (`STATICKERNEL_AUTOTUNE`)."""

    OFF = "0"
    USE_CACHE = "1"
    FORCE = "force"


def autotune_setting(kernel: str | None = None, where: str | None = None) -> Autotune:
    """The setting of `STATICKERNEL_AUTOTUNE`; an unknown value is a TuneError naming the
    kernel and the line of the call that read it."""
    value = os.environ.get(AUTOTUNE_ENV, "1").strip()
    for setting in Autotune:
        if value.lower() == setting.value:
            return setting
    raise TuneError(
        f"environment variable {AUTOTUNE_ENV} holds an unknown value",
        kernel=kernel,
        where=where,
        expected="0, 1 or force",
        actual=repr(value),
        fix=f"set {AUTOTUNE_ENV}=1 (calls take cached tunings), 0 (declared defaults) or force "
        "(calls tune new shapes)",
    )


def cache_dir() -> pathlib.Path:
    """Where tunings are cached: `$STATICKERNEL_CACHE_DIR`, else the user's cache dir."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return pathlib.Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "statickernel"


def _source(spec: KernelSpec) -> str:
    try:
        return inspect.getsource(spec.fn)
    except (OSError, TypeError):  # defined where no source is kept (an exec, a REPL)
        return f"{spec.fn.__module__}.{spec.fn.__qualname__}"


def tuning_key(
    spec: KernelSpec,
    shapes: Sequence[tuple[tuple[int, ...], str]],
    fixed: Mapping[str, Any],
    target: str,
) -> str:
    """The cache key of one tuning: a hash of what its choice depends on."""
    from .. import __version__

    facts = {
        "format": _FORMAT,
        "kernel": spec.name,
        "module": f"{spec.fn.__module__}.{spec.fn.__qualname__}",
        "source": _source(spec),
        "candidates": {k: list(v) for k, v in spec.tunables.items()},
        "shapes": [[list(shape), dtype] for shape, dtype in shapes],
        "fixed": sorted((k, repr(v)) for k, v in fixed.items()),
        "target": target,
        "jax": f"{jax.__version__}",  # a part of the key, never compared
        "statickernel": __version__,
    }
    text = json.dumps(facts, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _path(key: str, kernel: str) -> pathlib.Path:
    return cache_dir() / "tune" / f"{kernel}-{key}.json"


def load(key: str, kernel: str) -> TuneResult | None:
    """The tuning cached under `key` (marked `cached`), or None: a missing, unreadable or
    older-format file is a miss."""
    try:
        data = json.loads(_path(key, kernel).read_text())
        if data.get("format") != _FORMAT or data.get("key") != key:
            return None
        table = tuple(
            TuneCandidate(**{**c, "status": Status(c["status"])}) for c in data["candidates"]
        )
        result = TuneResult(
            data["kernel"],
            Ranking(data["ranked_by"]),
            data["target"],
            tuple(data["shapes"]),
            dict(data["best"]),
            table,
            cached=True,
        )
        result.check_invariants()
        return result
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return None


def store(key: str, result: TuneResult) -> pathlib.Path:
    """Writes `result` under `key`, atomically (a reader sees the old file or the new one)."""
    path = _path(key, result.kernel)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": _FORMAT, "key": key, **result.to_json()}
    del data["cached"]
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(f.name, path)
    return path
