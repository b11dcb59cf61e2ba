"""One gallery kernel of each register form and each launch schedule, run in the interpreter
against its reference at ragged shapes: the interpreter's share of `make test`.

The rest of the suite runs each form and schedule at many more shapes, bodies and dtypes;
these are the cases a change to any of them is most likely to break first, at a cost of a few
seconds each. `test_every_form_and_schedule_has_a_case` plans them (no kernel runs) and
fails when a form or a schedule has no case, or a case no longer takes the launch it is here
for.
"""

import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import statickernel as sk
from add import add
from attention import attention
from matmul import matmul
from softmax import softmax
from softmax_online import softmax_online
from statickernel._compiler.mosaic_gpu.plan import schedule as schedule_figures

F32, BF16 = jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)
Schedule = sk.ScheduleKind


@dataclasses.dataclass(frozen=True)
class Case:
    """A kernel at shapes that take one form and one schedule."""

    kernel: sk.Kernel[..., Any]
    shapes: tuple[tuple[int, ...], ...]
    dtype: Any
    form: sk.Form
    schedule: sk.ScheduleKind
    target: str = "sm_90a"
    # The SMs persistent launches are sized for, where fewer than a GPU's make a launch of a
    # few blocks persistent (or split) at shapes the interpreter runs in seconds.
    sms: int | None = None

    @property
    def id(self) -> str:
        shapes = "-".join("x".join(map(str, s)) for s in self.shapes)
        sms = "" if self.sms is None else f"-{self.sms}sms"
        return f"{self.kernel.spec.name}-{self.dtype.name}-{shapes}-{self.target}{sms}"

    def on_target(self) -> sk.Kernel[..., Any]:
        return self.kernel.with_target(self.target)


CASES = [
    Case(add, ((129, 257), (129, 257)), F32, sk.Form.STRIDED, Schedule.ONE_BLOCK_PER_CTA),
    Case(add, ((129, 257), (129, 257)), F32, sk.Form.STRIDED, Schedule.PERSISTENT, sms=4),
    Case(softmax, ((129, 95),), F32, sk.Form.BLOCK, Schedule.ONE_BLOCK_PER_CTA),
    Case(softmax, ((3, 8192),), F32, sk.Form.ROWS, Schedule.ONE_BLOCK_PER_CTA),
    Case(softmax, ((40, 8192),), F32, sk.Form.ROWS, Schedule.PERSISTENT, sms=4),
    Case(softmax_online, ((129, 512),), F32, sk.Form.ROWS, Schedule.ONE_BLOCK_PER_CTA),
    Case(matmul, ((65, 33), (33, 65)), BF16, sk.Form.BLOCK, Schedule.PIPELINED_LOOPS),
    Case(matmul, ((7, 577), (577, 129)), BF16, sk.Form.BLOCK, Schedule.SPLIT_LOOP),
    Case(matmul, ((257, 128), (128, 256)), BF16, sk.Form.BLOCK, Schedule.WARP_SPECIALIZED),
    Case(
        matmul,
        ((257, 128), (128, 256)),
        BF16,
        sk.Form.BLOCK,
        Schedule.MMA_WARP,
        target="sm_100a",
    ),
    Case(
        attention,
        ((1, 2, 129, 128), (1, 2, 130, 128), (1, 2, 130, 128)),
        BF16,
        sk.Form.BLOCK,
        Schedule.CONSUMER_PAIR,
    ),
]


@pytest.fixture
def sms(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    case: Case = request.param
    if case.sms is not None:
        monkeypatch.setattr(schedule_figures, "SMS", case.sms)
    yield


def _plan(case: Case) -> sk.LaunchPlan:
    return case.on_target().plan(*(jax.ShapeDtypeStruct(s, case.dtype) for s in case.shapes))


def test_every_form_and_schedule_has_a_case(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: set[tuple[sk.Form, sk.ScheduleKind]] = set()
    for case in CASES:
        monkeypatch.setattr(schedule_figures, "SMS", case.sms)
        plan = _plan(case)
        assert plan.schedule is not None
        assert (plan.form, plan.schedule.kind) == (case.form, case.schedule), case.id
        taken.add((plan.form, plan.schedule.kind))
    assert {form for form, _ in taken} == set(sk.Form)
    assert {kind for _, kind in taken} == set(sk.ScheduleKind)


@pytest.mark.representative
@pytest.mark.parametrize("sms", CASES, ids=[c.id for c in CASES], indirect=True)
def test_the_case_matches_its_reference(sms: None, request: pytest.FixtureRequest) -> None:
    case: Case = request.node.callspec.params["sms"]
    assert _plan(case).schedule.kind is case.schedule  # pyright: ignore[reportOptionalMemberAccess]
    sk.testing.check_kernel(case.on_target(), shapes=[case.shapes], dtypes=[case.dtype])
