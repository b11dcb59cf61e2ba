"""kernel.tune ranked by a deviceless compile for sm_90a: the spills ptxas reports decide
first. Runs where the [aot] toolchain is installed (`make gpu-compile`); skips elsewhere."""

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, BFloat16

import statickernel as sk
from matmul import matmul
from statickernel._compat import cuda_plugin_installed
from statickernel.tuning.result import Status

pytestmark = pytest.mark.skipif(
    not cuda_plugin_installed(), reason="needs the CUDA plugin and ptxas (make gpu-compile)"
)

SQUARE = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)


def swiglu_reference(x: jax.Array, w_gate: jax.Array, w_up: jax.Array) -> jax.Array:
    gate = jnp.dot(x, w_gate, preferred_element_type=jnp.float32)
    up = jnp.dot(x, w_up, preferred_element_type=jnp.float32)
    return (jax.nn.silu(gate) * up).astype(x.dtype)


# A SwiGLU as the docs teach it: one loop over K, two accumulators.
@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, reference=swiglu_reference)
def swiglu(
    x: BFloat16[Array, "M K"],
    w_gate: BFloat16[Array, "K N"],
    w_up: BFloat16[Array, "K N"],
    *,
    BM: sk.Const[int] = sk.tune(128, 64),
    BN: sk.Const[int] = sk.tune(128, 64, 256),
    BK: sk.Const[int] = 64,
) -> BFloat16[Array, "M N"]:
    zero = jnp.zeros((BM, BN), jnp.float32)
    gate, up = sk.loop(
        "K",
        lambda acc: (acc[0] + sk.dot(x, w_gate), acc[1] + sk.dot(x, w_up)),
        init=(zero, zero),
    )
    return (jax.nn.silu(gate) * up).astype(x.dtype)


def test_the_gallery_matmul_tunes_to_a_candidate_without_spills() -> None:
    result = matmul.tune(SQUARE, SQUARE, by="compile", force=True)
    result.check_invariants()
    assert result.ranked_by is sk.Ranking.COMPILE
    ranked = [c for c in result.table if c.status is Status.RANKED]
    assert len(ranked) >= 4
    assert all(c.registers is not None for c in ranked)
    assert ranked[0].spill_bytes == 0
    spilled = [c for c in ranked if c.spill_bytes]
    # A candidate that spills ranks after every one that does not.
    assert all(ranked.index(c) >= len(ranked) - len(spilled) for c in spilled)


def test_a_swiglu_that_spills_at_its_defaults_tunes_to_no_spills() -> None:
    default = swiglu.compile(SQUARE, SQUARE, SQUARE)
    assert default.spill_bytes > 0
    result = swiglu.tune(SQUARE, SQUARE, SQUARE, by="compile", force=True)
    best = result.table[0]
    assert best.spill_bytes == 0 and best.registers is not None
    assert dict(result.best) != {"BM": 128, "BN": 128}
    assert swiglu.bind().compile(SQUARE, SQUARE, SQUARE).spill_bytes == 0  # the cached best
