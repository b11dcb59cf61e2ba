"""`statickernel tune`: the candidates a kernel's constants declare with `sk.tune(...)`,
ranked at the shapes given, the best cached for later calls (`Kernel.tune`)."""

import argparse
import json
import sys

from .._errors import StaticKernelError
from ..tuning.result import constants_text
from .args import consts, load_kernel, operand_structs, point_at_declaration

__all__ = ["cmd_tune"]


def cmd_tune(args: argparse.Namespace) -> int:
    _, kernel = load_kernel(args.target)
    structs = operand_structs(kernel, args.arg)
    try:
        result = kernel.tune(
            *structs,
            by=args.by,
            reps=args.reps,
            force=args.force,
            target=args.gpu_target,
            **consts(args.const),
        )
    except StaticKernelError as exc:
        point_at_declaration(exc, kernel)
        raise
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(result)
        print(f"\ncalls of these shapes now take {constants_text(result.best)}", file=sys.stderr)
    return 0
