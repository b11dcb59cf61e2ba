"""`statickernel check`, `plan` and `emit`, and finding the kernels a command names."""

import argparse
import dataclasses
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from .. import testing
from .._errors import StaticKernelError
from ..runtime.specialization import Specialization
from . import compile as _compile_cli
from .args import UsageError, consts, load_kernel, operand_structs, point_at_declaration
from .discover import FoundKernel, ModuleResult, TargetError, discover
from .json_output import plan_to_json
from .output import Style, error_facts, error_text, indent, plural, print_json
from .parser import DEFAULT_TARGET, ColorChoice

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "cmd_check",
    "cmd_emit",
    "cmd_plan",
    "collect",
    "discover_paths",
    "import_failure_facts",
    "print_import_failure",
    "style_of",
]

EXIT_OK, EXIT_FAILED = 0, 1


def style_of(args: argparse.Namespace) -> Style:
    return Style.choose(ColorChoice(args.color))


def discover_paths(paths: Sequence[str]) -> list[ModuleResult]:
    try:
        return discover(paths)
    except TargetError as exc:
        raise UsageError(str(exc)) from None


def collect(items: Sequence[str]) -> tuple[list[FoundKernel], list[ModuleResult]]:
    """The kernels named by TARGETs or found under PATHs, and the modules that failed."""
    found: list[FoundKernel] = []
    failed: list[ModuleResult] = []
    for item in items:
        if ":" in item and not pathlib.Path(item).exists():
            name, kernel = load_kernel(item)
            found.append(FoundKernel(name.rpartition(":")[2], kernel))
            continue
        for module in discover_paths([item]):
            if module.error is not None:
                failed.append(module)
            found.extend(module.kernels)
    return found, failed


def _import_failure_kind(error: BaseException) -> str:
    return "declaration error" if isinstance(error, StaticKernelError) else "import failed"


def print_import_failure(module: ModuleResult, full: bool, style: Style) -> None:
    assert module.error is not None
    print(style.marks(f"✗ {module.source}: {_import_failure_kind(module.error)}"), flush=True)
    print(indent(error_text(module.error, full)), flush=True)


def import_failure_facts(module: ModuleResult) -> dict[str, Any]:
    assert module.error is not None
    return {
        "source": module.source,
        "kind": _import_failure_kind(module.error),
        "error": error_facts(module.error),
    }


# --- check ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KernelCheck:
    """One kernel's line in `statickernel check`."""

    found: FoundKernel
    passed: bool
    summary: str = ""  # what was checked, or what failed; "" when only declared
    error: BaseException | None = None  # what lowering or compiling raised

    def line(self, full: bool) -> str:
        head = f"{'✓' if self.passed else '✗'} {self.found.location}  {self.found.name}"
        if self.passed:
            return f"{head}  ({self.summary})" if self.summary else head
        text = f"{head}: {self.summary}"
        return text + ("\n" + indent(error_text(self.error, full)) if self.error else "")

    def facts(self) -> dict[str, Any]:
        return {
            "name": self.found.name,
            "kernel": self.found.kernel.spec.name,
            "location": self.found.location,
            "ok": self.passed,
            "summary": self.summary,
            "error": None if self.error is None else error_facts(self.error),
        }


def check_modules(items: Sequence[str]) -> list[ModuleResult]:
    """The modules under PATHs, and for a TARGET (path/to/file.py:NAME) its module with that
    kernel alone; a module that fails to import is kept, to be reported."""
    modules: list[ModuleResult] = []
    for item in items:
        if ":" not in item or pathlib.Path(item).exists():
            modules += discover_paths([item])
            continue
        source, _, name = item.rpartition(":")
        for module in discover_paths([source]):
            if module.error is None:
                kernels = tuple(k for k in module.kernels if k.name == name)
                if not kernels:
                    found = ", ".join(k.name for k in module.kernels) or "none"
                    raise UsageError(
                        f"{item}: {source} defines no kernel named {name!r} (its kernels: {found})"
                    )
                module = dataclasses.replace(module, kernels=kernels)
            modules.append(module)
    return modules


def cmd_check(args: argparse.Namespace) -> int:
    style = style_of(args)
    modules = check_modules(args.paths)
    compile_for = (args.gpu_target or DEFAULT_TARGET) if args.compile else None
    checks: list[KernelCheck] = []
    document: list[dict[str, Any]] = []
    for module in modules:
        if module.error is not None:
            if not args.json:
                print_import_failure(module, args.traceback, style)
            document.append({**import_failure_facts(module), "ok": False, "kernels": []})
            continue
        if not module.kernels and not args.json:
            print(f"- {module.source}: no kernels", flush=True)
        done = [_check_kernel(f, args.lower, compile_for, args.gpu_target) for f in module.kernels]
        for check in done if not args.json else ():
            print(style.marks(check.line(args.traceback)), flush=True)
        checks += done
        document.append(
            {
                "source": module.source,
                "ok": all(c.passed for c in done),
                "error": None,
                "kernels": [c.facts() for c in done],
            }
        )
    passed = sum(c.passed for c in checks)
    failed_imports = sum(m.error is not None for m in modules)
    failed = len(checks) - passed
    nothing = not checks and not failed_imports
    ok = not nothing and failed == 0 and failed_imports == 0
    if args.json:
        totals = {
            "modules": len(modules),
            "kernels": len(checks),
            "passed": passed,
            "failed": failed,
            "import_failures": failed_imports,
        }
        print_json({"command": "check", "ok": ok, "modules": document, "totals": totals})
        return EXIT_OK if ok else EXIT_FAILED
    if nothing:
        print(f"no kernels found under {', '.join(args.paths)}")
        return EXIT_FAILED
    kernel_count = f"{plural(len(checks), 'kernel')} in {plural(len(modules), 'module')}"
    print(style.marks(f"{passed} ✓, {failed} ✗ ({kernel_count})"))
    if failed_imports:
        print(style.marks(f"✗ {plural(failed_imports, 'module')} failed to import (shown above)"))
    return EXIT_OK if ok else EXIT_FAILED


def _check_kernel(
    found: FoundKernel, lower: bool, compile_for: str | None = None, target: str | None = None
) -> KernelCheck:
    """Declaring the kernel ran the import-time checks; compile it, lower it or plan it for
    the GPU `target` at its probe shapes if asked."""
    if compile_for is not None:
        try:
            passed, detail = _compile_cli.check_compiles(found.kernel, compile_for)
        except Exception as exc:  # reported against the kernel, then the next kernel runs
            return KernelCheck(found, False, "compiling failed", exc)
        # check_compiles words its result for the line: ": spills ..." or "  (compiled ...)".
        summary = detail.strip().removeprefix(": ").removeprefix("(").removesuffix(")")
        return KernelCheck(found, passed, summary)
    if not lower and target is None:
        return KernelCheck(found, True)
    cases = testing.probe_cases(found.kernel)
    kernel = found.kernel
    for case in cases:
        try:
            if lower:
                kernel.lower(*case.structs(), target=target)
            else:
                kernel.plan(*case.structs(), backend="mosaic_gpu", target=target)
        except Exception as exc:  # reported against the probe, then the next kernel runs
            step = "lowering" if lower else "planning"
            return KernelCheck(found, False, f"{step} failed at {case.describe()}", exc)
    shapes = len({c.shapes for c in cases})
    dtypes = ", ".join(dict.fromkeys(d for c in cases for d in c.dtypes))
    done = "lowered for Mosaic GPU" if lower else "planned for Mosaic GPU"
    done += f" ({target})" if target else ""
    return KernelCheck(found, True, f"{done} at {plural(shapes, 'probe shape')} in {dtypes}")


# --- plan and emit ----------------------------------------------------------------------------


def _specialize(args: argparse.Namespace) -> Specialization:
    _, kernel = load_kernel(args.target)
    structs = operand_structs(kernel, args.arg)
    overrides = consts(args.const)
    try:
        target = args.gpu_target  # the plan's and the module's: their products are the target's
        return kernel.specialize(*structs, backend=args.backend, target=target, **overrides)
    except StaticKernelError as exc:
        point_at_declaration(exc, kernel)
        raise


def cmd_plan(args: argparse.Namespace) -> int:
    plan = _specialize(args).plan
    if not args.json:
        print(plan, flush=True)  # before compiling, which may fail
    report = None
    if args.compile:
        _, kernel = load_kernel(args.target)
        structs = operand_structs(kernel, args.arg)
        try:
            report = _compile_cli.run_compile(kernel, structs, consts(args.const), args.gpu_target)
        except StaticKernelError as exc:
            point_at_declaration(exc, kernel)
            raise
    if args.json:
        document = {"command": "plan", "plan": plan_to_json(plan)}
        if report is not None:
            document["compile"] = report.to_json()
        print_json(document)
    elif report is not None:
        print(report)
    return EXIT_OK


def cmd_emit(args: argparse.Namespace) -> int:
    source = _specialize(args).source
    if args.output is None:
        sys.stdout.write(source)
        return EXIT_OK
    output = pathlib.Path(args.output)
    try:
        output.write_text(source, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"-o {args.output}: cannot write it ({exc.strerror})") from None
    print(f"wrote {output} ({plural(len(source.splitlines()), 'line')})", file=sys.stderr)
    return EXIT_OK
