"""Load records: the one table of fills, from the body's loads to the plan and the code.

Each operand's load is recorded once per block copy it reads (the copy made once per block,
or one loop's pipeline), with its fill and the user's line. The plan derives every fill it
prints from these records, and the generated code reads the plan.
"""

import dataclasses
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from softmax_online import softmax_online
from statickernel._compiler.build import compile_call
from statickernel._compiler.declare.binding import bind
from statickernel._targets import MOSAIC_GPU_LIMITS, TARGETS

F32 = jnp.float32


def _loads(kernel: sk.Kernel, *args: jax.ShapeDtypeStruct):
    binding = bind(kernel.spec, args, kernel.consts, {}, limits=MOSAIC_GPU_LIMITS, call=False)
    return compile_call(kernel.spec, binding, "interpret", None).trace.loads


@sk.kernel(tile={"M": "BM"})
def scaled(
    x: Float[Array, "M N"], w: Float[Array, " N"], *, BM: sk.Const[int] = 64
) -> Float[Array, "M N"]:
    v = sk.load(x, fill=-1.5)
    return v * sk.load(w, fill=2.0)[None, :] + sk.load(x, fill=-1.5)


def test_each_block_copy_is_recorded_once_with_its_fill_and_line() -> None:
    loads = _loads(scaled, jax.ShapeDtypeStruct((100, 30), F32), jax.ShapeDtypeStruct((30,), F32))
    assert [(r.operand, r.loop, r.fill) for r in loads] == [("x", None, -1.5), ("w", None, 2.0)]
    assert all(r.line and r.line.startswith("tests/language/test_loads.py:") for r in loads)
    first_load_line = int(str(loads[0].line).rsplit(":", 1)[1])
    source = pathlib.Path(__file__).read_text().splitlines()
    assert "sk.load(x, fill=-1.5)" in source[first_load_line - 1]


def test_the_plan_and_the_code_read_the_recorded_fills() -> None:
    x = jax.ShapeDtypeStruct((100, 30), F32)
    w = jax.ShapeDtypeStruct((30,), F32)
    plan = scaled.plan(x, w)
    assert plan.operand("x").fill == -1.5 and plan.operand("w").fill == 2.0
    source = scaled.emit(x, w)
    assert "jnp.float32(-1.5)" in source and "jnp.float32(2.0)" in source


def test_each_loop_records_its_own_fill_of_one_operand() -> None:
    x = jax.ShapeDtypeStruct((130, 1000), F32)
    loads = _loads(softmax_online, x)
    assert [(r.operand, r.loop) for r in loads] == [("x", 0), ("x", 1)]
    assert loads[0].fill == -math.inf and loads[1].fill == 0
    # Rows too wide for shared memory: each loop's pipeline reads x with its own fill.
    wide = jax.ShapeDtypeStruct((130, 100_000), F32)
    plan = softmax_online.plan(wide)
    assert plan.loops[0].fills == (("x", -math.inf),)
    assert plan.loops[1].fills == (("x", 0),)
    assert "fill -inf" in str(plan)
    # Rows held in shared memory: each loop's walk reads x with its own fill, as its note says.
    notes = " ".join(softmax_online.plan(x).notes)
    assert "loop 0: N in 4 step(s) of 256 over the row in shared memory" in notes
    assert "reads x (fill -inf)" in notes and "reads x (fill 0)" in notes
    source = softmax_online.emit(x)
    assert "x = jnp.where(col_ok, x, jnp.float32(-jnp.inf))" in source
    assert "x = jnp.where(col_ok, x, jnp.float32(0.0))" in source


def test_a_load_whose_value_is_unused_takes_no_effect() -> None:
    @sk.kernel(tile={"M": "BM"})
    def ignores_y(
        x: Float[Array, "M N"], y: Float[Array, "M N"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        sk.load(y, fill=7.0)
        return sk.load(x) * 2.0

    shape = jax.ShapeDtypeStruct((64, 8), F32)
    assert [r.operand for r in _loads(ignores_y, shape, shape)] == ["x"]
    plan = ignores_y.plan(shape, shape)
    assert not plan.operand("y").loaded and plan.operand("y").fill is None


@pytest.mark.parametrize("fill", [-1.5, 2.0, math.inf])
def test_whatever_the_recorded_fill_a_ragged_reduction_is_exact(fill: float) -> None:
    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def row_min(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
        # A min over columns: elements past N take the reduction's identity, whatever the fill.
        return sk.min(sk.load(x, fill=fill), axis=1)

    x = np.arange(70 * 10, dtype=np.float32).reshape(70, 10) + 3.0
    np.testing.assert_array_equal(np.asarray(row_min(jnp.asarray(x))), x.min(axis=1))


@sk.kernel(tile={"M": "BM"})
def shifted_rows(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
    return sk.load(x, offset={"M": 8})


def test_a_shifted_load_reaches_as_far_as_one_copy_of_the_target() -> None:
    # The trace reads the bound from the target compiled for: a target whose copies reach 4
    # elements refuses the offset of 8 that Mosaic GPU's 256-element TMA box takes.
    hopper = TARGETS["sm_90a"]
    short = dataclasses.replace(hopper.limits, copy_extent_max=4)
    x = jax.ShapeDtypeStruct((128, 64), jnp.float32)
    binding = bind(shifted_rows.spec, (x,), shifted_rows.consts, {}, limits=short)
    with pytest.raises(sk.BodyError) as info:
        compile_call(
            shifted_rows.spec,
            binding,
            "interpret",
            None,
            target=dataclasses.replace(hopper, limits=short),
        )
    assert info.value.what == "`x` is loaded 8 elements away along M, more than one copy reaches"
    assert info.value.expected == "an offset of at most 4 either way"
    assert compile_call(shifted_rows.spec, binding, "interpret", None, target=hopper).trace.loads
