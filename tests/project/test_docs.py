"""The code on the documentation pages runs, and prints what the pages say it prints.

Conventions for docs/**/*.md (the HTML comments do not show on the site):

- Every ```python block runs. The blocks of one page run in order, in one namespace, as if
  they were one file named after the page (docs/tutorial/first-kernel.md runs as
  `first_kernel.py`, with each block at the lines it would have in that file), from the
  repository root, with examples/ importable and the interpreter backend.
- A ```text block right after an `<!-- output -->` line is the output of the python block
  before it: its stdout must match. `<!-- output jax=0.11.2 -->` compares only under that
  jax version (the code runs under every version).
- A python block right after `<!-- raises NAME -->` must raise an exception whose class (or a
  base class) is NAME; its output is its stdout followed by `NAME: message`.
- A ```console block is a transcript: each `$ statickernel ARGS` line runs the command line
  in-process, and the lines up to the next `$` line are its output (stdout and stderr).
  `<!-- output jax=0.11.2 -->` before it compares the output only under that jax version.
- `<!-- skip-test -->` right before a python or console block: it does not run.
- In shown output, a line `...` stands for any number of lines, and a duration such as
  `4.3 s` for any duration. In a `statickernel test` table, the max abs error of a passing
  case (a row ending in ✓) stands for any error: it is rounding, and which way a sum rounds
  is the machine's choice (its vectorization), so the shown `0` or `5.96e-08` is one CPU's.

When a change to statickernel changes what a page prints, rewrite the shown outputs (those
without a `...` line) with the new ones, then review the diff:

    STATICKERNEL_UPDATE_DOCS=1 .venv/bin/python -m pytest tests/project/test_docs.py
"""

import contextlib
import dataclasses
import difflib
import io
import linecache
import os
import pathlib
import re
import shlex
import sys
import types
from collections.abc import Iterator
from typing import Any

import jax
import pytest

import statickernel as sk
from jax_support import needs_mosaic_gpu_jax
from statickernel import cli

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# The pages run the gallery through the command line: statickernel's own output, not the jax
# version's (which the goldens and the lowering tests cover), so one run of CI is enough.
pytestmark = pytest.mark.slow

UPDATE_DOCS = os.environ.get("STATICKERNEL_UPDATE_DOCS") == "1"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>skip-test|output|raises)\b(?P<arg>[^>]*?)\s*-->\s*$")
_DURATION = re.compile(r"\b\d+\.\d+ s\b")
# A passing row of a `statickernel test` table: ... max abs error, tolerance, ✓.
_PASSING_ERROR = re.compile(r"^(?P<head>.*\S)\s{2,}\S+(?P<tail>\s{2,}\S+\s{2}✓)$")


@dataclasses.dataclass
class Block:
    lang: str
    text: str
    line: int  # line of the opening fence, 1-based (so, 0-based, of the first line inside)
    indent: str = ""
    marker: str | None = None
    marker_arg: str = ""
    output: "Block | None" = None


def parse(page: pathlib.Path) -> list[Block]:
    """The fenced blocks of a page, with the marker before each and outputs attached."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    marker: tuple[str, str, int] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        found = _MARKER.match(line)
        if found:
            marker = (found["kind"], found["arg"].strip(), i + 1)
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence is None:
            if line.strip() and marker is not None:
                raise AssertionError(
                    f"{page}:{marker[2]}: <!-- {marker[0]} --> is not right before a fenced block"
                )
            i += 1
            continue
        indent, mark = fence["indent"], fence["fence"]
        body: list[str] = []
        i += 1
        while i < len(lines) and not (
            lines[i].startswith(indent + mark[0] * len(mark))
            and not lines[i].strip().strip(mark[0])
        ):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        start = i - len(body)
        i += 1  # the closing fence
        # An empty block spans no line: rewriting its output inserts before its closing fence.
        text = "\n".join(body) + "\n" if body else ""
        block = Block(fence["lang"], text, start, indent)
        if marker is not None:
            block.marker, block.marker_arg = marker[0], marker[1]
            marker = None
        blocks.append(block)
    return _attach_outputs(page, blocks)


def _attach_outputs(page: pathlib.Path, blocks: list[Block]) -> list[Block]:
    kept: list[Block] = []
    for block in blocks:
        if block.marker == "output" and block.lang != "console":
            owner = kept[-1] if kept else None
            if block.lang != "text" or owner is None or owner.lang != "python":
                raise AssertionError(
                    f"{page}:{block.line}: <!-- output --> must mark a ```text block that "
                    "follows a ```python block"
                )
            if owner.output is not None:
                raise AssertionError(f"{page}:{block.line}: a second output for one block")
            owner.output = block
            continue
        if block.marker == "raises" and (block.lang != "python" or not block.marker_arg):
            raise AssertionError(
                f"{page}:{block.line}: <!-- raises NAME --> must name an exception and mark a "
                "```python block"
            )
        kept.append(block)
    return kept


def runnable(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.lang in ("python", "console") and b.marker != "skip-test"]


def pages() -> list[pathlib.Path]:
    # docs/notes/ holds design notes for features not built yet: their sketches do not run.
    return sorted(p for p in DOCS.rglob("*.md") if "notes" not in p.relative_to(DOCS).parts)


def _id(page: pathlib.Path) -> str:
    return page.relative_to(DOCS).as_posix()


def _normalize(text: str) -> str:
    lines = [_DURATION.sub("0.0 s", line.rstrip()) for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


def _comparable(text: str) -> str:
    """`text` normalized, with the max abs errors of passing cases left out."""
    lines = _normalize(text).splitlines()
    return "".join(_PASSING_ERROR.sub(r"\g<head>  …\g<tail>", line) + "\n" for line in lines)


def matches(expected: str, actual: str) -> bool:
    """Whether `actual` is `expected`, where a line `...` stands for any lines."""
    pattern = "".join(
        r"(?:.*\n)*?" if line == "..." else re.escape(line) + r"\n"
        for line in _comparable(expected).splitlines()
    )
    return re.fullmatch(pattern, _comparable(actual)) is not None


@dataclasses.dataclass
class Edits:
    """Shown outputs to rewrite in one page: (first line, line count, indent, new text)."""

    page: pathlib.Path
    pending: list[tuple[int, int, str, str]] = dataclasses.field(default_factory=list)

    def write(self) -> None:
        if not self.pending:
            return
        lines = self.page.read_text(encoding="utf-8").splitlines()
        for first, count, indent, text in sorted(self.pending, reverse=True):
            new = [(indent + line).rstrip() for line in _normalize(text).splitlines()]
            lines[first : first + count] = new
        self.page.write_text("\n".join(lines) + "\n", encoding="utf-8")


def check_output(
    where: str, expected: str, actual: str, edits: Edits, span: tuple[int, int, str]
) -> None:
    if matches(expected, actual):
        return
    if UPDATE_DOCS and "..." not in expected.splitlines():
        edits.pending.append((*span, actual))
        return
    diff = "\n".join(
        difflib.unified_diff(
            _normalize(expected).splitlines(),
            _normalize(actual).splitlines(),
            "shown on the page",
            "printed",
            lineterm="",
        )
    )
    pytest.fail(f"{where}: the output differs from the page\n{diff}", pytrace=False)


def _exception_line(name: str, exc: BaseException) -> str:
    message = str(exc)
    return f"{name}: {message}\n" if message else f"{name}\n"


def _is_a(exc: BaseException, name: str) -> bool:
    return any(cls.__name__ == name for cls in type(exc).__mro__)


def run_python(
    block: Block, where: str, module: types.ModuleType, filename: str, offset: int, edits: Edits
) -> None:
    code = compile("\n" * offset + block.text, filename, "exec")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if block.marker == "raises":
            try:
                exec(code, module.__dict__)
            except Exception as exc:
                if not _is_a(exc, block.marker_arg):
                    raise
                print(_exception_line(block.marker_arg, exc), end="")
            else:
                pytest.fail(f"{where}: the block raised no {block.marker_arg}", pytrace=False)
        else:
            exec(code, module.__dict__)
    output = block.output
    if output is not None and _version_matches(output.marker_arg):
        span = (output.line, output.text.count("\n"), output.indent)
        where = f"{where} (output at line {output.line})"
        check_output(where, output.text, out.getvalue(), edits, span)


def transcript(text: str) -> Iterator[tuple[str, str, int, int]]:
    """(command, output shown, its first line in the block, its line count) for each `$ `
    line of a console block."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        yield lines[start][2:], "\n".join(lines[start + 1 : end]), start + 1, end - start - 1


def _version_matches(marker_arg: str) -> bool:
    version = marker_arg.removeprefix("jax=") if marker_arg else None
    return version is None or version == jax.__version__


def run_console(block: Block, where: str, edits: Edits) -> None:
    compare = block.marker != "output" or _version_matches(block.marker_arg)
    commands = list(transcript(block.text))
    assert commands, f"{where}: a console block with no `$ ` command"
    for command, shown, first, count in commands:
        argv = shlex.split(command)
        assert argv[0] == "statickernel", f"{where}: only `statickernel` commands can run"
        out = io.StringIO()
        # SystemExit: --help, and argparse's usage errors.
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(out),
            contextlib.suppress(SystemExit),
        ):
            cli.main(argv[1:])
        if compare:
            span = (block.line + first, count, block.indent)
            check_output(f"{where}: $ {command}", shown, out.getvalue(), edits, span)


@pytest.fixture
def docs_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    monkeypatch.setenv("STATICKERNEL_BACKEND", "interpret")
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps --help to the terminal width
    sk.set_backend(None)
    yield
    sk.set_backend(None)


PAGES = [p for p in pages() if runnable(parse(p))]
# Pages whose subject exists only on a jax that runs the generated modules, beyond kernel calls
# (which say so themselves, with a BackendError): page -> what it shows.
_NEED_MOSAIC_GPU_JAX = {
    "concepts/static.md": "shows jax refusing to lower pl.pallas_call for Mosaic GPU "
    "(jax 0.10.2 still lowers it, with a deprecation warning)",
    "tutorial/shipping.md": "runs an emitted module on its own, without statickernel",
}


def _page_param(page: pathlib.Path) -> Any:
    subject = _NEED_MOSAIC_GPU_JAX.get(_id(page))
    return pytest.param(page, marks=needs_mosaic_gpu_jax(subject)) if subject else page


@pytest.mark.parametrize("page", [_page_param(p) for p in PAGES], ids=_id)
@pytest.mark.usefixtures("docs_env")
def test_page(page: pathlib.Path) -> None:
    blocks = runnable(parse(page))
    filename = page.stem.replace("-", "_") + ".py"
    python = [b for b in blocks if b.lang == "python"]
    source = "".join(b.text for b in python)
    # Register the page's code under its file name, so that tracebacks and statickernel's
    # messages can quote its lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(f"docs_{filename.removesuffix('.py')}")
    module.__file__ = filename
    sys.modules[module.__name__] = module
    edits = Edits(page)
    try:
        offset = 0
        for block in blocks:
            where = f"{page.relative_to(REPO)}:{block.line}"
            if block.lang == "python":
                run_python(block, where, module, filename, offset, edits)
                offset += block.text.count("\n")
            else:
                run_console(block, where, edits)
        edits.write()
    finally:
        del sys.modules[module.__name__]
        linecache.cache.pop(filename, None)


def test_pages_are_found() -> None:
    assert PAGES, "no documentation page has code to run"
    names = {_id(p) for p in pages()}
    assert "index.md" in names


def test_markers_are_well_formed(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(1)\n```\n\n<!-- output -->\n```text\n1\n```\n\n"
        "<!-- skip-test -->\n```python\nraise SystemExit\n```\n",
        encoding="utf-8",
    )
    blocks = parse(page)
    assert [b.lang for b in blocks] == ["python", "python"]
    assert blocks[0].output is not None and blocks[0].output.text == "1\n"
    assert runnable(blocks) == blocks[:1]
    page.write_text("<!-- output -->\n\nSome prose.\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="not right before a fenced block"):
        parse(page)


def test_output_matching() -> None:
    assert matches("a\n...\nd\n", "a\nb\nc\nd\n")
    assert matches("a\n...\nd", "a\nd\n")
    assert matches("took 4.3 s  \n", "took 12.0 s\n")
    # A passing case's max abs error is rounding, which the machine decides; a failing one's
    # is shown as it is.
    shown = "softmax  ragged M  [129,128]  float32  interpret           0      1e-05  ✓\n"
    assert matches(shown, shown.replace("          0", "   1.19e-07"))
    failed = shown.replace("✓", "✗")
    assert not matches(failed, failed.replace("          0", "   1.19e-07"))
    assert not matches(shown, shown.replace("1e-05", "2e-05"))
    assert not matches("a\nb\n", "a\nc\n")
    assert not matches("a\n", "a\nb\n")


def _tree(cls: type, prefix: str = "") -> list[str]:
    children = [c for c in cls.__subclasses__() if c.__module__.startswith("statickernel")]
    lines: list[str] = []
    for index, child in enumerate(children):
        last = index == len(children) - 1
        lines.append(f"{prefix}{'└── ' if last else '├── '}{child.__name__}")
        lines += _tree(child, prefix + ("    " if last else "│   "))
    return lines


def test_exception_tree_is_current() -> None:
    """The hierarchy drawn on the exceptions page is the one the package defines."""
    page = DOCS / "reference" / "exceptions.md"
    drawn = next(b.text for b in parse(page) if b.text.startswith("StaticKernelError\n"))
    actual = ["StaticKernelError", *_tree(sk.StaticKernelError)]
    assert drawn.splitlines() == actual
    public = {name for name in sk.__all__ if name.endswith("Error")}
    assert public == {line.split()[-1] for line in actual}


def test_the_design_page_names_every_module() -> None:
    """docs/design.md's package tree names every module of the package, under its folder."""
    import re

    page = (REPO / "docs" / "design.md").read_text()
    tree = page[
        page.index("```\n__init__.py") : page.index("```\n", page.index("```\n__init__.py") + 4)
    ]
    package = REPO / "src" / "statickernel"
    sections: dict[str, str] = {}
    path: list[str] = []
    for line in tree.splitlines()[1:]:
        name = line[:29].strip()  # a folder or module in the first column; else a continuation
        if name:
            depth = (len(line) - len(line.lstrip())) // 2
            folder = re.fullmatch(r"(\S+)/", name.split()[0])
            path = [*path[:depth], folder.group(1)] if folder else path[:depth]
        sections["/".join(path)] = sections.get("/".join(path), "") + " " + line
    missing = []
    for module in sorted(package.rglob("*.py")):
        if module.name == "__init__.py" and module.parent != package:
            continue
        folder = module.parent.relative_to(package).as_posix()
        folder = "" if folder == "." else folder
        words = sections.get(folder, "")
        if not re.search(rf"(?<![\w.]){re.escape(module.stem)}(?![\w])", words):
            missing.append(module.relative_to(package).as_posix())
    assert not missing, f"modules docs/design.md's package tree does not name: {missing}"
