"""The register forms as strategies past the choice: the plan asks its `PlannedForm`, code
generation its `FormEmitter`, and only the forms' own modules read a form's frames."""

import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import statickernel as sk
from add import add
from rmsnorm import rmsnorm
from softmax import softmax
from statickernel._compiler.ir.nodes import Form
from statickernel._compiler.mosaic_gpu.emit import variants as emit_variants
from statickernel._compiler.mosaic_gpu.pallas import FlatFrame, RowFrame
from statickernel._compiler.mosaic_gpu.plan.forms import planned_form

COMPILER = pathlib.Path(sk.__file__).parent / "_compiler" / "mosaic_gpu"
# The modules that read a form's frames: the forms that propose them, the plan's and the
# emitter's form strategies, the fields that carry them, the translator's register shapes and
# the IR builders they parametrize.
READS_FRAMES = {
    "forms/rows.py",
    "forms/strided.py",
    "plan/forms.py",
    "plan/inputs.py",
    "plan/plan.py",
    "plan/make.py",
    "emit/rows.py",
    "emit/module.py",
    "emit/persistent_block.py",
    "lower/translation.py",
    "lower/context.py",
}


def _plan(kernel: sk.Kernel[..., Any], *shapes: tuple[int, ...], dtype: Any) -> sk.LaunchPlan:
    return kernel.plan(*(jax.ShapeDtypeStruct(s, dtype) for s in shapes))


def test_every_form_has_an_emitter() -> None:
    assert set(emit_variants.FORM_EMITTERS) == set(Form)


@pytest.mark.parametrize(
    ("frames", "form"),
    [
        ((None, None), Form.BLOCK),
        ((None, FlatFrame((64, 128), 8)), Form.STRIDED),
        ((RowFrame(1024, 8), None), Form.ROWS),
    ],
)
def test_a_plan_takes_its_form_from_its_frame(
    frames: tuple[RowFrame | None, FlatFrame | None], form: Form
) -> None:
    assert planned_form(*frames).form is form


@pytest.mark.parametrize(
    ("kernel", "shapes", "dtype", "form", "line"),
    [
        (softmax, [(1000, 100)], jnp.float32, Form.BLOCK, None),
        (add, [(1000, 1000), (1000, 1000)], jnp.float32, Form.STRIDED, "form: strided"),
        (rmsnorm, [(64, 16384), (16384,)], jnp.float32, Form.ROWS, "form: rows"),
    ],
)
def test_the_plan_shows_the_form_it_took(
    kernel: sk.Kernel[..., Any],
    shapes: list[tuple[int, ...]],
    dtype: Any,
    form: Form,
    line: str | None,
) -> None:
    plan = _plan(kernel, *shapes, dtype=dtype)
    text = str(plan)
    assert plan.form is form
    if line is None:
        assert "form: rows" not in text and "form: strided" not in text
    else:
        assert line in text


def test_only_the_forms_modules_read_their_frames() -> None:
    reads = re.compile(r"\b(row_frame|flat_frame)\b")
    readers = {
        path.relative_to(COMPILER).as_posix()
        for path in COMPILER.rglob("*.py")
        if reads.search(path.read_text())
    }
    assert readers <= READS_FRAMES, (
        f"a form's frames read outside its modules: {readers - READS_FRAMES}"
    )
