"""Hand-written Pallas Mosaic GPU kernels for the gallery's computations: the baselines.

They are written the way a person writes them with `plgpu.kernel`, without statickernel:
TMA copies into shared memory, Lane semantics, WGMMA-layout register values, and a mask only
where a ragged edge would change the result. TMA already reads zeros past an array's edge and
drops stores there, so sums and elementwise ops need no mask; a max (softmax) and a variance
(layernorm) over padded columns do.

Each builder takes the shape, the dtype and the blocks, and returns a jitted function of the
operands. `interpret=True` runs it in the Mosaic GPU interpreter instead of compiling it.
A builder raises `Unsupported` where its blocks would not fit a block's shared memory (whole
rows wider than 256 float32 or 512 bfloat16 columns in 64-row blocks), on the interpreter too,
so that a dry run skips what the GPU would refuse.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

__all__ = [
    "SMEM_BYTES",
    "Unsupported",
    "add",
    "layernorm",
    "rmsnorm",
    "row_sum",
    "scale_bias",
    "softmax",
]

TILE = plgpu.Layout.WGMMA
PER_ROW = plgpu.Layout.WGMMA.reduce(1)  # one value per row of a tile
PER_COL = plgpu.Layout.WGMMA.reduce(0)  # one value per column of a tile

BOX_MAX = 256  # elements along each dim of one TMA box
TMA_ROW_BYTES = 16  # GMEM row strides and box rows are multiples of this
VECTOR_BYTES = 128  # a 1-D copy moves whole 128-byte chunks
WGMMA_COLS = 8  # a WGMMA-layout tile has a multiple of 8 columns
SMEM_BYTES = 232_448  # shared memory one block may use on an H100/H200 (227 KiB)
BARRIER_BYTES = 8


class Unsupported(ValueError):
    """The hand-written kernel has no version for this shape: its blocks would not fit."""


def _check_smem(scratch_bytes: int, what: str) -> None:
    if scratch_bytes > SMEM_BYTES:
        raise Unsupported(
            f"{what} need {scratch_bytes:,} B of shared memory, over the {SMEM_BYTES:,} B a "
            "block has"
        )


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _cdiv(a, b) * b


def _launch(
    body: Callable[..., None],
    out_type: jax.ShapeDtypeStruct,
    grid: tuple[int, ...],
    grid_names: tuple[str, ...],
    scratch: Sequence[Any],
    interpret: bool,
) -> Callable[..., Any]:
    return plgpu.kernel(
        body,
        out_type=out_type,
        grid=grid,
        grid_names=grid_names,
        scratch_types=list(scratch),
        # Lane semantics with untiled shared memory: the register layouts and masks below
        # lower for ragged widths, where the default warpgroup semantics does not.
        compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane),
        interpret=plgpu.InterpretGPUParams() if interpret else None,
    )


def _load(ref: Any, layout: Any) -> jax.Array:
    return plgpu.load(ref, layout=layout, optimized=False)


def _store(ref: Any, value: jax.Array) -> None:
    # jax 0.12 stores through plgpu.store, whose optimized default refuses untiled refs.
    store = getattr(plgpu, "store", None)
    if store is not None:
        store(ref, value, optimized=False)
    else:
        ref[...] = value


def _copy_mode(in_bounds: bool) -> dict[str, Any]:
    # Promising in-bounds boxes lets TMA skip its bounds handling.
    return {"oob_mode": plgpu.OOBFillMode.PROMISE_IN_BOUNDS} if in_bounds else {}


def _tma_width(n: int, dtype: Any) -> int:
    """The row length TMA can address: rows padded on the host to a multiple of 16 bytes."""
    return _round_up(n, TMA_ROW_BYTES // jnp.dtype(dtype).itemsize)


def _pad_cols(x: jax.Array, width: int) -> jax.Array:
    return x if x.shape[1] == width else jnp.pad(x, ((0, 0), (0, width - x.shape[1])))


def _row_boxes(n: int, unit: int) -> tuple[int, int]:
    """(boxes, box width) holding a whole row of `n` elements in equal TMA boxes, each a
    multiple of `unit` elements."""
    boxes = _cdiv(_round_up(n, unit), BOX_MAX)
    return boxes, _round_up(_cdiv(n, boxes), unit)


def _per_row(v: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return lax.broadcast_in_dim(v, shape, (0,))


def _per_col(v: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return lax.broadcast_in_dim(v, shape, (1,))


# --- elementwise kernels: tiles of (bm, bn) ---------------------------------------------------


def _tiled(
    m: int,
    n: int,
    dtype: Any,
    *,
    tiles: int,
    has_bias: bool,
    compute: Callable[..., jax.Array],
    bm: int,
    bn: int,
    interpret: bool,
) -> Callable[..., jax.Array]:
    """A kernel over (bm, bn) tiles of `tiles` (m, n) operands and an optional (n,) bias."""
    width = _tma_width(n, dtype)
    in_bounds = m % bm == 0 and n % bn == 0

    inputs = tiles + has_bias
    itemsize = jnp.dtype(dtype).itemsize
    _check_smem(
        (tiles + 1) * bm * bn * itemsize + has_bias * bn * itemsize + inputs * BARRIER_BYTES,
        f"{bm}x{bn} tiles",
    )

    def body(*refs: Any) -> None:
        # plgpu.kernel passes the inputs, the output, then the scratch buffers in order.
        in_gmem, out_gmem = refs[:inputs], refs[inputs]
        in_smem, out_smem = refs[inputs + 1 : 2 * inputs + 1], refs[2 * inputs + 1]
        barriers = refs[2 * inputs + 2 :]
        i, j = lax.axis_index("m"), lax.axis_index("n")
        rows, cols = pl.ds(i * bm, bm), pl.ds(j * bn, bn)
        mode = _copy_mode(in_bounds)
        for k in range(inputs):
            box = in_gmem[k].at[rows, cols] if k < tiles else in_gmem[k].at[cols]
            plgpu.copy_gmem_to_smem(box, in_smem[k], barriers[k], **mode)
        for barrier in barriers:
            plgpu.barrier_wait(barrier)
        values = [_load(ref, TILE) for ref in in_smem[:tiles]]
        if has_bias:
            values.append(_per_col(_load(in_smem[tiles], PER_COL), (bm, bn)))
        _store(out_smem, compute(*values))
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(out_smem, out_gmem.at[rows, cols])
        plgpu.wait_smem_to_gmem(0)

    scratch = [plgpu.SMEM((bm, bn), dtype) for _ in range(tiles)]
    if has_bias:
        scratch.append(plgpu.SMEM((bn,), dtype))
    scratch.append(plgpu.SMEM((bm, bn), dtype))
    scratch += [plgpu.Barrier() for _ in range(inputs)]
    launch = _launch(
        body,
        jax.ShapeDtypeStruct((m, width), dtype),
        (_cdiv(m, bm), _cdiv(n, bn)),
        ("m", "n"),
        scratch,
        interpret,
    )

    @jax.jit
    def run(*operands: jax.Array) -> jax.Array:
        padded = [_pad_cols(x, width) for x in operands[:tiles]]
        out = launch(*padded, *operands[tiles:])
        return out if width == n else out[:, :n]

    return run


def add(
    m: int, n: int, dtype: Any, *, bm: int = 64, bn: int = 128, interpret: bool = False
) -> Callable[..., jax.Array]:
    """x + y over (m, n)."""
    return _tiled(
        m,
        n,
        dtype,
        tiles=2,
        has_bias=False,
        compute=lambda x, y: x + y,
        bm=bm,
        bn=bn,
        interpret=interpret,
    )


def scale_bias(
    m: int,
    n: int,
    dtype: Any,
    *,
    scale: float = 2.0,
    bm: int = 64,
    bn: int = 128,
    interpret: bool = False,
) -> Callable[..., jax.Array]:
    """x * scale + bias, with an (n,) bias broadcast over the rows."""
    return _tiled(
        m,
        n,
        dtype,
        tiles=1,
        has_bias=True,
        compute=lambda x, bias: x * scale + bias,
        bm=bm,
        bn=bn,
        interpret=interpret,
    )


# --- row-wise kernels: blocks of bm whole rows ------------------------------------------------


def _rowwise(
    m: int,
    n: int,
    dtype: Any,
    *,
    vectors: int,
    compute: Callable[..., jax.Array],
    out_dtype: Any,
    per_row_out: bool,
    bm: int,
    interpret: bool,
) -> Callable[..., jax.Array]:
    """A kernel over blocks of `bm` whole rows of an (m, n) operand, with `vectors` (n,)
    operands (weights, biases) and an (m, n) or (m,) result.

    `compute(x, col_ok, *vectors)` gets the block in registers, `col_ok` (None when every
    column is real) and the vectors, each (width,) long.
    """
    itemsize = jnp.dtype(dtype).itemsize
    unit = max(WGMMA_COLS, TMA_ROW_BYTES // itemsize)
    if vectors:
        unit = max(unit, VECTOR_BYTES // itemsize)
    boxes, box = _row_boxes(n, unit)
    width = boxes * box
    gmem_width = _tma_width(n, dtype)
    ragged_cols = width != n
    in_bounds = m % bm == 0 and not ragged_cols
    out_bytes = bm * jnp.dtype(out_dtype).itemsize * (1 if per_row_out else width)
    _check_smem(
        (bm + vectors) * width * itemsize + out_bytes + (1 + vectors) * BARRIER_BYTES,
        f"blocks of {bm} whole rows of {n} {jnp.dtype(dtype).name}",
    )

    def smem_row(shape_lead: tuple[int, ...], dt: Any) -> Any:
        # Several boxes along a row each get their own buffer: a TMA box lands contiguously.
        return plgpu.SMEM((boxes, *shape_lead, box) if boxes > 1 else (*shape_lead, box), dt)

    def box_of(ref: Any, k: int) -> Any:
        return ref.at[k] if boxes > 1 else ref

    def body(*refs: Any) -> None:
        x_gmem, vec_gmem = refs[0], refs[1 : 1 + vectors]
        out_gmem, x_smem = refs[1 + vectors], refs[2 + vectors]
        vec_smem = refs[3 + vectors : 3 + 2 * vectors]
        out_smem, barriers = refs[3 + 2 * vectors], refs[4 + 2 * vectors :]
        i = lax.axis_index("m")
        rows = pl.ds(i * bm, bm)
        # jax 0.12 refuses a static slice wider than the array, so a box reaching past the
        # row's end starts at a traced zero (TMA reads zeros there and drops writes).
        zero = i * 0

        def cols(k: int, length: int) -> Any:
            start = k * box
            return pl.ds(start, box) if start + box <= length else pl.ds(zero + start, box)

        mode = _copy_mode(in_bounds)
        for k in range(boxes):
            plgpu.copy_gmem_to_smem(
                x_gmem.at[rows, cols(k, gmem_width)], box_of(x_smem, k), barriers[0], **mode
            )
            for src, dst, barrier in zip(vec_gmem, vec_smem, barriers[1:], strict=True):
                plgpu.copy_gmem_to_smem(src.at[cols(k, n)], box_of(dst, k), barrier, **mode)
        for barrier in barriers:
            plgpu.barrier_wait(barrier)
        x = jnp.concatenate([_load(box_of(x_smem, k), TILE) for k in range(boxes)], axis=1)
        vecs = [
            jnp.concatenate([_load(box_of(ref, k), PER_COL) for k in range(boxes)], axis=0)
            for ref in vec_smem
        ]
        col_ok = None
        if ragged_cols:
            col_ok = plgpu.broadcasted_iota(jnp.int32, (bm, width), 1, layout=TILE) < n
        out = compute(x, col_ok, *vecs)
        if per_row_out:
            _store(out_smem, out)
        else:
            for k in range(boxes):
                _store(box_of(out_smem, k), out[:, k * box : (k + 1) * box])
        plgpu.commit_smem()
        if per_row_out:
            plgpu.copy_smem_to_gmem(out_smem, out_gmem.at[rows])
        else:
            for k in range(boxes):
                plgpu.copy_smem_to_gmem(box_of(out_smem, k), out_gmem.at[rows, cols(k, gmem_width)])
        plgpu.wait_smem_to_gmem(0)

    scratch = [smem_row((bm,), dtype)] + [smem_row((), dtype) for _ in range(vectors)]
    scratch.append(plgpu.SMEM((bm,), out_dtype) if per_row_out else smem_row((bm,), out_dtype))
    scratch += [plgpu.Barrier(num_arrivals=boxes) for _ in range(1 + vectors)]
    out_shape = (m,) if per_row_out else (m, gmem_width)
    launch = _launch(
        body,
        jax.ShapeDtypeStruct(out_shape, out_dtype),
        (_cdiv(m, bm),),
        ("m",),
        scratch,
        interpret,
    )

    @jax.jit
    def run(x: jax.Array, *vecs: jax.Array) -> jax.Array:
        out = launch(_pad_cols(x, gmem_width), *vecs)
        return out if per_row_out or gmem_width == n else out[:, :n]

    return run


def softmax(
    m: int, n: int, dtype: Any, *, bm: int = 64, interpret: bool = False
) -> Callable[..., jax.Array]:
    """Softmax of each row, computed in float32."""

    def compute(x: jax.Array, col_ok: jax.Array | None) -> jax.Array:
        v = x.astype(jnp.float32)
        if col_ok is not None:  # padded columns must not win the max
            v = jnp.where(col_ok, v, -jnp.inf)
        e = jnp.exp(v - _per_row(jnp.max(v, axis=1), v.shape))
        return (e / _per_row(jnp.sum(e, axis=1), v.shape)).astype(dtype)

    return _rowwise(
        m,
        n,
        dtype,
        vectors=0,
        compute=compute,
        out_dtype=dtype,
        per_row_out=False,
        bm=bm,
        interpret=interpret,
    )


def rmsnorm(
    m: int, n: int, dtype: Any, *, eps: float = 1e-6, bm: int = 64, interpret: bool = False
) -> Callable[..., jax.Array]:
    """RMS norm of each row times an (n,) weight, computed in float32."""

    def compute(x: jax.Array, col_ok: jax.Array | None, weight: jax.Array) -> jax.Array:
        del col_ok  # padded columns read zero and add nothing to the sum of squares
        v = x.astype(jnp.float32)
        rms = lax.rsqrt(jnp.sum(v * v, axis=1) / n + eps)
        w = _per_col(weight.astype(jnp.float32), v.shape)
        return (v * _per_row(rms, v.shape) * w).astype(dtype)

    return _rowwise(
        m,
        n,
        dtype,
        vectors=1,
        compute=compute,
        out_dtype=dtype,
        per_row_out=False,
        bm=bm,
        interpret=interpret,
    )


def layernorm(
    m: int, n: int, dtype: Any, *, eps: float = 1e-5, bm: int = 64, interpret: bool = False
) -> Callable[..., jax.Array]:
    """Layer norm of each row, then an (n,) weight and bias, computed in float32."""

    def compute(
        x: jax.Array, col_ok: jax.Array | None, weight: jax.Array, bias: jax.Array
    ) -> jax.Array:
        v = x.astype(jnp.float32)
        centred = v - _per_row(jnp.sum(v, axis=1) / n, v.shape)
        square = centred * centred
        if col_ok is not None:  # a padded column is zero, but its centred value is not
            square = jnp.where(col_ok, square, 0.0)
        inv_std = lax.rsqrt(jnp.sum(square, axis=1) / n + eps)
        y = centred * _per_row(inv_std, v.shape)
        w = _per_col(weight.astype(jnp.float32), v.shape)
        b = _per_col(bias.astype(jnp.float32), v.shape)
        return (y * w + b).astype(dtype)

    return _rowwise(
        m,
        n,
        dtype,
        vectors=2,
        compute=compute,
        out_dtype=dtype,
        per_row_out=False,
        bm=bm,
        interpret=interpret,
    )


def row_sum(
    m: int, n: int, dtype: Any, *, bm: int = 64, interpret: bool = False
) -> Callable[..., jax.Array]:
    """The float32 sum of each row: an (m,) result."""

    def compute(x: jax.Array, col_ok: jax.Array | None) -> jax.Array:
        del col_ok  # padded columns read zero
        return jnp.sum(x.astype(jnp.float32), axis=1)

    return _rowwise(
        m,
        n,
        dtype,
        vectors=0,
        compute=compute,
        out_dtype=jnp.float32,
        per_row_out=True,
        bm=bm,
        interpret=interpret,
    )
