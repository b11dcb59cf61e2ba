"""A row of the compile table: one gallery kernel at one set of operand shapes and dtypes."""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["Row", "tile"]


@dataclasses.dataclass(frozen=True)
class Row:
    """One kernel of the gallery at one set of operand shapes and dtypes."""

    module: str
    kernel: str
    operands: tuple[tuple[tuple[int, ...], str], ...]
    consts: tuple[tuple[str, Any], ...] = ()
    """Constants other than the defaults, e.g. (("bf16_out", True),)."""

    @property
    def label(self) -> str:
        consts = ", ".join(f"{k}={v!r}" for k, v in self.consts)
        return f"{self.kernel} ({consts})" if consts else self.kernel

    @property
    def structs(self) -> tuple[jax.ShapeDtypeStruct, ...]:
        return tuple(jax.ShapeDtypeStruct(s, jnp.dtype(d)) for s, d in self.operands)

    @property
    def shape(self) -> list[str]:
        return [f"{d}[{','.join(map(str, s))}]" for s, d in self.operands]


def tile(m: int, n: int, dtype: str, count: int = 1) -> tuple[tuple[tuple[int, ...], str], ...]:
    return tuple(((m, n), dtype) for _ in range(count))
