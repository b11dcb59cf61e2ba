"""The command line's grammar: its commands, their options and help, and its usage error.

It imports neither jax nor the rest of statickernel, so that `statickernel --help`, a
command's `--help`, `--version` and a usage error answer at once; the commands import what
they need when they run.
"""

import argparse
import enum
import math
from typing import Any

from .._targets import TARGETS
from ..runtime.backend import BACKENDS

__all__ = ["DEFAULT_TARGET", "PROG", "TARGET_HELP", "ColorChoice", "UsageError", "build_parser"]

PROG = "statickernel"
# The default of kernel.compile (_compile.DEFAULT_TARGET), spelled here so that the parser
# does not import the compiler; a test keeps the two equal.
DEFAULT_TARGET = "sm_90a"
TARGET_HELP = (
    f"the GPU architecture to plan, generate and compile for: {' or '.join(TARGETS)} (default "
    f"{DEFAULT_TARGET}, H100 and H200; sm_100a, B200, multiplies with tcgen05)"
)


class UsageError(Exception):
    """The command line asks for something malformed or missing; exits with code 2."""


class ColorChoice(enum.StrEnum):
    """`--color`: whether ✓, ✗ and headings are coloured."""

    AUTO = "auto"  # on a terminal, unless NO_COLOR is set (or FORCE_COLOR forces it)
    ALWAYS = "always"
    NEVER = "never"


class _ShowVersion(argparse.Action):
    """`--version`, with the versions read only when it is asked for."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        del kwargs
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        del args
        print(_version())
        parser.exit()


def _seed(text: str) -> int:
    """`--seed`: an int >= 0, numpy's seeds (a negative one would fail every case)."""
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if seed < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed: give an int >= 0, e.g. 1")
    return seed


def _positive(text: str) -> int:
    """`--reps`: an int >= 1."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count: give an int >= 1, e.g. 20")
    return count


def _tolerance(text: str) -> float:
    """`--rtol` and `--atol`: a finite number >= 0. A NaN or infinite tolerance would pass any
    result, and a negative one fail every case."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a tolerance: give a finite number >= 0, e.g. 1e-3"
        )
    return value


def _gpu_target(text: str) -> str:
    """`--target`: one of the GPU architectures statickernel plans for."""
    if text not in TARGETS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a GPU architecture statickernel plans for: give "
            + " or ".join(f"{name} ({t.gpus})" for name, t in TARGETS.items())
        )
    return text


def _version() -> str:
    import importlib.metadata  # only for --version: it takes a while to import

    from .. import __version__

    try:
        jax_version = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        jax_version = "not installed"
    return f"{PROG} {__version__} (jax {jax_version})"


_EPILOG = """\
exit codes: 0 success, 1 a check or test failed (or statickernel refused the kernel),
2 a usage error. Run `statickernel COMMAND --help` for each command's options.

examples:
  statickernel check examples --lower
  statickernel plan examples/softmax.py:softmax --arg x=float32[1000,100]
  statickernel emit examples/softmax.py:softmax --arg x=float32[1000,100] -o softmax_pallas.py
  statickernel test examples
  statickernel compile examples/softmax.py:softmax --arg x=float32[1000,100]
  statickernel tune examples/matmul.py:matmul --arg a=bf16[4096,4096] --arg b=bf16[4096,4096]
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
_COLOR_HELP = (
    "colour ✓, ✗ and headings: auto (the default) on a terminal unless $NO_COLOR is set "
    "($FORCE_COLOR forces it), always, or never"
)
_JSON_HELP = "print one JSON document on standard output instead of text"


def _command(
    subparsers: Any,
    name: str,
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
    return parser


def _specialization_options(parser: argparse.ArgumentParser, backend: bool = True) -> None:
    parser.add_argument("target", metavar="TARGET", help=_TARGET_HELP)
    parser.add_argument(
        "--arg", action="append", default=[], metavar="NAME=DTYPE[D0,...]", help=_ARG_HELP
    )
    parser.add_argument(
        "--const", action="append", default=[], metavar="NAME=VALUE", help=_CONST_HELP
    )
    if backend:
        parser.add_argument("--backend", choices=BACKENDS, default=None, help=_BACKEND_HELP)


def _gpu_target_option(
    parser: argparse.ArgumentParser, default: str | None = DEFAULT_TARGET, text: str = TARGET_HELP
) -> None:
    parser.add_argument(
        "--target", dest="gpu_target", type=_gpu_target, default=default, metavar="ARCH", help=text
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Check, plan, emit and test statickernel kernels (Pallas Mosaic GPU).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_ShowVersion)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help=_TRACEBACK_HELP)
    common.add_argument(
        "--color",
        choices=[c.value for c in ColorChoice],
        default=ColorChoice.AUTO.value,
        help=_COLOR_HELP,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    check = _command(
        subparsers,
        "check",
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
        "are skipped), a module name, or one kernel (path/to/file.py:NAME), e.g. examples or "
        "examples/softmax.py:softmax",
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
    _gpu_target_option(
        check,
        None,
        f"the GPU architecture to check for, {' or '.join(TARGETS)}: --lower and --compile "
        "plan for it, and without them each kernel is planned for it at its probe shapes "
        f"(default: for --compile {DEFAULT_TARGET}, for --lower the attached GPU's, else "
        f"{DEFAULT_TARGET}), e.g. --target sm_100a",
    )
    check.add_argument("--json", action="store_true", help=_JSON_HELP)

    plan = _command(
        subparsers,
        "plan",
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
    _gpu_target_option(plan)
    plan.add_argument("--json", action="store_true", help=_JSON_HELP)

    emit = _command(
        subparsers,
        "emit",
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
    _gpu_target_option(emit)

    test = _command(
        subparsers,
        "test",
        "Run each kernel that declares a reference against it, on random data at generated "
        "probe shapes, and print a table of the errors.",
        "  statickernel test examples\n"
        "  statickernel test examples/softmax.py:softmax --dtype float16 --seed 1\n"
        "  statickernel test examples -k norm --json\n",
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
        "--seed",
        type=_seed,
        default=0,
        help="the random data's seed (default 0), e.g. --seed 1",
    )
    test.add_argument("--backend", choices=BACKENDS, default=None, help=_BACKEND_HELP)
    test.add_argument(
        "-k",
        dest="select",
        action="append",
        default=[],
        metavar="PATTERN",
        help="test only the kernels whose name contains PATTERN, or matches it as a glob "
        "(*, ?, [...]); case-insensitive and repeatable, e.g. -k softmax -k 'layer*'",
    )
    test.add_argument(
        "--rtol",
        type=_tolerance,
        default=None,
        help="the allowed error relative to |want|, replacing the tolerance derived from the "
        "dtypes: an element fails when |got - want| > atol + rtol * |want|; e.g. --rtol 1e-3",
    )
    test.add_argument(
        "--atol",
        type=_tolerance,
        default=None,
        help="the allowed abs error, replacing the derived one (with only one of --rtol and "
        "--atol, the other is 0); e.g. --atol 1e-4",
    )
    test.add_argument(
        "-x",
        "--exitfirst",
        action="store_true",
        help="stop after the first kernel with a failing case",
    )
    test.add_argument(
        "--junit-xml",
        metavar="FILE",
        default=None,
        help="also write a JUnit XML report, one testcase per case, e.g. --junit-xml report.xml",
    )
    test.add_argument("--json", action="store_true", help=_JSON_HELP)

    compile_ = _command(
        subparsers,
        "compile",
        "Compile one specialization for the GPU through ptxas, with or without a GPU, and "
        "print its registers, spills, shared memory, occupancy and SASS mix.",
        "  statickernel compile examples/softmax.py:softmax --arg x=float32[1000,100]\n"
        "  statickernel compile examples/matmul.py:matmul --arg a=bf16[4096,4096] "
        "--arg b=bf16[4096,4096] --json --dump build/matmul\n",
        common,
    )
    _specialization_options(compile_, backend=False)
    _gpu_target_option(compile_)
    compile_.add_argument(
        "--json", action="store_true", help="print the facts as one line of JSON instead"
    )
    compile_.add_argument(
        "--dump",
        metavar="DIR",
        default=None,
        help="also write the PTX, SASS, ptxas log and JSON facts into DIR, e.g. --dump build/k",
    )

    tune = _command(
        subparsers,
        "tune",
        "Try the candidates a kernel's constants declare with sk.tune(...) at one set of "
        "shapes, rank them (on the GPU, by a compile without one, or by the plan) and cache "
        "the best for later calls.",
        "  statickernel tune examples/matmul.py:matmul --arg a=bf16[4096,4096] "
        "--arg b=bf16[4096,4096]\n"
        "  statickernel tune examples/matmul.py:matmul --arg a=bf16[64,4096] "
        "--arg b=bf16[4096,4096] --by plan --json\n",
        common,
    )
    _specialization_options(tune, backend=False)
    tune.add_argument(
        "--by",
        choices=("device", "compile", "plan"),
        default=None,
        help="what ranks the candidates: device (timed on this machine's GPU), compile (ptxas "
        "without a GPU; needs statickernel[aot]) or plan (the plan's estimate); by default "
        "the first this machine can do, e.g. --by plan",
    )
    tune.add_argument(
        "--force",
        action="store_true",
        help="measure again even when a tuning of these shapes is cached",
    )
    tune.add_argument(
        "--reps", type=_positive, default=20, help="timed runs a candidate on a GPU (default 20)"
    )
    _gpu_target_option(
        tune,
        None,
        f"the GPU architecture to tune for, {' or '.join(TARGETS)}: a tuning applies to the "
        f"calls planned for it alone (default: the attached GPU's, else {DEFAULT_TARGET}), "
        "e.g. --target sm_100a",
    )
    tune.add_argument("--json", action="store_true", help=_JSON_HELP)
    return parser
