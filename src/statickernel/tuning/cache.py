"""The on-disk cache of tuned constants, and the setting that says whether calls read it.

One JSON file a tuning, under `$STATICKERNEL_CACHE_DIR/tune/` (by default the user's cache
directory: `$XDG_CACHE_HOME/statickernel`, else `~/.cache/statickernel`), named by a hash of
everything the choice depends on: the kernel's source, its name and module, the operands'
shapes and dtypes, the constants fixed by the caller, the GPU architecture its candidates were
planned for (and the device they were timed on, if they were), and the jax and statickernel
versions. A change to any of them misses the cache; nothing is ever reused across them (a
tuning for sm_90a never applies to a call planned for sm_100a). The file records the
architecture and the versions.

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
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from .._compiler.declare.spec import KernelSpec
from .._errors import TuneError
from .._where import PACKAGE_DIR
from .cache_warning import TuningCacheWarning
from .result import Ranking, Status, TuneCandidate, TuneResult

__all__ = [
    "AUTOTUNE_ENV",
    "CACHE_ENV",
    "Autotune",
    "autotune_setting",
    "cache_dir",
    "load",
    "path_of",
    "report_bad_entry",
    "store",
    "tuning_key",
]

CACHE_ENV = "STATICKERNEL_CACHE_DIR"
AUTOTUNE_ENV = "STATICKERNEL_AUTOTUNE"
# 2: keyed by the architecture planned for (and the device timed on), which the file records
# with the versions that made it.
_FORMAT = 2


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
    device: str | None = None,
) -> str:
    """The cache key of one tuning: a hash of what its choice depends on, the GPU
    architecture its candidates were planned for (`target`: a tuning for one never applies to
    another) and, when they were timed on one, the device."""
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
        "device": device,
        "jax": f"{jax.__version__}",  # a part of the key, never compared
        "statickernel": __version__,
    }
    text = json.dumps(facts, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def path_of(key: str, kernel: str) -> pathlib.Path:
    """The file of the tuning cached under `key`."""
    return cache_dir() / "tune" / f"{kernel}-{key}.json"


def load(key: str, kernel: str, report: bool = True) -> TuneResult | None:
    """The tuning cached under `key` (marked `cached`), or None: none is cached, or the file
    cannot be read or holds no tuning of this key, which is ignored and, if `report`, reported
    once (`report_bad_entry`)."""
    path = path_of(key, kernel)
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # none cached (or no cache folder)
        return None
    except (OSError, ValueError) as exc:  # unreadable, or not UTF-8
        problem = f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    else:
        try:
            return _parsed(text, key)
        except _NotATuning as exc:
            problem = str(exc)
    if report:
        report_bad_entry(path, kernel, problem)
    return None


class _NotATuning(Exception):
    """What a cache file holds instead of a tuning of its key."""


def _parsed(text: str, key: str) -> TuneResult:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _NotATuning(f"is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _NotATuning(f"holds a JSON {_json_kind(data)}, not a tuning")
    if data.get("format") != _FORMAT or data.get("key") != key:
        raise _NotATuning("holds a tuning of another format or key than its name says")
    try:
        best, candidates = data["best"], data["candidates"]
        if not isinstance(best, dict) or not isinstance(candidates, list) or not candidates:
            raise TypeError("'best' is not an object, or 'candidates' not a list of them")
        table = tuple(_candidate(c) for c in candidates)
        result = TuneResult(
            _text(data["kernel"]),
            Ranking(data["ranked_by"]),
            _text(data["target"]),
            tuple(_text(s) for s in data["shapes"]),
            dict(best),
            table,
            cached=True,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _NotATuning(f"holds a malformed tuning ({type(exc).__name__}: {exc})") from None
    ranked = [c for c in table if c.status is Status.RANKED]
    if not ranked or dict(ranked[0].constants) != result.best:
        raise _NotATuning("holds a best that is not its first ranked candidate")
    return result


_NUMBERS = ("estimated_seconds", "seconds", "ctas", "ctas_per_sm", "bytes_in_flight_per_sm")
_NUMBERS += ("smem_bytes", "copied_bytes", "registers", "spill_bytes")


def _candidate(data: Any) -> TuneCandidate:
    if not isinstance(data, dict) or not isinstance(data.get("constants"), dict):
        raise TypeError(f"a candidate is {_json_kind(data)}, not an object with its constants")
    for name in _NUMBERS:
        value = data.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise TypeError(f"a candidate's {name} is {value!r}, not a number")
    return TuneCandidate(
        **{**data, "status": Status(data["status"]), "reason": _text(data["reason"])}
    )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _json_kind(value: Any) -> str:
    kinds = {list: "array", dict: "object", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


# The bad cache files reported in this process, with what was wrong: each is reported once.
_REPORTED: set[tuple[pathlib.Path, str]] = set()


def report_bad_entry(path: pathlib.Path, kernel: str, problem: str) -> None:
    """Warns, once per file and problem, that a cache file is ignored, and how to clear it:
    calls of its shapes take the declared defaults."""
    if (path, problem) in _REPORTED:
        return
    _REPORTED.add((path, problem))
    warnings.warn(
        f"kernel `{kernel}`: the tuning cache file {path} {problem}; it is ignored, and calls "
        "of these shapes take the declared defaults. Delete the file to clear it (or the "
        f"folder {path.parent}, every cached tuning), or tune these shapes again with "
        "kernel.tune(..., force=True)",
        TuningCacheWarning,
        stacklevel=_outside_statickernel(),
    )


def _outside_statickernel() -> int:
    """`warnings.warn`'s stacklevel, from `report_bad_entry`, of the innermost frame outside
    statickernel: the user's line that called the kernel."""
    frame, level = sys._getframe(2), 2  # pyright: ignore[reportPrivateUsage]
    while frame is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def store(key: str, result: TuneResult, planned_for: str) -> pathlib.Path:
    """Writes `result` under `key`, atomically (a reader sees the old file or the new one),
    with the architecture it was planned for and the versions that made it."""
    from .. import __version__

    path = path_of(key, result.kernel)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "format": _FORMAT,
        "key": key,
        "planned_for": planned_for,
        "versions": {"statickernel": __version__, "jax": f"{jax.__version__}"},
        **result.to_json(),
    }
    del data["cached"]
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(f.name, path)
    return path
