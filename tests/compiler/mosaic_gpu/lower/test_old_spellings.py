"""Bodies written the way they were before statickernel had a declaration for what they do:
taps shifted with jnp.pad or jnp.roll, rows read with an index operand's values, rows written
with .at[].set or dynamic_update_slice, a loop to a bound the data gives, a slice at a start
the data gives. Each is refused with the error class of its op, and its fix names what does
the job now: sk.load(x, offset=...), index=, update=, sk.loop(..., stop=) and ragged=, pages=.
The shifted load the fix names is run against the jnp the body meant."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float, Float32, Int32

import statickernel as sk
from tolerances import assert_close, tolerance_for


def _refused(body: Callable[..., Any], error: type[sk.UnsupportedOpError]) -> sk.StaticKernelError:
    """`body(x, ids, n)` in a kernel of x 'L C', an integer vector along L and an integer
    scalar."""
    with pytest.raises(error) as info:

        @sk.kernel(tile={"L": "BL", "C": "BC"})
        def old(
            x: Float32[Array, "L C"],
            ids: Int32[Array, " L"],
            n: Int32[Array, ""],
            *,
            BL: sk.Const[int] = 64,
            BC: sk.Const[int] = 64,
        ) -> Float32[Array, "L C"]:
            return body(sk.load(x), sk.load(ids), sk.load(n))

    assert info.value.fix is not None
    return info.value


def _causal_taps(x: jax.Array) -> jax.Array:
    """x plus x three rows back, zeros before the first row, as jnp writes it."""
    return x + jnp.pad(x, ((3, 0), (0, 0)))[:-3]


@sk.kernel(tile={"L": "BL", "C": "BC"})
def causal_taps(
    x: Float32[Array, "L C"], *, BL: sk.Const[int] = 64, BC: sk.Const[int] = 64
) -> Float32[Array, "L C"]:
    return sk.load(x) + sk.load(x, offset={"L": -3})


def test_taps_shifted_with_jnp_pad_are_told_to_load_them_shifted() -> None:
    error = _refused(lambda v, ids, n: _causal_taps(v), sk.UnsupportedOpError)
    assert 'sk.load(x, offset={"L": -3})' in str(error.fix)
    # The load the fix names, against the jnp the body meant.
    x = jax.random.normal(jax.random.key(0), (70, 64), jnp.float32)
    assert_close(causal_taps(x), _causal_taps(x), tolerance_for(jnp.float32, 2))


def test_taps_shifted_with_jnp_roll_are_told_to_load_them_shifted() -> None:
    error = _refused(lambda v, ids, n: v + jnp.roll(v, 3, axis=0), sk.SliceError)
    assert 'sk.load(x, offset={"L": -3})' in str(error.fix)


def test_rows_read_by_an_index_in_the_body_are_told_to_declare_index() -> None:
    error = _refused(lambda v, ids, n: v[ids], sk.UnsupportedOpError)
    assert 'index={"V": "ids"}' in str(error.fix)


@pytest.mark.parametrize(
    ("body", "written_as"),
    [
        (lambda v, ids, n: v.at[ids].set(v * 2.0), "set"),
        (lambda v, ids, n: v.at[ids].add(1.0), "add"),
        (lambda v, ids, n: jax.lax.dynamic_update_slice(v, v * 2.0, (n, 0)), "dus"),
    ],
    ids=["at-set", "at-add", "dynamic-update-slice"],
)
def test_rows_written_in_the_body_are_told_to_declare_update(
    body: Callable[..., Any], written_as: str
) -> None:
    error = _refused(body, sk.UnsupportedOpError)
    assert 'update="cache"' in str(error.fix) and 'index={"Slots": ' in str(error.fix)


def test_a_loop_to_a_bound_the_data_gives_is_told_to_use_sk_loop_or_ragged() -> None:
    def body(v: Any, ids: Any, n: Any) -> Any:
        return jax.lax.fori_loop(0, n, lambda i, acc: acc + v, jnp.zeros_like(v))

    fix = str(_refused(body, sk.UnsupportedOpError).fix)
    assert "stop=sk.load(length)" in fix and 'ragged={"M": "group_sizes"}' in fix


def test_a_slice_at_a_start_the_data_gives_is_told_to_declare_index_or_pages() -> None:
    def body(v: Any, ids: Any, n: Any) -> Any:
        return jax.lax.dynamic_slice(v, (n, 0), (v.shape[0], v.shape[1]))

    fix = str(_refused(body, sk.UnsupportedOpError).fix)
    assert 'index={"V": "ids"}' in fix and 'pages={"P": "block_tables"}' in fix


def test_the_body_of_a_kernel_with_a_declared_frame_still_gets_its_own_fix() -> None:
    """A 2-D operand the declaration accepts, sliced at a row in the body: no declaration is
    named where none does the job, only the shifted load, conditionally."""
    with pytest.raises(sk.SliceError) as info:

        @sk.kernel(tile={"M": "BM"})
        def first_row(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            v = sk.load(x)
            return v - v[:1]

    assert str(info.value.fix).startswith("to read a block shifted along its rows")
