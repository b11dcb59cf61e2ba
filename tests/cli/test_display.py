"""Plans, compile reports and generated source in IPython and Jupyter: the hooks IPython
calls, exercised without IPython."""

import html
import pickle
import re

import jax
import pytest

from softmax import softmax
from statickernel._display import PallasSource


class _Printer:
    """What IPython's pretty printer passes to `_repr_pretty_`: something with `text`."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def text(self, part: str) -> None:
        self.parts.append(part)


X = jax.ShapeDtypeStruct((1000, 100), "float32")


def test_a_plan_shows_as_its_text() -> None:
    plan = softmax.plan(X)
    printer = _Printer()
    plan._repr_pretty_(printer, cycle=False)
    assert printer.parts == [str(plan)]
    shown = plan._repr_html_()
    assert shown.startswith("<pre") and shown.endswith("</pre>")
    assert html.escape(str(plan).splitlines()[0]) in shown


def test_emitted_source_is_a_str_shown_as_python() -> None:
    source = softmax.emit(X)
    assert isinstance(source, str) and isinstance(source, PallasSource)
    assert source == softmax.specialize(X).source
    assert str(source) + "" == source and source.splitlines()[0] == str(source).splitlines()[0]
    assert pickle.loads(pickle.dumps(source)) == source
    printer = _Printer()
    source._repr_pretty_(printer, cycle=False)
    assert printer.parts == [str(source)]  # lines, not a quoted repr
    assert source._repr_markdown_() == f"```python\n{source}\n```"
    shown = source._repr_html_()
    assert '<span style="color' in shown  # highlighted, with inline styles a notebook keeps
    assert html.unescape(re.sub(r"<[^>]+>", "", shown)).strip() == source.strip()


def test_emitted_source_html_without_pygments(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pygments(name: str, *args, **kwargs):
        if name.startswith("pygments"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pygments)
    source = softmax.emit(X)
    assert isinstance(source, PallasSource)
    shown = source._repr_html_()
    assert shown.startswith("<pre") and html.escape("import jax") in shown
