"""The `statickernel` command line: check, plan, emit, test and compile kernels from the shell.

    statickernel check examples --lower
    statickernel plan examples/softmax.py:softmax --arg x=float32[1000,100]
    statickernel emit examples/softmax.py:softmax --arg x=float32[1000,100] -o softmax_pallas.py
    statickernel test examples
    statickernel compile examples/softmax.py:softmax --arg x=float32[1000,100]

Exit codes: 0 when everything passed, 1 when a check or test failed (or statickernel refused a
kernel or its operands), 2 for a usage error. A statickernel error prints as its message; pass
`--traceback` for the full traceback.
"""

import argparse
import os
import pathlib
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from . import _compile_cli, testing
from ._backend import BACKENDS, default_backend
from ._cli_args import (
    DTYPE_ALIASES,
    UsageError,
    consts,
    load_kernel,
    operand_structs,
    point_at_declaration,
)
from ._discover import FoundKernel, ModuleResult, TargetError, discover
from ._errors import StaticKernelError
from ._kernel import Specialization

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PROG = "statickernel"
# Non-statickernel errors (from jax, say) can be pages long; show their head only.
_MAX_ERROR_LINES = 20
# --- output helpers ---------------------------------------------------------------------------


def _error_text(exc: BaseException, full: bool) -> str:
    """A statickernel error's own message; otherwise the exception, shortened unless `full`."""
    if full:
        return "".join(traceback.format_exception(exc)).rstrip()
    if isinstance(exc, StaticKernelError):
        return str(exc)
    lines = f"{type(exc).__name__}: {exc}".rstrip().splitlines()
    if len(lines) > _MAX_ERROR_LINES:
        hidden = len(lines) - _MAX_ERROR_LINES
        lines = [*lines[:_MAX_ERROR_LINES], f"... ({hidden} more lines; see --traceback)"]
    return "\n".join(lines)


def _indent(text: str, prefix: str = "    ") -> str:
    return prefix + text.replace("\n", "\n" + prefix)


def _print_import_failure(source: str, error: BaseException, full: bool) -> None:
    what = "declaration error" if isinstance(error, StaticKernelError) else "import failed"
    print(f"✗ {source}: {what}", flush=True)
    print(_indent(_error_text(error, full)), flush=True)


def _progress(text: str) -> None:
    print(text, end="", file=sys.stderr, flush=True)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


# --- commands ---------------------------------------------------------------------------------


def _discover(paths: Sequence[str]) -> list[ModuleResult]:
    try:
        return discover(paths)
    except TargetError as exc:
        raise UsageError(str(exc)) from None


def cmd_check(args: argparse.Namespace) -> int:
    modules = _discover(args.paths)
    ok = failed = kernels = 0
    for module in modules:
        if module.error is not None:
            failed += 1
            _print_import_failure(module.source, module.error, args.traceback)
            continue
        if not module.kernels:
            print(f"- {module.source}: no kernels", flush=True)
        for found in module.kernels:
            kernels += 1
            passed, detail = _check_kernel(
                found, args.lower, args.traceback, args.gpu_target if args.compile else None
            )
            ok += passed
            failed += not passed
            print(f"{'✓' if passed else '✗'} {found.location}  {found.name}{detail}", flush=True)
    if not kernels and not failed:
        print(f"no kernels found under {', '.join(args.paths)}")
        return EXIT_FAILED
    kernel_count = f"{_plural(kernels, 'kernel')} in {_plural(len(modules), 'module')}"
    print(f"{ok} ✓, {failed} ✗ ({kernel_count})")
    return EXIT_OK if failed == 0 else EXIT_FAILED


def _check_kernel(
    found: FoundKernel, lower: bool, full: bool, compile_for: str | None = None
) -> tuple[bool, str]:
    """(passed, text after the kernel's name). Declaring it ran the import-time checks."""
    if compile_for is not None:
        try:
            return _compile_cli.check_compiles(found.kernel, compile_for)
        except Exception as exc:  # reported against the kernel, then the next kernel runs
            return False, ": compiling failed\n" + _indent(_error_text(exc, full))
    if not lower:
        return True, ""
    cases = testing.probe_cases(found.kernel)
    for case in cases:
        try:
            found.kernel.lower(*case.structs())
        except Exception as exc:  # reported against the probe, then the next kernel runs
            return False, f": lowering failed at {case.describe()}\n" + _indent(
                _error_text(exc, full)
            )
    shapes = len({c.shapes for c in cases})
    dtypes = ", ".join(dict.fromkeys(d for c in cases for d in c.dtypes))
    return True, f"  (lowered for Mosaic GPU at {_plural(shapes, 'probe shape')} in {dtypes})"


def _specialize(args: argparse.Namespace) -> Specialization:
    _, kernel = load_kernel(args.target)
    structs = operand_structs(kernel, args.arg)
    overrides = consts(args.const)
    try:
        return kernel.specialize(*structs, backend=args.backend, **overrides)
    except StaticKernelError as exc:
        point_at_declaration(exc, kernel)
        raise


def cmd_plan(args: argparse.Namespace) -> int:
    print(_specialize(args).plan)
    if args.compile:
        _, kernel = load_kernel(args.target)
        structs = operand_structs(kernel, args.arg)
        try:
            report = _compile_cli.run_compile(kernel, structs, consts(args.const), args.gpu_target)
        except StaticKernelError as exc:
            point_at_declaration(exc, kernel)
            raise
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
    print(f"wrote {output} ({_plural(len(source.splitlines()), 'line')})", file=sys.stderr)
    return EXIT_OK


def cmd_test(args: argparse.Namespace) -> int:
    found, failed_imports = _collect(args.targets)
    for module in failed_imports:
        assert module.error is not None
        _print_import_failure(module.source, module.error, args.traceback)
    runs = _runs(found, _dtype_names(args.dtype))
    backend = args.backend or default_backend()
    results: list[testing.CheckResult] = []
    start = time.perf_counter()
    for index, (f, dtypes) in enumerate(runs, 1):
        results += _test_kernel(f, dtypes, f"[{index}/{len(runs)}]", args.seed, backend)
    if results:
        print(testing.format_results(results))
    bad = sum(not r.passed for r in results)
    print(
        f"{len(results) - bad} ✓, {bad} ✗ ({_plural(len(results), 'case')} of "
        f"{_plural(len(runs), 'kernel')}, {time.perf_counter() - start:.1f} s)"
        + (f"; {_plural(len(failed_imports), 'module')} failed to import" if failed_imports else "")
    )
    if not runs and not failed_imports:
        print("nothing to test: no kernel with a reference was found")
        return EXIT_FAILED
    return EXIT_OK if bad == 0 and not failed_imports else EXIT_FAILED


def _collect(items: Sequence[str]) -> tuple[list[FoundKernel], list[ModuleResult]]:
    """The kernels named by TARGETs or found under PATHs, and the modules that failed."""
    found: list[FoundKernel] = []
    failed: list[ModuleResult] = []
    for item in items:
        if ":" in item and not pathlib.Path(item).exists():
            name, kernel = load_kernel(item)
            found.append(FoundKernel(name.rpartition(":")[2], kernel))
            continue
        for module in _discover([item]):
            if module.error is not None:
                failed.append(module)
            found.extend(module.kernels)
    return found, failed


def _dtype_names(texts: Sequence[str]) -> list[str]:
    names = []
    for text in texts:
        try:
            names.append(jnp.dtype(DTYPE_ALIASES.get(text, text)).name)
        except TypeError:
            raise UsageError(
                f"--dtype {text!r} is not a dtype; use e.g. float32, bfloat16 or float16"
            ) from None
    return names


def _runs(
    found: Sequence[FoundKernel], dtypes: Sequence[str]
) -> list[tuple[FoundKernel, list[str] | None]]:
    """Each kernel to test with the --dtype values it allows (None: the default dtypes);
    kernels with no reference, or allowing none of the --dtype values, are skipped."""
    runs: list[tuple[FoundKernel, list[str] | None]] = []
    for f in found:
        if f.kernel.reference is None:
            print(f"- {f.location}  {f.name}: no reference declared, skipped", flush=True)
            continue
        allowed = {d for o in f.kernel.spec.operands for d in o.dtypes}
        wanted = [d for d in dtypes if d in allowed]
        if dtypes and not wanted:
            print(
                f"- {f.location}  {f.name}: allows none of {', '.join(dtypes)}, skipped", flush=True
            )
            continue
        runs.append((f, wanted or None))
    if dtypes and not runs and any(f.kernel.reference is not None for f in found):
        raise UsageError(f"--dtype: no kernel found allows {', '.join(dtypes)}")
    return runs


def _test_kernel(
    found: FoundKernel, dtypes: list[str] | None, counter: str, seed: int, backend: str
) -> list[testing.CheckResult]:
    cases = len(testing.probe_cases(found.kernel, dtypes=dtypes))
    _progress(f"{counter} {found.name} ({found.location}): {_plural(cases, 'case')} ")
    start = time.perf_counter()

    def report(result: testing.CheckResult) -> None:
        _progress("." if result.passed else "F")

    results = testing.run_checks(
        found.kernel, dtypes=dtypes, backend=backend, seed=seed, on_result=report
    )
    _progress(f" {time.perf_counter() - start:.1f} s\n")
    return results


# --- the parser -------------------------------------------------------------------------------

_EPILOG = """\
exit codes: 0 success, 1 a check or test failed (or statickernel refused the kernel),
2 a usage error. Run `statickernel COMMAND --help` for each command's options.

examples:
  statickernel check examples --lower
  statickernel plan examples/softmax.py:softmax --arg x=float32[1000,100]
  statickernel emit examples/softmax.py:softmax --arg x=float32[1000,100] -o softmax_pallas.py
  statickernel test examples
  statickernel compile examples/softmax.py:softmax --arg x=float32[1000,100]
"""

_TARGET_HELP = (
    "the kernel: path/to/file.py:NAME or package.module:NAME, e.g. examples/softmax.py:softmax"
)
_ARG_HELP = (
    "an operand's dtype and shape, NAME=DTYPE[D0,D1,...]; repeat it for every operand, "
    "e.g. --arg x=float32[1000,777] --arg w=bfloat16[777]"
)
_CONST_HELP = "override a constant for this specialization, e.g. --const BM=128 --const eps=1e-6"
_BACKEND_HELP = (
    f"{' or '.join(BACKENDS)}; by default the kernel's, else mosaic_gpu on a machine with a "
    "CUDA GPU and interpret elsewhere (or $STATICKERNEL_BACKEND), e.g. --backend interpret"
)
_TRACEBACK_HELP = "print the full traceback of an error instead of its message alone"


def _command(
    subparsers: Any,
    name: str,
    run: Callable[[argparse.Namespace], int],
    summary: str,
    examples: str,
    common: argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        name,
        help=summary,
        description=summary,
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.set_defaults(run=run)
    return parser


def _specialization_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="TARGET", help=_TARGET_HELP)
    parser.add_argument(
        "--arg", action="append", default=[], metavar="NAME=DTYPE[D0,...]", help=_ARG_HELP
    )
    parser.add_argument(
        "--const", action="append", default=[], metavar="NAME=VALUE", help=_CONST_HELP
    )
    parser.add_argument("--backend", choices=BACKENDS, default=None, help=_BACKEND_HELP)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Check, plan, emit and test statickernel kernels (Pallas Mosaic GPU).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"{PROG} {__version__} (jax {jax.__version__})"
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help=_TRACEBACK_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    check = _command(
        subparsers,
        "check",
        cmd_check,
        "Import every module under the paths and list each kernel with ✓, or ✗ and its "
        "declaration error at your line.",
        "  statickernel check examples\n"
        "  statickernel check examples/softmax.py mypkg.kernels --lower\n",
        common,
    )
    check.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a Python file, a folder (searched recursively; files named _*.py or test_*.py "
        "are skipped) or a module name, e.g. examples",
    )
    check.add_argument(
        "--lower",
        action="store_true",
        help="also cross-lower each kernel for Mosaic GPU (CUDA) at probe shapes generated "
        "from its tiling: aligned, ragged on each dim, smaller than one block; e.g. "
        "statickernel check examples --lower",
    )
    check.add_argument(
        "--compile",
        action="store_true",
        help="also compile each kernel for the GPU through ptxas at its probe shapes (no GPU "
        "needed; needs statickernel[aot]) and fail on a compile error or a register spill",
    )
    check.add_argument(
        "--target",
        dest="gpu_target",
        default="sm_90a",
        metavar="ARCH",
        help=_compile_cli.TARGET_HELP,
    )

    plan = _command(
        subparsers,
        "plan",
        cmd_plan,
        "Print the launch plan of one specialization: grid, blocks, per-dim edge handling, "
        "shared memory and fallbacks.",
        "  statickernel plan examples/softmax.py:softmax --arg x=float32[1000,100]\n"
        "  statickernel plan examples.add:add --arg x=bf16[300,1000] --arg y=bf16[300,1000] "
        "--const BN=256\n",
        common,
    )
    _specialization_options(plan)
    plan.add_argument(
        "--compile",
        action="store_true",
        help="also compile it for the GPU through ptxas (no GPU needed; needs "
        "statickernel[aot]) and print its registers, spills, occupancy and SASS mix",
    )
    plan.add_argument(
        "--target",
        dest="gpu_target",
        default="sm_90a",
        metavar="ARCH",
        help=_compile_cli.TARGET_HELP,
    )

    emit = _command(
        subparsers,
        "emit",
        cmd_emit,
        "Print or write the standalone Pallas module of one specialization; it imports only "
        "jax and numpy.",
        "  statickernel emit examples/softmax.py:softmax --arg x=float32[1000,100]\n"
        "  statickernel emit examples/softmax.py:softmax --arg x=float32[1000,100] "
        "--backend mosaic_gpu -o softmax_pallas.py\n",
        common,
    )
    _specialization_options(emit)
    emit.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        default=None,
        help="write the module to FILE instead of standard output, e.g. -o softmax_pallas.py",
    )

    test = _command(
        subparsers,
        "test",
        cmd_test,
        "Run each kernel that declares a reference against it, on random data at generated "
        "probe shapes, and print a table of the errors.",
        "  statickernel test examples\n"
        "  statickernel test examples/softmax.py:softmax --dtype float16 --seed 1\n",
        common,
    )
    test.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET|PATH",
        help="a kernel (path/to/file.py:NAME or package.module:NAME), a Python file, a folder "
        "or a module name, e.g. examples or examples/softmax.py:softmax",
    )
    test.add_argument(
        "--dtype",
        action="append",
        default=[],
        metavar="DTYPE",
        help="check in this dtype instead of float32 and bfloat16; repeatable, e.g. "
        "--dtype float16",
    )
    test.add_argument(
        "--seed", type=int, default=0, help="the random data's seed (default 0), e.g. --seed 1"
    )
    test.add_argument("--backend", choices=BACKENDS, default=None, help=_BACKEND_HELP)

    compile_ = _command(
        subparsers,
        "compile",
        _compile_cli.cmd_compile,
        "Compile one specialization for the GPU through ptxas, with or without a GPU, and "
        "print its registers, spills, shared memory, occupancy and SASS mix.",
        "  statickernel compile examples/softmax.py:softmax --arg x=float32[1000,100]\n"
        "  statickernel compile examples/matmul.py:matmul --arg a=bf16[4096,4096] "
        "--arg b=bf16[4096,4096] --json --dump build/matmul\n",
        common,
    )
    compile_.add_argument("target", metavar="TARGET", help=_TARGET_HELP)
    compile_.add_argument(
        "--arg", action="append", default=[], metavar="NAME=DTYPE[D0,...]", help=_ARG_HELP
    )
    compile_.add_argument(
        "--const", action="append", default=[], metavar="NAME=VALUE", help=_CONST_HELP
    )
    _compile_cli.add_options(compile_)
    return parser


def _robust_output() -> None:
    # A terminal or pipe that cannot encode ✓ and ✗ gets a replacement, not a crash.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line and returns its exit code."""
    _robust_output()
    parser = build_parser()
    args = parser.parse_args(argv)
    where = f"{PROG} {args.command}"
    if args.command == "compile" or getattr(args, "compile", False):
        _compile_cli.prepare_environment()
    try:
        return args.run(args)
    except UsageError as exc:
        print(f"{where}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StaticKernelError as exc:
        print(f"{where}: {_error_text(exc, args.traceback)}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, and keep the interpreter's final
        # flush from failing on the same pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"{where}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # e.g. the user's module raising on import
        print(f"{where}: {_error_text(exc, args.traceback)}", file=sys.stderr)
        if not args.traceback:
            print("(run with --traceback for the full traceback)", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
