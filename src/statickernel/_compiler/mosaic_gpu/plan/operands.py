"""One planned array of a specialization: an operand or a result, with its array, its block
and what it reads past the edge."""

import dataclasses
import enum
import math
from typing import Any

from ....language.context import Halo
from ...ir.nodes import Kind
from .. import hardware as hw

__all__ = ["OperandPlan", "PageCopies", "Role"]


class Role(enum.StrEnum):
    """Whether a planned array is read by the kernel or written by it."""

    INPUT = "input"
    OUTPUT = "output"


@dataclasses.dataclass(frozen=True)
class PageCopies:
    """How each step of a paged loop copies a paged operand's block: `copies` TMA copies of
    `copy_rows` rows each, from the pages its table lists."""

    table: str
    """The page table's name (`pages={"P": "block_tables"}`)."""
    page_rows: int
    """The rows of one page."""
    copy_rows: int
    """The rows one copy moves: a whole page, or the step's block when it is part of one."""
    copies: int
    """The copies a step: its block's rows over `copy_rows`."""
    pool: int
    """The pages in the pool; a page outside [0, pool) reads zeros."""
    outside: int
    """The page a copy of a page outside the pool is sent to, where TMA reads zeros: past
    every page of every batch entry of the array (the pages of all its entries, which Mosaic
    GPU may merge into one dim of a copy)."""

    def check_invariants(self) -> None:
        assert self.copies >= 1 and self.copy_rows >= 1
        assert self.page_rows % self.copy_rows == 0
        assert self.outside >= self.pool


@dataclasses.dataclass(frozen=True)
class OperandPlan:
    """One operand or result of a specialization: its array, its block and its edge fill."""

    name: str
    """The parameter's name; results are named `result`, or `result0`, `result1`, ..."""
    role: Role
    """`Role.INPUT` ("input") for an operand, `Role.OUTPUT` ("output") for a result."""
    dims: tuple[str, ...]
    """The names of its dims, as in the annotation."""
    shape: tuple[int, ...]
    """The array's shape in this specialization."""
    dtype: str
    """The array's dtype name, e.g. "float32"."""
    kind: Kind
    """Its register form: `Kind.TILE` ("tile") for 2-D blocks, `Kind.ROW` ("row") or
    `Kind.COL` ("col") for 1-D blocks along the rows or the columns."""
    block_shape: tuple[int, ...]
    """The physical block held in shared memory and registers."""
    gmem_shape: tuple[int, ...]
    """The shape of the array the kernel addresses: `shape`, or larger when the array is padded
    on the host because TMA cannot address its rows."""
    fill: Any
    """What loads past the array's edge read; None for results, scalars and operands never
    loaded."""
    loaded: bool
    """Whether the body loads it (results are always stored, and count as loaded)."""
    loop_dim: str | None = None
    """The loop dim whose pipeline copies its blocks; None when copied once per block."""
    swizzle: int = 0
    """For an operand of `sk.dot`: elements per swizzle row of its tiled SMEM (the swizzle
    the kernel's products share, `pipelining.dot_swizzle`); else 0."""
    batch: tuple[str, ...] = ()
    """Its leading batch dims, which `shape` and `gmem_shape` include and `dims` does not."""
    groups: tuple[str, ...] = ()
    """Its group dims, after the batch dims, which `shape` and `gmem_shape` include and `dims`
    does not: each step of its loop reads one index of them (`step`)."""
    shares_smem_with: str | None = None
    """For a result of the row form: the operand whose shared-memory block it is written
    into, row by row, once each row has been read; None when it has a block of its own."""

    in_place: bool = False
    """For an operand: read from global memory where the body uses it, never copied into
    shared memory. A scalar is (every block reads it), and so is a per-row operand of the row
    form (each row reads its own element, a scalar in that form's registers). For a result:
    written to global memory where the body computes it, with no shared memory (a per-row
    result of the row form, its element a row)."""

    per_block: tuple[str, ...] = ()
    """For a result reduced across blocks: the tiled dims whose block index leads its array
    (after the batch dims), one partial per block, combined after the launch; else empty."""

    halo: Halo = dataclasses.field(default_factory=Halo)
    """For an operand the body reads at row offsets (`sk.load(x, offset=...)`): the rows its
    copy holds above and below its block; none otherwise."""

    column_steps: int = 0
    """For a 4-bit operand whose loop walks its columns: the array (`gmem_shape`, its columns
    padded to whole steps) is viewed as (rows, column_steps, block), so that every TMA copy
    starts at column 0. Mosaic GPU addresses a 4-bit array's column coordinate twice too far
    on the device (jax 0.11.2, measured on an H200); its row coordinates are right. Else 0."""

    index: str | None = None
    """For an operand whose rows an index operand's values pick (`index={"V": "ids"}`): that
    operand's name. Row `t` of its block is copied from row `ids[t]` of the array, one row a
    copy; an id outside the array reads a row of zeros. Else None."""

    updates: str | None = None
    """For a result that updates an operand in place (`update="cache"`): that operand's name;
    the kernel writes into its array. Else None."""

    pages: PageCopies | None = None
    """For a paged operand (`pages={"P": "block_tables"}`): how each step of its loop copies
    its block from the pages the table lists. Else None."""

    last_block_rows: int = 0
    """For a batch entry's result whose blocks span its whole rows, the rows ragged: the rows
    of its last block inside the array, which that block's store copies alone. A block of
    whole rows is contiguous, and Mosaic GPU stores it by a plain bulk copy clipped only at
    the end of the whole array: a whole last block would write into the next entry. Else 0."""

    flat: bool = False
    """For a 2-D array of the row form whose rows are not a multiple of 16 bytes: the kernel
    addresses it flattened to 1-D (a reshape, no copy), where TMA needs no row stride. Its
    rows are loaded by 1-D TMA boxes that start at any element, and a result's rows stored
    from registers (`emit.flat_rows`). `gmem_shape` is then the array's own 2-D shape. For
    a per-column vector of the row form whose bytes are not a multiple of 16: copied by 1-D
    TMA boxes, zeros past its end, where a bulk copy could not end at its last element."""

    parts: tuple[tuple[int, int], ...] = ()
    """For a result whose joined columns a block holds part by part (`DimLayout.parts`):
    each part's first column in the array the kernel writes (`gmem_shape`) and its size; the
    wrapper joins the parts into the result. Else empty."""

    def with_partials(
        self, per_block: tuple[str, ...], lead: tuple[int, ...], dtype: str | None = None
    ) -> "OperandPlan":
        """This result as an array of partials (of `dtype`, by default its own): one entry for
        each block along `per_block` (`lead` of them), after its batch dims; each row of
        partials on a 16-byte boundary, as TMA needs of every stride."""
        dtype = dtype or self.dtype
        gmem = self.gmem_shape
        if gmem and (lead or self.batch):  # a 0-d result's entries are written in place
            unit = hw.per_bytes(hw.TMA_ALIGN_BYTES, dtype)
            gmem = (*gmem[:-1], hw.round_up(gmem[-1], unit))
        batch = len(self.batch)
        return dataclasses.replace(
            self,
            dtype=dtype,
            shape=(*self.shape[:batch], *lead, *self.shape[batch:]),
            gmem_shape=(*gmem[:batch], *lead, *gmem[batch:]),
            per_block=per_block,
        )

    @property
    def block_gmem_shape(self) -> tuple[int, ...]:
        """`gmem_shape` without the batch, group and per-block dims: the array one grid step
        (or one step of its loop) addresses."""
        return self.gmem_shape[len(self.batch) + len(self.groups) + len(self.per_block) :]

    @property
    def launched_shape(self) -> tuple[int, ...]:
        """The shape of the array the launch takes or returns: `gmem_shape`, flattened where
        the kernel addresses the array flat."""
        return (
            (math.prod(self.gmem_shape),)
            if self.flat and self.kind is Kind.TILE
            else self.gmem_shape
        )

    @property
    def host_padded(self) -> bool:
        """True when the array is padded on the host before the launch (one extra copy)."""
        return self.gmem_shape != self.shape

    @property
    def smem_bytes(self) -> int:
        """The bytes its block takes in shared memory, before alignment; 0 if never loaded,
        or if it is written into an operand's block, or read in place from global memory."""
        if self.shares_smem_with is not None or self.in_place:
            return 0
        count = 1
        for extent in self.smem_block_shape:
            count *= extent
        return hw.nbytes(count, self.dtype) if self.loaded or self.role is Role.OUTPUT else 0

    @property
    def smem_block_shape(self) -> tuple[int, ...]:
        """The block as its shared-memory buffer holds it: with its halo's rows."""
        if not self.halo.rows:
            return self.block_shape
        return (self.block_shape[0] + self.halo.rows, *self.block_shape[1:])
