"""The launch schedules as strategies: asked in order, the first that proposes itself is the
launch's, and each reads what the register form allows, never which form it is."""

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import statickernel as sk
from add import add
from matmul import matmul
from softmax_online import softmax_online
from statickernel._compiler.mosaic_gpu.emit import variants as emit_variants
from statickernel._compiler.mosaic_gpu.schedules import choose
from statickernel._compiler.mosaic_gpu.schedules.consumers import ConsumerPairLoop
from statickernel._compiler.mosaic_gpu.schedules.mma_warp import MmaWarpLoop
from statickernel._compiler.mosaic_gpu.schedules.one_block import OneBlockPerCta
from statickernel._compiler.mosaic_gpu.schedules.persistent import PersistentBlocks
from statickernel._compiler.mosaic_gpu.schedules.pipelined import PipelinedLoops
from statickernel._compiler.mosaic_gpu.schedules.split import SplitLoop
from statickernel._compiler.mosaic_gpu.schedules.warpspec import WarpSpecializedLoop

SCHEDULES = pathlib.Path(choose.__file__).parent


def _plan(kernel: sk.Kernel[..., Any], *shapes: tuple[int, ...], dtype: Any) -> sk.LaunchPlan:
    return kernel.plan(*(jax.ShapeDtypeStruct(s, dtype) for s in shapes))


def _kind(plan: sk.LaunchPlan) -> sk.ScheduleKind:
    assert plan.schedule is not None
    return plan.schedule.kind


def test_the_schedules_are_asked_in_order() -> None:
    assert [type(s) for s in choose.LAUNCH_SCHEDULES] == [
        SplitLoop,
        MmaWarpLoop,
        WarpSpecializedLoop,
        ConsumerPairLoop,
        PipelinedLoops,
        PersistentBlocks,
        OneBlockPerCta,
    ]


def test_every_schedule_kind_has_an_emitter() -> None:
    assert set(emit_variants.SCHEDULE_EMITTERS) == set(sk.ScheduleKind)


@pytest.mark.parametrize(
    ("kernel", "shapes", "dtype", "kind"),
    [
        (matmul, ((4096, 4096), (4096, 4096)), jnp.bfloat16, sk.ScheduleKind.WARP_SPECIALIZED),
        (softmax_online, ((1000, 100_000),), jnp.float32, sk.ScheduleKind.PIPELINED_LOOPS),
        (matmul, ((256, 4096), (4096, 4096)), jnp.bfloat16, sk.ScheduleKind.SPLIT_LOOP),
        # A decode step's product: its blocks narrowed, one a CTA, no split.
        (matmul, ((16, 4096), (4096, 4096)), jnp.bfloat16, sk.ScheduleKind.PIPELINED_LOOPS),
        (add, ((8192, 8192), (8192, 8192)), jnp.float32, sk.ScheduleKind.PERSISTENT),
        (add, ((100, 300), (100, 300)), jnp.float32, sk.ScheduleKind.ONE_BLOCK_PER_CTA),
    ],
)
def test_each_schedule_takes_its_launches(
    kernel: sk.Kernel[..., Any], shapes: Any, dtype: Any, kind: sk.ScheduleKind
) -> None:
    assert _kind(_plan(kernel, *shapes, dtype=dtype)) is kind


@pytest.mark.parametrize(
    ("kernel", "shapes", "dtype", "without", "kind"),
    [
        # Without the split, a matmul of few blocks is warp-specialized over its tiles.
        (
            matmul,
            ((256, 4096), (4096, 2048)),
            jnp.bfloat16,
            SplitLoop,
            sk.ScheduleKind.WARP_SPECIALIZED,
        ),
        # Without the warp-specialized schedule, the matmul's loop is a plain pipeline.
        (
            matmul,
            ((4096, 2048), (2048, 4096)),
            jnp.bfloat16,
            WarpSpecializedLoop,
            sk.ScheduleKind.PIPELINED_LOOPS,
        ),
        # Without persistent CTAs, a large elementwise launch takes one block a CTA.
        (
            add,
            ((8192, 4096), (8192, 4096)),
            jnp.float32,
            PersistentBlocks,
            sk.ScheduleKind.ONE_BLOCK_PER_CTA,
        ),
    ],
)
def test_a_schedule_left_out_is_never_chosen(
    monkeypatch: pytest.MonkeyPatch,
    kernel: sk.Kernel[..., Any],
    shapes: Any,
    dtype: Any,
    without: type,
    kind: sk.ScheduleKind,
) -> None:
    kept = tuple(s for s in choose.LAUNCH_SCHEDULES if not isinstance(s, without))
    monkeypatch.setattr(choose, "LAUNCH_SCHEDULES", kept)
    plan = _plan(kernel, *shapes, dtype=dtype)
    assert _kind(plan) is kind
    assert (plan.warp_specialized is not None) == (kind is sk.ScheduleKind.WARP_SPECIALIZED)


@pytest.mark.parametrize("path", sorted(SCHEDULES.glob("*.py")), ids=lambda p: p.name)
def test_the_schedules_read_capabilities_not_forms(path: pathlib.Path) -> None:
    """A schedule reads what the form allows (`FormFacts`), never the form's own frames."""
    text = path.read_text()
    for name in ("row_frame", "flat_frame", "Form.ROWS", "Form.STRIDED", "forms."):
        assert name not in text, f"{path.name} names {name}"
