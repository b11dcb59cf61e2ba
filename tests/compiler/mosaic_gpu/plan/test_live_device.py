"""Device-true SM counts: persistent launches are sized for the live GPU's SMs when the process
has a GPU of the planned architecture (an H100 PCIe has 114), and for the target's 132 on a
machine without one."""

import jax
import jax.numpy as jnp
import pytest

from matmul import matmul
from rmsnorm import rmsnorm
from statickernel._compiler.mosaic_gpu.plan import schedule

SQUARE = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)


@pytest.fixture
def h100_pcie(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule, "_live_sms", lambda: 114)


def test_without_a_gpu_the_target_counts() -> None:
    if schedule._live_sms() is not None:  # pyright: ignore[reportPrivateUsage]
        pytest.skip("this machine has a Hopper GPU")
    assert schedule.sm_count() == 132
    assert matmul.bind().plan(SQUARE, SQUARE, BM=128, BN=128).schedule.ctas == 132  # type: ignore[union-attr]


@pytest.mark.usefixtures("h100_pcie")
def test_a_live_gpus_sms_size_the_persistent_launches() -> None:
    assert schedule.sm_count() == 114
    plan = matmul.bind().plan(SQUARE, SQUARE, BM=128, BN=128)
    assert plan.schedule is not None and plan.schedule.ctas == 114
    assert plan.warp_specialized is not None and plan.warp_specialized.ctas == 114
    x = jax.ShapeDtypeStruct((16384, 4096), jnp.float32)
    w = jax.ShapeDtypeStruct((4096,), jnp.float32)
    rows = rmsnorm.bind().plan(x, w).schedule
    assert rows is not None and rows.ctas % 114 == 0 and rows.ctas <= 114 * rows.ctas_per_sm


@pytest.mark.usefixtures("h100_pcie")
def test_a_tests_own_count_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule, "SMS", 4)
    assert schedule.sm_count() == 4


class _FakeDevice:
    def __init__(self, capability: str) -> None:
        self.compute_capability = capability


@pytest.mark.parametrize(("capability", "name"), [("9.0", "sm_90a"), ("10.0", "sm_100a")])
def test_the_live_gpu_names_the_target_calls_plan_for(
    monkeypatch: pytest.MonkeyPatch, capability: str, name: str
) -> None:
    """A B200 plans tcgen05 products by itself; an H100 or H200 WGMMA's."""
    from statickernel import _targets

    probe = _targets.live_target.__wrapped__  # uncached
    monkeypatch.setattr(jax, "devices", lambda backend=None: [_FakeDevice("8.0")])
    assert probe() is None  # an A100: neither target
    monkeypatch.setattr(jax, "devices", lambda backend=None: [_FakeDevice(capability)])
    found = probe()
    assert found is not None and found.name == name
    monkeypatch.setattr(_targets, "live_target", lambda: found)
    assert _targets.resolve_target(None, "matmul", None).name == name
