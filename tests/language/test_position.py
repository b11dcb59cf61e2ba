"""`sk.position(dim)`: the global indices of the body's block along its rows or columns.

Kernels return positions (or compute with them) at ragged shapes, in the Mosaic GPU
interpreter, and are compared with `jnp.arange`: in a tiled body, along a whole dim, inside the
steps of `sk.loop` and `sk.map_blocks`, and as a causal mask. Forms that cannot hold a vector
keep the block form, and misuse is refused at the declaration with a fix.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float, Int32

import statickernel as sk
from markers import line_finder

F32 = jnp.float32
# Ragged both ways, primes, smaller than one block, a single row, and aligned.
SHAPES = [(129, 257), (97, 131), (33, 65), (1, 300), (128, 256)]

line_of = line_finder(__file__)


@sk.kernel(tile={"M": "BM", "N": "BN"})
def grid_positions(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
) -> Int32[Array, "M N"]:
    return sk.position("M")[:, None] * 10_000 + sk.position("N")[None, :]


@sk.kernel(tile={"M": "BM"})
def row_positions(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, " M"]:
    return sk.position("M")


@sk.kernel(tile={"M": "BM"})
def whole_columns(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, "M N"]:
    # N is whole: its positions run over the whole row, 0 .. N-1.
    return sk.position("N")[None, :] - sk.position("M")[:, None]


@sk.kernel(tile={"M": "BM", "N": "BN"})
def causal(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Float[Array, "M N"]:
    keep = sk.position("M")[:, None] >= sk.position("N")[None, :]
    return jnp.where(keep, sk.load(x), 0.0)


@sk.kernel(tile={"M": "BM"})
def label_logit(
    logits: Float[Array, "M V"], labels: Int32[Array, " M"], *, BM: sk.Const[int] = 64
) -> Float[Array, " M"]:
    """Each row's logit at its label: a label mask, with jnp's implicit broadcasting."""
    hit = sk.position("V") == sk.load(labels)[:, None]
    return sk.sum(jnp.where(hit, sk.load(logits), 0.0), axis=1)


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def last_kept_column(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Int32[Array, " M"]:
    """Per row, the largest column whose element is positive: positions of each step's block."""

    def step(best: jax.Array) -> jax.Array:
        cols = jnp.where(sk.load(x) > 0, sk.position("N")[None, :], -1)
        return jnp.maximum(best, sk.max(cols, axis=1))

    return sk.loop("N", step, init=jnp.full((64,), -1, jnp.int32))


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def mapped_positions(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
) -> Int32[Array, "M N"]:
    return sk.map_blocks("N", lambda: sk.position("M")[:, None] * 1000 + sk.position("N")[None, :])


def zeros(shape: tuple[int, ...]) -> jax.Array:
    return jnp.zeros(shape, F32)


def arange_grid(m: int, n: int, row_scale: int) -> np.ndarray:
    return np.arange(m, dtype=np.int32)[:, None] * row_scale + np.arange(n, dtype=np.int32)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rows_and_columns_of_a_tiled_body(shape: tuple[int, int]) -> None:
    out = grid_positions(zeros(shape))
    np.testing.assert_array_equal(np.asarray(out), arange_grid(*shape, 10_000))


@pytest.mark.parametrize("block", [(64, 64), (128, 256)], ids=str)
def test_positions_do_not_depend_on_the_blocks(block: tuple[int, int]) -> None:
    out = grid_positions(zeros((200, 300)), BM=block[0], BN=block[1])
    np.testing.assert_array_equal(np.asarray(out), arange_grid(200, 300, 10_000))


@pytest.mark.parametrize("m", [1, 63, 129])
def test_a_per_row_result(m: int) -> None:
    out = row_positions(zeros((m, 40)))
    np.testing.assert_array_equal(np.asarray(out), np.arange(m, dtype=np.int32))


@pytest.mark.parametrize("shape", [(70, 100), (5, 8)], ids=str)
def test_a_whole_dim_runs_over_the_whole_row(shape: tuple[int, int]) -> None:
    m, n = shape
    out = whole_columns(zeros(shape))
    expected = np.arange(n, dtype=np.int32)[None, :] - np.arange(m, dtype=np.int32)[:, None]
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize("shape", [(130, 130), (65, 200), (1, 70)], ids=str)
def test_a_causal_mask(shape: tuple[int, int]) -> None:
    x = jax.random.normal(jax.random.key(0), shape, F32)
    np.testing.assert_array_equal(np.asarray(causal(x)), np.asarray(jnp.tril(x)))


@pytest.mark.parametrize("shape", [(130, 100), (1, 7)], ids=str)
def test_a_label_mask(shape: tuple[int, int]) -> None:
    logits = jax.random.normal(jax.random.key(3), shape, F32)
    labels = jax.random.randint(jax.random.key(4), shape[:1], 0, shape[1])
    expected = jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
    np.testing.assert_array_equal(np.asarray(label_logit(logits, labels)), np.asarray(expected))


@pytest.mark.parametrize("shape", [(70, 300), (64, 64), (3, 65)], ids=str)
def test_positions_of_a_loop_steps_block(shape: tuple[int, int]) -> None:
    x = jax.random.normal(jax.random.key(1), shape, F32)
    cols = jnp.where(x > 0, jnp.arange(shape[1], dtype=jnp.int32)[None, :], -1)
    np.testing.assert_array_equal(np.asarray(last_kept_column(x)), np.asarray(cols.max(axis=1)))


@pytest.mark.parametrize("shape", [(70, 130), (64, 64)], ids=str)
def test_positions_of_a_map_steps_block(shape: tuple[int, int]) -> None:
    out = mapped_positions(zeros(shape))
    np.testing.assert_array_equal(np.asarray(out), arange_grid(*shape, 1000))


def test_the_generated_code_adds_the_block_start_to_the_masks_iota() -> None:
    source = causal.emit(jax.ShapeDtypeStruct((130, 130), F32))
    assert "row_position = row_index + block_M * 64" in source
    assert "col_position = col_index + block_N * 64" in source
    step = mapped_positions.emit(jax.ShapeDtypeStruct((70, 130), F32))
    assert "col_position = col_index + loop0_index * 64" in step


def test_positions_share_the_masks_iota() -> None:
    """A ragged reduction's mask and a position along one axis come from one iota."""

    @sk.kernel(tile={"M": "BM"})
    def masked_row_max(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
        v = sk.load(x) + sk.position("N")[None, :].astype(jnp.float32)
        return sk.max(v, axis=1)

    source = masked_row_max.emit(jax.ShapeDtypeStruct((100, 100), F32))
    assert source.count("col_index = plgpu.broadcasted_iota") == 1
    assert "col_ok_vec = col_position < 100" in source
    x = jax.random.normal(jax.random.key(2), (100, 100), F32) - 50
    expected = jnp.max(x + jnp.arange(100, dtype=F32)[None, :], axis=1)
    np.testing.assert_array_equal(np.asarray(masked_row_max(x)), np.asarray(expected))


def test_positions_keep_the_block_form_where_the_form_holds_no_such_vector() -> None:
    """The strided block holds no vectors, and the row form no per-row vector: a body with
    such positions stays in the block form at the shapes where the same body without them
    would not. The row form holds the columns' positions, the row's own indices."""

    @sk.kernel(tile={"M": "BM", "N": "BN"})
    def plain(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 128
    ) -> Float[Array, "M N"]:
        return sk.load(x) * 2.0

    big = jax.ShapeDtypeStruct((8192, 8192), F32)
    assert plain.plan(big).form is sk.Form.STRIDED
    assert causal.plan(big).form is sk.Form.BLOCK

    @sk.kernel(tile={"M": "BM"})
    def row_shift(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x) + sk.position("N")[None, :].astype(jnp.float32)
        return v - sk.max(v, axis=1, keepdims=True)

    @sk.kernel(tile={"M": "BM"})
    def row_plain(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)
        return v - sk.max(v, axis=1, keepdims=True)

    @sk.kernel(tile={"M": "BM"})
    def row_index(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x) + sk.position("M")[:, None].astype(jnp.float32)
        return v - sk.max(v, axis=1, keepdims=True)

    wide = jax.ShapeDtypeStruct((1001, 256), F32)
    assert row_plain.plan(wide).form is sk.Form.ROWS
    assert row_shift.plan(wide).form is sk.Form.ROWS
    assert row_index.plan(wide).form is sk.Form.BLOCK
    x = jax.random.normal(jax.random.key(3), (1001, 256), F32)
    shifted = x + jnp.arange(256, dtype=F32)[None, :]
    want = shifted - jnp.max(shifted, axis=1, keepdims=True)
    np.testing.assert_allclose(row_shift(x), want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("shape", [(1000, 130), (128, 256)], ids=str)
def test_cross_lowers(shape: tuple[int, int]) -> None:
    for kernel in (causal, grid_positions, last_kept_column):
        assert "mosaic_gpu" in kernel.lower(jax.ShapeDtypeStruct(shape, F32)).as_text()


# --- misuse ------------------------------------------------------------------------------------


def declare(body: Any, **decorator: Any) -> None:
    sk.kernel(**decorator)(body)


def test_outside_a_body() -> None:
    with pytest.raises(sk.BodyError, match="outside a kernel body") as info:
        sk.position("M")  # @position-outside
    # At the user's line, and saying where it is valid.
    assert info.value.where is not None
    assert info.value.where.endswith(f"test_position.py:{line_of('position-outside')}")
    assert "only valid inside" in info.value.what
    assert info.value.dim == "M"
    assert info.value.fix is not None and "jnp.arange" in info.value.fix


def test_an_unknown_dim() -> None:
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return sk.load(x) + sk.position("Q")[None, :].astype(jnp.float32)

    with pytest.raises(sk.BodyError, match="does not declare") as info:
        declare(k, tile={"M": "BM"})
    assert "one of M, N" in str(info.value)


def test_a_batch_dim() -> None:
    def k(x: Float[Array, "B M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "B M N"]:
        return sk.load(x) + sk.position("B")[:, None].astype(jnp.float32)

    with pytest.raises(sk.BodyError, match="batch dim") as info:
        declare(k, tile={"M": "BM"}, batch=("B",))
    assert "pass it as an operand" in str(info.value)


def test_a_loop_dim_outside_its_loop() -> None:
    def k(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, BN: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        cols = sk.position("N")
        return sk.map_blocks("N", lambda: sk.load(x) + cols[None, :].astype(jnp.float32))

    with pytest.raises(sk.BodyError, match="outside its loop") as info:
        declare(k, tile={"M": "BM"}, loop={"N": "BN"})
    assert "inside the step" in str(info.value)


def test_a_loop_dim_outside_the_blocks_in_its_step() -> None:
    # Inside the step of a loop over K, which no block of registers runs along, positions run
    # along the loop's blocks (as attention's causal mask needs); outside it, they do not.
    def k(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
        BK: sk.Const[int] = 64,
    ) -> Float[Array, "M N"]:
        def step(acc: jax.Array) -> jax.Array:
            assert sk.position("K").shape == (64,)
            return acc + sk.dot(a, b)

        return sk.loop("K", step, init=jnp.zeros((64, 64), jnp.float32))

    declare(k, tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})

    def outside(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
        BK: sk.Const[int] = 64,
    ) -> Float[Array, "M N"]:
        sk.position("K")
        return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((64, 64), jnp.float32))

    with pytest.raises(sk.BodyError, match="neither the rows nor the columns"):
        declare(outside, tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})


def test_arange_in_a_body_points_at_position() -> None:
    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return sk.load(x) + jnp.arange(64, dtype=jnp.float32)[:, None]

    with pytest.raises(sk.UnsupportedOpError, match="iota") as info:
        declare(k, tile={"M": "BM"})
    assert "sk.position" in str(info.value)
