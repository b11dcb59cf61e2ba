"""A declaration's compile-time constants: the `sk.Const` marker, a constant's spec, and the
checks of its declared default and of a value a call overrides it with."""

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar, cast

import numpy as np

from ..._compat import public_type_name
from ..._errors import ConstantError, StaticKernelError

__all__ = [
    "Const",
    "ConstSpec",
    "Tune",
    "check_const_value",
    "check_stage_count",
    "const_spec",
    "tune",
    "type_name",
]

T = TypeVar("T")


class _ConstMarker:
    """Marks a keyword parameter as a compile-time constant."""

    def __repr__(self) -> str:
        return "sk.Const"


CONST = _ConstMarker()
# `BM: sk.Const[int] = 64` reads as a plain int to type checkers.
Const = Annotated[T, CONST]

CONST_TYPES: tuple[type, ...] = (int, float, bool)


@dataclasses.dataclass(frozen=True)
class Tune:
    """A constant's default that lists the values `kernel.tune` tries: the first is the value
    a call takes until a tuned one is cached."""

    values: tuple[Any, ...]

    def __repr__(self) -> str:
        return f"sk.tune({', '.join(map(repr, self.values))})"


def tune(default: T, /, *alternatives: T) -> T:
    """Declares a constant's candidates for `kernel.tune`: `BM: sk.Const[int] = sk.tune(128,
    64, 256)`. The first value is the default, which calls take until a tuned value is
    cached; type checkers read the declaration as a plain `int`."""
    return cast(T, Tune((default, *alternatives)))


@dataclasses.dataclass(frozen=True)
class ConstSpec:
    name: str
    type: type
    default: Any
    optional: bool = False
    """Declared `sk.Const[T | None]`: None is a value too (a scale that defaults to a formula)."""
    candidates: tuple[Any, ...] = ()
    """The values `kernel.tune` tries (`sk.tune(...)`, the default first); empty when the
    constant is not tuned."""

    @property
    def is_int(self) -> bool:
        """An int constant that is never None: what a block size or a stage count needs."""
        return self.type is int and not self.optional

    @property
    def counts_stages(self) -> bool:
        """An int constant, or an optional one whose None lets the plan fit the stages to
        shared memory: what a stage count takes."""
        return self.type is int


def const_spec(param: inspect.Parameter, hint: Any, err: dict[str, Any]) -> ConstSpec:
    """A keyword-only parameter as a constant: its type, read from `sk.Const[...]`, and its
    checked default."""
    base = None
    if typing.get_origin(hint) is Annotated:
        args = typing.get_args(hint)
        if any(isinstance(a, _ConstMarker) for a in args[1:]):
            base = args[0]
    # `sk.Const[float | None]`: a constant that may also be None.
    members = (
        typing.get_args(base) if typing.get_origin(base) in (typing.Union, types.UnionType) else ()
    )
    optional = len(members) == 2 and type(None) in members
    if optional:
        base = next(m for m in members if m is not type(None))
    if base not in CONST_TYPES:
        raise ConstantError(
            f"constant `{param.name}` is not annotated as an int, float or bool constant",
            **err,
            constant=param.name,
            expected="sk.Const[int], sk.Const[float] or sk.Const[bool]",
            actual=type_name(hint),
            fix=f"annotate it `{param.name}: sk.Const[int] = ...`",
        )
    assert isinstance(base, type)
    if param.default is param.empty:
        raise ConstantError(
            f"constant `{param.name}` has no default value",
            **err,
            constant=param.name,
            fix=f"give it a default, e.g. `{param.name}: sk.Const[{base.__name__}] = 64`",
        )
    if isinstance(param.default, Tune):
        candidates = _tune_values(param.name, base, param.default, err, optional)
        return ConstSpec(param.name, base, candidates[0], optional, candidates)
    default = check_const_value(
        param.name, base, param.default, err, ConstantError, optional=optional
    )
    return ConstSpec(param.name, base, default, optional)


def _tune_values(
    name: str, base: type, declared: Tune, err: dict[str, Any], optional: bool
) -> tuple[Any, ...]:
    """`sk.tune(...)`'s values, each checked as a default is; a value listed twice is refused,
    since it would be compiled and measured twice."""
    values = tuple(
        check_const_value(name, base, v, err, ConstantError, optional=optional)
        for v in declared.values
    )
    seen: list[Any] = []
    for value in values:
        if any(type(value) is type(s) and value == s for s in seen):
            raise ConstantError(
                f"constant `{name}` lists {value!r} twice in sk.tune(...)",
                **err,
                constant=name,
                expected="distinct values, the default first",
                actual=repr(declared),
                fix=f"list each value once, e.g. `{name}: sk.Const[{base.__name__}] = "
                f"sk.tune({', '.join(map(repr, dict.fromkeys(values)))})`",
            )
        seen.append(value)
    return values


def check_const_value(
    name: str,
    base: type,
    value: Any,
    err: Mapping[str, Any],
    error: type[StaticKernelError],
    example: Any = 64,
    *,
    optional: bool = False,
) -> Any:
    """Checks a constant's default or override value against its declared type, and returns it
    as a Python value: a numpy scalar such as np.int64(64) becomes the int, float or bool. An
    optional constant may also be None."""
    if optional and value is None:
        return None
    shown = f"{value!r} ({type(value).__name__})"
    if isinstance(value, np.bool_ | np.integer | np.floating):
        value = value.item()
    ok = isinstance(value, base) and (base is bool or not isinstance(value, bool))
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise error(
            f"constant `{name}` must be a Python {base.__name__}",
            **err,
            constant=name,
            expected=base.__name__ + (" or None" if optional else ""),
            actual=shown,
            fix=f"pass a concrete {base.__name__}; constants are compile-time values and cannot "
            "be traced",
        )
    # An optional int's None is "none" (no window): 0 is one of its values too (a window of
    # no keys). A plain int sizes or counts, and is positive.
    if base is int and optional and value < 0:
        raise error(
            f"constant `{name}` must not be negative",
            **err,
            constant=name,
            expected=">= 0, or None",
            actual=value,
            fix=f"use 0 or more, such as `{name}=0`, or `{name}=None`",
        )
    if base is int and not optional and value <= 0:
        raise error(
            f"constant `{name}` must be positive",
            **err,
            constant=name,
            expected="> 0",
            actual=value,
            fix=f"use a positive value such as `{name}={example}`",
        )
    return value


def check_stage_count(
    name: str, value: Any, err: Mapping[str, Any], error: type[StaticKernelError]
) -> None:
    """A stage count, declared optional (None fits the stages to shared memory), is at least
    1: an optional int may be 0 otherwise."""
    if value == 0:
        raise error(
            f"constant `{name}` is the pipeline's stage count, which must be positive",
            **err,
            constant=name,
            expected="> 0, or None to fit the stages to shared memory",
            actual=value,
            fix=f"use `{name}=2` or more to overlap copies with compute, or `{name}=None`",
        )


def type_name(hint: Any) -> str:
    """An annotation as an error shows it: `sk.Const[int]` for a constant's."""
    if hint is None:
        return "no annotation"
    if typing.get_origin(hint) is Annotated:
        base, *marks = typing.get_args(hint)
        if any(isinstance(m, _ConstMarker) for m in marks):
            return f"sk.Const[{type_name(base)}]"
    return public_type_name(hint) or repr(hint)
