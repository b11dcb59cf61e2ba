"""Compiles a specialization for a GPU all the way through ptxas, with or without the GPU.

On a machine without one, XLA's deviceless ahead-of-time compilation does it: the CUDA PJRT
plugin builds a topology from a GPU description (shipped in `statickernel/targets/`) instead
of a live device, and compiling for that topology runs Mosaic GPU's whole pipeline, LLVM's
NVPTX backend and ptxas, exactly as on the device. Mosaic GPU's dump switch writes the PTX,
the ptxas log and the SASS of each kernel, which `aot.report` reads.
"""

import dataclasses
import functools
import importlib.resources
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import jax

from .._compat import cuda_plugin_installed
from .._compiler.mosaic_gpu.plan.plan import LaunchPlan
from .._errors import CompileError, ToolchainError
from .._targets import DEFAULT_TARGET, find_target
from ..runtime.backend import has_cuda
from .report import (
    KEY_SASS,
    TARGETS,
    CompileReport,
    GpuTarget,
    occupancy,
    parse_ptxas,
    parse_smem_scratch,
    parse_threads,
    sass_counts,
)

__all__ = [
    "DEFAULT_TARGET",
    "compile_kernel",
    "compile_specialization",
    "find_target",
    "toolchain",
]

# The aot extra, installed from a checkout until statickernel is published on PyPI.
INSTALL_HINT = "pip install '.[aot]' in a statickernel checkout"
# Mosaic GPU reads the dump folder from the environment when it compiles a module: compiles
# that change the environment must not overlap.
_COMPILE_LOCK = threading.Lock()
_REPORTS: dict[tuple[Any, str], CompileReport] = {}
_architectures: list[str] = []  # the one this process compiles for, once it has compiled
# Packages whose bin/ holds the pinned ptxas (and nvdisasm), most preferred first.
_TOOL_PACKAGES = ("nvidia.cu13", "nvidia.cuda_nvcc")


class Toolchain:
    """Where ptxas and nvdisasm are, and ptxas' version."""

    def __init__(self, bin_dir: pathlib.Path | None, ptxas: pathlib.Path) -> None:
        self.bin_dir = bin_dir
        self.ptxas = ptxas
        self.has_nvdisasm = (ptxas.parent / "nvdisasm").exists()

    @functools.cached_property
    def ptxas_version(self) -> str:
        try:
            out = subprocess.run(
                [str(self.ptxas), "--version"], capture_output=True, text=True, timeout=30
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return "unknown"
        lines = [line for line in out.splitlines() if "release" in line]
        return lines[-1].split("release", 1)[1].strip(" ,") if lines else "unknown"


def _package_bin(package: str) -> pathlib.Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (pathlib.Path(root) / "bin" / "ptxas").exists():
            return pathlib.Path(root) / "bin"
    return None


@functools.cache
def toolchain() -> Toolchain:
    """The compile toolchain of this environment, or a ToolchainError saying what to install."""
    if not cuda_plugin_installed():
        raise ToolchainError(
            "compiling for a GPU needs the CUDA PJRT plugin, which this environment lacks",
            expected="jax-cuda13-plugin and jax-cuda13-pjrt, of the installed jax's version",
            actual="no jax_plugins.xla_cuda13 (or xla_cuda12) in this environment",
            fix=f"{INSTALL_HINT} (or `make gpu-compile`, which sets up .venv-aot)",
        )
    for package in _TOOL_PACKAGES:
        if (bin_dir := _package_bin(package)) is not None:
            return Toolchain(bin_dir, bin_dir / "ptxas")
    on_path = shutil.which("ptxas")
    if on_path is None:
        raise ToolchainError(
            "compiling for a GPU needs ptxas, and none was found",
            expected="the nvidia-cuda-nvcc package, or a ptxas on PATH",
            actual="no ptxas",
            fix=INSTALL_HINT,
        )
    return Toolchain(None, pathlib.Path(on_path))


@functools.cache
def _deviceless_device(target_name: str) -> Any:
    from jax.experimental import topologies

    target = TARGETS[target_name]
    description = (
        importlib.resources.files("statickernel")
        .joinpath("targets", target.description_file)
        .read_text()
    )
    try:
        topology = topologies.get_topology_desc(
            "", platform="cuda", target_config=description, topology="1x1x1"
        )
    except Exception as exc:  # the plugin's own failure, turned into what to do about it
        raise ToolchainError(
            "the CUDA plugin is installed but not registered with jax, so it cannot compile "
            "without a GPU",
            expected="jax started with the CUDA plugin registered",
            actual=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            fix="set JAX_PLATFORMS=cpu (or JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1) in the environment "
            "before jax starts; on a machine without a CUDA driver the plugin's version check "
            "drops it otherwise",
        ) from None
    return topology.devices[0]


def _device(target: GpuTarget) -> tuple[Any, str]:
    """The device to compile for: this machine's GPU when it is of the target's architecture,
    otherwise the target's description (deviceless)."""
    if has_cuda():
        device = jax.devices("cuda")[0]
        capability = str(getattr(device, "compute_capability", ""))
        if capability.split(".")[0] == str(target.compute_capability[0]):
            return device, device.device_kind
    return _deviceless_device(target.name), "deviceless"


@contextmanager
def _compile_environment(dump: pathlib.Path, tools: Toolchain) -> Iterator[None]:
    """Mosaic GPU's dump folder set, and the pinned ptxas first on PATH (Mosaic GPU takes the
    first ptxas on PATH, and a machine may have another)."""
    saved = {k: os.environ.get(k) for k in ("MOSAIC_GPU_DUMP_TO", "PATH")}
    os.environ["MOSAIC_GPU_DUMP_TO"] = str(dump)
    if tools.bin_dir is not None:
        os.environ["PATH"] = os.pathsep.join([str(tools.bin_dir), saved["PATH"] or ""])
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def _stderr_copied_to(sink: list[str]) -> Iterator[None]:
    """Mosaic GPU and ptxas report a failure's cause on the process' stderr (file descriptor 2),
    not in the exception: keep a copy of what they write, and pass it on unchanged."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
            sink.append(text)
            sys.stderr.write(text)
            sys.stderr.flush()


def _diagnostics(stderr: str) -> list[str]:
    """The compiler's error lines, without the plugin's own log lines."""
    lines = [line.strip() for line in stderr.splitlines()]
    return [line for line in lines if "error" in line and not line.startswith(("I0", "W0"))]


def _read(folder: pathlib.Path, suffix: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob(f"*{suffix}")))


def compile_kernel(
    kernel: Any, args: Sequence[Any], overrides: dict[str, Any], target: str, where: str | None
) -> CompileReport:
    """Compiles `kernel`'s mosaic_gpu specialization for `args` (arrays or ShapeDtypeStructs)."""
    chosen = find_target(target, kernel.spec.name, where)  # before the specialization
    bound = getattr(kernel, "target", None)
    if bound is not None and bound != chosen.name:
        raise CompileError(
            f"the kernel is bound to generate code for {bound} (kernel.with_target), and "
            f"code for one target's tensor cores is never compiled for another's",
            kernel=kernel.spec.name,
            where=where,
            expected=f"target={bound!r}, the kernel's",
            actual=repr(chosen.name),
            fix=f"compile it with target={bound!r}, or compile kernel.with_target("
            f"{chosen.name!r}) (or the kernel before with_target) for {chosen.name}",
        )
    entry = kernel.specialize(*args, backend="mosaic_gpu", target=target, **overrides)
    return compile_specialization(entry.plan, entry.fn, args, target, where)


def compile_specialization(
    plan: LaunchPlan, fn: Any, args: Sequence[Any], target_name: str, where: str | None
) -> CompileReport:
    """Compiles the jitted function `fn` of a mosaic_gpu specialization, planned as `plan`, for
    `args` (arrays or ShapeDtypeStructs). Reports are kept per specialization and target."""
    target = find_target(target_name, plan.kernel, where)  # before the cache, which hashes it
    if plan.target != target.name:
        # Code generated for one architecture's tensor cores is never lowered for another:
        # jax 0.12 aborts the process on tcgen05 code lowered for sm_90a.
        planned = find_target(plan.target, plan.kernel, where)
        raise CompileError(
            f"this specialization was generated for {planned.name} ({planned.gpus}), its "
            f"products by {planned.tensor_cores.value}, and cannot be compiled for {target.name}",
            kernel=plan.kernel,
            where=where,
            expected=f"target={planned.name!r}, the plan's",
            actual=repr(target.name),
            fix=f"specialize for {target.name} (kernel.compile(..., target={target.name!r}) "
            "does), or compile for the plan's target",
        )
    key = (fn, target_name)
    with _COMPILE_LOCK:
        cached = _REPORTS.get(key)
    if cached is not None:
        return cached
    report = _compile(fn, args, plan.kernel, target_name, plan.smem_bytes, where)
    if plan.schedule is not None and report.target == "sm_90a":  # the schedule's figures
        schedule = plan.schedule.with_registers(report.registers, report.smem_bytes)
        report = dataclasses.replace(report, schedule=schedule)
    with _COMPILE_LOCK:
        _REPORTS[key] = report
    return report


def _compile(
    fn: Any,
    args: Sequence[Any],
    kernel: str,
    target_name: str,
    smem_estimate: int,
    where: str | None,
) -> CompileReport:
    target = find_target(target_name, kernel, where)
    try:
        tools = toolchain()
    except ToolchainError as exc:  # the same facts, about this kernel and this call
        raise ToolchainError(
            exc.what,
            kernel=kernel,
            where=where,
            expected=exc.expected,
            actual=exc.actual,
            fix=exc.fix,
        ) from None
    if _architectures and target.name not in _architectures:
        # Measured with jax 0.11.2: after a compile for sm_90a, ptxas is run for sm_100a PTX
        # without its architecture and refuses it ("SM version specified by .target is higher
        # than default SM version assumed"); each architecture compiles in a fresh process.
        raise CompileError(
            f"this process has compiled for {_architectures[0]}, and the CUDA plugin compiles "
            "for one GPU architecture per process",
            kernel=kernel,
            where=where,
            expected=f"target={_architectures[0]!r} in this process",
            actual=repr(target.name),
            fix=f"compile for {target.name} in another process, e.g. statickernel compile "
            f"FILE.py:KERNEL --arg ... --target {target.name}",
        )
    device, compiled_on = _device(target)
    sharding = jax.sharding.SingleDeviceSharding(device)
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in args]
    with _COMPILE_LOCK, tempfile.TemporaryDirectory(prefix="statickernel-compile-") as tmp:
        dump = pathlib.Path(tmp)
        stderr: list[str] = []
        try:
            with _compile_environment(dump, tools), _stderr_copied_to(stderr):
                fn.trace(*shapes).lower().compile()
        except Exception as exc:  # Mosaic GPU's and ptxas' own errors, kept in the message
            text = str(exc)
            missing = "No PTX compilation provider" in text
            cls = ToolchainError if missing else CompileError
            causes = _diagnostics("".join(stderr))[-4:] + text.strip().splitlines()[-3:]
            raise cls(
                f"compiling for {target.name} failed (ptxas {tools.ptxas_version})",
                kernel=kernel,
                where=where,
                expected="a kernel that Mosaic GPU and ptxas compile",
                actual="\n            ".join(causes),
                fix=INSTALL_HINT
                if missing
                else "read the compiler's message above; cross-lowering (kernel.lower) shows "
                "the same failure with its MLIR when it comes from Mosaic GPU",
            ) from None
        if target.name not in _architectures:
            _architectures.append(target.name)
        ptxas_log = _read(dump, ".ptxas")
        if not ptxas_log:
            raise CompileError(
                "the compile produced no ptxas report: jax may have reused a compiled module",
                kernel=kernel,
                where=where,
                expected="a .ptxas file in Mosaic GPU's dump folder",
                actual=f"files: {sorted(p.name for p in dump.iterdir())}",
                fix="compile in a fresh process",
            )
        ptx = _read(dump, ".ptx")
        sass = _read(dump, ".sass_ctrl") or _read(dump, ".sass")
        scratch = parse_smem_scratch(_read(dump, ".resources.txt"))
    facts = parse_ptxas(ptxas_log)
    threads = parse_threads(ptx) or 128
    smem = (scratch if scratch is not None else smem_estimate) + facts.static_smem_bytes
    counts = sass_counts(sass)
    report = CompileReport(
        kernel=kernel,
        target=target.name,
        gpu=target.gpus,
        compiled_on=compiled_on,
        shapes=tuple(
            f"{jax.numpy.dtype(a.dtype).name}[{','.join(map(str, a.shape))}]" for a in args
        ),
        registers=facts.registers,
        spill_store_bytes=facts.spill_store_bytes,
        spill_load_bytes=facts.spill_load_bytes,
        smem_bytes=smem,
        threads=threads,
        occupancy=occupancy(target, facts.registers, smem, threads),
        sass_mix=tuple((op, counts.get(op, 0)) for op in KEY_SASS),
        ptxas_version=tools.ptxas_version,
        ptx=ptx,
        sass=sass,
        ptxas_log=ptxas_log,
    )
    report.check_invariants()
    return report
