"""The rule registry: every primitive a body may call is registered once with the places it
lowers in, `docs/coverage.md` is its table, and what the table says is what the compiler does,
probed through the public API with one small kernel per rule and place."""

import os
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float, Int32

import statickernel as sk
from statickernel._compiler.mosaic_gpu.lower.context import Support, Where
from statickernel._compiler.mosaic_gpu.lower.registry import GROUPS, REFUSALS, RULES, coverage_table
from statickernel._errors import SharedMemoryError

PAGE = pathlib.Path(__file__).resolve().parents[4] / "docs" / "coverage.md"
BEGIN, END = "<!-- coverage table: begin -->", "<!-- coverage table: end -->"


def test_every_rule_is_in_the_table_once_and_none_is_also_refused() -> None:
    listed = [prim for _, prims in GROUPS for prim in prims]
    assert sorted(listed) == sorted(RULES)
    assert not set(RULES) & set(REFUSALS)


def test_the_docs_page_is_the_registrys_table() -> None:
    page = PAGE.read_text(encoding="utf-8")
    head, rest = page.split(BEGIN)
    _, tail = rest.split(END)
    want = f"{head}{BEGIN}\n{coverage_table()}{END}{tail}"
    if os.environ.get("STATICKERNEL_UPDATE_DOCS") == "1":
        PAGE.write_text(want, encoding="utf-8")
        page = want
    assert page == want, "docs/coverage.md is stale; rerun with STATICKERNEL_UPDATE_DOCS=1"


# --- what the compiler does, probed ------------------------------------------------------------
# The strided block is chosen for an elementwise body whose blocks are all tiled and aligned;
# the row form for whole rows too wide for the block form. A body the form cannot hold takes
# the block form instead.

STRIDED_X = jax.ShapeDtypeStruct((256, 256), jnp.float32)
WIDE_X = jax.ShapeDtypeStruct((16, 16384), jnp.float32)


def _tiled(body: Callable[[Any], Any]) -> sk.Kernel:
    @sk.kernel(tile={"M": "BM", "N": "BN"})
    def probe(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
    ) -> Float[Array, "M N"]:
        return body(sk.load(x))

    return probe


def _rows(body: Callable[[Any], Any], result: Any = Float[Array, "M N"]) -> sk.Kernel:
    def probe(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64):
        return body(sk.load(x, fill=0.0))

    probe.__annotations__["return"] = result
    return sk.kernel(tile={"M": "BM"})(probe)


def _position_rows(v: Any) -> Any:
    return v + sk.position("M")[:, None].astype(jnp.float32)


def _position_cols(v: Any) -> Any:
    return v + sk.position("N")[None, :].astype(jnp.float32)


def _printed(v: Any) -> Any:
    jax.debug.print("v = {}", v)
    return v


@sk.kernel(tile={"M": "BM"})
def _top_k_rows(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, K: sk.Const[int] = 2
) -> Int32[Array, "M K"]:
    return jax.lax.top_k(sk.load(x, fill=0.0), K)[1]


@sk.kernel(tile={"M": "BM", "N": "BN"})
def _shifted_tiled(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, "M N"]:
    return sk.load(x) + sk.load(x, offset={"M": -1})


@sk.kernel(tile={"M": "BM"})
def _shifted_rows(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return sk.load(x) + sk.load(x, offset={"M": 1})


# (rule, place, kernel, its argument, whether that place holds it)
PROBES = {
    "a shifted load in the strided block": (
        "sk_shift",
        Where.STRIDED,
        _shifted_tiled,
        STRIDED_X,
        False,
    ),
    "a shifted load in the row form": ("sk_shift", Where.ROWS, _shifted_rows, WIDE_X, False),
    "a top_k in the row form": ("top_k", Where.ROWS, _top_k_rows, WIDE_X, False),
    "a cumsum in the row form": (
        "cumsum",
        Where.ROWS,
        _rows(lambda v: jnp.cumsum(v, axis=1)),
        WIDE_X,
        True,
    ),
    "exp in the strided block": ("exp", Where.STRIDED, _tiled(jnp.exp), STRIDED_X, True),
    "exp in the row form": ("exp", Where.ROWS, _rows(jnp.exp), WIDE_X, True),
    "a sum over the columns in the row form": (
        "reduce_sum",
        Where.ROWS,
        _rows(lambda v: sk.sum(v, axis=1), Float[Array, " M"]),
        WIDE_X,
        True,
    ),
    "a sum over the rows in the strided block": (
        "reduce_sum",
        Where.STRIDED,
        _tiled(lambda v: v - sk.sum(v, axis=0, keepdims=True)),
        STRIDED_X,
        False,
    ),
    "a position in the strided block": (
        "sk_position",
        Where.STRIDED,
        _tiled(_position_rows),
        STRIDED_X,
        False,
    ),
    "a row position in the row form": (
        "sk_position",
        Where.ROWS,
        _rows(_position_rows),
        WIDE_X,
        False,
    ),
    "a column position in the row form": (
        "sk_position",
        Where.ROWS,
        _rows(_position_cols),
        WIDE_X,
        True,
    ),
    "a print in the strided block": (
        "debug_print",
        Where.STRIDED,
        _tiled(_printed),
        STRIDED_X,
        True,
    ),
    "a print in the row form": ("debug_print", Where.ROWS, _rows(_printed), WIDE_X, False),
    "a composite in the strided block": (
        "log1p",
        Where.STRIDED,
        _tiled(jnp.log1p),
        STRIDED_X,
        True,
    ),
    "a composite in the row form": ("log1p", Where.ROWS, _rows(jnp.log1p), WIDE_X, True),
    "jnp.any over the columns in the row form": (
        "reduce_or",
        Where.ROWS,
        _rows(lambda v: jnp.where(jnp.any(v > 0, axis=1, keepdims=True), v, -v)),
        WIDE_X,
        True,
    ),
    "jnp.all over the rows in the strided block": (
        "reduce_and",
        Where.STRIDED,
        _tiled(lambda v: jnp.where(jnp.all(v > 0, axis=0, keepdims=True), v, -v)),
        STRIDED_X,
        False,
    ),
    "a slice of a row in the row form": (
        "slice",
        Where.ROWS,
        _rows(lambda v: jnp.concatenate([v[:, 8192:], v[:, :8192]], axis=1)),
        jax.ShapeDtypeStruct((16, 16384), jnp.bfloat16),
        False,
    ),
    "a sum to a scalar in the row form": (
        "reduce_sum",
        Where.ROWS,
        _rows(lambda v: v - jnp.sum(v)),
        WIDE_X,
        False,
    ),
    "an argmax over the columns in the row form": (
        "argmax",
        Where.ROWS,
        _rows(lambda v: jnp.argmax(v, axis=1), Int32[Array, " M"]),
        WIDE_X,
        True,
    ),
    "an argmax in the strided block": (
        "argmax",
        Where.STRIDED,
        _tiled(lambda v: v + jnp.argmax(v, axis=1)[:, None].astype(v.dtype)),
        STRIDED_X,
        False,
    ),
}
_FORMS = {Where.STRIDED: sk.Form.STRIDED, Where.ROWS: sk.Form.ROWS}


@pytest.mark.parametrize("case", list(PROBES))
def test_the_table_says_what_the_compiler_does(case: str) -> None:
    prim, where, kernel, x, holds = PROBES[case]
    support = RULES[prim].support_in(where)
    assert support is (Support.YES if holds else Support.NO) or support is Support.PARTLY
    try:
        form = kernel.plan(x).form
    except SharedMemoryError:
        form = None  # the row form refused it, and the block form cannot hold so wide a row
    assert (form is _FORMS[where]) == holds, f"{case}: {form}"
