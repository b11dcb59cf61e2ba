"""How plans, compile reports and generated source show themselves in IPython and Jupyter.

A notebook cell that ends in `softmax.plan(x)` shows the plan as `print` would, not as a
dataclass repr; `softmax.emit(x)` shows highlighted Python. Nothing here imports IPython:
the hooks are the methods IPython looks for (`_repr_pretty_`, `_repr_html_`).
"""

import html
from typing import Any

__all__ = ["PallasSource", "TextDisplay"]

_PRE_STYLE = "font-family: var(--jp-code-font-family, monospace); line-height: 1.3;"


def _preformatted(text: str) -> str:
    return f'<pre style="{_PRE_STYLE}">{html.escape(text)}</pre>'


class TextDisplay:
    """A mixin: IPython and Jupyter show the object as its `str`, the text `print` gives."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(f"<{type(self).__name__}>" if cycle else str(self))

    def _repr_html_(self) -> str:
        return _preformatted(str(self))


class PallasSource(str):
    """Generated Pallas source: a `str` in every way, shown as highlighted Python in a
    notebook and as plain lines (not a quoted repr) in IPython."""

    __slots__ = ()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        try:  # Jupyter depends on pygments, so a notebook has it; a bare install may not.
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer
        except ImportError:
            return _preformatted(str(self))
        return highlight(str(self), PythonLexer(), HtmlFormatter(noclasses=True))

    def _repr_markdown_(self) -> str:
        return f"```python\n{self}\n```"
