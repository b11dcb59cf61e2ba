"""The gallery kernels as benchmark subjects: each statickernel kernel with its reference, its
hand-written twin, its operands at a given (M, N), and the bytes it must move."""

import dataclasses
import functools
import importlib
import pathlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import handwritten
import statickernel as sk

__all__ = ["EXAMPLES_DIR", "GALLERY", "Subject", "example_module", "select"]

EXAMPLES_DIR = pathlib.Path(__file__).resolve().parent.parent / "examples"

# Operand and result forms: a (M, N) tile, an (N,) vector along the columns, an (M,) vector
# along the rows.
TILE, COLS, ROWS = "MN", "N", "M"

# Builds the hand-written kernel: (M, N, dtype, interpret, the kernel's constants) -> function.
Builder = Callable[[int, int, Any, bool, Mapping[str, Any]], Callable[..., Any]]


@dataclasses.dataclass(frozen=True)
class Subject:
    """One gallery kernel and everything needed to measure it against its baselines."""

    name: str
    module: str
    operands: tuple[str, ...]  # the form of each operand: TILE, COLS or ROWS
    result: str
    result_dtype: str | None  # None: the first operand's dtype
    row_wise: bool  # N is whole in every block: 64 rows of it, or a few in the row form
    build_handwritten: Builder

    @property
    def kernel(self) -> sk.Kernel[..., Any]:
        return getattr(example_module(self.module), self.name)

    @property
    def reference(self) -> Callable[..., Any]:
        reference = self.kernel.reference
        assert reference is not None, f"{self.name} declares no reference"
        return reference

    def shapes(self, m: int, n: int) -> tuple[tuple[int, ...], ...]:
        return tuple(_shape(form, m, n) for form in self.operands)

    def structs(self, m: int, n: int, dtype: Any) -> tuple[jax.ShapeDtypeStruct, ...]:
        return tuple(jax.ShapeDtypeStruct(s, jnp.dtype(dtype)) for s in self.shapes(m, n))

    def arrays(self, m: int, n: int, dtype: Any, seed: int = 0) -> tuple[jax.Array, ...]:
        """Seeded operands, centred well below zero, so that a zero read past an edge would
        change a max, a softmax or a norm visibly."""
        rng = np.random.default_rng([seed, m, n])
        return tuple(
            jnp.asarray(rng.standard_normal(s, dtype=np.float32) * 2 - 4).astype(dtype)
            for s in self.shapes(m, n)
        )

    def random_arrays(self, m: int, n: int, dtype: Any, seed: int = 0) -> tuple[jax.Array, ...]:
        """Operands centred as in `arrays`, drawn on the device: at the speed shapes (up to
        512 MiB an operand) drawing them on the host would take seconds."""
        return _draw(self.shapes(m, n), jnp.dtype(dtype).name, seed)

    def handwritten(self, m: int, n: int, dtype: Any, *, interpret: bool) -> Callable[..., Any]:
        """The hand-written kernel with the statickernel kernel's blocks and constants; raises
        `handwritten.Unsupported` at a shape it has no version for."""
        return self.build_handwritten(m, n, jnp.dtype(dtype), interpret, self.kernel.consts)

    def statickernel_jit(self, backend: str) -> Callable[..., Any]:
        """The kernel called inside jax.jit, as the benchmarks time every contender."""
        kernel = self.kernel
        return jax.jit(lambda *args: kernel(*args, backend=backend))

    def handwritten_jit(self, m: int, n: int, dtype: Any, *, interpret: bool) -> Callable[..., Any]:
        """The hand-written kernel called inside jax.jit, the same way."""
        hand = self.handwritten(m, n, dtype, interpret=interpret)
        return jax.jit(lambda *args: hand(*args))

    def bytes_moved(self, m: int, n: int, dtype: Any) -> int:
        """The bytes a kernel must read and write at least: every operand once, the result once."""
        item = jnp.dtype(dtype).itemsize
        read = sum(_size(form, m, n) * item for form in self.operands)
        out_item = jnp.dtype(self.result_dtype or dtype).itemsize
        return read + _size(self.result, m, n) * out_item


@functools.partial(jax.jit, static_argnums=(0, 1))
def _draw(shapes: tuple[tuple[int, ...], ...], dtype: str, seed: Any) -> tuple[jax.Array, ...]:
    keys = jax.random.split(jax.random.key(seed), len(shapes))
    return tuple(
        (jax.random.normal(k, s, jnp.float32) * 2 - 4).astype(dtype)
        for k, s in zip(keys, shapes, strict=True)
    )


def _shape(form: str, m: int, n: int) -> tuple[int, ...]:
    return {TILE: (m, n), COLS: (n,), ROWS: (m,)}[form]


def _size(form: str, m: int, n: int) -> int:
    return int(np.prod(_shape(form, m, n)))


def example_module(name: str) -> Any:
    # The gallery is a folder of scripts, not a package.
    if str(EXAMPLES_DIR) not in sys.path:
        sys.path.insert(0, str(EXAMPLES_DIR))
    return importlib.import_module(name)


GALLERY: tuple[Subject, ...] = (
    Subject(
        "add",
        "add",
        (TILE, TILE),
        TILE,
        None,
        row_wise=False,
        build_handwritten=lambda m, n, dt, interpret, c: handwritten.add(
            m, n, dt, bm=c["BM"], bn=c["BN"], interpret=interpret
        ),
    ),
    Subject(
        "scale_bias",
        "scale_bias",
        (TILE, COLS),
        TILE,
        None,
        row_wise=False,
        build_handwritten=lambda m, n, dt, interpret, c: handwritten.scale_bias(
            m, n, dt, scale=c["scale"], bm=c["BM"], bn=c["BN"], interpret=interpret
        ),
    ),
    Subject(
        "softmax",
        "softmax",
        (TILE,),
        TILE,
        None,
        row_wise=True,
        build_handwritten=lambda m, n, dt, interpret, c: handwritten.softmax(
            m, n, dt, bm=c["BM"], interpret=interpret
        ),
    ),
    Subject(
        "rmsnorm",
        "rmsnorm",
        (TILE, COLS),
        TILE,
        None,
        row_wise=True,
        build_handwritten=lambda m, n, dt, interpret, c: handwritten.rmsnorm(
            m, n, dt, eps=c["eps"], bm=c["BM"], interpret=interpret
        ),
    ),
    Subject(
        "layernorm",
        "layernorm",
        (TILE, COLS, COLS),
        TILE,
        None,
        row_wise=True,
        build_handwritten=lambda m, n, dt, interpret, c: handwritten.layernorm(
            m, n, dt, eps=c["eps"], bm=c["BM"], interpret=interpret
        ),
    ),
    Subject(
        "row_sum",
        "row_sum",
        (TILE,),
        ROWS,
        "float32",
        row_wise=True,
        build_handwritten=lambda m, n, dt, interpret, c: handwritten.row_sum(
            m, n, dt, bm=c["BM"], interpret=interpret
        ),
    ),
)


def select(names: str | None) -> tuple[Subject, ...]:
    """The subjects named in a comma-separated list, or all of them."""
    if not names:
        return GALLERY
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {s.name: s for s in GALLERY}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return tuple(known[n] for n in wanted)
