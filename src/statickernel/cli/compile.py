"""The command line's compile steps: `statickernel compile` and `statickernel check --compile`.

Both compile kernels for a GPU through ptxas, on a machine with or without one (see
`aot.compile`), and report registers, spills, shared memory, occupancy and the SASS mix.
"""

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from .. import testing
from .._errors import StaticKernelError
from ..aot.compile import compile_kernel
from ..aot.report import CompileReport
from .args import consts, load_kernel, operand_structs, point_at_declaration

__all__ = [
    "check_compiles",
    "cmd_compile",
    "run_compile",
    "write_dump",
]


def cmd_compile(args: argparse.Namespace) -> int:
    _, kernel = load_kernel(args.target)
    structs = operand_structs(kernel, args.arg)
    try:
        report = run_compile(kernel, structs, consts(args.const), args.gpu_target)
    except StaticKernelError as exc:
        point_at_declaration(exc, kernel)
        raise
    if args.dump:
        for path in write_dump(report, args.dump):
            print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(report.to_json()) if args.json else report)
    return 0


def run_compile(
    kernel: Any, structs: Sequence[Any], consts: dict[str, Any], target: str
) -> CompileReport:
    return compile_kernel(kernel, structs, consts, target, kernel.spec.location)


def write_dump(report: CompileReport, folder: str) -> list[pathlib.Path]:
    """Writes the PTX, SASS, ptxas log and JSON facts of `report` into `folder`."""
    out = pathlib.Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{report.kernel}.{report.target}"
    files = {
        f"{stem}.ptx": report.ptx,
        f"{stem}.sass": report.sass,
        f"{stem}.ptxas": report.ptxas_log,
        f"{stem}.json": json.dumps(report.to_json(), indent=2) + "\n",
    }
    written = []
    for name, text in files.items():
        if text:
            (out / name).write_text(text, encoding="utf-8")
            written.append(out / name)
    return written


def check_compiles(kernel: Any, target: str) -> tuple[bool, str]:
    """Compiles `kernel` at each probe shape, in its first dtype configuration; fails on a
    compile error or on any spill. Returns (passed, the text after the kernel's name)."""
    cases = testing.probe_cases(kernel)
    first = cases[0].dtypes if cases else ()
    worst: CompileReport | None = None
    chosen = [c for c in cases if c.dtypes == first]
    for case in chosen:
        report = run_compile(kernel, case.structs(), {}, target)
        if report.spill_store_bytes or report.spill_load_bytes:
            return False, (
                f": spills at {case.describe()}: {report.spill_store_bytes} B stored, "
                f"{report.spill_load_bytes} B loaded ({report.registers} registers)"
            )
        if worst is None or report.registers > worst.registers:
            worst = report
    if worst is None:
        return True, "  (no probe shapes)"
    return True, (
        f"  (compiled for {target} at {len(chosen)} probe shapes: up to {worst.registers} "
        f"registers, no spills, {worst.ctas_per_sm} CTA/SM)"
    )
