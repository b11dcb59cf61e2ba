"""The one table of what a body may call: every primitive's rule, registered once with the
forms it lowers in (`Rule.support`), and the primitives no form lowers, with what to write
instead. `coverage_table()` renders it for `docs/coverage.md`.

The translator asks it for each equation: a rule a form cannot hold sends the compile path on
to the next form (the block form is the last), and a refused primitive is reported at the
user's line with its fix.
"""

from collections.abc import Mapping

from .arg_reductions import ARG_RULES
from .composites import COMPOSITE_RULES, COMPOSITES
from .context import Refusal, Rule, Support, Where
from .dots import DOT_RULES
from .positions import POSITION_RULES
from .prints import PRINT_RULES
from .rules import BINARY, BODY_RULES, OTHER, REDUCTIONS, SHAPE_ONLY, UNARY
from .scans import SCAN_RULES
from .shifts import SHIFT_RULES
from .slices import SLICE_RULES
from .steps import LOOP_RULES
from .take_along import TAKE_ALONG_RULES
from .top_k import TOP_K_RULES
from .totals import TOTAL_RULES

__all__ = ["CHUNKABLE", "COLUMN_LOCAL", "GROUPS", "REFUSALS", "RULES", "coverage_table"]

RULES: Mapping[str, Rule] = {
    **BODY_RULES,
    **COMPOSITE_RULES,
    **LOOP_RULES,
    **POSITION_RULES,
    **DOT_RULES,
    **PRINT_RULES,
    **SLICE_RULES,
    **TOTAL_RULES,
    **ARG_RULES,
    **TOP_K_RULES,
    **TAKE_ALONG_RULES,
    **SCAN_RULES,
    **SHIFT_RULES,
}

# What the user wrote, and what to write instead, for ops Mosaic GPU cannot lower.
# What a row taken in chunks may compute: elementwise ops, whose values in a chunk are its
# columns' alone, reshapes, the reductions the chunks combine (sum, max, min), and the
# positions of the columns (each chunk's, offset by its first column).
CHUNKABLE: frozenset[str] = frozenset(
    {*UNARY, *BINARY, *OTHER, *COMPOSITES, *REDUCTIONS, *SHAPE_ONLY, "sk_position"}
)

# What a result's joined columns held part by part may take (`Geometry.col_parts`): ops whose
# value at a column is that column's alone, and the reductions and positions of the columns,
# which their edge masks and positions keep to the parts.
COLUMN_LOCAL: frozenset[str] = CHUNKABLE | frozenset(
    {*ARG_RULES, "reduce_or", "reduce_and", "concatenate", *PRINT_RULES}
)

REFUSALS: Mapping[str, Refusal] = {
    "dot_general": Refusal(
        "jnp.dot / @ / jnp.einsum",
        "multiply the operands themselves with sk.dot(a, b) in the step of a loop over the "
        'contracted dim: acc = sk.loop("K", lambda acc: acc + sk.dot(a, b), '
        'init=jnp.zeros((BM, BN), jnp.float32)), with loop={"K": "BK"} in the decorator',
    ),
    "transpose": Refusal("transpose / .T", "pass a transposed operand from outside the kernel"),
    "cumlogsumexp": Refusal(
        "lax.cumlogsumexp",
        "scan jnp.exp(x - m) with jnp.cumsum for m the row's max, and take its log",
    ),
    "pow": Refusal(
        "x ** y with a float exponent", "use an integer exponent, or jnp.exp(y * jnp.log(x))"
    ),
    "iota": Refusal(
        "jnp.arange / lax.iota",
        'use sk.position("M") for the global indices of the block along a dim (a causal mask: '
        'sk.position("M")[:, None] >= sk.position("N")[None, :]); edge masks are built for you',
    ),
    "dynamic_slice": Refusal(
        "dynamic slicing",
        'declare the rows chosen by data: index={"V": "ids"} makes row t of sk.load(table) '
        "row ids[t] of `table` (a run from a start: ids = start + jnp.arange(T), an operand), "
        'pages={"P": "block_tables"} walks the pages a table lists; otherwise slice the '
        "operand outside the kernel",
    ),
    "dynamic_update_slice": Refusal(
        "lax.dynamic_update_slice",
        'declare the rows written in place: update="cache", index={"Slots": "slots"} '
        "writes row t of the result the body returns (sk.load(new)) to row slots[t] of `cache`, "
        "slots an operand (slots = start + jnp.arange(T) for a run from a start)",
    ),
    "scatter": Refusal(
        "x.at[ids].set(v)",
        'declare the rows written in place: update="cache", index={"Slots": '
        '"slot_mapping"} writes row t of the result the body returns (sk.load(new)) to row '
        "slot_mapping[t] of `cache` (a KV-cache update)",
    ),
    "scatter-add": Refusal(
        "x.at[ids].add(v)",
        'declare the rows updated in place: update="cache", index={"Slots": '
        '"slot_mapping"}, and return sk.load(cache) + sk.load(new): the rows of `cache` at '
        "the slots are gathered, added to and written back (with each slot once; a repeated "
        "slot keeps one row's sum, so scatter-add outside the kernel where slots repeat)",
    ),
    "pad": Refusal(
        "jnp.pad / lax.pad",
        'load the block shifted: sk.load(x, offset={"L": -3}) is the block 3 rows of L '
        "back, the fill before the array (a causal convolution's taps); otherwise pad the "
        "operand outside the kernel",
    ),
    "while": Refusal(
        "lax.fori_loop / lax.while_loop",
        'walk a dim of the operands with sk.loop: loop={"S": "BS"} in the decorator and '
        'sk.loop("S", step, init=..., stop=sk.load(length)) in the body ends at a length the '
        "data gives; rows split into groups whose sizes the data gives (a grouped matmul) are "
        'ragged={"M": "group_sizes"}, pages a table lists pages={"P": "block_tables"}',
    ),
    "sort": Refusal("jnp.sort", "sort outside the kernel"),
    "reduce_prod": Refusal("jnp.prod", "use jnp.exp(jnp.sum(jnp.log(x), axis=...)) for positive x"),
    "argsort": Refusal("jnp.argsort", "sort outside the kernel"),
    "roll": Refusal("jnp.roll", "roll the operand outside the kernel"),
}

# The table's groups, in order, and what a user writes for the statickernel primitives.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("elementwise, one operand", tuple(UNARY)),
    ("elementwise, two operands", tuple(BINARY)),
    ("elementwise, other", tuple(sorted(OTHER))),
    ("elementwise, written with the ops above", tuple(COMPOSITES)),
    ("reductions", (*REDUCTIONS, "reduce_or", "reduce_and", *ARG_RULES, *TOP_K_RULES)),
    ("shapes", tuple(sorted(SHAPE_ONLY))),
    ("slices and joins", tuple(SLICE_RULES)),
    ("indexing with arrays", tuple(TAKE_ALONG_RULES)),
    ("scans", tuple(SCAN_RULES)),
    ("statickernel", ("sk_loop", "sk_map_blocks", "sk_dot", "sk_position", "sk_shift")),
    ("printing", ("debug_print",)),
)
# How a body writes the primitives whose jnp name is not `jnp.<primitive>`.
_SPELLING = {
    "sk_loop": "sk.loop",
    "sk_map_blocks": "sk.map_blocks",
    "sk_dot": "sk.dot",
    "sk_position": "sk.position",
    "sk_shift": "sk.load(x, offset={dim: k})",
    "debug_print": "jax.debug.print / pl.debug_print",
    "neg": "-x",
    "slice": "x[:, a:b]",
    "split": "jnp.split(x, n, axis=1)",
    "concatenate": "jnp.concatenate([x, y], axis=1)",
    "not": "~x",
    "logistic": "jax.nn.sigmoid",
    "erf": "jax.scipy.special.erf",
    "erfc": "jax.scipy.special.erfc",
    "atan": "jnp.arctan",
    "is_finite": "jnp.isfinite",
    "reduce_or": "jnp.any",
    "argmax": "jnp.argmax(x, axis=1)",
    "argmin": "jnp.argmin(x, axis=1)",
    "top_k": "jax.lax.top_k(x, K)",
    "gather": "jnp.take_along_axis(x, i, axis=1)",
    "cumsum": "jnp.cumsum(x, axis=1)",
    "cumprod": "jnp.cumprod(x, axis=1)",
    "cummax": "lax.cummax(x, axis=1)",
    "cummin": "lax.cummin(x, axis=1)",
    "reduce_and": "jnp.all",
    "rem": "x % y",
    "and": "x & y",
    "or": "x | y",
    "xor": "x ^ y",
    "eq": "x == y",
    "ne": "x != y",
    "shift_left": "x << n",
    "shift_right_arithmetic": "x >> n (signed)",
    "shift_right_logical": "lax.shift_right_logical",
    "integer_pow": "x ** 3",
    "convert_element_type": "x.astype(dtype)",
    "select_n": "jnp.where",
    "clamp": "jnp.clip",
    "reduce_sum": "jnp.sum / sk.sum",
    "reduce_max": "jnp.max / sk.max",
    "reduce_min": "jnp.min / sk.min",
    "broadcast_in_dim": "x[:, None], jnp.broadcast_to",
    "expand_dims": "jnp.expand_dims",
    "copy": "jnp.copy",
    "copy_p": "jnp.array(x)",
    "stop_gradient": "lax.stop_gradient",
    "rsqrt": "lax.rsqrt",
    "exp2": "jnp.exp2",
    "atan2": "jnp.arctan2",
    "max": "jnp.maximum",
    "min": "jnp.minimum",
    "lt": "x < y",
    "le": "x <= y",
    "gt": "x > y",
    "ge": "x >= y",
    "add": "x + y",
    "sub": "x - y",
    "mul": "x * y",
    "div": "x / y",
}


def coverage_table() -> str:
    """Markdown: each primitive by where it lowers, then the refused ones with their fixes."""
    places = list(Where)
    head = "| primitive | written as | " + " | ".join(places) + " | note |"
    rows = [head, "|" + "---|" * (len(places) + 3)]
    for group, prims in GROUPS:
        rows.append(f"| **{group}** |" + " |" * (len(places) + 2))
        for prim in prims:
            rule = RULES[prim]
            marks = [rule.support_in(w) for w in places]
            note = rule.note if any(m is not Support.YES for m in marks) else ""
            user = _SPELLING.get(prim, f"jnp.{prim}")
            cells = " | ".join(m.value for m in marks)
            user = user.replace("|", "\\|")  # inside a cell of a Markdown table
            rows.append(f"| `{prim}` | `{user}` | {cells} | {note} |")
    refused = ["| primitive | written as | instead |", "|---|---|---|"]
    for prim, refusal in REFUSALS.items():
        refused.append(f"| `{prim}` | {refusal.written_as} | {refusal.fix} |")
    return "\n".join(rows) + "\n\nRefused in every form:\n\n" + "\n".join(refused) + "\n"
