"""Random numbers in a kernel body: `sk.random_bits` and `sk.uniform`, their references, the
scalar seed operand that carries a runtime seed, and the gallery's dropout.

The bits are a hash of the seed and each element's global position, so the kernel's bits
equal `sk.random_bits_reference`'s exactly, at any shape, seed and blocking, in the
interpreter; they cross-lower for CUDA; and a new seed reuses the compiled kernel.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Float32, Int32, UInt32

import statickernel as sk
from dropout import dropout, dropout_reference
from markers import line_finder

F32 = jnp.float32
SHAPES = [(129, 257), (97, 131), (33, 65), (1, 300), (128, 256)]
SEEDS = [0, 1, 2**32 - 1, 123_456_789]

line_of = line_finder(__file__)


@sk.kernel(tile={"M": "BM", "N": "BN"})
def bits(
    x: Float[Array, "M N"],
    seed: UInt32[Array, ""],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 128,
) -> UInt32[Array, "M N"]:
    return sk.random_bits(seed)


@sk.kernel(tile={"M": "BM", "N": "BN"})
def noisy(
    x: Float[Array, "M N"],
    seed: Int32[Array, ""],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
) -> Float[Array, "M N"]:
    # An int32 seed, and one computed from it: the next seed's numbers.
    return sk.load(x) + sk.uniform(sk.load(seed) + 1)


@sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
def streamed_uniform(
    x: Float[Array, "M N"],
    seed: UInt32[Array, ""],
    *,
    BM: sk.Const[int] = 64,
    BN: sk.Const[int] = 64,
) -> Float[Array, "M N"]:
    return sk.map_blocks("N", lambda: sk.load(x) + sk.uniform(seed))


def zeros(shape: tuple[int, int]) -> jax.Array:
    return jnp.zeros(shape, F32)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_kernels_bits_are_the_references(shape: tuple[int, int], seed: int) -> None:
    out = bits(zeros(shape), jnp.uint32(seed))
    np.testing.assert_array_equal(
        np.asarray(out), np.asarray(sk.random_bits_reference(seed, shape))
    )


@pytest.mark.parametrize("block", [(64, 64), (128, 128), (64, 256), (192, 32)], ids=str)
def test_the_bits_do_not_depend_on_the_blocks(block: tuple[int, int]) -> None:
    shape, seed = (200, 300), jnp.uint32(7)
    out = bits(zeros(shape), seed, BM=block[0], BN=block[1])
    np.testing.assert_array_equal(np.asarray(out), np.asarray(bits(zeros(shape), seed)))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(sk.random_bits_reference(7, shape)))


@pytest.mark.parametrize("shape", [(70, 130), (64, 64)], ids=str)
def test_a_loop_steps_numbers_are_the_references(shape: tuple[int, int]) -> None:
    out = streamed_uniform(zeros(shape), jnp.uint32(3))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(sk.uniform_reference(3, shape)))


def test_an_int32_seed_and_one_computed_in_the_body() -> None:
    x = jnp.ones((100, 70), F32)
    for seed in (0, -1, 41):
        expected = x + sk.uniform_reference(jnp.int32(seed) + 1, x.shape)
        np.testing.assert_array_equal(np.asarray(noisy(x, jnp.int32(seed))), np.asarray(expected))


def test_int32_and_uint32_seeds_agree_on_the_bits() -> None:
    a = sk.random_bits_reference(jnp.int32(-1), (8, 8))
    b = sk.random_bits_reference(jnp.uint32(2**32 - 1), (8, 8))
    c = sk.random_bits_reference(2**32 - 1, (8, 8))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_the_numbers_look_uniform() -> None:
    u = np.asarray(sk.uniform_reference(2024, (512, 512)), dtype=np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005
    assert abs(u.std() - (1 / 12) ** 0.5) < 0.005
    counts = np.histogram(u, bins=16, range=(0, 1))[0]
    assert counts.min() > 0.95 * u.size / 16 and counts.max() < 1.05 * u.size / 16
    centred = u - u.mean()
    for a, b in ((centred[1:], centred[:-1]), (centred[:, 1:], centred[:, :-1])):
        correlation = float(np.mean(a * b) / np.mean(centred * centred))
        assert abs(correlation) < 0.01, correlation
    # Each bit is set about half the time.
    raw = np.asarray(sk.random_bits_reference(2024, (512, 512)))
    ones = [(raw >> k & 1).mean() for k in range(32)]
    assert all(abs(p - 0.5) < 0.01 for p in ones), ones


def test_the_bits_vary_across_rows_columns_and_seeds() -> None:
    raw = np.asarray(sk.random_bits_reference(5, (64, 64)))
    assert len(np.unique(raw)) > 64 * 64 * 0.99
    assert not (raw[1:] == raw[:-1]).any() and not (raw[:, 1:] == raw[:, :-1]).any()
    others = [np.asarray(sk.random_bits_reference(s, (64, 64))) for s in (6, 2**31 + 5)]
    for other in others:
        assert (other != raw).mean() > 0.99
    # A seed's rows are not another's rows shifted.
    assert (raw[1:] != others[0][:-1]).mean() > 0.99


def test_the_kernel_is_deterministic() -> None:
    x, seed = zeros((130, 200)), jnp.uint32(11)
    np.testing.assert_array_equal(np.asarray(bits(x, seed)), np.asarray(bits(x, seed)))


def test_a_new_seed_reuses_the_compiled_kernel() -> None:
    x = jax.ShapeDtypeStruct((100, 300), F32)
    first = dropout.specialize(x, jnp.uint32(1))
    assert dropout.specialize(x, jnp.uint32(2)) is first
    step = jax.jit(dropout)
    a = step(jnp.ones((100, 300), F32), jnp.uint32(1))
    b = step(jnp.ones((100, 300), F32), jnp.uint32(2))
    assert bool(jnp.any(a != b))


# --- dropout -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("shape", [(100, 300), (1, 65), (257, 129)], ids=str)
def test_dropout_is_its_reference(shape: tuple[int, int], dtype: Any) -> None:
    x = jax.random.normal(jax.random.key(0), shape, F32).astype(dtype)
    for seed in (0, 99):
        y = dropout(x, jnp.uint32(seed))
        expected = dropout_reference(x, jnp.uint32(seed))
        np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(expected, np.float32))


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_dropout_keeps_one_minus_rate_and_scales_them(rate: float) -> None:
    x = jnp.ones((256, 512), F32)
    y = np.asarray(dropout(x, jnp.uint32(3), rate=rate))
    kept = y != 0
    assert abs(kept.mean() - (1 - rate)) < 0.01
    np.testing.assert_array_equal(y[kept], np.float32(1 / (1 - rate)))


def test_dropouts_gradient_is_its_mask_times_the_cotangent() -> None:
    x = jax.random.normal(jax.random.key(1), (130, 200), F32)
    seed = jnp.uint32(8)
    grad = jax.grad(lambda v: jnp.sum(dropout(v, seed) * 3.0))(x)
    keep = sk.uniform_reference(seed, x.shape) >= 0.1
    expected = jnp.where(keep, jnp.float32(3.0) * jnp.float32(1 / 0.9), 0.0)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(expected), rtol=1e-6)


def test_dropout_checks_against_its_reference_at_the_probe_shapes() -> None:
    results = sk.testing.check_kernel(dropout)
    assert results and all(r.error is None and r.mismatches == 0 for r in results)


@pytest.mark.parametrize("shape", [(1000, 130), (8192, 4096)], ids=str)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=lambda d: jnp.dtype(d).name)
def test_cross_lowers(shape: tuple[int, int], dtype: Any) -> None:
    seed = jax.ShapeDtypeStruct((), jnp.uint32)
    lowered = dropout.lower(jax.ShapeDtypeStruct(shape, dtype), seed)
    assert "mosaic_gpu" in lowered.as_text()
    assert "mosaic_gpu" in bits.lower(jax.ShapeDtypeStruct(shape, F32), seed).as_text()


def test_the_plan_shows_the_scalar() -> None:
    plan = dropout.plan(jax.ShapeDtypeStruct((100, 300), F32), jax.ShapeDtypeStruct((), "uint32"))
    seed = plan.operand("seed")
    assert seed.kind is sk.Kind.SCALAR and seed.smem_bytes == 0 and seed.loaded
    assert "seed: uint32[]  block []\n" in str(plan)
    assert "seed = seed_gmem[...]" in dropout.emit(
        jax.ShapeDtypeStruct((100, 300), F32), jax.ShapeDtypeStruct((), "uint32")
    )


# --- misuse ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["uniform", "random_bits"])
def test_outside_a_body(name: str) -> None:
    with pytest.raises(sk.BodyError, match="outside a kernel body") as info:
        getattr(sk, name)(0)  # @random-outside
    # At the user's line, naming the function called and its whole-array reference.
    assert info.value.where is not None
    assert info.value.where.endswith(f"test_random.py:{line_of('random-outside')}")
    assert info.value.what.startswith(f"sk.{name} was called")
    assert "only valid inside" in info.value.what
    assert info.value.fix is not None and f"sk.{name}_reference(seed, shape)" in info.value.fix


def test_a_float_seed() -> None:
    def k(
        x: Float[Array, "M N"], seed: Float32[Array, ""], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        return sk.load(x) + sk.uniform(seed)

    with pytest.raises(sk.BodyError, match="int32 or uint32 scalar") as info:
        sk.kernel(tile={"M": "BM"})(k)
    assert 'UInt32[Array, ""]' in str(info.value)


def test_a_vector_seed() -> None:
    def k(
        x: Float[Array, "M N"], seed: UInt32[Array, " M"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        return sk.load(x) + sk.uniform(seed)

    with pytest.raises(sk.BodyError, match="int32 or uint32 scalar"):
        sk.kernel(tile={"M": "BM"})(k)


def test_the_reference_takes_a_2d_shape_and_an_integer_seed() -> None:
    with pytest.raises(ValueError, match="rows, cols"):
        sk.uniform_reference(0, (4, 4, 4))
    with pytest.raises(ValueError, match="int32 or uint32 scalar"):
        sk.uniform_reference(jnp.float32(1.0), (4, 4))


def test_a_scalar_result_is_a_reduction_not_a_block() -> None:
    """A 0-d result is reduced across blocks (see test_cross_block.py); a block is refused."""

    def k(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, ""]:
        return sk.load(x)

    with pytest.raises(sk.ResultMismatchError, match="wrong block shape"):
        sk.kernel(tile={"M": "BM"})(k)


def test_a_scalar_operand_needs_a_0d_array() -> None:
    x = zeros((64, 128))
    with pytest.raises(sk.OperandError, match="not an array"):
        bits(x, 3)  # pyright: ignore[reportArgumentType]
    with pytest.raises(sk.ShapeError, match="rank"):
        bits(x, jnp.zeros((1,), jnp.uint32))
    with pytest.raises(sk.DtypeError, match="float32"):
        bits(x, jnp.float32(3.0))
