"""Slices, splits and concatenations of blocks along their columns (`v[:, :h]`, `jnp.split`,
`jnp.concatenate`): each kernel in the interpreter against the same body run by jnp on whole
arrays, on ragged and padded shapes; the refusals, with their fixes; and the cross-lowering
for Mosaic GPU."""

import functools
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from jaxtyping import Array, Float, Float32, Int8

import statickernel as sk
from tolerances import assert_close, tolerance_for


def _rotate_half_body(v: Any) -> Any:
    """RoPE's rotate-half and a row statistic of one half, as jnp writes them."""
    half = v.shape[1] // 2
    x1, x2 = v[:, :half], v[:, half:]
    total = jnp.sum(x1 * x2, axis=1)
    return jnp.concatenate([-x2, x1 + total[:, None]], axis=1)


def _split_body(v: Any) -> Any:
    """Four quarters, scaled apart and joined back in another order; a per-column sum of one
    quarter over the rows (a reduction of a slice over the ragged rows)."""
    a, b, c, d = jnp.split(v, 4, axis=1)
    column_max = jnp.max(a, axis=0)
    return jnp.concatenate([d * 2.0, c, b - column_max[None, :], jnp.exp(a)], axis=1)


def _constant_pieces_body(v: Any) -> Any:
    """Slices joined with constant blocks: zeros, and a filled block added to a slice."""
    rows, width = v.shape[0], v.shape[1] - 8
    rest = jnp.full((rows, width), 3.0, v.dtype) + v[:, 8:]
    return jnp.concatenate([jnp.zeros((rows, 8), v.dtype), rest], axis=1)


BODIES: dict[str, Callable[[Any], Any]] = {
    "rotate_half": _rotate_half_body,
    "split": _split_body,
    "constant_pieces": _constant_pieces_body,
}


def _kernel(body: Callable[[Any], Any]) -> sk.Kernel:
    @sk.kernel(tile={"M": "BM"})
    def sliced(x: Float[Array, "M D"], *, BM: sk.Const[int] = 64) -> Float[Array, "M D"]:
        return body(sk.load(x).astype(jnp.float32)).astype(x.dtype)

    return sliced


KERNELS = {name: _kernel(body) for name, body in BODIES.items()}


def _by_blocks(name: str, x: jax.Array) -> jax.Array:
    """The body run by jnp on each block of 64 rows of the whole array, as the kernel runs it
    (a reduction over the rows is one block's)."""
    v = x.astype(jnp.float32)
    blocks = [BODIES[name](v[i : i + 64]) for i in range(0, len(v), 64)]
    return jnp.concatenate(blocks).astype(x.dtype)


# D = 544 is padded to 552 in registers (3 boxes of 184), so a join back to the full width
# fills the 8 columns past the edge.
@pytest.mark.parametrize("name", list(BODIES))
@pytest.mark.parametrize("shape", [(1, 32), (7, 64), (100, 128), (129, 96), (65, 544)])
def test_a_sliced_body_matches_jnp(name: str, shape: tuple[int, int]) -> None:
    x = jax.random.normal(jax.random.key(shape[0]), shape, jnp.bfloat16)
    got = KERNELS[name](x)
    assert_close(
        got, _by_blocks(name, x), tolerance_for(jnp.bfloat16, terms=shape[1]), err_msg=name
    )


@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 200), sixteenths=st.integers(1, 16))
def test_rotate_half_matches_jnp_on_drawn_shapes(rows: int, sixteenths: int) -> None:
    x = jax.random.normal(jax.random.key(rows), (rows, 16 * sixteenths), jnp.float32)
    got = KERNELS["rotate_half"](x)
    want = _by_blocks("rotate_half", x)
    assert_close(got, want, tolerance_for(jnp.float32, terms=8 * sixteenths))


def test_a_slice_of_a_per_column_vector() -> None:
    @sk.kernel(tile={"M": "BM"})
    def halves_scaled(
        x: Float32[Array, "M D"], w: Float32[Array, " D"], *, BM: sk.Const[int] = 64
    ) -> Float32[Array, "M D"]:
        v, g = sk.load(x), sk.load(w)
        half = g.shape[0] // 2
        return jnp.concatenate([v[:, :half] * g[half:], v[:, half:] * g[:half]], axis=1)

    x = jax.random.normal(jax.random.key(0), (70, 64))
    w = jax.random.normal(jax.random.key(1), (64,))
    want = jnp.concatenate([x[:, :32] * w[32:], x[:, 32:] * w[:32]], axis=1)
    assert_close(halves_scaled(x, w), want, tolerance_for(jnp.float32))


@pytest.mark.parametrize("name", list(BODIES))
def test_a_sliced_body_cross_lowers_for_the_gpu(name: str) -> None:
    KERNELS[name].lower(jax.ShapeDtypeStruct((129, 544), jnp.bfloat16))


def test_the_declaration_leaves_the_alignment_to_the_call() -> None:
    """At the declaration D is a probe of 8 columns, whose halves are 4: the alignment is a
    fact of the call's sizes, which the declaration does not know."""
    kernel = KERNELS["rotate_half"]
    with pytest.raises(sk.SliceError) as info:
        kernel(jnp.zeros((10, 100), jnp.float32))
    error = info.value
    assert error.kernel == "sliced" and error.phase is sk.Phase.CALL
    assert "column 50" in error.what and "[0:50] of 100 columns" in (error.actual or "")
    assert error.fix is not None and "[0:50] and [50:100]" in error.fix
    assert "each piece" in error.fix and "jnp.pad" in error.fix
    assert isinstance(error, sk.UnsupportedOpError)


def _thirds_body(v: Any) -> Any:
    """Three equal parts, joined back in another order: D / 3 columns each."""
    a, b, c = jnp.split(v, 3, axis=1)
    return jnp.concatenate([c, b * 2.0, a - jnp.max(b, axis=1, keepdims=True)], axis=1)


@functools.cache
def _thirds() -> sk.Kernel:
    """Declared on first use: before, the declaration refused it (a test-time failure)."""
    return _kernel(_thirds_body)


@pytest.mark.parametrize("shape", [(70, 384), (1, 24), (129, 48)])
def test_a_split_in_three_is_declared_and_matches_jnp(shape: tuple[int, int]) -> None:
    """At the declaration D was a probe of 8 columns, which jnp.split cannot cut in 3: the
    body failed to trace there, though every call at a multiple of 24 columns takes it. The
    declaration now checks the body where it traces, 24 columns."""
    x = jax.random.normal(jax.random.key(shape[1]), shape, jnp.float32)
    v = x.astype(jnp.float32)
    want = jnp.concatenate([_thirds_body(v[i : i + 64]) for i in range(0, len(v), 64)])
    assert_close(_thirds()(x), want, tolerance_for(jnp.float32))


def test_a_split_in_three_at_a_width_it_cannot_take_is_the_calls_error() -> None:
    with pytest.raises(sk.BodyError) as info:
        _thirds()(jnp.zeros((10, 100), jnp.float32))
    error = info.value
    assert type(error) is sk.BodyError and error.phase is sk.Phase.CALL
    assert "equal division" in error.what and error.bindings == {"M": 10, "D": 100}
    assert error.where is not None and error.where.endswith(f":{_THIRDS_SPLIT_LINE}")


_THIRDS_SPLIT_LINE = _thirds_body.__code__.co_firstlineno + 2


def test_a_body_that_traces_at_no_width_is_refused_at_the_declaration() -> None:
    """The wider probes are tried only where the smallest fails; a body that fails at every
    width is refused with the smallest probe's error, as before."""
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def unsplittable(
            x: Float32[Array, "M D"], *, BM: sk.Const[int] = 64
        ) -> Float32[Array, "M D"]:
            v = sk.load(x)
            return v * float(v[0, 0])  # a traced value made a Python float: at any width

    error = info.value
    assert error.phase is sk.Phase.DECLARATION and "float32[64, 8]" in str(error.actual)


def _refused(body: Callable[[Any], Any], **decorator: Any) -> sk.UnsupportedOpError:
    with pytest.raises(sk.UnsupportedOpError) as info:

        @sk.kernel(**(decorator or {"tile": {"M": "BM"}}))
        def refused(
            x: Float32[Array, "M D"], *, BM: sk.Const[int] = 64, BD: sk.Const[int] = 64
        ) -> Float32[Array, "M D"]:
            return body(sk.load(x))

    return info.value


def test_a_slice_with_a_step_is_refused_with_a_fix() -> None:
    error = _refused(lambda v: jnp.concatenate([v[:, ::2], v[:, 1::2]], axis=1))
    assert "with a step" in error.what and error.fix and "permute the columns" in error.fix


def test_a_slice_along_the_rows_is_refused() -> None:
    error = _refused(lambda v: jnp.concatenate([v[32:], v[:32]], axis=0))
    assert isinstance(error, sk.SliceError) and "along their columns only" in error.what


def test_a_slice_of_a_split_dim_is_refused_with_a_fix() -> None:
    error = _refused(
        lambda v: jnp.concatenate([v[:, 32:], v[:, :32]], axis=1), tile={"M": "BM", "D": "BD"}
    )
    assert isinstance(error, sk.SliceError) and "which the grid splits" in error.what
    assert str(error.fix).startswith("hold D whole: drop it from tile= in the decorator")
    assert 'sk.load(x, offset={"D": -3})' in str(error.fix)


def test_a_slice_of_8_bit_values_is_refused_with_a_cast() -> None:
    with pytest.raises(sk.SliceError, match="cast it first"):

        @sk.kernel(tile={"M": "BM"})
        def bytes_rotated(x: Int8[Array, "M D"], *, BM: sk.Const[int] = 64) -> Int8[Array, "M D"]:
            v = sk.load(x)
            return jnp.concatenate([v[:, 16:], v[:, :16]], axis=1)
