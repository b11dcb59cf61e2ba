"""`sk.dot` beyond the matmul: a chained product (a fused MLP) whose first product contracts a
whole dim and whose second multiplies a value in registers, and the generalized dot misused."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Array, BFloat16, Float32

import statickernel as sk
from attention import attention, attention_reference
from markers import line_finder
from mlp import mlp, mlp_reference

line_of = line_finder(__file__)


def mlp_args(m: int, k: int, h: int, n: int, seed: int = 0) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng([seed, m, k, h, n])

    def normal(*shape: int, scale: float = 1.0) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * scale, jnp.bfloat16)

    return normal(m, k), normal(k, h, scale=k**-0.5), normal(h, n, scale=h**-0.5)


def assert_mlp(*args: jax.Array, **consts: int) -> None:
    out = mlp(*args, **consts)
    ref = mlp_reference(*args)
    assert out.shape == ref.shape and out.dtype == jnp.float32
    got = np.asarray(out)
    assert np.isfinite(got).all()
    # The hidden activations are rounded to bf16 in both; the sums run in different orders.
    np.testing.assert_allclose(got, np.asarray(ref), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(
    "shape",
    [(128, 64, 128, 64), (300, 256, 1000, 128), (1, 64, 37, 64), (67, 128, 131, 192)],
    ids=lambda s: "x".join(map(str, s)),
)
def test_mlp_matches_its_reference(shape: tuple[int, int, int, int]) -> None:
    assert_mlp(*mlp_args(*shape))


@settings(max_examples=5, deadline=None)
@given(
    m=st.integers(1, 150),
    k=st.sampled_from([64, 128]),
    h=st.integers(1, 200),
    n=st.sampled_from([64, 128]),
)
def test_mlp_at_any_shape(m: int, k: int, h: int, n: int) -> None:
    assert_mlp(*mlp_args(m, k, h, n))


def test_mlp_plan_keeps_the_hidden_block_on_chip() -> None:
    x, w1, w2 = mlp_args(8192, 256, 1024, 256)
    plan = mlp.plan(x, w1, w2)
    (loop,) = plan.loops
    assert loop.products == (("x", "w1", False), ("", "w2", False))
    # HBM traffic: the operands and the result, never the (M, H) hidden activations.
    hidden_bytes = 8192 * 1024 * 2
    assert plan.cost is not None and plan.cost.hbm_bytes < hidden_bytes
    with sk.backend("mosaic_gpu"):
        assert "mosaic_gpu" in mlp.lower(x, w1, w2).as_text()


def test_mlp_operand_outside_the_frame_is_not_loaded() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"H": "BH"})
        def k(
            x: BFloat16[Array, "M K"],
            w1: BFloat16[Array, "K H"],
            w2: BFloat16[Array, "H N"],
            *,
            BM: sk.Const[int] = 64,
            BH: sk.Const[int] = 64,
        ) -> Float32[Array, "M N"]:
            def step(acc):
                norm = sk.sum(sk.load(x).astype(jnp.float32), axis=1)  # @load-x
                hidden = sk.dot(x, w1) * norm[:, None]
                return acc + sk.dot(hidden.astype(jnp.bfloat16), w2)

            return sk.loop("H", step, init=jnp.zeros((BM, sk.dim("N")), jnp.float32))

    assert info.value.operand == "x"
    assert info.value.where is not None and info.value.where.endswith(f":{line_of('load-x')}")
    assert "cannot be loaded into registers" in info.value.what


# --- the generalized sk.dot, misused ---------------------------------------------------------


def test_dot_of_a_float32_value() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            q: BFloat16[Array, "M D"],
            kv: BFloat16[Array, "N D"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
        ) -> Float32[Array, "M D"]:
            def step(acc):
                p = sk.dot(q, kv)
                return acc + sk.dot(p, kv)  # @f32-value

            return sk.loop("N", step, init=jnp.zeros((BM, sk.dim("D")), jnp.float32))

    assert info.value.where is not None and info.value.where.endswith(f":{line_of('f32-value')}")
    assert "16-bit" in info.value.what
    assert "astype(jnp.bfloat16)" in str(info.value.fix)


def test_dot_contracting_a_tiled_dim() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM", "D": "BD"}, loop={"N": "BN"})
        def k(
            q: BFloat16[Array, "M D"],
            kv: BFloat16[Array, "N D"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
            BD: sk.Const[int] = 64,
        ) -> Float32[Array, "M D"]:
            def step(acc):
                return acc + sk.dot(sk.dot(q, kv).astype(jnp.bfloat16), kv)  # @tiled-dim

            return sk.loop("N", step, init=jnp.zeros((BM, BD), jnp.float32))

    assert info.value.dim == "D"
    assert "split across the grid" in info.value.what
    assert "tile=" in str(info.value.fix)


def test_dot_of_a_b_that_is_a_value_of_the_steps_rows() -> None:
    """A computed b is a block of the loop dim by the columns: one along the rows M is not."""
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
        def k(
            a: BFloat16[Array, "M K"],
            b: BFloat16[Array, "K N"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 128,
            BK: sk.Const[int] = 64,
        ) -> Float32[Array, "M N"]:
            def step(acc):
                return acc + sk.dot(a, sk.load(a).T)  # @b-value

            return sk.loop("K", step, init=jnp.zeros((BM, BN), jnp.float32))

    assert "the value b is not a block of the step's K by the kernel's columns N" in info.value.what
    assert "annotate the operand b is computed from 'K N'" in str(info.value.fix)


def test_dot_whose_a_does_not_share_its_last_dim() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            q: BFloat16[Array, "M D"],
            kv: BFloat16[Array, "N E"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
        ) -> Float32[Array, "M D"]:
            def step(acc):
                s = sk.dot(q, kv)  # @no-shared-dim
                return acc + s

            return sk.loop("N", step, init=jnp.zeros((BM, sk.dim("D")), jnp.float32))

    assert info.value.where is not None
    assert info.value.where.endswith(f":{line_of('no-shared-dim')}")
    assert info.value.dim == "D"
    assert info.value.expected == "'D N' or 'N D' for kv"


def test_any_whole_dim_is_exact_and_one_too_large_is_refused() -> None:
    # A whole dim only sk.dot reads is padded to WGMMA's swizzle: D = 40 and K = 100 are exact.
    q = jax.random.normal(jax.random.key(0), (1, 1, 33, 40), jnp.float32).astype(jnp.bfloat16)
    np.testing.assert_allclose(
        np.asarray(attention(q, q, q), np.float32),
        np.asarray(attention_reference(q, q, q), np.float32),
        rtol=2e-2,
        atol=2e-2,
    )
    assert_mlp(*mlp_args(70, 100, 130, 40))
    # A whole K wider than one TMA box is refused, with the loop that would walk it.
    with pytest.raises(sk.DotShapeError) as info:
        mlp(*mlp_args(64, 512, 128, 64))
    assert info.value.dim == "K"
    assert 'loop={"K": "BK"}' in str(info.value.fix)
    assert "at most 256" in str(info.value.expected)


def attention_like(step_body: Any) -> None:
    """Declares a kernel whose loop over N computes `step_body(q, kv, acc)` for its carry."""

    @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
    def k(
        q: BFloat16[Array, "M D"],
        kv: BFloat16[Array, "N D"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
    ) -> Float32[Array, "M D"]:
        return sk.loop(
            "N",
            lambda acc: step_body(q, kv, acc),
            init=jnp.zeros((BM, sk.dim("D")), jnp.float32),
        )


def test_scores_reduced_over_their_rows() -> None:
    def body(q: Any, kv: Any, acc: Any) -> Any:
        s = sk.dot(q, kv)
        column_max = sk.max(s, axis=0)  # @rows
        return acc + sk.dot((s - column_max[None, :]).astype(jnp.bfloat16), kv)

    with pytest.raises(sk.UnsupportedOpError) as info:
        attention_like(body)
    assert info.value.where is not None and info.value.where.endswith(f":{line_of('rows')}")
    assert "over its rows" in info.value.what


def test_stop_that_is_a_vector() -> None:
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"}, loop={"N": "BN"})
        def k(
            q: BFloat16[Array, "M D"],
            kv: BFloat16[Array, "N D"],
            *,
            BM: sk.Const[int] = 64,
            BN: sk.Const[int] = 64,
        ) -> Float32[Array, "M D"]:
            init = jnp.zeros((BM, sk.dim("D")), jnp.float32)

            def step(acc: Any) -> Any:
                return acc + sk.dot(sk.dot(q, kv).astype(jnp.bfloat16), kv)

            return sk.loop("N", step, init=init, stop=sk.position("M") + 1)  # @vector-stop

    assert "not an integer scalar" in info.value.what
    assert 'sk.position("M").max() + 1' in str(info.value.expected)
