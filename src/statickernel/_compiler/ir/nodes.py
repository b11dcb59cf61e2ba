"""The typed form of generated code: the expressions and statements of a Pallas module.

Translation and code generation build these; `ir.printer` is the only place that turns them into
text, so literals, dtype names, indentation, line wrapping and blank lines are decided in one
place, from the structure below.

The nodes cover what the generated modules contain, no more. A `Name` is an identifier or a
dotted path (`lax.add`, `x_gmem.at`); it reads its first part.
"""

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import TypeAlias, TypeVar

__all__ = [
    "PASS",
    "Assign",
    "BinOp",
    "Call",
    "Comment",
    "Const",
    "DType",
    "EllipsisIndex",
    "Expr",
    "ExprStmt",
    "For",
    "Form",
    "FunctionDef",
    "IfExp",
    "Import",
    "ImportFrom",
    "Keyword",
    "Kind",
    "Lambda",
    "List",
    "Literal",
    "LoopMode",
    "Mask",
    "Module",
    "Name",
    "Operator",
    "Pass",
    "Return",
    "Slice",
    "SourceLine",
    "Stmt",
    "Subscript",
    "Tuple",
    "call",
    "mentions",
    "names_read",
    "renamed",
]


class Kind(enum.StrEnum):
    """The register form of a body's value."""

    TILE = "tile"  # a 2-D block (rows, cols), in the WGMMA layout
    ROW = "row"  # a per-row vector (rows,): the WGMMA layout reduced over columns
    COL = "col"  # a per-column vector (cols,): the WGMMA layout reduced over rows
    SCALAR = "scalar"  # a 0-d value
    # Inside the step of a loop over a dim outside the (rows, cols) frame (a matmul's K, an
    # attention's keys), a (rows, loop block) block: what sk.dot gives along the loop dim, such
    # as attention's scores. In the WGMMA layout; it does not outlive the step.
    LOOP_TILE = "loop_tile"
    LOOP_COL = "loop_col"  # a per-column vector of a LOOP_TILE, (loop block,)
    # In such a step, a (loop block, cols) block: an operand laid out (loop dim, column dim)
    # loaded there, and what the step computes from it, such as a weight dequantized for
    # sk.dot's `b`. In the WGMMA layout; its per-column vectors are the frame's (COL).
    LOOP_ROWS = "loop_rows"
    # A vector of parameters along a dim of its own (PolyNorm's weights): never loaded, each
    # element read by index from global memory where the body takes it (`w[0]`).
    PARAMS = "params"


class Form(enum.StrEnum):
    """How a block of a kernel without loops lives in registers."""

    BLOCK = "block"  # the whole block at once, in the WGMMA layout
    ROWS = "rows"  # one whole row at a time, a vector in the warpgroup-strided layout
    STRIDED = "strided"  # the whole block at once, in the warpgroup-strided layout


class LoopMode(enum.StrEnum):
    FOLD = "fold"  # sk.loop: the steps fold into carries
    MAP = "map"  # sk.map_blocks: each step writes an output block


class Mask(enum.StrEnum):
    """The edge masks of a block, named as the generated module names them."""

    ROW_OK = "row_ok"  # a block's rows inside the array
    COL_OK = "col_ok"  # a block's columns inside the array
    ROW_OK_VEC = "row_ok_vec"  # a per-row vector's elements inside the array
    COL_OK_VEC = "col_ok_vec"  # a per-column vector's elements inside the array
    # Not masks, but the positions they compare, which `sk.position` returns.
    ROW_POSITION = "row_position"  # the block's global row indices, a per-row vector
    COL_POSITION = "col_position"  # the block's global column indices, a per-column vector
    # Along a loop dim outside the frame, in its step: a LOOP_TILE's columns inside the array.
    LOOP_OK = "loop_ok"
    LOOP_OK_VEC = "loop_ok_vec"
    LOOP_ROW_OK = "loop_row_ok"  # the rows of a (loop block, cols) block inside the loop dim
    LOOP_ROW_OK_VEC = "loop_row_ok_vec"
    LOOP_ROW_POSITION = "loop_row_position"
    LOOP_POSITION = "loop_position"


class Operator(enum.StrEnum):
    """The binary operators the generated code writes as operators (lax calls are calls)."""

    ADD = "+"
    SUB = "-"
    MUL = "*"
    FLOORDIV = "//"
    DIV = "/"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="
    AND = "&"
    OR = "|"


# --- expressions -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Name:
    text: str  # an identifier, or a dotted path whose first part is one


@dataclasses.dataclass(frozen=True)
class Const:
    """A plain Python constant: an int, a bool, None, a str, or a tuple of these (a shape)."""

    value: object


@dataclasses.dataclass(frozen=True)
class Literal:
    """A value of the traced body, in its dtype: `jnp.float32(0.5)`, or a bare weak-typed
    Python number."""

    value: object
    dtype: str
    weak_type: bool


@dataclasses.dataclass(frozen=True)
class DType:
    """A dtype as jnp names it: `jnp.float32`, `jnp.bool_`."""

    name: str


@dataclasses.dataclass(frozen=True)
class Keyword:
    name: str
    value: "Expr"


@dataclasses.dataclass(frozen=True)
class Call:
    func: "Expr"
    args: tuple["Expr", ...] = ()
    keywords: tuple[Keyword, ...] = ()
    # Written one argument per line whatever its length, as a formatter keeps a call with a
    # trailing comma: the launch and the pipelines, which read better that way.
    one_per_line: bool = False


@dataclasses.dataclass(frozen=True)
class BinOp:
    op: Operator
    left: "Expr"
    right: "Expr"


@dataclasses.dataclass(frozen=True)
class Tuple:
    items: tuple["Expr", ...]
    trailing_comma: bool = False  # `(a, b,)`; a 1-tuple always has one


@dataclasses.dataclass(frozen=True)
class List:
    items: tuple["Expr", ...]
    one_per_line: bool = False  # like Call.one_per_line; an empty list is `[]`


@dataclasses.dataclass(frozen=True)
class Subscript:
    value: "Expr"
    index: tuple["Expr", ...]  # `value[i, j]`


@dataclasses.dataclass(frozen=True)
class Slice:
    start: "Expr | None" = None
    stop: "Expr | None" = None


@dataclasses.dataclass(frozen=True)
class EllipsisIndex:
    """`...` as an index: a whole ref."""


@dataclasses.dataclass(frozen=True)
class Lambda:
    params: tuple[str, ...]
    body: "Expr"


@dataclasses.dataclass(frozen=True)
class IfExp:
    test: "Expr"
    body: "Expr"
    orelse: "Expr"


Expr: TypeAlias = (
    Name
    | Const
    | Literal
    | DType
    | Call
    | BinOp
    | Tuple
    | List
    | Subscript
    | Slice
    | EllipsisIndex
    | Lambda
    | IfExp
)

# --- statements --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Comment:
    text: str  # without the leading "# "


@dataclasses.dataclass(frozen=True)
class SourceLine:
    """The comment naming the user's line that the statements after it come from."""

    where: str  # file:line
    source: str  # the line's text; "" when it is unknown

    @property
    def text(self) -> str:
        return f"{self.where}: {self.source}" if self.source else self.where


@dataclasses.dataclass(frozen=True)
class Assign:
    targets: tuple[Expr, ...]  # more than one: `a, b = value`
    value: Expr
    comment: str | None = None


@dataclasses.dataclass(frozen=True)
class ExprStmt:
    expr: Expr
    comment: str | None = None


@dataclasses.dataclass(frozen=True)
class Return:
    value: Expr


@dataclasses.dataclass(frozen=True)
class Pass:
    pass


@dataclasses.dataclass(frozen=True)
class FunctionDef:
    name: str
    params: tuple[str, ...]
    body: tuple["Stmt", ...]
    decorators: tuple[Expr, ...] = ()


@dataclasses.dataclass(frozen=True)
class For:
    """`for target in range(count):`, a loop Python unrolls as it traces the kernel: the
    same statements on each of a few static pieces (a row's chunks)."""

    target: str
    count: int
    body: tuple["Stmt", ...]


@dataclasses.dataclass(frozen=True)
class Import:
    module: str
    alias: str | None = None


@dataclasses.dataclass(frozen=True)
class ImportFrom:
    module: str
    name: str
    alias: str | None = None


Stmt: TypeAlias = (
    Comment
    | SourceLine
    | Assign
    | ExprStmt
    | Return
    | Pass
    | FunctionDef
    | For
    | Import
    | ImportFrom
)

PASS = Pass()


@dataclasses.dataclass(frozen=True)
class Module:
    """A module's statements in sections, which one blank line separates; top-level
    functions get two blank lines around them."""

    sections: tuple[tuple[Stmt, ...], ...]


# --- building and reading ----------------------------------------------------------------------


def call(func: str | Expr, /, *args: Expr, **keywords: Expr) -> Call:
    """`func(*args, **keywords)`, keywords in the order given."""
    target = Name(func) if isinstance(func, str) else func
    return Call(target, args, tuple(Keyword(k, v) for k, v in keywords.items()))


def names_read(node: Expr | Stmt) -> frozenset[str]:
    """The variables an expression or a statement reads: the first part of every name it
    evaluates. An assignment's plain targets are written, not read; a subscripted target reads
    its ref. Comments read nothing (see `mentions`)."""
    return frozenset(_reads(node))


def _reads(node: Expr | Stmt) -> set[str]:
    match node:
        case Name(text):
            return {text.split(".", 1)[0]}
        case Call(func, args, keywords):
            return _union(func, *args, *(k.value for k in keywords))
        case BinOp(_, left, right):
            return _union(left, right)
        case Tuple(items) | List(items):
            return _union(*items)
        case Subscript(value, index):
            return _union(value, *index)
        case Slice(start, stop):
            return _union(*(part for part in (start, stop) if part is not None))
        case Lambda(params, body):
            return _reads(body) - set(params)
        case IfExp(test, body, orelse):
            return _union(test, body, orelse)
        case Assign(targets, value):
            return _union(value, *(t for t in targets if not isinstance(t, Name | Tuple)))
        case ExprStmt(expr):
            return _reads(expr)
        case Return(value):
            return _reads(value)
        case FunctionDef(_, params, body, decorators):
            return _union(*body, *decorators) - set(params)
        case For(target, _, body):
            return _union(*body) - {target}
        case _:  # constants, literals, dtypes, `...`, comments, pass, imports
            return set()


def _union(*nodes: Expr | Stmt) -> set[str]:
    found: set[str] = set()
    for node in nodes:
        found |= _reads(node)
    return found


_Node = TypeVar("_Node", bound="Expr | Stmt | Keyword")


def renamed(node: _Node, names: Mapping[str, str]) -> _Node:
    """`node` with every name `names` maps replaced, and every dotted name that starts with
    one and a dot: `{"a.B": "a.C"}` makes `a.B.f` into `a.C.f`. Other nodes are kept as they
    are (the same objects, where nothing under them changed)."""
    if isinstance(node, Name):
        for old, new in names.items():
            if node.text == old or node.text.startswith(old + "."):
                return Name(new + node.text[len(old) :])  # type: ignore[return-value]
        return node
    changes: dict[str, object] = {}
    for field in dataclasses.fields(node):  # type: ignore[arg-type]
        value = getattr(node, field.name)
        new_value = _renamed_field(value, names)
        if new_value is not value:
            changes[field.name] = new_value
    return dataclasses.replace(node, **changes) if changes else node  # type: ignore[type-var]


def _renamed_field(value: object, names: Mapping[str, str]) -> object:
    if isinstance(value, tuple):
        items = tuple(_renamed_field(v, names) for v in value)
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type | enum.Enum):
        return renamed(value, names)  # type: ignore[type-var]
    return value


def mentions(comment: Comment | SourceLine, word: str) -> bool:
    """True when a comment names `word` (as a whole word, not an attribute). Comments are prose,
    so this is a text search; a user's line names the operands its statements read."""
    return re.search(rf"(?<![\w.]){re.escape(word)}(?!\w)", f"# {comment.text}") is not None
