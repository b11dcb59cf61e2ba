"""Results whose columns join operands' columns (`-> "M N1+N2"`): each kernel in the
interpreter against the same body run by jnp on whole arrays, on ragged rows and parts of any
widths (a part off the register tiles is held apart from the next, `layout.joined`, and the
parts joined after the launch), several parts, batch dims, per-column vectors of a part,
reductions of a padded part, reductions, argmax and positions along joined columns held
apart; the refusals of what moves values along them, at the call, with fixes that apply; the
race detector and the cross-lowering for Mosaic GPU."""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from jaxtyping import Array, Float, Int32

import statickernel as sk
from tolerances import assert_close, tolerance_for


@sk.kernel(tile={"M": "BM"})
def joined(
    a: Float[Array, "M N1"], b: Float[Array, "M N2"], *, BM: sk.Const[int] = 64
) -> Float[Array, "M N1+N2"]:
    """Two operands side by side, the first scaled."""
    return jnp.concatenate([sk.load(a) * 2, sk.load(b)], axis=1)


@sk.kernel(batch=("B",), tile={"M": "BM"})
def three_parts(
    a: Float[Array, "B M N1"],
    b: Float[Array, "M N2"],
    c: Float[Array, "B M N3"],
    w: Float[Array, " N2"],
    *,
    BM: sk.Const[int] = 64,
) -> Float[Array, "B M N1+N2+N3"]:
    """Three parts: the middle one scaled by a vector along its columns and summed over its
    row, the sum added to the last (a reduction of a part, padded in registers)."""
    bv = sk.load(b) * sk.load(w)[None, :]
    total = jnp.sum(bv, axis=1, keepdims=True)
    return jnp.concatenate([sk.load(a), bv, sk.load(c) + total], axis=1)


def _three_parts_reference(a: jax.Array, b: jax.Array, c: jax.Array, w: jax.Array) -> jax.Array:
    bv = jnp.broadcast_to(b * w, (a.shape[0], *b.shape))
    return jnp.concatenate([a, bv, c + jnp.sum(bv, axis=-1, keepdims=True)], axis=-1)


def _normal(seed: int, shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, dtype)


# The last part may end anywhere (21, 61: padded in registers); 512 columns are copied in 2
# boxes; one row; bfloat16. A first part off the register tiles (67, 37, 1, 13, 300: the
# second held from the next tile), one column each, the first copied in two boxes.
@pytest.mark.parametrize(
    ("m", "n1", "n2", "dtype"),
    [
        (100, 40, 24, jnp.float32),
        (100, 40, 21, jnp.float32),
        (1, 8, 3, jnp.float32),
        (130, 128, 61, jnp.bfloat16),
        (64, 512, 64, jnp.bfloat16),
        (257, 64, 200, jnp.float32),
        (100, 67, 5, jnp.float32),
        (10, 37, 20, jnp.float32),
        (1, 1, 1, jnp.float32),
        (65, 1, 8, jnp.bfloat16),
        (7, 13, 300, jnp.float32),
        (130, 300, 13, jnp.bfloat16),
    ],
)
def test_two_operands_joined_match_jnp(m: int, n1: int, n2: int, dtype: jnp.dtype) -> None:
    a, b = _normal(0, (m, n1), dtype), _normal(1, (m, n2), dtype)
    got = joined(a, b)
    assert got.shape == (m, n1 + n2) and got.dtype == dtype
    assert_close(got, jnp.concatenate([a * 2, b], axis=1), tolerance_for(dtype))


@pytest.mark.parametrize(
    ("batch", "m", "n1", "n2", "n3"),
    [
        (2, 100, 16, 24, 13),
        (3, 1, 8, 8, 8),
        (1, 65, 64, 200, 96),
        (2, 70, 8, 104, 5),
        (2, 70, 8, 101, 5),
        (1, 65, 67, 200, 96),
        (3, 1, 1, 1, 1),
    ],
)
def test_three_parts_with_a_vector_and_a_reduction_match_jnp(
    batch: int, m: int, n1: int, n2: int, n3: int
) -> None:
    a, c = _normal(0, (batch, m, n1)), _normal(2, (batch, m, n3))
    b, w = _normal(1, (m, n2)), _normal(3, (n2,))
    got = three_parts(a, b, c, w)
    assert_close(got, _three_parts_reference(a, b, c, w), tolerance_for(jnp.float32, terms=n2))


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 200), first=st.integers(1, 200), last=st.integers(1, 100))
def test_joined_parts_match_jnp_on_drawn_shapes(m: int, first: int, last: int) -> None:
    a, b = _normal(m, (m, first)), _normal(m + 1, (m, last))
    assert_close(joined(a, b), jnp.concatenate([a * 2, b], axis=1), tolerance_for(jnp.float32))


@sk.kernel(tile={"M": "BM"})
def joined_statistics(
    a: Float[Array, "M N1"], b: Float[Array, "M N2"], *, BM: sk.Const[int] = 64
) -> tuple[Float[Array, "M N1+N2"], Float[Array, " M"], Int32[Array, " M"]]:
    """Reductions, an argmax and positions along the joined columns: where the parts are
    held apart, the masks leave the columns between them out, and positions skip them."""
    v = jnp.concatenate([sk.load(a), sk.load(b) + 1], axis=1)
    centred = v - jnp.mean(v, axis=1, keepdims=True)
    at = sk.position("N1+N2").astype(jnp.float32)[None, :]
    return centred + at, jnp.max(v, axis=1), jnp.argmax(v, axis=1).astype(jnp.int32)


@pytest.mark.parametrize(("m", "n1", "n2"), [(100, 67, 5), (1, 1, 1), (70, 9, 300), (64, 40, 3)])
def test_reductions_argmax_and_positions_along_joined_columns_match_jnp(
    m: int, n1: int, n2: int
) -> None:
    a, b = _normal(0, (m, n1)), _normal(1, (m, n2))
    centred, top, where = joined_statistics(a, b)
    v = jnp.concatenate([a, b + 1], axis=1)
    want = v - jnp.mean(v, axis=1, keepdims=True) + jnp.arange(n1 + n2, dtype=jnp.float32)
    assert_close(centred, want, tolerance_for(jnp.float32, terms=n1 + n2))
    assert_close(top, jnp.max(v, axis=1), tolerance_for(jnp.float32))
    assert (where == jnp.argmax(v, axis=1)).all()


def test_parts_held_apart_show_in_the_plan_and_are_joined_after_the_launch() -> None:
    a, b = jax.ShapeDtypeStruct((100, 67), jnp.float32), jax.ShapeDtypeStruct((100, 5), jnp.float32)
    text = str(joined.plan(a, b))
    assert (
        "N1+N2=72  whole            whole, padded 72 -> 80, its parts held from columns 0, 72"
        in (text)
    )
    assert "result: float32[100, 72]  block [64, 80]  host-padded to [100, 80]" in text
    assert "the kernel writes the result so, as [100, 80], and the parts are joined" in text
    source = joined.emit(a, b)
    assert "out_type=jax.ShapeDtypeStruct((100, 80), jnp.float32)" in source
    assert "return jnp.concatenate([result[:, :67], result[:, 72:77]], axis=-1)" in source


@sk.kernel(tile={"M": "BM"})
def joined_scan(
    a: Float[Array, "M N1"], b: Float[Array, "M N2"], *, BM: sk.Const[int] = 64
) -> Float[Array, "M N1+N2"]:
    return jnp.cumsum(jnp.concatenate([sk.load(a), sk.load(b)], axis=1), axis=1)


@sk.kernel(tile={"M": "BM"})
def joined_then_sliced(
    a: Float[Array, "M N1"], b: Float[Array, "M N2"], *, BM: sk.Const[int] = 64
) -> tuple[Float[Array, "M N1+N2"], Float[Array, " M"]]:
    v = jnp.concatenate([sk.load(a), sk.load(b)], axis=1)
    return v, jnp.sum(v[:, 8:], axis=1)


def test_values_moved_along_joined_columns_held_apart_are_refused_at_the_call() -> None:
    """A scan and a slice along the joined columns are exact where the parts lie side by side
    (N1 = 64), and refused where a block holds them apart (N1 = 67), with the part that is
    off the tiles and a fix that applies."""
    a, b = _normal(0, (10, 64)), _normal(1, (10, 5))
    want = jnp.cumsum(jnp.concatenate([a, b], axis=1), axis=1)
    assert_close(joined_scan(a, b), want, tolerance_for(jnp.float32, terms=69))
    for kernel, prim in ((joined_scan, "cumsum"), (joined_then_sliced, "slice")):
        with pytest.raises(sk.JoinedColumnsError) as info:
            kernel(jnp.zeros((10, 67)), jnp.zeros((10, 5)))
        error = info.value
        assert error.phase is sk.Phase.CALL and error.dim == "N1+N2"
        assert f"(`{prim}`)" in error.what and "N1 = 67 is not a multiple of 8" in error.what
        assert error.fix is not None and "on the parts before joining them" in error.fix


@sk.kernel(tile={"M": "BM"})
def joined_in_pieces(
    a: Float[Array, "M N1"],
    b: Float[Array, "M N2"],
    c: Float[Array, "M N3"],
    *,
    BM: sk.Const[int] = 64,
) -> Float[Array, "M N1+N2+N3"]:
    v = sk.load(a)
    return jnp.concatenate([v[:, :8], v[:, 8:], sk.load(b), sk.load(c)], axis=1)


@sk.kernel(tile={"M": "BM"})
def joined_in_two_steps(
    a: Float[Array, "M N1"],
    b: Float[Array, "M N2"],
    c: Float[Array, "M N3"],
    *,
    BM: sk.Const[int] = 64,
) -> Float[Array, "M N1+N2+N3"]:
    first = jnp.concatenate([sk.load(a), sk.load(b)], axis=1)
    return jnp.concatenate([first, sk.load(c)], axis=1)


def test_parts_held_apart_are_joined_whole_and_at_once() -> None:
    """Where N2 = 5 makes a block hold the parts apart, a join of other pieces (N1 in two) is
    refused, and so is a join of some of the parts; each fix says to join the parts at once.
    Where they lie side by side, both are exact."""
    a, b, c = _normal(0, (10, 16)), _normal(1, (10, 8)), _normal(2, (10, 3))
    want = jnp.concatenate([a, b, c], axis=1)
    assert_close(joined_in_pieces(a, b, c), want, tolerance_for(jnp.float32))
    assert_close(joined_in_two_steps(a, b, c), want, tolerance_for(jnp.float32))
    b = _normal(1, (10, 5))
    with pytest.raises(sk.JoinedColumnsError) as pieces:
        joined_in_pieces(a, b, c)
    assert "pieces of 8 + 8 + 5 + 3 columns" in pieces.value.what
    assert "whose parts (16 + 5 + 3 columns)" in pieces.value.what
    assert pieces.value.fix is not None and "join the parts of N1+N2+N3 whole" in pieces.value.fix
    with pytest.raises(sk.SliceError) as steps:
        joined_in_two_steps(_normal(0, (10, 13)), b, c)
    assert "column 13 (the join)" in steps.value.what
    assert (
        steps.value.fix is not None and "join all the parts of N1+N2+N3 at once" in steps.value.fix
    )


def test_parts_too_wide_for_shared_memory_get_a_fix_that_applies() -> None:
    with pytest.raises(sk.SharedMemoryError) as info:
        joined.plan(
            jax.ShapeDtypeStruct((64, 4096), jnp.bfloat16),
            jax.ShapeDtypeStruct((64, 4096), jnp.bfloat16),
        )
    fix = info.value.fix or ""
    assert "N1+N2" in fix and "results of their own" in fix and "loop=" not in fix


def test_the_plan_shows_the_parts_joined() -> None:
    text = str(joined.plan(jnp.zeros((100, 40)), jnp.zeros((100, 21))))
    assert "N1=40" in text and "joined into N1+N2" in text
    assert "padded 21 -> 24" in text and "N1+N2=61" in text
    assert "result: float32[100, 61]" in text


@pytest.mark.parametrize("widths", [(16, 24, 13), (13, 21, 5)])
def test_a_joined_result_has_no_races(widths: tuple[int, int, int]) -> None:
    report = sk.testing.detect_races(three_parts, *_three_inputs(*widths))
    assert not report.races_found and report.result is not None


def _three_inputs(n1: int = 16, n2: int = 24, n3: int = 13) -> tuple[jax.Array, ...]:
    return (
        _normal(0, (2, 100, n1)),
        _normal(1, (100, n2)),
        _normal(2, (2, 100, n3)),
        _normal(3, (n2,)),
    )


@pytest.mark.parametrize(
    "shapes",
    [
        (((130, 128), jnp.bfloat16), ((130, 61), jnp.bfloat16)),
        (((64, 512), jnp.bfloat16), ((64, 64), jnp.bfloat16)),
        (((100, 67), jnp.float32), ((100, 5), jnp.float32)),
        (((130, 300), jnp.bfloat16), ((130, 13), jnp.bfloat16)),
    ],
)
def test_a_joined_result_cross_lowers_for_the_gpu(
    shapes: tuple[tuple[tuple[int, int], jnp.dtype], ...],
) -> None:
    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes]
    assert "mosaic_gpu" in joined.lower(*args).as_text()


@pytest.mark.parametrize("widths", [(16, 24, 13), (13, 21, 5)])
def test_three_parts_cross_lower_for_the_gpu(widths: tuple[int, int, int]) -> None:
    args = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in _three_inputs(*widths)]
    assert "mosaic_gpu" in three_parts.lower(*args).as_text()


def test_reductions_along_joined_columns_held_apart_cross_lower_for_the_gpu() -> None:
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((100, 67), (100, 5))]
    assert "mosaic_gpu" in joined_statistics.lower(*args).as_text()
