"""Marker comments (`# @tag`) that let a test name a line of its own file, so an error's
`where` can be checked against the exact line without hard-coding line numbers."""

import pathlib
import re
from collections.abc import Callable


def line_finder(path: str) -> Callable[[str], int]:
    """A function giving the 1-based line of `path` that carries the marker comment `# @tag`."""
    lines = pathlib.Path(path).read_text().splitlines()

    def line_of(tag: str) -> int:
        marker = re.compile(rf"#\s@{re.escape(tag)}(\s|$)")
        hits = [n for n, text in enumerate(lines, 1) if marker.search(text)]
        assert len(hits) == 1, f"marker @{tag} is on {len(hits)} lines"
        return hits[0]

    return line_of
