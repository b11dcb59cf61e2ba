"""The plan's first-order estimate of a specialization's time, which ranks candidates when
nothing better can measure them.

Two effects the roofline floor (`Cost.floor_seconds`) leaves out decide most block-size
choices, and both can be read from the plan's schedule:
- Latency hiding: by Little's law an SM needs about its share of the HBM bandwidth times the
  memory latency in flight (4.3 TB/s x ~1 us / 132 SMs, about 32 KiB) to stream at full rate;
  a schedule with less streams proportionally slower.
- Copies onto the chip: a block of an operand is copied into shared memory once for each
  grid block that reads it, so smaller blocks copy the operands along the other tiled dims
  more often (a matmul's a once per column block). The copies of all blocks pass from L2 to
  the SMs, at about 64 B per clock an SM (1.755 GHz): an assumed first-order figure, as the
  roofline's rates are.
- Waves: a launch of one block a CTA runs in waves of (SMs x CTAs per SM); the last wave's
  idle slots are lost. A launch whose CTAs walk the blocks loses the SMs it leaves without
  a CTA.
The estimate is the largest of the memory time over the latency-hiding fraction, the copies'
time and the compute time, over the wave efficiency. It is a model, not a measurement: a device run settles it.
"""

import math

from .._compiler.mosaic_gpu import hardware as hw
from .._compiler.mosaic_gpu.hardware import HBM_BYTES_PER_S
from .._compiler.mosaic_gpu.plan.plan import LaunchPlan
from .._compiler.mosaic_gpu.plan.schedule import Schedule
from .._targets import TARGETS

__all__ = [
    "HBM_LATENCY_S",
    "L2_TO_SM_BYTES_PER_S",
    "bytes_in_flight_needed",
    "copied_bytes",
    "estimated_seconds",
    "wave_efficiency",
]

HBM_LATENCY_S = 1e-6
"""The first-order memory latency of the Little's-law figure (about 1 us on an H100/H200)."""


L2_TO_SM_BYTES_PER_S = 64 * 1.755e9
"""One SM's first-order rate of copies from L2 into its shared memory."""


def copied_bytes(plan: LaunchPlan) -> int:
    """The bytes every grid block copies into shared memory, over the whole call: each loaded
    operand's array once per pass, times the blocks of the tiled dims it does not have (in a
    warp-specialized launch, a CTA's consumers share such a copy)."""
    tiled = {d.name: d for d in plan.dims if d.tiled_by is not None and not d.batched}
    blocks = {name: math.ceil(d.size / d.block) for name, d in tiled.items()}
    shared = None if plan.schedule_variant is None else plan.schedule_variant.shared_copies()
    if shared is not None and shared.dim in blocks:
        blocks[shared.dim] = math.ceil(blocks[shared.dim] / shared.consumers)
    total = 0
    for op in plan.operands:
        if not op.loaded:
            continue
        passes = max(1, sum(op.name in loop.operands for loop in plan.loops))
        reads = math.prod(n for name, n in blocks.items() if name not in op.dims)
        total += passes * reads * hw.nbytes(math.prod(op.gmem_shape), op.dtype)
    return total


def bytes_in_flight_needed(sms: int) -> float:
    """The bytes of loads one SM keeps in flight to stream at its share of HBM bandwidth."""
    return HBM_BYTES_PER_S * HBM_LATENCY_S / sms


def wave_efficiency(schedule: Schedule, sms: int) -> float:
    """The fraction of the machine's CTA slots the launch keeps busy, over its waves."""
    slots = sms * schedule.ctas_per_sm
    if schedule.walks_blocks:
        return min(1.0, schedule.ctas / slots)
    waves = math.ceil(schedule.ctas / slots)
    return schedule.ctas / (waves * slots)


def estimated_seconds(
    plan: LaunchPlan, schedule: Schedule | None = None, target: str = "sm_90a"
) -> float:
    """The plan's estimate of the call's time on `target`, from `schedule` (the plan's own, or
    one with a compile's registers counted in)."""
    schedule = schedule or plan.schedule
    cost = plan.cost
    assert schedule is not None and cost is not None
    sms = TARGETS[target].sms
    hiding = min(1.0, schedule.bytes_in_flight_per_sm / bytes_in_flight_needed(sms))
    memory = cost.memory_seconds / max(hiding, 1e-9)
    copies = copied_bytes(plan) / (L2_TO_SM_BYTES_PER_S * sms)
    return max(memory, copies, cost.compute_seconds) / wave_efficiency(schedule, sms)
