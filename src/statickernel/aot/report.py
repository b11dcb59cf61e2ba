"""What a compile for a GPU says about a kernel: registers, spills, occupancy and the SASS mix.

Everything here reads the compiler's own outputs (the `ptxas -v` log, the PTX, the SASS and
Mosaic GPU's resource summary) and needs no GPU and no toolchain, so it is tested on saved text.
"""

import dataclasses
import re
from collections import Counter
from typing import Any

from typing_extensions import override

from .._compiler.mosaic_gpu.plan.schedule import Schedule
from .._display import TextDisplay
from .._targets import TARGETS, GpuTarget, Occupancy, OccupancyLimit, occupancy

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
    "HGMMA",  # 16-bit and tf32 operands
    "QGMMA",  # fp8 operands
    "IGMMA",  # int8 operands
    "UTCHMMA",  # tcgen05 (sm_100a), 16-bit operands
    "UTCQMMA",  # tcgen05 (sm_100a), fp8 operands
    "LDTM",  # tensor memory to registers (sm_100a)
    "STTM",  # registers to tensor memory (sm_100a)
    "UTMALDG",
    "UTMALDG.MULTICAST",  # of them, the copies multicast to a cluster's CTAs
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
_SASS_LINE = re.compile(
    r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)"
)
# Modifiers counted as an opcode of their own too: `UTMALDG.4D.MULTICAST` is counted as
# `UTMALDG` and as `UTMALDG.MULTICAST`.
_COUNTED_MODIFIERS = ("MULTICAST",)


def sass_counts(sass: str) -> dict[str, int]:
    """How often each opcode (without its modifiers) appears in a SASS listing; and each
    opcode with one of the modifiers counted on their own (`UTMALDG.MULTICAST`)."""
    counts: Counter[str] = Counter()
    for m in _SASS_LINE.finditer(sass):
        counts[m.group(1)] += 1
        modifiers = m.group(2).split(".")
        counts.update(f"{m.group(1)}.{mod}" for mod in _COUNTED_MODIFIERS if mod in modifiers)
    return dict(counts)


@dataclasses.dataclass(frozen=True)
class CompileReport(TextDisplay):
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
    schedule: Schedule | None = None
    """The plan's schedule with these registers counted in its CTAs per SM."""

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
            "bytes_in_flight_per_sm": self.schedule.bytes_in_flight_per_sm
            if self.schedule
            else None,
        }

    @override  # TextDisplay shows what this returns
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
        if self.schedule is not None:
            lines.insert(-2, f"  schedule:       {self.schedule}")
        return "\n".join(lines)
