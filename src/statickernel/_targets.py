"""The GPUs kernels are compiled for, and how many CTAs of a kernel one of their SMs holds.

Both the plan's schedule (from shared memory alone) and a compile's report (with the
registers ptxas gives) count occupancy here, one way.
"""

import dataclasses
import enum
import functools
import re
from collections.abc import Mapping

__all__ = [
    "DEFAULT_TARGET",
    "MOSAIC_GPU_LIMITS",
    "TARGETS",
    "BackendKind",
    "GpuTarget",
    "Occupancy",
    "OccupancyLimit",
    "TargetLimits",
    "TensorCores",
    "check_runs_here",
    "find_target",
    "live_target",
    "occupancy",
    "resolve_target",
]

# The target a plan is made for when nothing names one and no GPU is attached.
DEFAULT_TARGET = "sm_90a"


class BackendKind(enum.Enum):
    """The back-end a target's kernels are compiled by: a package of `_compiler/`."""

    MOSAIC_GPU = "mosaic_gpu"


class TensorCores(enum.Enum):
    """The instruction a target's tensor cores multiply with, and where it accumulates."""

    WGMMA = "WGMMA"  # Hopper: a warpgroup's MMA, the accumulator in registers
    TCGEN05 = "tcgen05"  # Blackwell: one thread issues the MMA, the accumulator in tensor memory

    @property
    def accumulates_in(self) -> str:
        return "registers" if self is TensorCores.WGMMA else "tensor memory"


@dataclasses.dataclass(frozen=True)
class TargetLimits:
    """The bounds a target's back-end sets on a call and a body that the front checks, at
    binding and in the trace: the front reads them here, never in a back-end's module."""

    compiler: str  # the back-end's compiler, as messages name it
    index_bits: int  # the width of the signed ints it computes positions and offsets in
    copy_bytes_quantum: int  # a copy of a page moves a whole number of this many bytes
    copy_extent_max: int  # the most elements one block copy reaches along a dim

    @property
    def index_type(self) -> str:
        """The signed int type of positions, e.g. "int32"."""
        return f"int{self.index_bits}"

    @property
    def index_max(self) -> int:
        """The largest position the back-end's index math addresses."""
        return 2 ** (self.index_bits - 1) - 1

    @property
    def index_math(self) -> str:
        """The index math that bounds a dim, for messages."""
        return f"{self.compiler}'s {self.index_type} index math"


# Mosaic GPU computes positions, block offsets and TMA coordinates in int32; it splits a copy's
# bytes over the 128 threads of the warpgroup that issues it; a TMA box holds at most 256
# elements along each dim. `mosaic_gpu/hardware.py` reads its numbers here.
MOSAIC_GPU_LIMITS = TargetLimits(
    compiler="Mosaic GPU", index_bits=32, copy_bytes_quantum=128, copy_extent_max=256
)


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
    tensor_cores: TensorCores = TensorCores.WGMMA
    limits: TargetLimits = MOSAIC_GPU_LIMITS

    @property
    def backend(self) -> BackendKind:
        """The back-end that compiles for this target."""
        return BackendKind.MOSAIC_GPU

    @property
    def has_wgmma(self) -> bool:
        return self.tensor_cores is TensorCores.WGMMA

    def check_invariants(self) -> None:
        assert re.fullmatch(r"sm_\d+a?", self.name), self.name
        assert self.description_file.endswith(".txtpb")
        assert self.smem_per_cta <= self.smem_per_sm
        assert self.registers_per_thread * 32 <= self.registers_per_sm


TARGETS: Mapping[str, GpuTarget] = {
    t.name: t
    for t in (
        GpuTarget(
            "sm_90a",
            "NVIDIA H100 and H200 (Hopper)",
            "sm_90a.txtpb",
            (9, 0),
            132,
            tensor_cores=TensorCores.WGMMA,
        ),
        GpuTarget(
            "sm_100a",
            "NVIDIA B200 (Blackwell)",
            "sm_100a.txtpb",
            (10, 0),
            148,
            tensor_cores=TensorCores.TCGEN05,
        ),
    )
}


def find_target(name: object, kernel: str, where: str | None) -> GpuTarget:
    """The target called `name`, or a CompileTargetError naming the known ones."""
    from ._errors import CompileTargetError

    target = TARGETS.get(name) if isinstance(name, str) else None
    if target is None:
        named = isinstance(name, str)
        what = (
            f"unknown GPU target {name!r}"
            if named
            else (f"the GPU target is a {type(name).__name__}, not the name of one GPU target")
        )
        raise CompileTargetError(
            what,
            kernel=kernel,
            where=where,
            expected=" or ".join(repr(t) for t in TARGETS),
            actual=repr(name)[:120],
            fix=f"use target={DEFAULT_TARGET!r} for H100 and H200, 'sm_100a' for B200"
            + ("" if named else "; compile once per target to compile for several"),
        )
    target.check_invariants()
    return target


def resolve_target(name: object, kernel: str, where: str | None) -> GpuTarget:
    """The target a call plans for: the one named, else this process' GPU's, else Hopper."""
    if name is None:
        return live_target() or TARGETS[DEFAULT_TARGET]
    return find_target(name, kernel, where)


def check_runs_here(target: GpuTarget, kernel: str, where: str | None) -> None:
    """Raises BackendError where this process' GPU is of another target than the code a call
    would launch: code generated for one architecture's tensor cores never runs on another's
    (jax 0.12 aborts the process compiling tcgen05 code for sm_90a)."""
    from ._errors import BackendError

    live = live_target()
    if live is None or live.name == target.name:
        return
    raise BackendError(
        f"the call would launch code generated for {target.name} ({target.gpus}) on this "
        f"process' GPU, a {live.name} ({live.gpus})",
        kernel=kernel,
        where=where,
        expected=f"target={live.name!r}, this GPU's (the default)",
        actual=repr(target.name),
        fix=f"call the kernel without target= (or with_target({live.name!r})) here; plan, "
        f"emit, lower or compile for {target.name} need no such GPU",
    )


@functools.cache
def live_target() -> GpuTarget | None:
    """The target of this process' first CUDA device, by its compute capability's major
    version (9: Hopper, 10: Blackwell); None without a CUDA device or for another GPU."""
    import jax

    try:
        device = jax.devices("cuda")[0]
    except (RuntimeError, IndexError):  # no CUDA backend, or no device
        return None
    major = str(getattr(device, "compute_capability", "")).split(".")[0]
    return next((t for t in TARGETS.values() if str(t.compute_capability[0]) == major), None)


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
