"""`sk.checked_indices()`: the index operands of each call read on the host first, an index
outside the dim it addresses (or a slot a scatter writes twice) an OperandError naming the
operand, the position, the value and the bound; -1 passes as a scatter's padding; calls under
jax.jit and outside the block are not checked."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import statickernel as sk
from embedding import embedding
from kv_cache_update import kv_cache_rows

TABLE = jnp.arange(40.0).reshape(10, 4)


def test_an_index_past_the_table_names_its_position_and_value() -> None:
    ids = jnp.array([1, 2, 10, 3, 11], jnp.int32)
    with sk.checked_indices(), pytest.raises(sk.OperandError) as info:
        embedding(TABLE, ids)
    error = info.value
    assert error.kernel == "embedding" and error.operand == "ids" and error.dim == "V"
    assert "position 2" in error.what and ": 10" in error.what
    assert error.expected == "indices in [0, 10) (V of `table`)"
    assert error.actual == "ids[2] = 10, and 1 more outside"
    assert error.fix and "zeros" in error.fix
    assert error.where and "test_checked_indices.py" in error.where


def test_a_negative_index_of_a_gather_is_refused() -> None:
    with sk.checked_indices(), pytest.raises(sk.OperandError, match="position 0: -1"):
        embedding(TABLE, jnp.array([-1, 0], jnp.int32))


def test_outside_the_block_and_under_jit_nothing_is_checked() -> None:
    ids = jnp.array([1, 12], jnp.int32)
    np.testing.assert_array_equal(embedding(TABLE, ids)[1], 0.0)
    with sk.checked_indices():
        np.testing.assert_array_equal(jax.jit(embedding)(TABLE, ids)[1], 0.0)
        with sk.checked_indices(False):
            np.testing.assert_array_equal(embedding(TABLE, ids)[0], TABLE[1])


def test_indices_inside_pass_and_give_the_rows() -> None:
    ids = jnp.array([9, 0, 4], jnp.int32)
    with sk.checked_indices():
        np.testing.assert_array_equal(embedding(TABLE, ids), TABLE[ids])


def test_a_scatter_passes_its_padding_and_refuses_a_slot_written_twice() -> None:
    cache, new = jnp.zeros((10, 8)), jnp.ones((4, 8))
    with sk.checked_indices():
        out = kv_cache_rows(cache, new, jnp.array([-1, 2, -1, 3], jnp.int32))
        np.testing.assert_array_equal(out.sum(axis=1), [0, 0, 8, 8, 0, 0, 0, 0, 0, 0])
        with pytest.raises(sk.OperandError) as info:
            kv_cache_rows(cache, new, jnp.array([4, 2, 9, 2], jnp.int32))
    assert info.value.operand == "slot_mapping" and info.value.dim == "Slots"
    assert "positions 1 and 3" in info.value.what
    assert info.value.actual == "slot_mapping[1] = slot_mapping[3] = 2"


def test_a_scatter_slot_past_the_cache_is_refused() -> None:
    cache, new = jnp.zeros((10, 8)), jnp.ones((2, 8))
    with sk.checked_indices(), pytest.raises(sk.OperandError, match="position 1: 10"):
        kv_cache_rows(cache, new, jnp.array([0, 10], jnp.int32))
