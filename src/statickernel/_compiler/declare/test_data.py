"""`test_data=`: the kernel's own generators of test data, by operand, for the operands whose
meaning random data miss (a saved log-sum-exp, lengths inside a row, labels inside a
vocabulary). The testing helpers draw those operands with them in every check of the kernel
(`statickernel.testing.data`); a check's own `operands=` replaces them one by one."""

from collections.abc import Callable, Mapping
from typing import Any

from ..._errors import AnnotationError
from .operand import OperandSpec

__all__ = ["check_test_data"]

_EXAMPLE = 'test_data={"lengths": lambda d: d.rng.integers(0, d.sizes["N"] + 1, d.shape)}'


def check_test_data(
    test_data: Mapping[str, Callable[..., Any]] | None,
    operands: list[OperandSpec],
    err: dict[str, Any],
) -> tuple[tuple[str, Callable[..., Any]], ...]:
    """The generators by operand, in the operands' order; an AnnotationError for a name that
    is no operand or a generator that is not callable."""
    if test_data is None:
        return ()
    if not isinstance(test_data, Mapping):
        raise AnnotationError(
            "test_data= is not a mapping of operand names to generators",
            **err,
            expected="a dict from an operand's name to a function of a Draw",
            actual=type(test_data).__name__,
            fix=f"write {_EXAMPLE}",
        )
    names = [o.name for o in operands]
    for name, generator in test_data.items():
        if name not in names:
            raise AnnotationError(
                f"test_data= names {name!r}, which is not an operand of the kernel",
                **err,
                expected=f"an operand's name, one of: {', '.join(names)}",
                actual=repr(name),
                fix="name the operand whose data the generator draws",
            )
        if not callable(generator):
            raise AnnotationError(
                f"test_data= gives operand `{name}` a {type(generator).__name__}, not a generator",
                **err,
                operand=name,
                expected="a function of a Draw returning an array of d.shape",
                actual=repr(generator),
                fix=f"write {_EXAMPLE}",
            )
    return tuple((n, test_data[n]) for n in names if n in test_data)
