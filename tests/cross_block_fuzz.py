"""Random results reduced across blocks for the differential fuzzer, and what it needs to run them.

A case is the text of a whole module with one `@sk.kernel` whose result lacks a tiled dim: a
scalar, or a per-column (per-row) vector when the rows (the columns) are tiled. Its body
composes, on one loaded block:
- an elementwise op on the block (abs, a square, a product with a loaded vector, ...);
- a first reduction (sum, max, min or mean) over the rows, the columns or both;
- for a vector, an op on it (a scale, a cast, a square root, a square, a constant added, a product with
  a loaded vector, the difference with another reduction of the block), then a second
  reduction over what is left, or none for a vector result;
- an op after the last reduction (a scale, a mean's division by `sk.dim`, a square root).
The tiling is the rows, the columns or both, so every reduction runs over tiled and whole
dims in turn; sometimes the first reduction's vector is a second result.

The reference is the same body run by plain jnp on the whole arrays. A kernel must match it,
or be refused at the declaration with `sk.CrossBlockResultError`. A refusal must be needed:
`blockwise` runs the body on each block alone and combines the blocks' results with the
result's last reduction, which is what reducing across blocks without following the body's
reductions computes; on a shape of several blocks along each tiled dim that combination must
differ from the whole-array value, unless every reduction over a tiled dim is a max or a min,
where an order-preserving op can make it agree (a scaled max, which the rule refuses).
"""

import dataclasses
import textwrap
import types
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

__all__ = [
    "KERNEL_NAME",
    "Composition",
    "blockwise",
    "compositions",
    "make_args",
    "multi_block_shape",
    "whole_array",
]

KERNEL_NAME = "fuzzed"
ROWS = (1, 3, 64, 65, 100, 130, 200)
COLS = (1, 7, 16, 64, 100, 129, 200)
BLOCKS = (64, 128)
TILINGS = (("M",), ("N",), ("M", "N"))
FILLS = ("", "0.0", "-jnp.inf", "jnp.inf", "1.0")
REDUCTIONS = ("sum", "max", "min")
# Elementwise ops on the block: each element stays whole, whatever the tiling.
BLOCK_OPS = (
    "{v}",
    "jnp.abs({v})",
    "{v} * {v}",
    "jnp.exp(-jnp.abs({v}))",
    "2.0 * {v} - 1.0",
    "{v} * wv[None, :]",
    "{v} + rv[:, None]",
)
# Ops on the first reduction's vector, before the second reduction.
VECTOR_OPS = (
    "{u}",
    "{u} * 2.0",
    "{u} * -0.5",
    "{u} / 3.0",
    "{u}.astype(jnp.float32)",
    "jnp.sqrt(jnp.abs({u}) + 1.0)",
    "{u} * {u}",
    "{u} + 1.0",
    "-{u}",
    "{u} - other",
    "{u} * along",
)
# Ops after the last reduction.
# Nonlinear ops that do not saturate, so that a wrong combination shows in the value.
RESULT_OPS = ("{r}", "{r}", "{r} * 0.5", "{r} / sk.dim({dim!r})", "jnp.sqrt(jnp.abs({r}) + 1.0)")


@dataclasses.dataclass(frozen=True)
class Composition:
    """One kernel module, and what the checks need to know about it."""

    source: str
    tiled: tuple[str, ...]
    blocks: tuple[tuple[str, int], ...]  # BM and BN
    operands: tuple[str, ...]  # "x", and "w" (along N) and "r" (along M) when loaded
    results: tuple[str, ...]  # each result's dims: "", "M" or "N"
    lasts: tuple[str, ...]  # each result's last reduction: "sum", "max" or "min"
    order_only: bool  # every reduction over a tiled dim is a max or a min
    m: int
    n: int
    seed: int

    def describe(self) -> str:
        numbered = "\n".join(
            f"{i:3d}  {line}" for i, line in enumerate(self.source.splitlines(), 1)
        )
        return f"{KERNEL_NAME} at M={self.m}, N={self.n}, seed={self.seed}\n{numbered}"


def _reduce(draw: Any, function: str, value: str, axis: int | tuple[int, int]) -> str:
    if function == "mean":
        return f"jnp.mean({value}, axis={axis})"
    namespace = draw(st.sampled_from(["sk", "jnp"]))
    return f"{namespace}.{function}({value}, axis={axis})"


@st.composite
def compositions(draw: Any) -> Composition:
    tiled = draw(st.sampled_from(TILINGS))
    blocks = {"M": draw(st.sampled_from(BLOCKS)), "N": draw(st.sampled_from(BLOCKS))}
    constant = {"M": "BM", "N": "BN"}
    lines = [f"v = sk.load(x{', fill=' + f if (f := draw(st.sampled_from(FILLS))) else ''})"]
    block_op = draw(st.sampled_from(BLOCK_OPS))
    lines.append("t = " + block_op.format(v="v"))
    first = draw(st.sampled_from([*REDUCTIONS, "sum", "mean"]))
    axis = draw(st.sampled_from([0, 1, (0, 1)]))
    lines.append("u = " + _reduce(draw, first, "t", axis))
    reduced = {"M"} if axis == 0 else {"N"} if axis == 1 else {"M", "N"}
    # The reductions over tiled dims, which the blocks hold parts of.
    reductions = [first] if reduced & set(tiled) else []
    results: list[str] = []
    lasts: list[str] = []
    if axis == (0, 1):
        value, last, kept = "u", first, ""
    else:
        kept = "N" if axis == 0 else "M"
        # A vector result must lack the dim it reduced, or it is an ordinary block result.
        vector_result = bool(reduced & set(tiled)) and draw(st.booleans())
        if vector_result:
            value, last = "u", first
        else:
            op = draw(st.sampled_from(VECTOR_OPS))
            if "other" in op:
                other = draw(st.sampled_from(REDUCTIONS))
                if reduced & set(tiled):
                    reductions.append(other)
                lines.append("other = " + _reduce(draw, other, "t", axis))
            if "along" in op:
                lines.append(f"along = {'wv' if kept == 'N' else 'rv'}")
            lines.append("s = " + op.format(u="u"))
            last = draw(st.sampled_from([*REDUCTIONS, "sum", "mean"]))
            if kept in tiled:
                reductions.append(last)
            lines.append("total = " + _reduce(draw, last, "s", 0))
            value, kept = "total", ""
    dim = draw(st.sampled_from(["M", "N"]))
    lines.append("result = " + draw(st.sampled_from(RESULT_OPS)).format(r=value, dim=dim))
    results.append(kept)
    lasts.append("sum" if last == "mean" else last)
    returned = ["result"]
    # Sometimes the first reduction's vector is a result too, reduced across blocks itself.
    if axis != (0, 1) and ("M" if axis == 0 else "N") in tiled and draw(st.integers(0, 3)) == 0:
        returned.append("u")
        results.append("N" if axis == 0 else "M")
        lasts.append("sum" if first == "mean" else first)
    text = "\n".join(lines)
    operands = ["x"]
    if "wv" in text:
        operands.append("w")
        lines.insert(1, "wv = sk.load(w)")
    if "rv" in text:
        operands.append("r")
        lines.insert(1, "rv = sk.load(r)")
    lines.append(f"return {', '.join(returned)}")
    dims = {"x": "M N", "w": " N", "r": " M"}
    annotations = [f'Float[Array, "{" " + d if d else ""}"]' for d in results]
    annotation = annotations[0] if len(annotations) == 1 else f"tuple[{', '.join(annotations)}]"
    params = [f'{o}: Float[Array, "{dims[o]}"],' for o in operands]
    params += ["*,", *(f"{constant[d]}: sk.Const[int] = {blocks[d]}," for d in tiled)]
    tile = {d: constant[d] for d in tiled}
    source = "\n".join(
        [
            "import jax",
            "import jax.numpy as jnp",
            "from jaxtyping import Array, Float",
            "",
            "import statickernel as sk",
            "",
            "",
            f"@sk.kernel(tile={tile!r})",
            f"def {KERNEL_NAME}(",
            *[f"    {p}" for p in params],
            f") -> {annotation}:",
            textwrap.indent("\n".join(lines), "    "),
            "",
        ]
    )
    return Composition(
        source=source,
        tiled=tiled,
        blocks=tuple((constant[d], blocks[d]) for d in tiled),
        operands=tuple(operands),
        results=tuple(results),
        lasts=tuple(lasts),
        order_only=all(r in ("max", "min") for r in reductions),
        m=draw(st.sampled_from(ROWS)),
        n=draw(st.sampled_from(COLS)),
        seed=draw(st.integers(0, 2**16)),
    )


def make_args(case: Composition, m: int, n: int, salt: int = 0) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng([case.seed, salt])
    shapes = {"x": (m, n), "w": (n,), "r": (m,)}
    return tuple(
        jnp.asarray(np.clip(2 * rng.standard_normal(shapes[o]), -6, 6), jnp.float32)
        for o in case.operands
    )


def multi_block_shape(case: Composition) -> tuple[int, int]:
    """A shape of two blocks and a ragged one along each tiled dim."""
    blocks = dict(case.blocks)
    m = 2 * blocks["BM"] + 3 if "M" in case.tiled else case.m
    n = 2 * blocks["BN"] + 5 if "N" in case.tiled else case.n
    return m, n


class _Whole:
    """An operand as the body sees it outside a kernel: loading gives the array."""

    def __init__(self, array: jax.Array):
        self.array = array

    def load(self, *, fill: Any = 0) -> jax.Array:
        del fill  # no element lies past the array's edge
        return self.array


def _body(case: Composition, filename: str) -> Callable[..., Any]:
    """The kernel's body from the module's text, run by plain jnp: `sk.load` gives the array,
    `sk.sum`, `sk.max` and `sk.min` are jnp's, and `sk.dim` reads `dims`."""
    module = compile(case.source, filename, "exec")
    code = next(
        c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == KERNEL_NAME
    )

    def run(args: tuple[jax.Array, ...], dims: Mapping[str, int]) -> tuple[np.ndarray, ...]:
        standin = types.SimpleNamespace(
            load=lambda operand, **kw: operand.load(**kw),
            sum=jnp.sum,
            max=jnp.max,
            min=jnp.min,
            dim=lambda name: dims[name],
        )
        namespace = {"__builtins__": __builtins__, "jax": jax, "jnp": jnp, "sk": standin}
        function = types.FunctionType(code, namespace, KERNEL_NAME)
        out = function(*(_Whole(a) for a in args), **{c: b for c, b in case.blocks})
        parts = out if isinstance(out, tuple) else (out,)
        return tuple(np.asarray(p, np.float32) for p in parts)

    return run


def whole_array(case: Composition, filename: str, args: tuple[jax.Array, ...]):
    """The body on the whole arrays: what the kernel must compute."""
    m, n = args[0].shape
    return _body(case, filename)(args, {"M": m, "N": n})


_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}
_IDENTITY = {"sum": 0.0, "max": -np.inf, "min": np.inf}


def blockwise(case: Composition, filename: str, args: tuple[jax.Array, ...]):
    """The body on each block alone (cut at the array's edge), the blocks' results combined
    by each result's last reduction: a combination across blocks that ignores the body's
    other reductions."""
    m, n = args[0].shape
    sizes = {"M": m, "N": n}
    blocks = dict(case.blocks)
    starts = {
        d: range(0, sizes[d], blocks["B" + d]) if d in case.tiled else range(0, sizes[d], sizes[d])
        for d in ("M", "N")
    }
    run = _body(case, filename)
    totals = [
        np.full([sizes[d] for d in r], _IDENTITY[last], np.float32)
        for r, last in zip(case.results, case.lasts, strict=True)
    ]
    for i in starts["M"]:
        for j in starts["N"]:
            rows = slice(i, i + blocks["BM"]) if "M" in case.tiled else slice(None)
            cols = slice(j, j + blocks["BN"]) if "N" in case.tiled else slice(None)
            cut = {"x": (rows, cols), "w": (cols,), "r": (rows,)}
            parts = run(tuple(a[cut[o]] for o, a in zip(case.operands, args, strict=True)), sizes)
            for total, part, dims, last in zip(
                totals, parts, case.results, case.lasts, strict=True
            ):
                index = {"": (), "M": (rows,), "N": (cols,)}[dims]
                total[index] = _COMBINE[last](total[index], part)
    return tuple(totals)
