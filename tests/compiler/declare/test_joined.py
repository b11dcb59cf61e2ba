"""Joined dims at the declaration (`-> "M N1+N2"`): the spec they make, and each refusal with
the operand, the dim and a fix that applies."""

from typing import Any

import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float

import statickernel as sk


def test_the_spec_joins_the_parts_into_the_columns() -> None:
    @sk.kernel(tile={"M": "BM"})
    def joined(
        a: Float[Array, "M N1"], b: Float[Array, "M N2"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N1+N2"]:
        return jnp.concatenate([sk.load(a), sk.load(b)], axis=1)

    spec = joined.spec
    assert spec.joined == (("N1+N2", ("N1", "N2")),)
    assert (spec.rows, spec.cols) == ("M", "N1+N2")
    assert spec.joined_parts() == ("N1", "N2")


def _refused(declare: Any) -> sk.AnnotationError:
    with pytest.raises(sk.AnnotationError) as info:
        declare()
    return info.value


def test_a_part_no_operand_has_is_refused() -> None:
    def declare() -> None:
        @sk.kernel(tile={"M": "BM"})
        def k(a: Float[Array, "M N1"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N1+X"]:
            return sk.load(a)

    error = _refused(declare)
    assert "the part X, which no operand has" in error.what and error.dim == "X"


def test_a_tiled_part_is_refused_with_a_fix() -> None:
    def declare() -> None:
        @sk.kernel(tile={"M": "BM", "N1": "BN"})
        def k(
            a: Float[Array, "M N1"],
            b: Float[Array, "M N2"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
        ) -> Float[Array, "M N1+N2"]:
            return jnp.concatenate([sk.load(a), sk.load(b)], axis=1)

    error = _refused(declare)
    assert "a constant splits" in error.what and error.dim == "N1"
    assert error.fix is not None and "leave N1 out of tile=" in error.fix


def test_a_join_in_a_kernel_with_loops_is_refused_with_a_fix() -> None:
    def declare() -> None:
        @sk.kernel(loop={"M": "BM"})
        def k(
            a: Float[Array, "M N1"], b: Float[Array, "M N2"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N1+N2"]:
            return jnp.concatenate([sk.load(a), sk.load(b)], axis=1)

    error = _refused(declare)
    assert "loop=" in error.what and error.fix is not None
    assert "jnp.concatenate outside the kernel" in error.fix


def test_a_joined_dim_off_the_columns_is_refused() -> None:
    def declare() -> None:
        @sk.kernel(tile={"M": "BM"})
        def k(
            a: Float[Array, "M N1"], b: Float[Array, "M N2"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, " N1+N2"]:
            return jnp.concatenate([sk.load(a)[0], sk.load(b)[0]])

    error = _refused(declare)
    assert "not as its columns" in error.what and error.operand == "result"
    assert error.fix is not None and "'M N1+N2'" in error.fix


def test_a_part_off_an_operands_columns_is_refused() -> None:
    def declare() -> None:
        @sk.kernel(tile={"M": "BM"})
        def k(
            a: Float[Array, "N1 M"], b: Float[Array, "M N2"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N1+N2"]:
            return jnp.concatenate([sk.load(a).T, sk.load(b)], axis=1)

    error = _refused(declare)
    assert error.operand == "a" and "not as its columns" in error.what
    assert error.expected is not None and "'M N1'" in error.expected


def test_an_operand_declared_as_a_sum_is_refused() -> None:
    def declare() -> None:
        @sk.kernel(tile={"M": "BM"})
        def k(a: Float[Array, "M N1+N2"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N1+N2"]:
            return sk.load(a)

    error = _refused(declare)
    assert "not a plain name" in error.what and error.fix is not None
    assert "a result's columns joined" in error.fix
