"""The schedule of a launch: how its CTAs keep HBM busy.

A memory-bound kernel reaches copy speed only with enough bytes of loads in flight on each SM
(Little's law: about 4.3 TB/s times about 1 us of latency, over 132 SMs, is tens of KiB per
SM). A CTA that copies its block in, computes and copies out has its loads in flight only
while it waits for them; co-resident CTAs overlap one another's waits, and a pipelined loop
keeps `stages` steps' loads in flight at once. The schedule states those figures, from the
plan's blocks; a compile (`kernel.compile`) folds the registers into the CTAs per SM.
"""

import dataclasses
import enum
import functools

from ...._targets import TARGETS, GpuTarget, OccupancyLimit, occupancy
from .. import hardware as hw

__all__ = [
    "PLANNED_FOR",
    "SMS",
    "WARPGROUP_THREADS",
    "Persistent",
    "Schedule",
    "ScheduleKind",
    "schedule_figures",
    "sm_count",
    "target_sm_count",
]

# The GPU the plan's figures are for: H100 and H200 (132 SMs).
_TARGET = "sm_90a"
PLANNED_FOR: GpuTarget = TARGETS[_TARGET]
_THREADS = WARPGROUP_THREADS = 128  # one warpgroup a CTA


class ScheduleKind(enum.StrEnum):
    """How each CTA spends its time."""

    ONE_BLOCK_PER_CTA = "one block per CTA"  # copy in, compute, copy out; CTAs overlap
    PIPELINED_LOOPS = "pipelined loops"  # each loop of the body a software pipeline
    # the body's loop cut into parts, a CTA a block and part, each part's loop pipelined
    SPLIT_LOOP = "pipelined loop split across CTAs"
    PERSISTENT = "persistent, pipelined"  # each CTA walks many blocks, `stages` in flight
    # a producer warpgroup copies, consumer warpgroups multiply; each CTA walks many tiles
    WARP_SPECIALIZED = "warp-specialized, persistent"
    # a TMA warp copies, an MMA warp issues tcgen05 into tensor memory, an epilogue
    # warpgroup stores one tile while the next accumulates; each CTA walks many tiles
    MMA_WARP = "warp-specialized (TMA warp, MMA warp, epilogue warpgroup), persistent"
    # a producer warpgroup copies the loop's blocks for two consumers of a block of rows each
    CONSUMER_PAIR = "warp-specialized loop, two consumers a CTA"


@dataclasses.dataclass(frozen=True)
class Persistent:
    """A persistent launch: `ctas` CTAs, each taking every `ctas`-th block in turn, with the
    loads of `stages` blocks in flight (one being computed on, the others arriving)."""

    ctas: int
    stages: int

    def trips(self, blocks: int, cta: int) -> int:
        """The blocks CTA `cta` takes: cta, cta + ctas, ... below `blocks`."""
        return hw.cdiv(blocks - cta, self.ctas)

    def check_invariants(self) -> None:
        assert self.ctas >= 1 and self.stages >= 2


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How a launch keeps loads in flight, on the H100/H200 figures (132 SMs)."""

    kind: ScheduleKind
    """What each CTA does: one block, or pipelined loops."""
    ctas: int
    """The CTAs launched: the product of the grid."""
    stages: int
    """Loads in flight per CTA, in steps: 1 for one block per CTA, a loop's stages."""
    ctas_per_sm: int
    """CTAs resident on one SM at once: what shared memory, threads and CTA slots allow (and
    registers, after a compile), and no more than the grid gives each SM."""
    limited_by: OccupancyLimit
    """What bounds `ctas_per_sm`: a resource, or the grid (`OccupancyLimit.GRID`)."""
    load_bytes_per_cta: int
    """The bytes of loads one CTA has in flight at once."""
    bytes_in_flight_per_sm: int
    """`ctas_per_sm` times `load_bytes_per_cta`: the bytes of loads each SM keeps in flight."""
    smem_bytes: int
    """One CTA's shared memory, as the plan counts it."""
    threads: int = _THREADS
    """Threads a CTA: one warpgroup, or a producer and consumers when warp-specialized."""

    @property
    def walks_blocks(self) -> bool:
        """Whether each CTA walks many blocks (persistent CTAs), not one block a CTA."""
        return self.kind in (
            ScheduleKind.PERSISTENT,
            ScheduleKind.WARP_SPECIALIZED,
            ScheduleKind.MMA_WARP,
        )

    @property
    def slots(self) -> int:
        """Shared-memory slots a staged block has: a persistent launch's stages, else one
        (a warp-specialized launch's pipeline holds its own)."""
        return self.stages if self.kind is ScheduleKind.PERSISTENT else 1

    @property
    def warpgroups(self) -> int:
        """Warpgroups a CTA: one, or a producer and its consumers."""
        return self.threads // _THREADS

    def with_registers(self, registers: int, smem_bytes: int | None = None) -> "Schedule":
        """This schedule with a compiled kernel's registers per thread counted in (and the
        shared memory the compile measured, when given)."""
        smem = self.smem_bytes if smem_bytes is None else smem_bytes
        return schedule_figures(
            self.kind,
            self.ctas,
            self.stages,
            self.load_bytes_per_cta,
            smem,
            registers,
            threads=self.threads,
        )

    def check_invariants(self) -> None:
        assert self.ctas >= 1 and self.stages >= 1 and self.ctas_per_sm >= 1
        assert self.bytes_in_flight_per_sm == self.ctas_per_sm * self.load_bytes_per_cta
        assert self.ctas_per_sm <= TARGETS[_TARGET].ctas_per_sm

    def __str__(self) -> str:
        stages = f", {self.stages} stages" if self.stages > 1 else ""
        return (
            f"{self.kind.value}, {self.ctas:,} CTA{'s' if self.ctas != 1 else ''}{stages}; "
            f"{self.ctas_per_sm} CTA{'s' if self.ctas_per_sm != 1 else ''}/SM "
            f"(limited by {self.limited_by.value}), {_kib(self.bytes_in_flight_per_sm)} of loads "
            f"in flight per SM"
        )


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB" if n % 1024 else f"{n // 1024:,} KiB"


def schedule_figures(
    kind: ScheduleKind,
    ctas: int,
    stages: int,
    load_bytes: int,
    smem_bytes: int,
    registers: int = 0,
    target: GpuTarget | None = None,
    threads: int = _THREADS,
) -> Schedule:
    target = target or TARGETS[_TARGET]
    occ = occupancy(target, registers, smem_bytes, threads)
    resident, limited_by = occ.ctas_per_sm, occ.limited_by
    sms = (_live_sms() or target.sms) if target is PLANNED_FOR else target.sms
    per_sm = hw.cdiv(ctas, sms)
    if per_sm < resident:
        resident, limited_by = per_sm, OccupancyLimit.GRID
    schedule = Schedule(
        kind=kind,
        ctas=ctas,
        stages=stages,
        ctas_per_sm=resident,
        limited_by=limited_by,
        load_bytes_per_cta=load_bytes,
        bytes_in_flight_per_sm=resident * load_bytes,
        smem_bytes=smem_bytes,
        threads=threads,
    )
    schedule.check_invariants()
    return schedule


# The SMs the plan's launches are sized for, when set (a module global, read at planning
# time, so that tests can run a persistent launch in the interpreter at a small size); by
# default the live GPU's count, or the target's.
SMS: int | None = None


def sm_count() -> int:
    """The SMs persistent launches are sized for: `SMS` when set; else the live GPU's SM count
    (`core_count`) when this process has a GPU of the planned architecture (an H100 PCIe has
    114, an H100 SXM or H200 132); else the target's 132."""
    if SMS is not None:
        return SMS
    return _live_sms() or PLANNED_FOR.sms


def target_sm_count(target: GpuTarget) -> int:
    """The SMs a persistent launch for `target` is sized for: `SMS` when set; for the planned
    architecture, `sm_count()`; else the target's count (a B200's 148)."""
    if SMS is not None:
        return SMS
    return sm_count() if target is PLANNED_FOR else target.sms


@functools.cache
def _live_sms() -> int | None:
    """The first CUDA device's SM count, if it is of the planned architecture; else None."""
    import jax

    try:
        device = jax.devices("cuda")[0]
    except (RuntimeError, IndexError):  # no CUDA backend, or no device
        return None
    capability = str(getattr(device, "compute_capability", ""))
    count = getattr(device, "core_count", None)
    if capability.split(".")[0] != str(PLANNED_FOR.compute_capability[0]):
        return None
    return count if isinstance(count, int) and count > 0 else None
