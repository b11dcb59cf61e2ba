"""The padding a SliceError proposes, applied as it is written: the fix's `x = ...` pads each
operand along the dim, its `out = ...` takes the results back out, and the kernel run on the
padded operands gives the numbers of a jnp reference on the unpadded ones. RoPE's halves at a
head dim of 100, DeepSeek's rotated part of 20 columns and its unrotated part of 60, and a
split into quarters. Padding the dim at its end, as the fix once said, gives other numbers."""

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from rope import mla_rope, mla_rope_reference, rope, rope_angles, rope_reference
from tolerances import assert_close, tolerance_for

_PAD = re.compile(r"x = (.+?) for every operand x along (\w+)")
_TAKE = re.compile(r"out = (.+?) for every result out along")


def _applied(error: sk.SliceError) -> tuple[str, Callable[[Any], Any], Callable[[Any], Any]]:
    """The dim the fix pads, and its two steps as functions: the operands' and the results'."""
    assert error.fix is not None
    pad, take = _PAD.search(error.fix), _TAKE.search(error.fix)
    assert pad is not None and take is not None, error.fix
    return (
        pad.group(2),
        lambda x: eval(pad.group(1), {"jnp": jnp, "x": x}),
        lambda out: eval(take.group(1), {"jnp": jnp, "out": out}),
    )


def _normal(seed: int, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def _rope_operands(head_dim: int) -> tuple[jax.Array, ...]:
    angles = rope_angles(jnp.arange(70), head_dim)
    q, k = _normal(0, (1, 2, 70, head_dim)), _normal(1, (1, 2, 70, head_dim))
    return q, k, jnp.cos(angles), jnp.sin(angles)


def test_the_rope_fix_pads_each_half() -> None:
    operands = _rope_operands(100)
    with pytest.raises(sk.SliceError) as info:
        rope(*operands)
    assert "each piece" in str(info.value.fix) and "[0:50] and [50:100]" in str(info.value.fix)
    dim, pad, take = _applied(info.value)
    assert dim == "D"
    padded = [pad(x) for x in operands]
    assert padded[0].shape[-1] == 112  # each half of 50 padded to 56
    got = [take(out) for out in rope(*padded)]
    for got_one, want in zip(got, rope_reference(*operands), strict=True):
        assert got_one.shape == want.shape
        assert_close(got_one, want, tolerance_for(jnp.float32, 2, scale=4.0))


def test_padding_the_head_dim_at_its_end_changes_the_numbers() -> None:
    """What the fix said before: the halves of the padded dim are not the halves of D."""
    operands = _rope_operands(100)
    at_end = [jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, 12)]) for x in operands]
    got = rope(*at_end)[0][..., :100]
    want = rope_reference(*operands)[0]
    assert float(jnp.max(jnp.abs(got - want))) > 0.1


def test_the_rotated_part_of_a_joined_dim_pads_each_half() -> None:
    angles = rope_angles(jnp.arange(70), 20)
    operands = (
        _normal(2, (1, 2, 70, 64)),
        _normal(3, (1, 2, 70, 20)),
        _normal(4, (1, 2, 70, 64)),
        _normal(5, (1, 70, 20)),
        jnp.cos(angles),
        jnp.sin(angles),
    )
    with pytest.raises(sk.SliceError) as info:
        mla_rope(*operands)
    dim, pad, take = _applied(info.value)
    assert dim == "Dr"
    q_nope, q_pe, k_nope, k_pe, cos, sin = operands
    got = mla_rope(q_nope, pad(q_pe), k_nope, pad(k_pe), pad(cos), pad(sin))
    for got_one, want in zip(got, mla_rope_reference(*operands), strict=True):
        assert_close(take(got_one), want, tolerance_for(jnp.float32, 2, scale=4.0))


def test_a_joined_part_off_the_tiles_needs_no_padding() -> None:
    """A part of a joined result's columns off the register tiles (Dn = 60) is held apart
    from the next part in the block, so the kernel runs unpadded (the fix the SliceError gave
    here before, padding Dn and taking it back out, is no longer needed)."""
    angles = rope_angles(jnp.arange(70), 16)
    operands = (
        _normal(6, (1, 2, 70, 60)),
        _normal(7, (1, 2, 70, 16)),
        _normal(8, (1, 2, 70, 60)),
        _normal(9, (1, 70, 16)),
        jnp.cos(angles),
        jnp.sin(angles),
    )
    got = mla_rope(*operands)
    for got_one, want in zip(got, mla_rope_reference(*operands), strict=True):
        assert_close(got_one, want, tolerance_for(jnp.float32, 2, scale=4.0))


@sk.kernel(tile={"M": "BM"})
def quarters(x: Float[Array, "M D"], *, BM: sk.Const[int] = 64) -> Float[Array, "M D"]:
    a, b, c, d = jnp.split(sk.load(x), 4, axis=1)
    return jnp.concatenate([d * 2.0, c, b - a, jnp.exp(a)], axis=1)


def test_a_split_pads_every_piece_it_cuts() -> None:
    x = _normal(10, (70, 100))
    with pytest.raises(sk.SliceError) as info:
        quarters(x)
    assert "[0:25] and [25:50] and [50:75] and [75:100]" in str(info.value.fix)
    _, pad, take = _applied(info.value)
    a, b, c, d = jnp.split(x, 4, axis=1)
    want = jnp.concatenate([d * 2.0, c, b - a, jnp.exp(a)], axis=1)
    assert_close(take(quarters(pad(x))), want, tolerance_for(jnp.float32, 2, scale=4.0))
