"""The Pallas Mosaic GPU vocabulary of generated code: register layouts, constants in a
layout, selects, and the stores from registers to shared memory.

Translation and code generation both write their statements with these, so one op is always
written one way.
"""

import numpy as np

from ._ir import Kind
from ._printer import dtype_source

__all__ = ["LAYOUTS", "full_source", "is_8bit", "select_source", "store_source"]

LAYOUTS: dict[str, str] = {  # by kind
    Kind.TILE: "plgpu.Layout.WGMMA",
    Kind.ROW: "plgpu.Layout.WGMMA.reduce(1)",
    Kind.COL: "plgpu.Layout.WGMMA.reduce(0)",
}


def is_8bit(dtype: str) -> bool:
    return dtype != "bool" and np.dtype(dtype).itemsize == 1


def select_source(mask: str, value: str, other: str, dtype: str) -> str:
    """`jnp.where(mask, value, other)` for a `value` of `dtype`. Mosaic GPU cannot select
    between 8-bit integers, so those are selected as int32 and cast back."""
    if not is_8bit(dtype):
        return f"jnp.where({mask}, {value}, {other})"
    wide = f"lax.convert_element_type({value}, jnp.int32)"
    return f"lax.convert_element_type(jnp.where({mask}, {wide}, {other}), {dtype_source(dtype)})"


def full_source(value: str, shape: tuple[int, ...], dtype: str, kind: str) -> str:
    """A constant value of `kind`, in that kind's register layout. A bare `jnp.full` is a
    splat, which reductions and carries do not take."""
    return f"plgpu.layout_cast(jnp.full({shape}, {value}, {dtype_source(dtype)}), {LAYOUTS[kind]})"


def store_source(ref: str, value: str, new_api: bool) -> str:
    """Registers to shared memory: `plgpu.store` where jax has it (0.12), whose default no
    longer suits untiled refs; an indexed assignment before."""
    if new_api:
        return f"plgpu.store({ref}, {value}, optimized=False)"
    return f"{ref}[...] = {value}"
