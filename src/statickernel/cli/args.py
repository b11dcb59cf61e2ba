"""The command line's operands and constants: `--arg NAME=DTYPE[D0,...]` and `--const NAME=VALUE`
become ShapeDtypeStructs and constant overrides, and `FILE.py:KERNEL` becomes the kernel."""

import ast
import contextlib
import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .. import _dtypes as hw
from .._errors import StaticKernelError
from ..runtime.kernel import Kernel
from .discover import TargetError, load_target
from .parser import UsageError

__all__ = [
    "DTYPE_ALIASES",
    "OperandArg",
    "UsageError",
    "consts",
    "load_kernel",
    "operand_structs",
    "parse_const",
    "parse_operand",
    "point_at_declaration",
]

DTYPE_ALIASES = {
    "f32": "float32",
    "bf16": "bfloat16",
    "f16": "float16",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
}
_ARG_PATTERN = re.compile(
    r"^\s*(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<dtype>\w+)\s*\[(?P<dims>\s*(?:\d+\s*(?:,\s*\d+\s*)*)?)\]\s*$"
)
_CONST_PATTERN = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*=(?P<value>.+)$")
_NOT_A_LITERAL = object()


# --- parsing operands and constants -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OperandArg:
    """One `--arg NAME=DTYPE[D0,D1,...]`."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def struct(self) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(self.shape, jnp.dtype(self.dtype))


def parse_operand(text: str) -> OperandArg:
    match = _ARG_PATTERN.match(text)
    if match is None:
        raise UsageError(
            f"--arg {text!r} is not NAME=DTYPE[D0,D1,...]; for example --arg x=float32[1000,777], "
            "or --arg seed=uint32[] for a scalar"
        )
    dtype = DTYPE_ALIASES.get(match["dtype"], match["dtype"])
    try:
        dtype = jnp.dtype(dtype)
    except TypeError:
        dtype = None
    # numpy also parses codes of dtypes that hold no numbers (V8, U4, O, M8), which jax
    # cannot make arrays of.
    if dtype is None or not (jnp.issubdtype(dtype, jnp.number) or dtype == jnp.bool_):
        aliases = ", ".join(f"{short} ({name})" for short, name in DTYPE_ALIASES.items())
        raise UsageError(
            f"--arg {text!r}: {match['dtype']!r} is not a dtype an operand can have; a kernel "
            f"takes {', '.join(hw.SUPPORTED_DTYPES)}, also written {aliases}"
        )
    dtype = dtype.name
    # `DTYPE[]` is a scalar (0-d) operand, such as a seed.
    shape = tuple(int(n) for n in match["dims"].split(",")) if match["dims"].strip() else ()
    return OperandArg(match["name"], dtype, shape)


def parse_const(text: str) -> tuple[str, Any]:
    match = _CONST_PATTERN.match(text)
    # None is a value too, for an optional constant (`sm_scale: sk.Const[float | None]`).
    value: Any = _NOT_A_LITERAL
    with contextlib.suppress(ValueError, SyntaxError):
        value = ast.literal_eval(match["value"].strip()) if match else _NOT_A_LITERAL
    if match is None or value is _NOT_A_LITERAL:
        raise UsageError(
            f"--const {text!r} is not NAME=VALUE with a Python literal value; for example "
            "--const BM=128 or --const eps=1e-6"
        )
    return match["name"], value


def operand_structs(kernel: Kernel, texts: Sequence[str]) -> tuple[jax.ShapeDtypeStruct, ...]:
    """The `--arg`s as one ShapeDtypeStruct per operand, in the kernel's order."""
    spec = kernel.spec
    names = [o.name for o in spec.operands]
    given: dict[str, OperandArg] = {}
    for text in texts:
        arg = parse_operand(text)
        if arg.name not in names:
            raise UsageError(
                f"--arg {arg.name}: `{spec.name}` has no operand {arg.name!r}; its operands are "
                + ", ".join(names)
            )
        if arg.name in given:
            raise UsageError(f"--arg {arg.name} is given twice")
        given[arg.name] = arg
    missing = [o for o in spec.operands if o.name not in given]
    if missing:
        examples = " ".join(f"--arg {o.name}={o.dtypes[0]}[{','.join(o.dims)}]" for o in missing)
        raise UsageError(
            f"`{spec.name}` needs every operand: missing {', '.join(o.name for o in missing)} "
            f"(give e.g. {examples}, with sizes for the dims)"
        )
    return tuple(given[n].struct for n in names)


def consts(texts: Sequence[str]) -> dict[str, Any]:
    return dict(parse_const(t) for t in texts)


def load_kernel(text: str) -> tuple[str, Kernel]:
    try:
        return load_target(text)
    except TargetError as exc:
        raise UsageError(str(exc)) from None


def point_at_declaration(exc: StaticKernelError, kernel: Kernel) -> None:
    """A call from the command line has no line of the user's to show: the frame that called
    statickernel is the launcher. Unless the error names a line of the kernel's own file (its
    body), point at the declaration."""
    kernel_file = kernel.spec.location.rpartition(":")[0]
    if not (exc.where or "").startswith(f"{kernel_file}:"):
        exc.where = f"{kernel.spec.location} (the kernel; its operands came from --arg)"
        exc.args = (exc._render(),)  # the message is rendered once, when the error is made
