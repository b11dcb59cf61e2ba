"""The `statickernel` command line: check, plan, emit, test and compile kernels from the shell.

    statickernel check examples --lower
    statickernel plan examples/softmax.py:softmax --arg x=float32[1000,100]
    statickernel emit examples/softmax.py:softmax --arg x=float32[1000,100] -o softmax_pallas.py
    statickernel test examples
    statickernel compile examples/softmax.py:softmax --arg x=float32[1000,100]
    statickernel tune examples/matmul.py:matmul --arg a=bf16[4096,4096] --arg b=bf16[4096,4096]

Exit codes: 0 when everything passed, 1 when a check or test failed (or statickernel refused a
kernel or its operands), 2 for a usage error. A statickernel error prints as its message; pass
`--traceback` for the full traceback.

This module parses the command line before it imports jax or the commands (`cli.parser`
imports neither), so `--help`, `--version` and usage errors answer without that cost.
"""

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from .._errors import StaticKernelError
from .output import error_text
from .parser import PROG, UsageError, build_parser

__all__ = ["PROG", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

# Each command's function, as (module, name): imported only when the command runs.
_COMMANDS = {
    "check": (".commands", "cmd_check"),
    "plan": (".commands", "cmd_plan"),
    "emit": (".commands", "cmd_emit"),
    "test": (".run_tests", "cmd_test"),
    "compile": (".compile", "cmd_compile"),
    "tune": (".tune", "cmd_tune"),
}


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    module, function = _COMMANDS[name]
    return getattr(importlib.import_module(module, __package__), function)


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
    if args.command in ("compile", "tune") or getattr(args, "compile", False):
        # Before jax starts: lets the CUDA plugin register on a machine with no CUDA driver.
        os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    try:
        return _command(args.command)(args)
    except UsageError as exc:
        print(f"{where}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StaticKernelError as exc:
        print(f"{where}: {error_text(exc, args.traceback)}", file=sys.stderr)
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
        print(f"{where}: {error_text(exc, args.traceback)}", file=sys.stderr)
        if not args.traceback:
            print("(run with --traceback for the full traceback)", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
