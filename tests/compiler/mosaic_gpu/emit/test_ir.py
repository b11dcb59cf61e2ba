"""The IR of generated code and its one printer: line wrapping, blank lines, operator
precedence, constants, and the names a statement reads.

The printer's layout is the one the golden files pin (tests/compiler/mosaic_gpu/emit/test_emit.py); these tests pin
each rule on its own, on small statements.
"""

import ast

import pytest

from statickernel._compiler.ir.nodes import (
    PASS,
    Assign,
    BinOp,
    Call,
    Comment,
    Const,
    DType,
    EllipsisIndex,
    ExprStmt,
    FunctionDef,
    IfExp,
    Keyword,
    Lambda,
    List,
    Literal,
    Module,
    Name,
    Operator,
    Return,
    Slice,
    SourceLine,
    Subscript,
    Tuple,
    call,
    mentions,
    names_read,
)
from statickernel._compiler.ir.printer import (
    LINE_LIMIT,
    expression_source,
    literal_source,
    module_source,
    statements_source,
)


def names(*texts: str) -> tuple[Name, ...]:
    return tuple(Name(t) for t in texts)


def long_call(width: int) -> Call:
    """`f(a0, a1, ...)` with arguments named to make the call `width` characters long."""
    args = names("aaaa", "bbbb")
    text = expression_source(call("f", *args))
    return call("f", *args, Name("c" * (width - len(text) - 2)))


# --- wrapping ----------------------------------------------------------------------------------


def test_a_line_at_the_limit_stays_and_one_past_it_wraps() -> None:
    at_limit = Assign((Name("x"),), long_call(LINE_LIMIT - len("x = ")))
    assert len(statements_source([at_limit]).rstrip("\n")) == LINE_LIMIT
    assert statements_source([at_limit]).count("\n") == 1
    past = Assign((Name("x"),), long_call(LINE_LIMIT - len("x = ") + 1))
    assert statements_source([past]).splitlines() == [
        "x = f(",
        "    aaaa,",
        "    bbbb,",
        f"    {past.value.args[2].text},",  # type: ignore[union-attr]
        ")",
    ]


def test_a_long_sum_breaks_inside_its_parentheses_without_making_a_tuple() -> None:
    """`x = c + s * (long)`, too long for a line, breaks inside the operand's parentheses; the
    operand keeps no comma there (which would make it a tuple), and the text evaluates to the
    number the expression is."""
    inner: BinOp | Name = Name("s")
    for coefficient in (
        0.15384615384615385,
        0.18181818181818182,
        0.2222222222222222,
        0.2857142857142857,
    ):
        inner = BinOp(
            Operator.ADD,
            Literal(coefficient, "float32", True),
            BinOp(Operator.MUL, Name("s"), inner),
        )
    value = BinOp(
        Operator.ADD, Literal(0.4, "float32", True), BinOp(Operator.MUL, Name("s"), inner)
    )
    text = statements_source([Assign((Name("x"),), value)])
    assert len(text.splitlines()) > 1 and not any(
        line.rstrip().endswith(",") for line in text.splitlines()
    )
    scope: dict[str, object] = {"s": 0.5}
    exec(text, scope)
    assert scope["x"] == pytest.approx(eval(expression_source(value), {"s": 0.5}))


def test_the_limit_counts_the_indentation() -> None:
    inner = Assign((Name("x"),), long_call(LINE_LIMIT - len("x = ") - 3))
    flat = statements_source([inner])
    assert flat.count("\n") == 1
    nested = statements_source([FunctionDef("f", (), (inner,))])
    assert nested.splitlines()[1] == "    x = f("


def test_a_long_call_keeps_its_comment_on_the_closing_line() -> None:
    stmt = ExprStmt(long_call(96), comment="why")
    lines = statements_source([stmt]).splitlines()
    assert lines[0] == "f("
    assert lines[-1] == ")  # why"


def test_keywords_are_arguments_of_their_own() -> None:
    value = call("plgpu.load", Name("x_smem" + "_" * 60), layout=Name("plgpu.Layout.WGMMA"))
    lines = statements_source([Assign((Name("x"),), value)]).splitlines()
    assert lines == [
        "x = plgpu.load(",
        f"    x_smem{'_' * 60},",
        "    layout=plgpu.Layout.WGMMA,",
        ")",
    ]


def test_a_tuple_target_gets_its_value_in_parentheses() -> None:
    # The statement's first parenthesis opens the target, not a call that ends the line.
    stmt = Assign((Tuple(names("a", "b")),), long_call(96))
    assert statements_source([stmt]).splitlines() == [
        "(a, b) = (",
        "    " + expression_source(stmt.value),
        ")",
    ]


def test_bare_targets_do_not_stop_a_call_from_splitting() -> None:
    stmt = Assign(names("a", "b"), long_call(96))
    assert statements_source([stmt]).splitlines()[0] == "a, b = f("


def test_a_value_whose_first_parenthesis_is_indexed_gets_parentheses() -> None:
    ref = Subscript(Name("x_gmem.at"), (long_call(92), Slice()))
    lines = statements_source([Assign((Name("x"),), ref)]).splitlines()
    assert lines == ["x = (", "    " + expression_source(ref), ")"]


def test_a_call_that_does_not_end_the_line_is_not_split() -> None:
    value = BinOp(Operator.MUL, long_call(96), Const(0))
    lines = statements_source([Assign((Name("x"),), value)]).splitlines()
    assert lines == ["x = (", "    " + expression_source(value), ")"]


def test_a_long_expression_statement_that_is_no_call_stays() -> None:
    stmt = ExprStmt(BinOp(Operator.ADD, Name("a" * 60), Name("b" * 60)))
    assert statements_source([stmt]).splitlines() == ["a" * 60 + " + " + "b" * 60]


def test_a_long_return_of_a_tuple_splits_its_items() -> None:
    stmt = Return(Tuple(names("a" * 40, "b" * 40, "c" * 40)))
    assert statements_source([stmt]).splitlines() == [
        "return (",
        "    " + "a" * 40 + ",",
        "    " + "b" * 40 + ",",
        "    " + "c" * 40 + ",",
        ")",
    ]


def test_a_long_def_splits_its_parameters() -> None:
    params = tuple(f"parameter_{i}" for i in range(8))
    lines = statements_source([FunctionDef("f", params, (PASS,))]).splitlines()
    assert lines == ["def f(", *[f"    {p}," for p in params], "):", "    pass"]


def test_comments_are_never_wrapped() -> None:
    text = "x" * 200
    assert statements_source([Comment(text)]) == f"# {text}\n"


def test_a_one_per_line_call_splits_whatever_its_length() -> None:
    pipeline = Call(
        Name("plgpu.emit_pipeline"),
        (Name("step"),),
        (Keyword("grid", Const((4,))),),
        one_per_line=True,
    )
    stmt = Assign((Tuple(names("a", "b")),), Call(pipeline, names("x_gmem")))
    assert statements_source([stmt]).splitlines() == [
        "(a, b) = plgpu.emit_pipeline(",
        "    step,",
        "    grid=(4,),",
        ")(x_gmem)",
    ]


def test_a_long_list_argument_of_a_one_per_line_call_splits_one_item_a_line() -> None:
    """As the formatter splits it: a pipeline's in_specs of five operands, too long for one
    line, go one spec a line with a trailing comma."""
    specs = List(names(*(f"loop0_operand{i}_spec" for i in range(5))))
    pipeline = Call(
        Name("plgpu.emit_pipeline"),
        (Name("step"),),
        (Keyword("in_specs", specs),),
        one_per_line=True,
    )
    source = statements_source([ExprStmt(Call(pipeline, names("x_gmem")))])
    ast.parse(source)
    lines = source.splitlines()
    assert lines[2] == "    in_specs=["
    assert lines[3:8] == [f"        loop0_operand{i}_spec," for i in range(5)]
    assert lines[8] == "    ],"
    assert max(map(len, lines)) <= LINE_LIMIT


def test_a_one_per_line_call_whose_tuple_target_is_too_long_splits_the_target() -> None:
    pipeline = Call(Name("plgpu.emit_pipeline"), (Name("step"),), one_per_line=True)
    carries = names(*(f"v{i}" for i in range(16, 32)))
    source = statements_source([Assign((Tuple(carries),), Call(pipeline, names("x_gmem")))])
    ast.parse(source)  # valid Python: the call's bracket is not left open in parentheses
    lines = source.splitlines()
    assert lines[0] == "("
    assert lines[1:17] == [f"    v{i}," for i in range(16, 32)]
    assert lines[17:] == [") = plgpu.emit_pipeline(", "    step,", ")(x_gmem)"]
    assert max(map(len, lines)) <= LINE_LIMIT


def test_the_line_closing_a_one_per_line_call_wraps_on_its_own() -> None:
    pipeline = Call(Name("plgpu.emit_pipeline"), (Name("step"),), one_per_line=True)
    views = names("a" * 50, "b" * 50)
    lines = statements_source([ExprStmt(Call(pipeline, views))]).splitlines()
    assert lines == [
        "plgpu.emit_pipeline(",
        "    step,",
        ")(",
        "    " + "a" * 50 + ",",
        "    " + "b" * 50 + ",",
        ")",
    ]


def test_one_per_line_lists_nest_and_an_empty_one_stays_flat() -> None:
    launch = Call(
        Name("plgpu.kernel"),
        (Name("body"),),
        (
            Keyword("scratch", List((call("plgpu.Barrier"),), one_per_line=True)),
            Keyword("none", List((), one_per_line=True)),
        ),
        one_per_line=True,
    )
    assert statements_source([Assign((Name("k"),), launch)]).splitlines() == [
        "k = plgpu.kernel(",
        "    body,",
        "    scratch=[",
        "        plgpu.Barrier(),",
        "    ],",
        "    none=[],",
        ")",
    ]


# --- blank lines -------------------------------------------------------------------------------


def test_a_nested_function_has_a_blank_line_around_it() -> None:
    inner = FunctionDef("inner", (), (PASS,))
    outer = FunctionDef("outer", (), (Assign((Name("a"),), Const(1)), inner, Return(Name("a"))))
    assert statements_source([outer]).splitlines() == [
        "def outer():",
        "    a = 1",
        "",
        "    def inner():",
        "        pass",
        "",
        "    return a",
    ]


def test_a_nested_function_with_a_wrapped_def_has_blank_lines_around_it_only() -> None:
    params = tuple(f"parameter_{i}" for i in range(8))
    inner = FunctionDef("inner", params, (PASS,))
    outer = FunctionDef("outer", (), (Assign((Name("a"),), Const(1)), inner, Return(Name("a"))))
    source = statements_source([outer])
    ast.parse(source)
    assert source.splitlines() == [
        "def outer():",
        "    a = 1",
        "",
        "    def inner(",
        *(f"        {p}," for p in params),
        "    ):",
        "        pass",
        "",
        "    return a",
    ]


def test_no_blank_line_between_a_def_and_a_function_opening_its_body() -> None:
    inner = FunctionDef("inner", (), (PASS,))
    outer = FunctionDef("outer", (), (inner, Return(Const(None))))
    assert statements_source([outer]).splitlines()[:2] == ["def outer():", "    def inner():"]


def test_comments_above_a_nested_function_stay_with_it() -> None:
    inner = FunctionDef("inner", (), (PASS,))
    body = (Assign((Name("a"),), Const(1)), Comment("why"), SourceLine("f.py:3", ""), inner, PASS)
    assert statements_source([FunctionDef("outer", (), body)]).splitlines() == [
        "def outer():",
        "    a = 1",
        "",
        "    # why",
        "    # f.py:3",
        "    def inner():",
        "        pass",
        "",
        "    pass",
    ]


def test_a_module_separates_sections_and_top_level_functions() -> None:
    module = Module(
        (
            (Comment("header"),),
            (
                Assign((Name("A"),), Const(True)),
                FunctionDef("f", (), (PASS,), decorators=(Name("jax.jit"),)),
                Assign((Name("B"),), Const(2)),
            ),
        )
    )
    assert module_source(module) == (
        "# header\n\nA = True\n\n\n@jax.jit\ndef f():\n    pass\n\n\nB = 2\n"
    )


# --- expressions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "source"),
    [
        (Const((1,)), "(1,)"),
        (Const(()), "()"),
        (Const(((0, 6), (0, 28))), "((0, 6), (0, 28))"),
        (Const("M"), '"M"'),
        (Tuple(names("a", "b"), trailing_comma=True), "(a, b,)"),
        (Tuple(names("a")), "(a,)"),
        (DType("bool"), "jnp.bool_"),
        (Subscript(Name("r"), (Slice(), Slice(None, Const(20)))), "r[:, :20]"),
        (Subscript(Name("r"), (Slice(Const(0), Const(64)),)), "r[0:64]"),
        (Subscript(Name("acc"), (EllipsisIndex(),)), "acc[...]"),
        (Lambda(("step",), Tuple((Const(0), Name("step")))), "lambda step: (0, step)"),
        (IfExp(Name("I"), call("p"), Const(None)), "p() if I else None"),
        (Literal(0.5, "float32", weak_type=False), "jnp.float32(0.5)"),
        (Literal(float("-inf"), "float32", weak_type=True), "-jnp.inf"),
        # A NaN keeps its sign: jax's top_k ranks -NaN below every number.
        (Literal(-float("nan"), "float32", weak_type=False), "jnp.float32(-jnp.nan)"),
        (Literal(float("nan"), "bfloat16", weak_type=True), "jnp.nan"),
    ],
)
def test_expression_source(expr: object, source: str) -> None:
    assert expression_source(expr) == source  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expr", "source"),
    [
        (BinOp(Operator.LT, BinOp(Operator.ADD, Name("i"), Name("s")), Const(9)), "i + s < 9"),
        (BinOp(Operator.MUL, BinOp(Operator.ADD, Name("a"), Name("b")), Name("c")), "(a + b) * c"),
        (BinOp(Operator.ADD, Name("a"), BinOp(Operator.ADD, Name("b"), Name("c"))), "a + (b + c)"),
        (BinOp(Operator.NE, BinOp(Operator.LT, Name("a"), Name("b")), Name("c")), "(a < b) != c"),
        (BinOp(Operator.AND, Name("row_ok"), Name("col_ok")), "row_ok & col_ok"),
    ],
)
def test_operators_get_parentheses_only_where_python_needs_them(expr: BinOp, source: str) -> None:
    assert expression_source(expr) == source
    # The text parses back to the same tree.
    assert ast.dump(ast.parse(source, mode="eval")) == ast.dump(
        ast.parse(expression_source(expr), mode="eval")
    )


def test_the_literal_printer_is_the_expression_printer() -> None:
    for value, dtype in [(-0.0, "bfloat16"), (float("nan"), "float16"), (3, "int8")]:
        expected = literal_source(value, dtype, weak_type=False)
        assert expression_source(Literal(value, dtype, weak_type=False)) == expected
    assert literal_source(-0.0, "bfloat16", weak_type=False) == "jnp.bfloat16(-0.0)"


# --- names read --------------------------------------------------------------------------------


def test_names_read_take_the_first_part_of_dotted_names() -> None:
    expr = call("lax.add", Name("x"), Subscript(Name("y_gmem.at"), (Name("block_M"),)))
    assert names_read(expr) == {"lax", "x", "y_gmem", "block_M"}


def test_keywords_and_lambda_parameters_are_not_reads() -> None:
    spec = call("plgpu.BlockSpec", Const((8,)), Lambda(("step",), Tuple((Name("step"), Name("k")))))
    assert names_read(call("f", layout=spec)) == {"f", "plgpu", "k"}


def test_an_assignment_reads_its_value_and_a_subscripted_target() -> None:
    assert names_read(Assign((Name("x"),), Name("y"))) == {"y"}
    assert names_read(Assign((Tuple(names("a", "b")),), Name("c"))) == {"c"}
    store = Assign((Subscript(Name("r_smem"), (EllipsisIndex(),)),), Name("v"))
    assert names_read(store) == {"r_smem", "v"}


def test_literals_and_comments_read_nothing() -> None:
    assert names_read(ExprStmt(Literal(1.0, "float32", weak_type=False))) == frozenset()
    assert names_read(Comment("x is read")) == frozenset()


def test_a_comment_mentions_whole_words_only() -> None:
    line = SourceLine("f.py:3", "y = sk.load(bias) + x_max + v.x")
    assert mentions(line, "bias")
    assert not mentions(line, "x")  # `x_max` and `v.x` do not name `x`
    assert mentions(Comment("where a NaN is reduced"), "a")
