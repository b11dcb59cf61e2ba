"""The GPUs kernels are compiled for, and how many CTAs of a kernel one of their SMs holds.

Both the plan's schedule (from shared memory alone) and a compile's report (with the
registers ptxas gives) count occupancy here, one way.
"""

import dataclasses
import enum
import re
from collections.abc import Mapping

__all__ = ["TARGETS", "GpuTarget", "Occupancy", "OccupancyLimit", "occupancy"]


@dataclasses.dataclass(frozen=True)
class GpuTarget:
    """A GPU that kernels are compiled for, by its architecture name, and the limits of one SM."""

    name: str  # the architecture, e.g. "sm_90a"
    gpus: str  # the devices it names, for messages
    description_file: str  # the GpuTargetConfigProto text shipped in statickernel/targets/
    compute_capability: tuple[int, int]
    sms: int
    registers_per_sm: int = 65536
    registers_per_thread: int = 255
    # Registers are given to each warp in units of this many (8 per thread).
    register_unit: int = 256
    threads_per_sm: int = 2048
    ctas_per_sm: int = 32
    smem_per_sm: int = 233472
    smem_per_cta: int = 232448
    # The driver keeps 1 KiB of each CTA's shared memory for itself.
    smem_reserved_per_cta: int = 1024
    has_wgmma: bool = False

    def check_invariants(self) -> None:
        assert re.fullmatch(r"sm_\d+a?", self.name), self.name
        assert self.description_file.endswith(".txtpb")
        assert self.smem_per_cta <= self.smem_per_sm
        assert self.registers_per_thread * 32 <= self.registers_per_sm


TARGETS: Mapping[str, GpuTarget] = {
    t.name: t
    for t in (
        GpuTarget(
            "sm_90a", "NVIDIA H100 and H200 (Hopper)", "sm_90a.txtpb", (9, 0), 132, has_wgmma=True
        ),
        GpuTarget("sm_100a", "NVIDIA B200 (Blackwell)", "sm_100a.txtpb", (10, 0), 148),
    )
}


class OccupancyLimit(enum.Enum):
    """What bounds the number of CTAs one SM holds at once."""

    REGISTERS = "registers"
    SHARED_MEMORY = "shared memory"
    THREADS = "threads"
    CTA_SLOTS = "CTA slots"
    GRID = "the grid"  # fewer CTAs than the SMs could hold


@dataclasses.dataclass(frozen=True)
class Occupancy:
    ctas_per_sm: int
    limited_by: OccupancyLimit
    by_registers: int
    by_shared_memory: int
    by_threads: int

    def __str__(self) -> str:
        return (
            f"{self.ctas_per_sm} CTA{'s' if self.ctas_per_sm != 1 else ''}/SM, limited by "
            f"{self.limited_by.value} (registers allow {self.by_registers}, shared memory "
            f"{self.by_shared_memory}, threads {self.by_threads})"
        )


def occupancy(target: GpuTarget, registers: int, smem_bytes: int, threads: int) -> Occupancy:
    """How many CTAs of `threads` threads, `registers` per thread and `smem_bytes` of shared
    memory fit on one SM at once, and which resource runs out first."""
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // target.register_unit) * target.register_unit
    by_registers = (target.registers_per_sm // per_warp) // warps
    per_cta = smem_bytes + target.smem_reserved_per_cta
    by_smem = target.smem_per_sm // per_cta
    by_threads = target.threads_per_sm // (warps * 32)
    limits = {
        OccupancyLimit.REGISTERS: by_registers,
        OccupancyLimit.SHARED_MEMORY: by_smem,
        OccupancyLimit.THREADS: by_threads,
        OccupancyLimit.CTA_SLOTS: target.ctas_per_sm,
    }
    limited_by = min(limits, key=lambda k: limits[k])  # the first of equals, in this order
    return Occupancy(limits[limited_by], limited_by, by_registers, by_smem, by_threads)
