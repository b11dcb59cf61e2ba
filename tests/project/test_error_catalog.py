"""docs/errors.md stays true: every error class has a section, and its example raises that class
and prints the message the page shows.

The page's python blocks run in order, in one namespace, as one file named `errors.py` run from
the repository root, which is how its messages come to say `at: errors.py:LINE`. A block right
after `<!-- raises NAME -->` must raise; the ```text block after the following `<!-- output -->`
is what it prints, as `NAME: message`. The printed message must match the page; line numbers
are compared loosely, so that editing the page's prose does not break this test.
"""

import contextlib
import dataclasses
import io
import linecache
import pathlib
import re
import sys
import types
from collections.abc import Iterator

import pytest

import statickernel as sk

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "errors.md"
PAGE_FILE = "errors.py"

ERROR_CLASSES = {
    name: cls
    for name in sk.__all__
    if isinstance(cls := getattr(sk, name), type) and issubclass(cls, sk.StaticKernelError)
}
# Never raised on their own: their examples raise one of their subclasses. HardwareLimitError
# and PlanError are deprecated: every hardware rule's class subclasses them, for one release.
BRANCHES = {
    "StaticKernelError",
    "DeclarationError",
    "CallError",
    "HardwareRuleError",
    "HardwareLimitError",
    "PlanError",
}

_HEADING = re.compile(r"^#{2,3} (?P<name>\w+)\s*$")
_RAISES = re.compile(r"^<!--\s*raises\s+(?P<name>\w+)\s*-->\s*$")
_OUTPUT = re.compile(r"^<!--\s*output\b[^>]*-->\s*$")
_LINE_NUMBER = re.compile(rf"{re.escape(PAGE_FILE)}:\d+")


@dataclasses.dataclass
class Example:
    section: str  # the heading above the block
    raises: str | None  # the class its marker names
    code: str
    line: int  # of the page, where the code starts
    shown: str | None = None  # the output the page shows for it
    printed: str = ""
    error: BaseException | None = None


def parse(text: str) -> list[Example]:
    """The python blocks of the page, with their section, marker and shown output."""
    examples: list[Example] = []
    lines = text.splitlines()
    section, marker, output_next = "", None, False
    i = 0
    while i < len(lines):
        line = lines[i]
        if heading := _HEADING.match(line):
            section = heading["name"]
        elif raises := _RAISES.match(line):
            marker = raises["name"]
        elif _OUTPUT.match(line):
            output_next = True
        elif line.startswith("```"):
            lang = line[3:].strip()
            end = lines.index("```", i + 1)
            body = "\n".join(lines[i + 1 : end]) + "\n"
            if lang == "python":
                examples.append(Example(section, marker, body, i + 2))
            elif lang == "text" and output_next and examples:
                examples[-1].shown = body
            marker, output_next = None, False
            i = end
        i += 1
    return examples


@pytest.fixture(scope="module")
def examples() -> Iterator[list[Example]]:
    """Runs the page once, recording what each example printed and raised."""
    found = parse(PAGE.read_text(encoding="utf-8"))
    source = "".join(e.code for e in found)
    linecache.cache[PAGE_FILE] = (len(source), None, source.splitlines(keepends=True), PAGE_FILE)
    module = types.ModuleType("docs_errors_catalog")
    module.__file__ = PAGE_FILE
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        patch.setenv("STATICKERNEL_BACKEND", "interpret")
        patch.setitem(sys.modules, module.__name__, module)
        offset = 0
        for example in found:
            code = compile("\n" * offset + example.code, PAGE_FILE, "exec")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    exec(code, module.__dict__)
                except Exception as exc:
                    if example.raises is None:
                        raise
                    example.error = exc
                    print(f"{example.raises}: {exc}")
            example.printed = out.getvalue()
            offset += example.code.count("\n")
    try:
        yield found
    finally:
        linecache.cache.pop(PAGE_FILE, None)
        sk.set_backend(None)


def _sections() -> list[str]:
    return [m["name"] for m in map(_HEADING.match, PAGE.read_text().splitlines()) if m]


def test_every_error_class_has_a_section() -> None:
    sections = _sections()
    missing = sorted(set(ERROR_CLASSES) - set(sections))
    assert not missing, f"docs/errors.md has no section for {missing}"
    assert len(ERROR_CLASSES) >= 19  # the hierarchy as documented; a new class needs a section


@pytest.mark.parametrize("name", sorted(ERROR_CLASSES))
def test_the_example_raises_the_class_of_its_section(name: str, examples: list[Example]) -> None:
    mine = [e for e in examples if e.section == name and e.raises is not None]
    assert mine, f"section {name} has no `<!-- raises {name} -->` example"
    cls = ERROR_CLASSES[name]
    for example in mine:
        where = f"docs/errors.md:{example.line}"
        assert example.raises == name, f"{where}: the marker names {example.raises}"
        assert example.error is not None, f"{where}: the example raised nothing"
        if name in BRANCHES:
            assert isinstance(example.error, cls), f"{where}: raised {example.error!r}"
        else:
            assert type(example.error) is cls, f"{where}: raised {type(example.error).__name__}"


@pytest.mark.parametrize("name", sorted(ERROR_CLASSES))
def test_the_message_carries_its_facts(name: str, examples: list[Example]) -> None:
    for example in (e for e in examples if e.section == name and e.error is not None):
        error = example.error
        assert isinstance(error, sk.StaticKernelError)
        assert error.where is not None and error.where.startswith(f"{PAGE_FILE}:"), error.where
        assert error.fix, str(error)
        assert error.expected is not None or error.actual is not None, str(error)
        text = str(error)
        assert f"  at:       {error.where}" in text
        assert f"  fix:      {error.fix}" in text


@pytest.mark.parametrize("name", sorted(ERROR_CLASSES))
def test_the_page_shows_the_message_printed(name: str, examples: list[Example]) -> None:
    for example in (e for e in examples if e.section == name and e.raises is not None):
        assert example.shown is not None, f"docs/errors.md:{example.line}: no output shown"
        shown = _LINE_NUMBER.sub(f"{PAGE_FILE}:N", example.shown.rstrip())
        printed = _LINE_NUMBER.sub(f"{PAGE_FILE}:N", example.printed.rstrip())
        assert printed == shown, f"docs/errors.md:{example.line}: the page shows\n{shown}"


def test_other_examples_print_what_the_page_shows(examples: list[Example]) -> None:
    for example in examples:
        if example.raises is None and example.shown is not None:
            assert example.printed.rstrip() == example.shown.rstrip(), example.code


# The codes are part of the API: scripts and searches key on them, so a class keeps its code
# for good, and a new class takes a new one. Pinned here so that a change is deliberate.
CODES = {
    "StaticKernelError": "SK000",
    "DeclarationError": "SK100",
    "AnnotationError": "SK101",
    "TilingError": "SK102",
    "ConstantError": "SK103",
    "BodyError": "SK104",
    "ResultMismatchError": "SK105",
    "UnsupportedOpError": "SK106",
    "VjpError": "SK107",
    "CrossBlockResultError": "SK108",
    "SliceError": "SK109",
    "ShiftError": "SK110",
    "RaggedGroupsError": "SK111",
    "JoinedColumnsError": "SK112",
    "HardwareLimitError": "SK199",
    "CallError": "SK200",
    "OperandError": "SK201",
    "ShapeError": "SK202",
    "DtypeError": "SK203",
    "SymbolicDimError": "SK204",
    "OverrideError": "SK205",
    "NotDifferentiableError": "SK206",
    "BackendError": "SK207",
    "BackwardError": "SK208",
    "NotAKernelError": "SK209",
    "BenchError": "SK210",
    "PlanError": "SK299",
    "HardwareRuleError": "SK300",
    "TmaBoxError": "SK301",
    "BlockAlignmentError": "SK302",
    "SharedMemoryError": "SK303",
    "Int32LimitError": "SK304",
    "GridLimitError": "SK305",
    "DotShapeError": "SK306",
    "DotDtypeError": "SK307",
    "DotLayoutError": "SK308",
    "LoopOperandError": "SK309",
    "TensorCoreTargetError": "SK310",
    "CompileError": "SK400",
    "CompileTargetError": "SK401",
    "ToolchainError": "SK402",
    "TuneError": "SK500",
    "NoCandidateError": "SK501",
}


def test_every_error_class_has_its_own_stable_code() -> None:
    assert {name: cls.code for name, cls in ERROR_CLASSES.items()} == CODES
    for name, cls in ERROR_CLASSES.items():
        assert "code" in cls.__dict__, f"{name} inherits its code"


def _section_text(name: str) -> str:
    text = PAGE.read_text()
    start = re.search(rf"^#{{2,3}} {name}\s*$", text, re.M)
    assert start is not None
    end = re.search(r"^#{2,3} ", text[start.end() :], re.M)
    return text[start.end() : start.end() + end.start() if end else len(text)]


@pytest.mark.parametrize("name", sorted(CODES))
def test_each_section_gives_its_code_and_each_message_links_to_it(name: str) -> None:
    cls = ERROR_CLASSES[name]
    assert f"Code: `{cls.code}`" in _section_text(name)
    # mkdocs' anchor for the heading `### ShapeError` is `#shapeerror`.
    assert cls.catalog_url().endswith(f"/errors/#{name.lower()}")
    message = str(cls("something failed", kernel="k", fix="do this"))
    assert message.splitlines()[-1] == f"  docs:     {cls.code}, {cls.catalog_url()}"


def test_a_users_subclass_shares_its_parents_code_and_entry() -> None:
    class MyShapeError(sk.ShapeError):
        pass

    assert MyShapeError.code == "SK202"
    assert MyShapeError.catalog_url() == sk.ShapeError.catalog_url()
