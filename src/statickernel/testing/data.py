"""Operand data a user draws for a check: a generator per operand, for the operands whose
meaning the default random data miss (lengths inside a row, labels inside a vocabulary,
positive scales, sorted offsets).

    sk.testing.check_kernel(
        masked_softmax,
        operands={"lengths": lambda d: d.rng.integers(0, d.sizes["N"] + 1, d.shape)},
    )

Each generator takes a `Draw` and returns an array-like of the draw's shape; it is cast to the
draw's dtype. Its random generator is seeded by the check's seed and the operand's position,
so a case's data are the same on every run and independent of the other operands'.
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
        dims = (*op.batch, *op.groups, *op.dims)
        if len(dims) == len(shape):
            sizes.update(zip(dims, shape, strict=True))
    return sizes


def drawn_operands(
    spec: KernelSpec,
    arrays: Sequence[jax.Array],
    generators: Mapping[str, OperandGenerator],
    seed: int,
) -> list[jax.Array]:
    """`arrays` with each operand that has a generator drawn by it instead."""
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
        draw = Draw(np.random.default_rng((seed, i)), shapes[i], dtype, sizes, op.name)
        values = np.asarray(generator(draw))
        if values.shape != shapes[i]:
            raise ValueError(
                f"the generator of operand {op.name!r} returned shape {values.shape}, not the "
                f"case's {shapes[i]}: draw d.shape elements"
            )
        out[i] = jnp.asarray(values).astype(dtype)
    return out
