"""The translation of a print from the body: `jax.debug.print` and `pl.debug_print` both trace
to a `debug_print` equation, which becomes one `pl.debug_print(fmt, *values)` on the register
values.

Mosaic GPU prints either scalars, any number of them, or one block or vector alone, each of
its elements on a line of its own with its index; its format string has one bare `{}` per
value. The rule rewrites the user's format to that: named and numbered fields become `{}` in
the order they appear, constants are written into the text, and the text is escaped for the
backend the module is generated for (the interpreter prints from the host with `str.format`,
Mosaic GPU with `printf`).
"""

import string
from collections.abc import Mapping
from typing import Any

from ...._compat import debug_print_arguments
from ...ir.nodes import Const, ExprStmt, Kind, call
from ...trace.body import Atom, Eqn
from .context import Rule, Support, Translator, Where

__all__ = ["PRINT_RULES"]


def debug_print(tr: Translator, eqn: Eqn) -> None:
    if eqn.param("ordered"):
        raise tr.fail(
            eqn,
            "the body prints with ordered=True, which Mosaic GPU cannot lower",
            "drop ordered=True: prints from a kernel are not ordered with the host's",
        )
    args, kwargs = debug_print_arguments(dict(eqn.params), list(eqn.inputs))
    parts, values = _positional(tr, eqn, eqn.param("fmt"), tuple(args), dict(kwargs))
    if len(values) > 1 and any(tr.kind(v) != Kind.SCALAR for v in values):
        raise tr.fail(
            eqn,
            "the body prints a block or a vector together with other values; Mosaic GPU prints "
            "several values only when all are scalars, and a block or vector alone",
            "print each block or vector in a print of its own, e.g. "
            'jax.debug.print("m = {}", m); jax.debug.print("s = {}", s)',
        )
    if tr.g.interpreted:  # formatted once, by jax on the host; as it is when it has no field
        braces = 1 if values else 0
    else:  # formatted once for scalars; for an array, with its elements' indices, then again
        braces = 2 if any(tr.kind(v) != Kind.SCALAR for v in values) else 1
    fmt = "".join("{}" if p is None else _escaped(p, braces, tr.g.interpreted) for p in parts)
    tr.lines.append(ExprStmt(call("pl.debug_print", Const(fmt), *map(tr.source, values))))


def _positional(
    tr: Translator, eqn: Eqn, fmt: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[str | None], list[Atom]]:
    """The format as its text and a None for each traced value, the values in its order, and
    the constants (literals, untraced arguments) written into its text."""
    text: list[str | None] = []
    values: list[Atom] = []
    used: set[int | str] = set()
    auto = 0
    for literal, field, spec, conversion in string.Formatter().parse(fmt):
        text.append(literal)
        if field is None:
            continue
        if spec or conversion:
            raise tr.fail(
                eqn,
                f"the body prints with the format field {{{field}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}}; Mosaic GPU prints every value in its own "
                "format and takes no format specs or conversions",
                f"write the field as {{{field}}}",
            )
        if field == "":
            key: int | str = auto
            auto += 1
        else:
            key = int(field) if field.isdigit() else field
        used.add(key)
        value = _argument(tr, eqn, key, args, kwargs)
        if isinstance(value, Atom) and value.var is not None:
            text.append(None)
            values.append(value)
        else:  # a literal, or an argument jax did not trace: written as text
            text.append(str(value.value if isinstance(value, Atom) else value))
    unused = [k for k in (*range(len(args)), *kwargs) if k not in used]
    if unused:
        raise tr.fail(
            eqn,
            f"the body prints {len(unused)} argument(s) its format has no field for "
            f"({', '.join(map(str, unused))}); Mosaic GPU prints only the values the format names",
            'give each value a field: pl.debug_print("x = {}", x), or name it: '
            'jax.debug.print("x = {x}", x=x)',
        )
    return text, values


def _argument(
    tr: Translator, eqn: Eqn, key: int | str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    if isinstance(key, int) and key < len(args):
        value = args[key]
    elif isinstance(key, str) and key in kwargs:
        value = kwargs[key]
    else:
        raise tr.fail(
            eqn,
            f"the body prints a format field {{{key}}} that names no argument of the print",
            "give each field a value: positional fields {} in order, or named ones {x} with x=...",
        )
    if not isinstance(value, Atom) and isinstance(value, list | tuple | dict):
        raise tr.fail(
            eqn,
            f"the body prints a {type(value).__name__} of values in one format field",
            'give each value a field of its own: jax.debug.print("{} {}", a, b)',
        )
    return value


def _escaped(text: str, braces: int, interpreted: bool) -> str:
    """Text of the format as `pl.debug_print` reads it: its braces escaped for the `braces`
    times it is formatted, and on the GPU its `%` for the `printf` that prints it."""
    for _ in range(braces):
        text = text.replace("{", "{{").replace("}", "}}")
    return text if interpreted else text.replace("%", "%%")


_PRINT = Rule(
    debug_print,
    support=((Where.ROWS, Support.NO),),
    note="not in the row form, which holds a block one row at a time: a print there would "
    "show one row, not the block; a body that prints keeps the block form",
)
PRINT_RULES: Mapping[str, Rule] = {"debug_print": _PRINT}
