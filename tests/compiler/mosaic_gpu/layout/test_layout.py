"""The block layout: built once from the spec, the sizes, the constants and the dtypes."""

import dataclasses

import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float

import statickernel as sk
from softmax import softmax
from softmax_online import softmax_online
from statickernel._compiler.mosaic_gpu.layout.blocks import (
    Phase,
    call_layout,
    declaration_layout,
    logical_blocks,
    split_blocks,
)
from statickernel._compiler.mosaic_gpu.layout.joined import part_columns, part_span


def test_a_call_layout_cuts_tiled_dims_by_their_constant_and_pads_whole_ones() -> None:
    layout = call_layout(
        softmax.spec, {"M": 1000, "N": 100}, {"BM": 64}, {"x": "float32", "result": "float32"}
    )
    layout.check_invariants()
    m, n = layout.dim("M"), layout.dim("N")
    assert (m.tiled_by, m.block, m.extent, m.grid_axis, m.ragged) == ("BM", 64, 64, 0, True)
    assert (n.tiled_by, n.block, n.extent, n.grid_axis) == (None, 100, 104, None)
    assert n.padded and n.ragged and n.status == "whole, padded 100 -> 104"
    assert layout.grid == (16,) and layout.grid_names == ("M",)
    assert layout.phase is Phase.CALL
    assert layout.edge_masked("M") and layout.edge_masked("N")


def test_a_divisible_tiled_dim_and_an_aligned_whole_dim_need_no_mask() -> None:
    layout = call_layout(
        softmax.spec, {"M": 128, "N": 256}, {"BM": 64}, {"x": "float32", "result": "float32"}
    )
    assert not layout.edge_masked("M") and not layout.edge_masked("N")


def test_a_loop_dim_is_masked_in_its_steps_only_when_its_last_step_is_ragged() -> None:
    dtypes = {"x": "float32", "result": "float32"}
    consts = {"BM": 64, "BN": 256, "stages": 2}
    even = call_layout(softmax_online.spec, {"M": 64, "N": 1024}, consts, dtypes)
    ragged = call_layout(softmax_online.spec, {"M": 64, "N": 1000}, consts, dtypes)
    assert even.dim("N").looped_by == "BN" and even.dim("N").block == 256
    assert not even.step_masked("N") and ragged.step_masked("N")


def test_the_declaration_layout_probes_every_edge() -> None:
    options = {"x": ("float32", "bfloat16"), "result": ("float32", "bfloat16")}
    layout = declaration_layout(softmax_online.spec, {"BM": 64, "BN": 256, "stages": 3}, options)
    layout.check_invariants()
    assert layout.phase is Phase.DECLARATION
    # Two blocks and one element of M; every stage in use, and a ragged step, along N.
    assert layout.sizes == {"M": 129, "N": 256 * 3 + 1}
    assert layout.edge_masked("M") and layout.step_masked("N")


def test_block_constants_are_read_in_one_place() -> None:
    consts = {"BM": 64, "BN": 256, "stages": 2}
    assert split_blocks(softmax_online.spec, consts) == {"M": 64, "N": 256}
    assert logical_blocks(softmax_online.spec, {"M": 1000, "N": 5000}, consts) == {
        "M": 64,
        "N": 256,
    }


def test_batch_dims_lead_the_grid() -> None:
    @sk.kernel(tile={"M": "BM"}, batch="B")
    def scale(x: Float[Array, "B M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "B M N"]:
        return sk.load(x) * 2.0

    layout = call_layout(
        scale.spec, {"B": 3, "M": 200, "N": 8}, {"BM": 64}, {"x": "float32", "result": "float32"}
    )
    layout.check_invariants()
    assert layout.grid == (3, 4) and layout.grid_names == ("B", "M")
    assert layout.dim("B").batched and not layout.dim("B").ragged


def test_a_broken_layout_fails_its_invariants() -> None:
    layout = call_layout(
        softmax.spec, {"M": 1000, "N": 100}, {"BM": 64}, {"x": "float32", "result": "float32"}
    )
    bad = dataclasses.replace(layout.dim("N"), extent=90)  # narrower than the dim it holds
    broken = dataclasses.replace(layout, dims=(layout.dim("M"), bad))
    with pytest.raises(AssertionError):
        broken.check_invariants()
    too_wide = layout.with_block("M", 512)  # past the TMA box: check_blocks refuses it first
    with pytest.raises(AssertionError):
        too_wide.check_invariants()


def test_the_plan_holds_the_layouts_dims() -> None:
    x = jnp.zeros((1000, 100), jnp.float32)
    plan = softmax.plan(x)
    layout = call_layout(
        softmax.spec, {"M": 1000, "N": 100}, {"BM": 64}, {"x": "float32", "result": "float32"}
    )
    assert plan.dims == layout.dims
    assert isinstance(plan.dims[0], sk.DimPlan)


@pytest.mark.parametrize(
    ("sizes", "parts"),
    [
        ((40, 21), ()),  # side by side: the last part may end anywhere
        ((64, 8, 3), ()),
        ((67, 5), ((0, 67), (72, 5))),  # N2 from the tile after N1's last
        ((1, 1), ((0, 1), (8, 1))),
        ((8, 101, 5), ((0, 8), (8, 101), (112, 5))),
        ((300, 13), ((0, 300), (304, 13))),
    ],
)
def test_joined_parts_start_on_register_tiles(
    sizes: tuple[int, ...], parts: tuple[tuple[int, int], ...]
) -> None:
    assert part_columns(sizes) == parts
    if parts:
        assert part_span(parts) == parts[-1][0] + sizes[-1]


def test_a_slice_off_the_tiles_of_a_joined_part_gets_a_whole_fix() -> None:
    """The fix used to stop mid-sentence ("halves of a part of a multiple of 16 columns are")."""

    @sk.kernel(tile={"M": "BM"})
    def halves(
        a: Float[Array, "M N1"], b: Float[Array, "M N2"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N1+N2"]:
        v = sk.load(a)
        return jnp.concatenate([v[:, :8], v[:, 8:], sk.load(b)], axis=1)

    with pytest.raises(sk.SliceError) as info:
        halves(jnp.ones((10, 67)), jnp.ones((10, 5)))
    fix = info.value.fix
    assert fix is not None and fix.startswith("pad each piece the body cuts N1 into here")
    assert fix.endswith("moves the pieces' bounds and changes the numbers")
