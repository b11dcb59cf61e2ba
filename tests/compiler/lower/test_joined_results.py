"""Results whose columns join operands' columns (`-> "M N1+N2"`): each kernel in the
interpreter against the same body run by jnp on whole arrays, on ragged rows and parts (the
last part may end off a register tile), several parts, batch dims, per-column vectors of a
part, reductions of a padded part; the refusal of a join off the register tiles, at the call,
with a fix that applies; the race detector and the cross-lowering for Mosaic GPU."""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from jaxtyping import Array, Float

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
# boxes; one row; bfloat16.
@pytest.mark.parametrize(
    ("m", "n1", "n2", "dtype"),
    [
        (100, 40, 24, jnp.float32),
        (100, 40, 21, jnp.float32),
        (1, 8, 3, jnp.float32),
        (130, 128, 61, jnp.bfloat16),
        (64, 512, 64, jnp.bfloat16),
        (257, 64, 200, jnp.float32),
    ],
)
def test_two_operands_joined_match_jnp(m: int, n1: int, n2: int, dtype: jnp.dtype) -> None:
    a, b = _normal(0, (m, n1), dtype), _normal(1, (m, n2), dtype)
    got = joined(a, b)
    assert got.shape == (m, n1 + n2) and got.dtype == dtype
    assert_close(got, jnp.concatenate([a * 2, b], axis=1), tolerance_for(dtype))


@pytest.mark.parametrize(
    ("batch", "m", "n1", "n2", "n3"),
    [(2, 100, 16, 24, 13), (3, 1, 8, 8, 8), (1, 65, 64, 200, 96), (2, 70, 8, 104, 5)],
)
def test_three_parts_with_a_vector_and_a_reduction_match_jnp(
    batch: int, m: int, n1: int, n2: int, n3: int
) -> None:
    a, c = _normal(0, (batch, m, n1)), _normal(2, (batch, m, n3))
    b, w = _normal(1, (m, n2)), _normal(3, (n2,))
    got = three_parts(a, b, c, w)
    assert_close(got, _three_parts_reference(a, b, c, w), tolerance_for(jnp.float32, terms=n2))


@settings(max_examples=10, deadline=None)
@given(
    m=st.integers(1, 200),
    eighths=st.integers(1, 24),
    last=st.integers(1, 100),
)
def test_joined_parts_match_jnp_on_drawn_shapes(m: int, eighths: int, last: int) -> None:
    a, b = _normal(m, (m, 8 * eighths)), _normal(m + 1, (m, last))
    assert_close(joined(a, b), jnp.concatenate([a * 2, b], axis=1), tolerance_for(jnp.float32))


def test_a_join_off_the_register_tiles_is_refused_at_the_call_with_a_fix() -> None:
    with pytest.raises(sk.SliceError) as info:
        joined(jnp.zeros((10, 37)), jnp.zeros((10, 20)))
    error = info.value
    assert error.phase is sk.Phase.CALL and "column 37 (the join)" in error.what
    assert error.fix is not None and "every part of N1+N2 but the last" in error.fix
    assert "outside the kernel" in error.fix


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


def test_a_joined_result_has_no_races() -> None:
    report = sk.testing.detect_races(three_parts, *_three_inputs())
    assert not report.races_found and report.result is not None


def _three_inputs() -> tuple[jax.Array, ...]:
    return (
        _normal(0, (2, 100, 16)),
        _normal(1, (100, 24)),
        _normal(2, (2, 100, 13)),
        _normal(3, (24,)),
    )


@pytest.mark.parametrize(
    "shapes",
    [
        (((130, 128), jnp.bfloat16), ((130, 61), jnp.bfloat16)),
        (((64, 512), jnp.bfloat16), ((64, 64), jnp.bfloat16)),
    ],
)
def test_a_joined_result_cross_lowers_for_the_gpu(
    shapes: tuple[tuple[tuple[int, int], jnp.dtype], ...],
) -> None:
    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes]
    assert "mosaic_gpu" in joined.lower(*args).as_text()


def test_three_parts_cross_lower_for_the_gpu() -> None:
    args = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in _three_inputs()]
    assert "mosaic_gpu" in three_parts.lower(*args).as_text()
