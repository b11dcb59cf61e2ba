"""What a compile for a GPU says about a kernel: registers, spills, occupancy and the SASS mix.

Everything here reads the compiler's own outputs (the `ptxas -v` log, the PTX, the SASS and
Mosaic GPU's resource summary) and needs no GPU and no toolchain, so it is tested on saved text.
"""

import dataclasses
import enum
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

__all__ = [
    "KEY_SASS",
    "TARGETS",
    "CompileReport",
    "GpuTarget",
    "Occupancy",
    "OccupancyLimit",
    "PtxasFacts",
    "occupancy",
    "parse_ptxas",
    "parse_smem_scratch",
    "parse_threads",
    "sass_counts",
]


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


@dataclasses.dataclass(frozen=True)
class PtxasFacts:
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    static_smem_bytes: int


def parse_ptxas(log: str) -> PtxasFacts:
    """The facts of a `ptxas -v` log. With several entry functions, the largest of each."""
    registers = [int(n) for n in re.findall(r"Used (\d+) registers", log)]
    if not registers:
        raise ValueError("the ptxas log has no 'Used N registers' line")
    spills = re.findall(
        r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log
    )
    smem = [int(n) for n in re.findall(r"registers,.*?(\d+) bytes smem", log)]
    return PtxasFacts(
        registers=max(registers),
        spill_store_bytes=max((int(s[1]) for s in spills), default=0),
        spill_load_bytes=max((int(s[2]) for s in spills), default=0),
        stack_bytes=max((int(s[0]) for s in spills), default=0),
        static_smem_bytes=max(smem, default=0),
    )


def parse_smem_scratch(resources: str) -> int | None:
    """The dynamic shared memory Mosaic GPU requests for a kernel, from its resource summary."""
    found = re.search(r"smem_scratch_bytes=(\d+)", resources)
    return int(found.group(1)) if found else None


def parse_threads(ptx: str) -> int | None:
    """Threads per CTA, from the PTX entry's `.maxntid` or `.reqntid`."""
    found = re.search(r"\.(?:maxntid|reqntid)\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?", ptx)
    if not found:
        return None
    x, y, z = (int(g) if g else 1 for g in found.groups())
    return x * y * z


# The instructions that show a kernel's structure: tensor-core products, TMA and bulk copies,
# shared-memory traffic (and its matrix forms), global loads and stores, register reallocation.
KEY_SASS = (
    "HGMMA",
    "UTMALDG",
    "UTMASTG",
    "UBLKCP",
    "LDS",
    "STS",
    "LDSM",
    "STSM",
    "LDG",
    "STG",
    "USETMAXREG",
    "BAR",
    "SYNCS",
)
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def sass_counts(sass: str) -> dict[str, int]:
    """How often each opcode (without its modifiers) appears in a SASS listing."""
    return dict(Counter(m.group(1) for m in _SASS_LINE.finditer(sass)))


@dataclasses.dataclass(frozen=True)
class CompileReport:
    """One specialization compiled for a GPU: what the compiler said about it.

    `sass_mix` holds the count of every opcode of `KEY_SASS`; `sass` is empty when no
    disassembler was found (the other facts do not need one)."""

    kernel: str
    target: str
    gpu: str
    compiled_on: str  # "deviceless" or the device's name
    shapes: tuple[str, ...]  # the operands, as "float32[1000,100]"
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    smem_bytes: int
    threads: int
    occupancy: Occupancy
    sass_mix: tuple[tuple[str, int], ...]
    ptxas_version: str
    ptx: str = dataclasses.field(repr=False)
    sass: str = dataclasses.field(repr=False)
    ptxas_log: str = dataclasses.field(repr=False)

    @property
    def spill_bytes(self) -> int:
        """Bytes spilled to local memory by stores: 0 for a kernel that fits in registers."""
        return self.spill_store_bytes

    @property
    def warpgroups(self) -> int:
        return -(-self.threads // 128)

    @property
    def ctas_per_sm(self) -> int:
        return self.occupancy.ctas_per_sm

    def check_invariants(self) -> None:
        assert self.registers > 0 and self.threads > 0
        assert self.spill_store_bytes >= 0 and self.spill_load_bytes >= 0
        assert self.occupancy.ctas_per_sm >= 0
        assert self.target in TARGETS

    def to_json(self) -> dict[str, Any]:
        """The facts as plain JSON values (no PTX or SASS text)."""
        return {
            "kernel": self.kernel,
            "target": self.target,
            "compiled_on": self.compiled_on,
            "shape": list(self.shapes),
            "registers": self.registers,
            "spill_bytes": self.spill_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "smem_bytes": self.smem_bytes,
            "threads": self.threads,
            "warpgroups": self.warpgroups,
            "ctas_per_sm": self.ctas_per_sm,
            "limited_by": self.occupancy.limited_by.value,
            "sass": dict(self.sass_mix),
            "ptxas_version": self.ptxas_version,
        }

    def __str__(self) -> str:
        mix = ", ".join(f"{op} {n}" for op, n in self.sass_mix if n) or (
            "(no SASS: no disassembler found)" if not self.sass else "none of the key opcodes"
        )
        spill = (
            "none"
            if not (self.spill_store_bytes or self.spill_load_bytes)
            else f"{self.spill_store_bytes} B stored, {self.spill_load_bytes} B loaded"
        )
        lines = [
            f"CompileReport for `{self.kernel}` on {self.target} ({self.gpu}), {self.compiled_on}",
            f"  operands:       {', '.join(self.shapes)}",
            f"  registers:      {self.registers} per thread",
            f"  spills:         {spill}",
            f"  shared memory:  {self.smem_bytes:,} B per CTA",
            f"  threads:        {self.threads} per CTA ({self.warpgroups} warpgroup"
            f"{'s' if self.warpgroups != 1 else ''})",
            f"  occupancy:      {self.occupancy}",
            f"  SASS:           {mix}",
            f"  ptxas:          {self.ptxas_version}",
        ]
        return "\n".join(lines)
