"""The one printer of generated code: IR in, Python source out.

It owns everything textual about a generated module: literals (nan, ±inf, -0.0 and bfloat16's
shortest forms), dtype names, indentation, wrapping at `LINE_LIMIT`, and the blank lines around
functions. The layout is the one a formatter would give, so the modules read like hand-written
code:

- a line over the limit whose first parenthesis opens a call (or a tuple) that ends the line is
  split one argument per line; any other long assignment gets its value in parentheses; other
  long lines stay as they are;
- a call or list marked `one_per_line` is split whatever its length, and the line closing it is
  wrapped on its own;
- a nested function has one blank line before it (not right after a `def` line; comments just
  above it stay with it) and one after its body; a top-level function has two.

Each rule is decided from the IR: an expression is first laid out as atoms and bracketed groups
(the same text, with its structure), and the rules look at the groups.
"""

import dataclasses
import enum
import math
from collections.abc import Iterable
from typing import TypeAlias

import ml_dtypes  # noqa: F401  (gives numpy the names bfloat16 and the float8 types)
import numpy as np

from .nodes import (
    Assign,
    BinOp,
    Call,
    Comment,
    Const,
    DType,
    EllipsisIndex,
    Expr,
    ExprStmt,
    For,
    FunctionDef,
    IfExp,
    Import,
    ImportFrom,
    Lambda,
    List,
    Literal,
    Module,
    Name,
    Operator,
    Pass,
    Return,
    Slice,
    SourceLine,
    Stmt,
    Subscript,
    Tuple,
)

__all__ = [
    "LINE_LIMIT",
    "dtype_source",
    "expression_source",
    "literal_source",
    "module_source",
    "statements_source",
]

LINE_LIMIT = 100
_INDENT = "    "


def dtype_source(dtype: str) -> str:
    return "jnp.bool_" if dtype == "bool" else f"jnp.{dtype}"


def literal_source(value: object, dtype: str, weak_type: bool) -> str:
    return _flat(_literal(value, dtype, weak_type))


def expression_source(expr: Expr) -> str:
    return _flat(_doc(expr))


def statements_source(statements: Iterable[Stmt]) -> str:
    """Statements printed at the top level, with the rules of a function's body: nested
    functions get one blank line around them."""
    lines = [text for stmt in statements for text in _statement(stmt, 0)]
    return "".join(_render(text) + "\n" for text in _space_nested_functions(lines))


def module_source(module: Module) -> str:
    lines: list[_Text] = []
    for number, section in enumerate(module.sections):
        if number:
            lines.append(_BLANK)
        previous: Stmt | None = None
        for stmt in section:
            if previous is not None and FunctionDef in (type(stmt), type(previous)):
                lines += [_BLANK, _BLANK]
            lines += _statement(stmt, 0)
            previous = stmt
    return "".join(_render(text) + "\n" for text in _space_nested_functions(lines))


# --- layout of expressions: atoms and bracketed groups -----------------------------------------


@dataclasses.dataclass(frozen=True)
class _Group:
    """A bracketed, comma-separated display: call arguments, a tuple, a list, an index."""

    open: str
    items: tuple["_Doc", ...]
    close: str
    trailing_comma: bool = False
    one_per_line: bool = False
    # Parentheses around one operand (`a * (b + c)`), not a display: broken over lines, its
    # item takes no comma, which would make it a tuple.
    grouping: bool = False


_Doc: TypeAlias = tuple["str | _Group", ...]

# Binding strength of the operators, as Python's grammar has it; atoms bind tightest.
_PRECEDENCE = {
    Operator.LT: 3,
    Operator.LE: 3,
    Operator.GT: 3,
    Operator.GE: 3,
    Operator.EQ: 3,
    Operator.NE: 3,
    Operator.OR: 4,
    Operator.AND: 6,
    Operator.ADD: 9,
    Operator.SUB: 9,
    Operator.MUL: 10,
    Operator.FLOORDIV: 10,
    Operator.DIV: 10,
}
_ATOM = 100


def _doc(expr: Expr) -> _Doc:
    match expr:
        case Name(text):
            return (text,)
        case Const(value):
            return _const(value)
        case Literal(value, dtype, weak_type):
            return _literal(value, dtype, weak_type)
        case DType(dtype):
            return (dtype_source(dtype),)
        case Call(func, args, keywords, one_per_line):
            items = [_doc(a) for a in args] + [(f"{k.name}=", *_doc(k.value)) for k in keywords]
            return (*_operand(func, _ATOM), _Group("(", tuple(items), ")", False, one_per_line))
        case BinOp(op, left, right):
            strength = _PRECEDENCE[op]
            # Comparisons chain in Python, so a comparison operand of one is parenthesized.
            left_min = strength + 1 if strength == _PRECEDENCE[Operator.LT] else strength
            return (*_operand(left, left_min), f" {op} ", *_operand(right, strength + 1))
        case Tuple(items, trailing_comma):
            docs = tuple(_doc(i) for i in items)
            return (_Group("(", docs, ")", trailing_comma or len(items) == 1),)
        case List(items, one_per_line):
            return (_Group("[", tuple(_doc(i) for i in items), "]", False, one_per_line),)
        case Subscript(value, index):
            return (*_operand(value, _ATOM), _Group("[", tuple(_doc(i) for i in index), "]"))
        case Slice(start, stop):
            return (
                *(_doc(start) if start is not None else ()),
                ":",
                *(_doc(stop) if stop is not None else ()),
            )
        case EllipsisIndex():
            return ("...",)
        case Lambda(params, body):
            return (f"lambda {', '.join(params)}: ", *_doc(body))
        case IfExp(test, body, orelse):
            return (*_operand(body, 2), " if ", *_operand(test, 2), " else ", *_doc(orelse))


def _strength(expr: Expr) -> int:
    match expr:
        case BinOp(op):
            return _PRECEDENCE[op]
        case IfExp():
            return 1
        case Lambda():
            return 0
        case _:
            return _ATOM


def _operand(expr: Expr, minimum: int) -> _Doc:
    """`expr` as an operand that must bind at least `minimum`: in parentheses if it binds less."""
    if _strength(expr) >= minimum:
        return _doc(expr)
    return (_Group("(", (_doc(expr),), ")", grouping=True),)


def _const(value: object) -> _Doc:
    if isinstance(value, tuple):
        items = tuple(_const(v) for v in value)
        return (_Group("(", items, ")", trailing_comma=len(items) == 1),)
    if isinstance(value, str):
        return ('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"',)
    return (repr(value),)


def _literal(value: object, dtype: str, weak_type: bool) -> _Doc:
    if dtype == "bool":
        return (repr(bool(value)),)
    number = float(value) if isinstance(value, float) or "float" in dtype else int(value)  # type: ignore[arg-type]
    if isinstance(number, float):
        with np.errstate(over="ignore"):  # a value past the dtype's range is its infinity
            typed = number if weak_type else float(np.dtype(dtype).type(number))
        if math.isnan(typed):
            # A NaN's sign orders it (jax's top_k ranks -NaN below -inf): kept.
            text = "-jnp.nan" if math.copysign(1.0, typed) < 0 else "jnp.nan"
        elif math.isinf(typed):
            text = "jnp.inf" if typed > 0 else "-jnp.inf"
        elif weak_type:
            text = repr(number)
        else:
            # The shortest text that parses back to the same value in the literal's own dtype;
            # numpy writes some bfloat16 values as integers, which would lose the sign of -0.
            text = str(np.dtype(dtype).type(number))
            if text.lstrip("-").isdigit():
                text += ".0"
    else:
        text = repr(number)
    return (text,) if weak_type else (dtype_source(dtype), _Group("(", ((text,),), ")"))


def _flat(doc: _Doc) -> str:
    return "".join(part if isinstance(part, str) else _flat_group(part) for part in doc)


def _flat_group(group: _Group) -> str:
    inner = ", ".join(_flat(item) for item in group.items)
    return group.open + inner + ("," if group.trailing_comma else "") + group.close


# --- statements: logical lines, then printed lines ---------------------------------------------


class _Role(enum.Enum):
    CODE = enum.auto()
    COMMENT = enum.auto()
    DEF = enum.auto()  # the first line of a function's header
    DECORATOR = enum.auto()  # a decorator line, which stays with its function
    BLANK = enum.auto()


@dataclasses.dataclass(frozen=True)
class _Line:
    """One line of a statement before wrapping."""

    depth: int
    value: _Doc
    target: _Doc | None = None  # an assignment's targets, whose value may be parenthesized
    comment: str | None = None
    role: _Role = _Role.CODE
    opens_block: bool = False  # ends with the `:` of a function's header


@dataclasses.dataclass(frozen=True)
class _Text:
    """One printed line, without its indentation."""

    depth: int
    text: str
    role: _Role = _Role.CODE
    opens_block: bool = False


_BLANK = _Text(0, "", _Role.BLANK)


def _render(line: _Text) -> str:
    return _INDENT * line.depth + line.text if line.text else ""


def _statement(stmt: Stmt, depth: int) -> list[_Text]:
    match stmt:
        case Comment() | SourceLine():
            return [_Text(depth, f"# {stmt.text}", _Role.COMMENT)]
        case FunctionDef(name, params, body, decorators):
            lines = [_Text(depth, "@" + _flat(_doc(d)), _Role.DECORATOR) for d in decorators]
            header = (f"def {name}", _Group("(", tuple((p,) for p in params), ")"), ":")
            lines += _wrap(_Line(depth, header, role=_Role.DEF, opens_block=True))
            return lines + [text for inner in body for text in _statement(inner, depth + 1)]
        case For(loop_var, count, body):
            header = _Text(depth, f"for {loop_var} in range({count}):", _Role.CODE)
            return [header] + [text for inner in body for text in _statement(inner, depth + 1)]
        case Import(module, alias):
            return [_Text(depth, f"import {module}" + (f" as {alias}" if alias else ""))]
        case ImportFrom(module, name, alias):
            as_alias = f" as {alias}" if alias else ""
            return [_Text(depth, f"from {module} import {name}{as_alias}")]
        case Assign(targets, value, comment):
            target: list[str | _Group] = []
            for i, t in enumerate(targets):
                target += [", "] * bool(i) + list(_doc(t))
            line = _Line(depth, _doc(value), tuple(target), comment)
        case ExprStmt(expr, comment):
            line = _Line(depth, _doc(expr), comment=comment)
        case Return(value):
            line = _Line(depth, ("return ", *_doc(value)))
        case Pass():
            line = _Line(depth, ("pass",))
    return [text for part in _split_one_per_line(line) for text in _wrap(part)]


def _split_one_per_line(line: _Line) -> list[_Line]:
    """The lines of a statement whose value holds a `one_per_line` call or list: the line that
    opens it, one line per item, and the line that closes it (which may open another)."""
    for i, part in enumerate(line.value):
        if isinstance(part, _Group) and part.one_per_line and part.items:
            head = dataclasses.replace(
                line, value=(*line.value[:i], part.open), comment=None, opens_block=False
            )
            items = [_Line(line.depth + 1, (*item, ",")) for item in part.items]
            tail = _Line(
                line.depth,
                (part.close, *line.value[i + 1 :]),
                comment=line.comment,
                opens_block=line.opens_block,
            )
            inner = [split for item in items for split in _split_one_per_line(item)]
            return [head, *inner, *_split_one_per_line(tail)]
    return [line]


def _wrap(line: _Line) -> list[_Text]:
    """A line, wrapped when it is longer than the limit (see the module's docstring)."""
    body = _flat(line.value)
    if line.target is not None:
        body = _flat(line.target) + " = " + body
    comment = f"  # {line.comment}" if line.comment else ""
    if len(_INDENT) * line.depth + len(body) + len(comment) <= LINE_LIMIT:
        return [_Text(line.depth, body + comment, line.role, line.opens_block)]
    parts = line.value if line.target is None else (*line.target, " = ", *line.value)
    opened = _first_parenthesis(parts)
    if opened is not None:
        i, group = opened
        before, after = _flat(parts[:i]), _flat(parts[i + 1 :])
        if before and after in ("", ":", ","):
            return [
                _Text(line.depth, before + group.open, line.role),
                *(
                    _Text(line.depth + 1, _flat(item) + ("" if group.grouping else ","))
                    for item in group.items
                ),
                _Text(line.depth, group.close + after + comment, opens_block=line.opens_block),
            ]
    opens_items = bool(line.value) and line.value[-1] in ("(", "[")
    if line.target is not None and opens_items and isinstance(line.target[0], _Group):
        # The head of a call written one argument per line, whose tuple target is itself too
        # long (a loop with many carries): the target goes one name per line, since a value
        # in parentheses would leave the call's bracket open inside them.
        target = line.target[0]
        rest = _flat(line.target[1:]) + " = " + _flat(line.value)
        return [
            _Text(line.depth, target.open, line.role),
            *(_Text(line.depth + 1, _flat(item) + ",") for item in target.items),
            _Text(line.depth, target.close + rest),
        ]
    if line.target is not None:
        return [
            _Text(line.depth, _flat(line.target) + " = (", line.role),
            _Text(line.depth + 1, _flat(line.value)),
            _Text(line.depth, ")" + comment, opens_block=line.opens_block),
        ]
    return [_Text(line.depth, body + comment, line.role, line.opens_block)]


def _first_parenthesis(parts: _Doc) -> tuple[int, _Group] | None:
    """The line's first `(` group, with its position when it is a part of the line itself;
    None when the first `(` is nested in a `[` group, or there is none. A `[` group of plain
    items that ends the line (`in_specs=[a_spec, b_spec, ...],`) splits as a formatter splits
    it, one item a line."""
    for i, part in enumerate(parts):
        if isinstance(part, str):
            continue
        if part.open == "(":
            return i, part
        if any(_has_parenthesis(item) for item in part.items):
            return None
        if part.open == "[" and _flat(parts[i + 1 :]) in ("", ","):
            return i, part
    return None


def _has_parenthesis(doc: _Doc) -> bool:
    return any(
        isinstance(p, _Group) and (p.open == "(" or any(_has_parenthesis(i) for i in p.items))
        for p in doc
    )


def _space_nested_functions(lines: list[_Text]) -> list[_Text]:
    """One blank line around each nested function, as a formatter puts it; comments just above
    a function stay with it. A function ends at the first line as shallow as its `def`."""
    out: list[_Text] = []
    closing: list[int] = []  # depths of nested functions whose bodies are still open
    in_header = False  # inside a `def` wrapped over several lines, before its `):`
    for line in lines:
        if in_header:
            in_header = not (line.opens_block and line.depth == closing[-1])
            out.append(line)
            continue
        if line.role is not _Role.BLANK and closing and line.depth <= closing[-1]:
            while closing and line.depth <= closing[-1]:
                closing.pop()
            if out and out[-1].role is not _Role.BLANK:
                out.append(_BLANK)
        if line.role is _Role.DEF and line.depth > 0:
            start = len(out)
            while start > 0 and out[start - 1].role in (_Role.COMMENT, _Role.DECORATOR):
                start -= 1
            before = out[start - 1] if start > 0 else _BLANK
            if before.role is not _Role.BLANK and not before.opens_block:
                out.insert(start, _BLANK)
            closing.append(line.depth)
            in_header = not line.opens_block
        out.append(line)
    return out
