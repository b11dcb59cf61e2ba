"""Every gallery kernel against its jnp reference, in the Mosaic GPU interpreter.

The shapes stress the edges: multiples of the block, one past it, primes, arrays smaller than
one block, a single row and a single column, and rows that TMA cannot address (f32 with 130
or 777 columns, bf16 with 100), which statickernel pads on the host. Each new shape compiles a
new specialization, so the list is kept short.
"""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import statickernel as sk
from gallery_checks import BF16, F32, KERNELS, check_against_reference, make_args
from row_sum import row_sum

# N is split across the grid: any N works.
TILED_N = ("add", "scale_bias")
# N is whole inside every block: past 256 elements it is copied in several TMA boxes, and the
# blocks must still fit in shared memory.
WHOLE_N = ("softmax", "rmsnorm", "layernorm", "row_sum")

SHAPES = {
    "64x128": (64, 128),  # multiples of the default blocks
    "128x256": (128, 256),  # multiples, and the widest whole N in one TMA box
    "65x129": (65, 129),  # one past the block on each dim
    "97x131": (97, 131),  # primes
    "211x53": (211, 53),  # primes, N not a multiple of 8
    "7x3": (7, 3),  # smaller than one block
    "1x1": (1, 1),
    "5x8": (5, 8),
    "300x1": (300, 1),  # a single column
    "20x100": (20, 100),  # bf16 rows of 200 B: not TMA-addressable
}
TILED_N_SHAPES = {
    "1x300": (1, 300),  # a single row, over several column blocks
    "40x777": (40, 777),  # f32 rows of 3108 B: not TMA-addressable
}
WHOLE_N_SHAPES = {
    "1x200": (1, 200),  # a single row
    "33x130": (33, 130),  # f32 rows of 520 B: not TMA-addressable
    "70x300": (70, 300),  # bf16: wider than one TMA box, copied in two; f32: the row form
}


def _cases() -> list[Any]:
    cases = []
    for name in KERNELS:
        extra = TILED_N_SHAPES if name in TILED_N else WHOLE_N_SHAPES
        for label, shape in {**SHAPES, **extra}.items():
            for dtype in (F32, BF16):
                cases.append(pytest.param(name, shape, dtype, id=f"{name}-{dtype.name}-{label}"))
    return cases


@pytest.mark.parametrize(("name", "shape", "dtype"), _cases())
def test_matches_reference(name: str, shape: tuple[int, int], dtype: Any) -> None:
    check_against_reference(name, make_args(name, *shape, dtype))


@pytest.mark.parametrize("name", KERNELS)
def test_declares_a_reference(name: str) -> None:
    kernel = KERNELS[name]
    assert isinstance(kernel, sk.Kernel)
    assert callable(kernel.reference)
    assert kernel.spec.name == name


def test_row_sum_of_bf16_is_f32() -> None:
    (x,) = make_args("row_sum", 70, 100, BF16)
    out = row_sum(x)
    assert out.dtype == F32
    assert out.shape == (70,)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: d.name)
def test_tiled_n_has_no_width_limit(dtype: Any) -> None:
    """A kernel that tiles N takes rows far wider than whole-N blocks could hold in SMEM."""
    check_against_reference("add", make_args("add", 3, 5000, dtype))


# Model widths, as a user calls the unchanged kernels: a decode step (M = 1), fewer rows than
# any block, ragged rows, and rows up to 16384 f32 and 32768 bf16 wide. Past about 450 f32
# columns the 64-row blocks no longer fit, and the rows take the row form.
MODEL_WIDTHS = {
    "f32-1x1024": (1, 1024, F32),
    "f32-3x450": (3, 450, F32),
    "f32-1000x777": (1000, 777, F32),  # rows of 3108 B: padded on the host
    "f32-64x4095": (64, 4095, F32),
    "f32-3x8192": (3, 8192, F32),
    "f32-5x16384": (5, 16384, F32),
    "bf16-77x4096": (77, 4096, BF16),
    "bf16-17x4095": (17, 4095, BF16),  # rows of 8190 B: padded on the host
    "bf16-2x32768": (2, 32768, BF16),
}


@pytest.mark.slow
@pytest.mark.parametrize(("m", "n", "dtype"), MODEL_WIDTHS.values(), ids=list(MODEL_WIDTHS))
@pytest.mark.parametrize("name", WHOLE_N)
def test_whole_rows_at_model_widths(name: str, m: int, n: int, dtype: Any) -> None:
    check_against_reference(name, make_args(name, m, n, dtype))


@pytest.mark.parametrize("name", WHOLE_N)
def test_a_row_too_wide_for_one_pass_says_how_to_stream_it(name: str) -> None:
    """One row of 262,144 f32 (1 MiB) cannot be held on chip: the fix is the loop rewrite."""
    args = make_args(name, 2, 262_144, F32)
    kernel = KERNELS[name]
    cached = len(kernel._cache)
    with pytest.raises(sk.SharedMemoryError) as info:
        kernel.plan(*args)
    err = info.value
    assert err.kernel == name
    assert err.bindings == {"M": 2, "N": 262_144}
    assert err.dim == "N"
    assert "one row of N=262144" in err.what
    assert "232,448" in str(err.expected)
    assert err.fix is not None
    assert 'loop={"N": "BN"}' in err.fix and 'sk.map_blocks("N"' in err.fix
    assert "softmax_online" in err.fix
    # The same error from a call, and no half-built specialization left behind.
    with pytest.raises(sk.SharedMemoryError):
        kernel(*args)
    assert len(kernel._cache) == cached


# --- any shape ---------------------------------------------------------------------------------

M_SIZES = st.integers(1, 300)
# Whole N up to 256 is one TMA box; wider rows are covered by the fixed shapes above, and by
# the row form's own strategy below.
N_SIZES = st.integers(1, 256)
ROW_FORM_M = st.integers(1, 70)
ROW_FORM_N = st.integers(300, 3000)


@given(m=M_SIZES, n=N_SIZES)
def test_softmax_any_shape(m: int, n: int) -> None:
    check_against_reference("softmax", make_args("softmax", m, n, F32))


@given(m=M_SIZES, n=N_SIZES)
def test_layernorm_any_shape(m: int, n: int) -> None:
    check_against_reference("layernorm", make_args("layernorm", m, n, F32))


@given(m=M_SIZES, n=N_SIZES)
def test_add_any_shape(m: int, n: int) -> None:
    check_against_reference("add", make_args("add", m, n, F32))


@pytest.mark.slow
@given(m=ROW_FORM_M, n=ROW_FORM_N, name=st.sampled_from(WHOLE_N), bf16=st.booleans())
def test_whole_rows_any_width(m: int, n: int, name: str, bf16: bool) -> None:
    check_against_reference(name, make_args(name, m, n, BF16 if bf16 else F32))
