"""Reporting: the environment a run measured, its tables as text and Markdown, and its JSON."""

import datetime
import importlib.metadata
import json
import math
import os
import pathlib
import platform
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

__all__ = ["Table", "agrees", "describe_error", "environment", "fmt", "write_json"]


def agrees(got: Any, want: Any) -> bool:
    """Two bfloat16-computed results equal within 3e-2, absolute and relative, in float32."""
    g32, w32 = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return bool(np.allclose(g32, w32, atol=3e-2, rtol=3e-2))


def environment() -> dict[str, Any]:
    """Where and when a run happened: what its figures are only valid for."""
    now = datetime.datetime.now(datetime.UTC)
    return {
        "date": now.date().isoformat(),
        "time_utc": now.isoformat(timespec="seconds"),
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "devices": [f"{d.platform}: {d.device_kind}" for d in jax.devices()],
        "argv": sys.argv[1:],
    }


def describe_error(exc: BaseException) -> str:
    """An exception in one line, short enough for a table cell."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def fmt(value: Any, digits: int = 3) -> str:
    """A cell: numbers to `digits` significant digits, None and NaN as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 10**digits:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


class Table:
    """A titled table, rendered as aligned text for the terminal or as Markdown."""

    def __init__(self, title: str, columns: Sequence[str], note: str = ""):
        self.title = title
        self.columns = tuple(columns)
        self.note = note
        self.rows: list[tuple[str, ...]] = []
        self.numeric: set[int] = set()  # columns right-aligned as numbers

    def add(self, *cells: Any) -> None:
        assert len(cells) == len(self.columns), (self.columns, cells)
        for i, cell in enumerate(cells):
            if isinstance(cell, int | float) and not isinstance(cell, bool):
                self.numeric.add(i)
        self.rows.append(tuple(fmt(c) for c in cells))

    def text(self) -> str:
        widths = [
            max(len(r[i]) for r in [self.columns, *self.rows]) for i in range(len(self.columns))
        ]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(
                c.rjust(w) if i in self.numeric else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        out = [self.title, line(self.columns), line(["-" * w for w in widths])]
        out += [line(r) for r in self.rows]
        if self.note:
            out.append(self.note)
        return "\n".join(out)

    def markdown(self) -> str:
        out = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |"]
        out.append(
            "|"
            + "|".join("---:" if i in self.numeric else "---" for i in range(len(self.columns)))
            + "|"
        )
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.note:
            out += ["", self.note]
        return "\n".join(out)


def write_json(path: pathlib.Path, data: Mapping[str, Any]) -> None:
    """Writes through a temporary file, so a reader never sees half a result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    text = json.dumps(_strict(data), indent=2, default=_jsonable, allow_nan=False)
    tmp.write_text(text + "\n")
    tmp.replace(path)


def _strict(value: Any) -> Any:
    """NaN and infinities become null: strict JSON has no spelling for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
