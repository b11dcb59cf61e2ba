"""How the command line writes: ✓ and ✗ in colour on a terminal, errors shortened to their
head, progress on standard error, JSON on standard output."""

import dataclasses
import json
import os
import sys
import traceback
from typing import Any, TextIO

from .._errors import StaticKernelError
from .parser import ColorChoice

__all__ = [
    "Style",
    "error_facts",
    "error_text",
    "indent",
    "plural",
    "print_json",
    "progress",
]

# Non-statickernel errors (from jax, say) can be pages long; show their head only.
_MAX_ERROR_LINES = 20
_GREEN, _RED, _BOLD, _RESET = "\033[32m", "\033[31m", "\033[1m", "\033[0m"


@dataclasses.dataclass(frozen=True)
class Style:
    """Colours ✓ green, ✗ red and headings bold, or leaves text as it is."""

    color: bool

    @classmethod
    def choose(cls, choice: ColorChoice, stream: TextIO | None = None) -> "Style":
        """`--color`: always or never; auto colours a terminal unless $NO_COLOR is set to
        anything (no-color.org), and $FORCE_COLOR colours a pipe too."""
        if choice is not ColorChoice.AUTO:
            return cls(choice is ColorChoice.ALWAYS)
        if os.environ.get("NO_COLOR"):
            return cls(False)
        if os.environ.get("FORCE_COLOR"):
            return cls(True)
        stream = stream if stream is not None else sys.stdout
        isatty = getattr(stream, "isatty", None)
        return cls(bool(isatty and isatty()))

    def marks(self, text: str) -> str:
        """`text` with each ✓ green and each ✗ red."""
        if not self.color:
            return text
        return text.replace("✓", f"{_GREEN}✓{_RESET}").replace("✗", f"{_RED}✗{_RESET}")

    def bold(self, text: str) -> str:
        return f"{_BOLD}{text}{_RESET}" if self.color and text else text

    def table(self, text: str) -> str:
        """A table from `format_results`: its header bold, its marks coloured."""
        header, _, rest = text.partition("\n")
        return self.bold(header) + ("\n" + self.marks(rest) if rest else "")


def error_text(exc: BaseException, full: bool) -> str:
    """A statickernel error's own message; otherwise the exception, shortened unless `full`."""
    if full:
        return "".join(traceback.format_exception(exc)).rstrip()
    if isinstance(exc, StaticKernelError):
        return str(exc)
    lines = f"{type(exc).__name__}: {exc}".rstrip().splitlines()
    if len(lines) > _MAX_ERROR_LINES:
        hidden = len(lines) - _MAX_ERROR_LINES
        lines = [*lines[:_MAX_ERROR_LINES], f"... ({hidden} more lines; see --traceback)"]
    return "\n".join(lines)


def error_facts(exc: BaseException) -> dict[str, str]:
    """An exception for --json: its class and its message."""
    return {"class": type(exc).__name__, "message": str(exc)}


def indent(text: str, prefix: str = "    ") -> str:
    return prefix + text.replace("\n", "\n" + prefix)


def progress(text: str) -> None:
    print(text, end="", file=sys.stderr, flush=True)


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, allow_nan=False))
