"""Printing from a body: `jax.debug.print` and `pl.debug_print` become `pl.debug_print` on the
register values of the generated module.

Kernels print in the Mosaic GPU interpreter (from a host callback, in no set order between
blocks or steps), and the printed values are compared with jnp's; every kernel cross-lowers
for CUDA. Prints Mosaic GPU cannot lower are refused at the declaration with a fix.
"""

import pathlib
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jaxtyping import Array, BFloat16, Float, Int32

import statickernel as sk
from markers import line_finder

F32 = jnp.float32

line_of = line_finder(__file__)


@sk.kernel(tile={"M": "BM"})
def row_max(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
    m = sk.max(sk.load(x, fill=-jnp.inf), axis=1)
    jax.debug.print("row max {m}", m=m)
    return m


@sk.kernel(tile={"M": "BM"})
def first_row(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, " M"]:
    rows = sk.position("M")
    first = rows.min()  # a scalar: the block's first row
    pl.debug_print("block from {} to {}", first, rows.max())
    return rows


@sk.kernel(tile={"M": "BM"})
def tile_plus_one(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    v = sk.load(x) + 1.0
    jax.debug.print("v = {}", v)
    return v


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def step_sums(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, " M"]:
    def step(acc: jax.Array) -> jax.Array:
        s = sk.sum(sk.load(x, fill=0.0), axis=1)
        jax.debug.print("step sum {}", s)
        return acc + s

    return sk.loop("N", step, init=jnp.zeros((BM,), F32))


@sk.kernel(tile={"M": "BM", "N": "BN"})
def doubled(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Float[Array, "M N"]:
    v = sk.load(x)
    jax.debug.print("x at 100%: {} {{x}}", v)
    return v * 2


@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
def product_printed(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "K N"],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
    BK: sk.Const[int] = 64,
) -> Float[Array, "M N"]:
    def step(acc: jax.Array) -> jax.Array:
        p = sk.dot(a, b)
        jax.debug.print("product {}", p)  # a value of the step, read from its accumulator
        return acc + p

    return sk.loop("K", step, init=jnp.zeros((BM, BN), F32))


def printed(capfd: pytest.CaptureFixture[str], run: Callable[[], Any], tag: str) -> list[str]:
    """What `run` prints, each print's text after `tag`, in the order printed."""
    jax.block_until_ready(run())
    jax.effects_barrier()
    out = capfd.readouterr().out
    return re.findall(rf"^{re.escape(tag)}(.*?)(?=^\S|\Z)", out, flags=re.M | re.S)


def numbers(text: str) -> np.ndarray:
    return np.array([float(t) for t in re.findall(r"-?inf|-?\d[\d.]*(?:e[-+]?\d+)?", text)])


def test_prints_a_vector_of_row_maxima(capfd: pytest.CaptureFixture[str]) -> None:
    x = jax.random.normal(jax.random.key(0), (100, 40), F32)
    prints = printed(capfd, lambda: row_max(x), "row max ")
    assert len(prints) == 2  # one a block
    # The blocks' vectors, 64 rows each; rows past M hold the fill's maximum, -inf.
    values = np.concatenate([numbers(p) for p in prints])
    assert values.shape == (128,)
    finite = np.sort(values[np.isfinite(values)])
    np.testing.assert_allclose(finite, np.sort(np.asarray(jnp.max(x, axis=1))), rtol=1e-6)


def test_prints_scalars_of_the_block(capfd: pytest.CaptureFixture[str]) -> None:
    x = jnp.zeros((150, 8), F32)
    prints = printed(capfd, lambda: first_row(x), "block from ")
    assert sorted(p.strip() for p in prints) == ["0 to 63", "128 to 191", "64 to 127"]


def test_prints_a_block(capfd: pytest.CaptureFixture[str]) -> None:
    x = jnp.arange(4 * 8, dtype=F32).reshape(4, 8) / 8
    (text,) = printed(capfd, lambda: tile_plus_one(x), "v = ")
    block = numbers(text).reshape(64, 8)  # the block's registers: rows padded to 64
    np.testing.assert_allclose(block[:4], np.asarray(x + 1.0), rtol=1e-6)


def test_prints_in_a_loop_step(capfd: pytest.CaptureFixture[str]) -> None:
    x = jax.random.normal(jax.random.key(1), (4, 300), F32)
    prints = printed(capfd, lambda: step_sums(x), "step sum ")
    got = sorted((tuple(numbers(p)[:4]) for p in prints), key=lambda s: s[0])
    steps = [x[:, i : i + 128].sum(axis=1) for i in range(0, 300, 128)]
    want = sorted((tuple(np.asarray(s)) for s in steps), key=lambda s: s[0])
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)


def test_prints_in_the_strided_block(capfd: pytest.CaptureFixture[str]) -> None:
    x = jnp.ones((4, 8), F32)
    assert doubled.plan(x).form is sk.Form.STRIDED
    (text,) = printed(capfd, lambda: doubled(x), "x at 100%: ")
    # The block of 64 x 128 is summarized: its first row, then the padding's zeros.
    assert text.startswith("[[1. 1. 1. ... 0. 0. 0.]")
    assert text.rstrip().endswith("{x}")


SPECS = {
    "row_max": (jax.ShapeDtypeStruct((100, 40), F32),),
    "first_row": (jax.ShapeDtypeStruct((150, 8), F32),),
    "tile_plus_one": (jax.ShapeDtypeStruct((4, 8), F32),),
    "step_sums": (jax.ShapeDtypeStruct((4, 300), F32),),
    "doubled": (jax.ShapeDtypeStruct((1000, 1000), F32),),
    "product_printed": (
        jax.ShapeDtypeStruct((64, 200), jnp.bfloat16),
        jax.ShapeDtypeStruct((200, 64), jnp.bfloat16),
    ),
}
KERNELS: dict[str, sk.Kernel[..., Any]] = {
    "row_max": row_max,
    "first_row": first_row,
    "tile_plus_one": tile_plus_one,
    "step_sums": step_sums,
    "doubled": doubled,
    "product_printed": product_printed,
}
EMITTED = {
    "row_max": 'pl.debug_print("row max {}", v0)',
    "first_row": 'pl.debug_print("block from {} to {}", v1, v2)',
    "tile_plus_one": 'pl.debug_print("v = {}", v0)',
    "step_sums": 'pl.debug_print("step sum {}", v2)',
    # printf reads %, and Mosaic GPU formats an array's text twice.
    "doubled": 'pl.debug_print("x at 100%%: {} {{{{x}}}}", x)',
    "product_printed": 'pl.debug_print("product {}", v2)',
}


@pytest.mark.parametrize("name", KERNELS)
def test_cross_lowers_with_the_print(name: str) -> None:
    kernel, args = KERNELS[name], SPECS[name]
    assert EMITTED[name] in kernel.emit(*args, backend="mosaic_gpu")
    assert "mosaic_gpu" in kernel.lower(*args).as_text()


def test_prints_a_product_in_a_loop_step(capfd: pytest.CaptureFixture[str]) -> None:
    a = jnp.ones((64, 200), jnp.bfloat16)
    prints = printed(capfd, lambda: product_printed(a, a.T), "product ")
    # Steps of 64 along K, the last one 8 wide: K past its edge reads zeros.
    assert sorted(numbers(p)[0] for p in prints) == [8.0, 64.0, 64.0, 64.0]


def test_interpreted_text_is_escaped_once() -> None:
    source = doubled.emit(jax.ShapeDtypeStruct((4, 8), F32), backend="interpret")
    assert 'pl.debug_print("x at 100%: {} {{x}}", x)' in source


def test_a_body_that_prints_keeps_the_block_form_over_rows() -> None:
    @sk.kernel(tile={"M": "BM"})
    def normalize(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)
        return v / sk.sum(v, axis=1, keepdims=True)

    @sk.kernel(tile={"M": "BM"})
    def normalize_printed(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)
        s = sk.sum(v, axis=1, keepdims=True)
        jax.debug.print("{}", s)
        return v / s

    wide = jax.ShapeDtypeStruct((16384, 400), F32)
    assert normalize.plan(wide).form is sk.Form.ROWS
    assert normalize_printed.plan(wide).form is sk.Form.BLOCK
    assert "mosaic_gpu" in normalize_printed.lower(wide).as_text()


def test_a_print_that_keeps_rows_out_of_the_row_form_is_named_in_the_error() -> None:
    """Rows too wide for the block form's blocks and a print the row form does not take:
    before, a SharedMemoryError that did not mention the print, which is what refused the
    form that fits."""

    @sk.kernel(tile={"M": "BM"})
    def normalize_printed(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)
        s = sk.sum(v, axis=1, keepdims=True)
        jax.debug.print("row sums {}", s)  # @row-form-print
        return v / s

    with pytest.raises(sk.SharedMemoryError) as info:
        normalize_printed.plan(jax.ShapeDtypeStruct((16, 16384), F32))
    error = info.value
    where = f"{pathlib.Path(__file__).name}:{line_of('row-form-print')}"
    assert "the row form" in error.what and "does not take the print" in error.what
    assert where in error.what and "jax.debug.print(" in error.what
    assert error.fix is not None and error.fix.startswith("take the print")
    assert where in error.fix and 'loop={"N": "BN"}' in error.fix
    assert error.dim == "N" and error.bindings == {"M": 16, "N": 16384}


def body_printing(printer: Callable[[jax.Array, jax.Array], None]) -> Callable[..., Any]:
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
        v = sk.load(x)
        m = sk.max(v, axis=1)
        printer(v, m)
        return m

    return k


REFUSED = {
    "format spec": (lambda v, m: jax.debug.print("{:.3f}", m), "format specs", "{}"),
    "conversion": (lambda v, m: pl.debug_print("{!r}", m), "conversions", "{}"),
    "block and vector": (
        lambda v, m: jax.debug.print("{} {}", v, m),
        "only when all are scalars",
        "a print of its own",
    ),
    "ordered": (
        lambda v, m: jax.debug.print("{}", m, ordered=True),
        "ordered=True",
        "drop ordered=True",
    ),
    "a tuple": (lambda v, m: jax.debug.print("{}", (m, m)), "a tuple", "a field of its own"),
    "no argument": (lambda v, m: pl.debug_print("{} {}", m), "names no argument", "{x}"),
    "no field": (lambda v, m: pl.debug_print("m =", m), "has no field for", "{}"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_prints_mosaic_gpu_cannot_lower_are_refused(case: str) -> None:
    printer, what, fix = REFUSED[case]
    with pytest.raises(sk.UnsupportedOpError, match=re.escape(what)) as info:
        sk.kernel(tile={"M": "BM"})(body_printing(printer))
    assert re.search(r"test_printing\.py:\d+$", info.value.where or "")
    assert fix in str(info.value.fix)
