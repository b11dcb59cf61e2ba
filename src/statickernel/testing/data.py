"""Operand data a user draws for a check: a generator per operand, for the operands whose
meaning the default random data miss (lengths inside a row, labels inside a vocabulary,
positive scales, sorted offsets).

    sk.testing.check_kernel(
        masked_softmax,
        operands={"lengths": lambda d: d.rng.integers(0, d.sizes["N"] + 1, d.shape)},
    )

Each generator takes a `Draw` and returns an array-like of the draw's shape; it is cast to the
draw's dtype. Its random generator is seeded by the check's seed and the operand's position,
so a case's data are the same on every run. Operands are drawn in the order they are
declared, and a draw sees the case's operands as drawn so far (`d.operands`) and the
kernel's constants (`d.consts`): a saved log-sum-exp can be computed from the q and k
declared before it, so that it fits them as the forward's would.

A kernel declares its own generators with `@sk.kernel(test_data=...)`; a check's
`operands=` replaces them one by one.
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._compiler.declare.spec import KernelSpec

__all__ = ["Draw", "OperandGenerator", "check_generators", "drawn_operands"]


@dataclasses.dataclass(frozen=True)
class Draw:
    """What a generator draws for: one operand of one case."""

    rng: np.random.Generator
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    sizes: Mapping[str, int]
    """Every dim's size in this case, by name (`d.sizes["N"]`)."""
    name: str
    operands: Mapping[str, jax.Array] = dataclasses.field(default_factory=dict)
    """The case's operands by name: the generated values of those declared before this one,
    the random ones of the rest."""
    consts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The kernel's constants in this case, by name."""


OperandGenerator = Callable[[Draw], Any]


def check_generators(spec: KernelSpec, generators: Mapping[str, OperandGenerator]) -> None:
    """Raises ValueError for a generator of no operand, or one that is not callable."""
    names = [o.name for o in spec.operands]
    for name, generator in generators.items():
        if name not in names:
            raise ValueError(
                f"operands={{{name!r}: ...}}: kernel `{spec.name}` has no operand {name!r}; "
                f"its operands: {', '.join(names)}"
            )
        if not callable(generator):
            raise ValueError(
                f"operands={{{name!r}: {generator!r}}}: give a function of a Draw, e.g. "
                "lambda d: d.rng.integers(0, d.sizes['N'] + 1, d.shape)"
            )


def _sizes(spec: KernelSpec, shapes: Sequence[tuple[int, ...]]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for op, shape in zip(spec.operands, shapes, strict=True):
        # An operand's dims hold its batch dims; a group dim leads them, unseen by the body.
        for dims in (op.dims, (*op.groups, *op.dims), (*op.batch, *op.groups, *op.dims)):
            if len(dims) == len(shape):
                sizes.update(zip(dims, shape, strict=True))
                break
    return sizes


def drawn_operands(
    spec: KernelSpec,
    arrays: Sequence[jax.Array],
    generators: Mapping[str, OperandGenerator],
    seed: int,
    consts: Mapping[str, Any] | None = None,
) -> list[jax.Array]:
    """`arrays` with each operand that has a generator drawn by it instead, in the order of
    the operands."""
    if not generators:
        return list(arrays)
    shapes = [tuple(a.shape) for a in arrays]
    sizes = _sizes(spec, shapes)
    out = list(arrays)
    for i, op in enumerate(spec.operands):
        generator = generators.get(op.name)
        if generator is None:
            continue
        dtype = np.dtype(arrays[i].dtype)
        drawn = {o.name: a for o, a in zip(spec.operands, out, strict=True)}
        draw = Draw(
            np.random.default_rng((seed, i)),
            shapes[i],
            dtype,
            sizes,
            op.name,
            drawn,
            dict(consts or {}),
        )
        values = np.asarray(generator(draw))
        if values.shape != shapes[i]:
            raise ValueError(
                f"the generator of operand {op.name!r} returned shape {values.shape}, not the "
                f"case's {shapes[i]}: draw d.shape elements"
            )
        out[i] = jnp.asarray(values).astype(dtype)
    return out
