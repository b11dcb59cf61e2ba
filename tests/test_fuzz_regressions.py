"""Bugs found by the fuzzer and by running the error catalog, each pinned by its smallest case.

Each test names the symptom that was seen before the fix.
"""

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float, Int, Int32

import statickernel as sk

THIS_FILE = pathlib.Path(__file__).name
_LINES = pathlib.Path(__file__).read_text().splitlines()


def _line(tag: str) -> int:
    """The line of this file that carries the marker comment `# @tag`."""
    return next(n for n, text in enumerate(_LINES, 1) if text.endswith(f"# @{tag}"))


@sk.kernel(tile={"M": "BM"}, backend="interpret")
def scaled(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = 64, flag: sk.Const[bool] = True
) -> Float[Array, "M N"]:
    v = sk.load(x)
    return 2 * v if flag else v


def test_integer_remainder_traces() -> None:
    """`%` on integers is jnp.remainder, a jitted function whose inner jaxpr holds another call.

    Before: TypeError "cannot unpack non-iterable Var object" at import, because the loop over
    a call's outputs reused the name of the (line, source) of the enclosing call.
    """

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def remainder(x: Int32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, "M N"]:
        return sk.load(x) % 5

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def clipped_remainder(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int32[Array, "M N"]:
        return (jnp.clip(sk.load(x), -100, 100).astype(jnp.int32) << 1) % 5

    x = jnp.arange(100 * 16, dtype=jnp.int32).reshape(100, 16) - 700
    np.testing.assert_array_equal(remainder(x), x % 5)
    y = jnp.linspace(-150, 150, 100 * 16, dtype=jnp.float32).reshape(100, 16)
    expected = (jnp.clip(y, -100, 100).astype(jnp.int32) << 1) % 5
    np.testing.assert_array_equal(clipped_remainder(y), expected)


@pytest.mark.parametrize(
    ("valid", "invalid"),
    [({"BM": 64}, {"BM": 64.0}), ({"flag": True}, {"flag": 1}), ({}, {"BM": 64.0})],
    ids=["int-then-float", "bool-then-int", "default-then-float"],
)
def test_an_override_of_another_type_is_not_served_from_the_cache(
    valid: dict[str, Any], invalid: dict[str, Any]
) -> None:
    """Before: once `BM=64` (or the default) was cached, `BM=64.0` hit the same cache entry,
    since 64.0 == 64 and hash(64.0) == hash(64), and ran instead of raising."""
    kernel = scaled.bind()  # an empty cache
    x = jnp.ones((100, 8), jnp.float32)
    kernel(x, **valid)
    with pytest.raises(sk.OverrideError) as info:
        kernel(x, **invalid)
    assert info.value.operand == next(iter(invalid))
    np.testing.assert_array_equal(kernel(x, **valid), 2 * x)


def test_a_differentiated_kernel_points_at_the_user_line() -> None:
    """Before: `at:` named contextlib.py, a frame of JAX's tracing in the standard library."""
    x = jnp.ones((100, 8), jnp.float32)
    with pytest.raises(sk.NotDifferentiableError) as info:
        jax.grad(lambda x: scaled(x).sum())(x)
    assert info.value.where is not None
    assert info.value.where.startswith(f"tests/{THIS_FILE}:") or THIS_FILE in info.value.where


def test_a_declaration_body_error_shows_no_probe_bindings() -> None:
    """Before: `bindings: M=129, N=8`, the sizes the declaration traces with, which the user
    never bound."""
    with pytest.raises(sk.BodyError) as info:

        @sk.kernel(tile={"M": "BM"})
        def add_per_row(
            x: Float[Array, "M N"], b: Float[Array, " M"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
            return sk.load(x) + sk.load(b)

    assert info.value.bindings == {}
    assert "bindings:" not in str(info.value)


def test_a_per_row_and_a_per_column_vector_make_a_block() -> None:
    """`a[:, None] * b[None, :]` and `rows + cols` of two keepdims reductions: lax broadcasts
    a (rows, 1) and a (1, cols) operand to the block without a broadcast of its own.

    Before: UnsupportedOpError "the body combines a per-row and a per-column vector without
    broadcasting", for bodies jnp runs fine.
    """

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def outer(
        a: Float[Array, " M"], b: Float[Array, " N"], *, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        return sk.load(a)[:, None] * sk.load(b)[None, :]

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def row_plus_column(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        v = sk.load(x)
        return sk.sum(v, axis=1, keepdims=True) + jnp.max(v, axis=0, keepdims=True)

    a, b = jnp.arange(100.0), jnp.arange(64.0) - 7
    np.testing.assert_array_equal(outer(a, b), a[:, None] * b[None, :])
    x = jnp.arange(60.0 * 30).reshape(60, 30) - 900  # one block: column maxima are exact
    expected = x.sum(axis=1, keepdims=True) + x.max(axis=0, keepdims=True)
    np.testing.assert_allclose(row_plus_column(x), expected, rtol=1e-6)


def test_a_per_row_and_a_per_column_vector_of_one_length_stay_refused() -> None:
    """Two 1-D vectors of equal length, one per row and one per column, have no block shape:
    jnp would pair element i with element i, which the register layouts cannot do."""
    with pytest.raises(sk.UnsupportedOpError):

        @sk.kernel(backend="interpret")
        def mixed(
            x: Float[Array, "M N"], a: Float[Array, " M"], b: Float[Array, " N"]
        ) -> Float[Array, " M"]:
            return sk.load(a) + sk.load(b) + 0 * sk.sum(sk.load(x), axis=1)


def test_arithmetic_on_8_bit_integers_is_an_unsupported_op() -> None:
    """Mosaic GPU computes on 8-bit integers only with bitwise ops and ==/!=.

    Before: the interpreter ran `x + x` on int8, and `kernel.lower` (and a GPU) failed with
    NotImplementedError "Pointwise operations on 8-bit types are unsupported".
    """

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def double(x: Int[Array, "M N"], *, BM: sk.Const[int] = 64) -> Int[Array, "M N"]:
        v = sk.load(x)
        return v + v  # @int8-add

    x = jnp.ones((100, 128), jnp.int8)
    with pytest.raises(sk.UnsupportedOpError) as info:
        double(x)  # int32, the first dtype `Int` allows, passed at import; int8 does not
    assert info.value.where is not None and info.value.where.endswith(f":{_line('int8-add')}")
    assert "int8" in info.value.what and "astype(jnp.int32)" in str(info.value.fix)
    np.testing.assert_array_equal(double(x.astype(jnp.int32)), 2 * x.astype(jnp.int32))


@pytest.mark.parametrize("shape", [(128, 256), (100, 200)], ids=["aligned", "ragged"])
def test_8_bit_fills_and_reductions_lower(shape: tuple[int, int]) -> None:
    """statickernel's own selects (a load's fill, a reduction's mask past a ragged edge) on
    8-bit integers are made in int32.

    Before: NotImplementedError from `kernel.lower` for a ragged int8 operand with a fill
    other than 0, or a max over a ragged int8 axis.
    """

    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def row_max_and_copy(
        x: Int[Array, "M N"], *, BM: sk.Const[int] = 128
    ) -> tuple[Int[Array, "M N"], Int[Array, " M"]]:
        v = sk.load(x, fill=7)
        return v, sk.max(v, axis=1)

    x = (jnp.arange(shape[0] * shape[1]) % 200 - 150).astype(jnp.int8).reshape(shape)
    copy, row_max = row_max_and_copy(x)
    np.testing.assert_array_equal(copy, x)
    np.testing.assert_array_equal(row_max, x.max(axis=1))
    row_max_and_copy.lower(x)  # the check that failed


@pytest.mark.parametrize("op", ["+", "*"])
def test_a_column_vector_added_to_a_loop_product_is_refused_as_multiplied(op: str) -> None:
    """`sk.dot(q, k) + v[None, :]` with `v` along the kernel's columns D, whose length happens
    to equal the loop block: the product runs along the loop dim, the vector along D.

    Before: AssertionError "cannot convert col to loop_tile" inside the translator for `+`
    (fused into the product's accumulator); `*` gave this UnsupportedOpError.
    """
    with pytest.raises(sk.UnsupportedOpError) as info:

        @sk.kernel(tile={"Sq": "BQ"}, loop={"Skv": "BKV"}, backend="interpret")
        def biased(
            q: BFloat16[Array, "Sq D"],
            k: BFloat16[Array, "Skv D"],
            v: BFloat16[Array, "Skv D"],
            bias: Float[Array, " D"],
            *,
            BQ: sk.Const[int] = 64,
            BKV: sk.Const[int] = 64,
        ) -> Float[Array, "Sq D"]:
            def step(acc: jax.Array) -> jax.Array:
                bias_row = sk.load(bias)[None, :]
                s = sk.dot(q, k) + bias_row if op == "+" else sk.dot(q, k) * bias_row  # @bias
                return acc + sk.dot(s.astype(q.dtype), v)

            return sk.loop("Skv", step, init=jnp.zeros((BQ, sk.dim("D")), jnp.float32))

    assert "along the kernel's columns with one along the loop dim" in info.value.what
    assert info.value.where is not None and info.value.where.endswith(f":{_line('bias')}")
    assert info.value.actual is not None and info.value.actual.startswith(
        "`add`" if op == "+" else "`mul`"
    )


def test_a_per_row_vector_added_to_a_loop_product_runs_and_lowers() -> None:
    """The add of a per-row vector to a product along the loop dim is fused into its
    accumulator, and broadcast to the block in the interpreter."""

    @sk.kernel(tile={"Sq": "BQ"}, loop={"Skv": "BKV"}, backend="interpret")
    def biased_row_max(
        q: BFloat16[Array, "Sq D"],
        k: BFloat16[Array, "Skv D"],
        bias: Float[Array, " Sq"],
        *,
        BQ: sk.Const[int] = 64,
        BKV: sk.Const[int] = 64,
    ) -> Float[Array, " Sq"]:
        def step(running_max: jax.Array) -> jax.Array:
            s = sk.dot(q, k) + sk.load(bias)[:, None]
            return jnp.maximum(running_max, sk.max(s, axis=1))

        return sk.loop("Skv", step, init=jnp.full((BQ,), -jnp.inf, jnp.float32))

    kq, kk = jax.random.split(jax.random.key(0))
    q = jax.random.normal(kq, (100, 64), jnp.bfloat16)
    k = jax.random.normal(kk, (130, 64), jnp.bfloat16)
    bias = jnp.arange(100.0)
    scores = q.astype(jnp.float32) @ k.astype(jnp.float32).T
    # float32 sums of 64 bf16 products: a few ulps of the scores' magnitude of tens.
    np.testing.assert_allclose(
        biased_row_max(q, k, bias), (scores + bias[:, None]).max(axis=1), rtol=1e-5, atol=1e-4
    )
    biased_row_max.with_backend("mosaic_gpu").lower(q, k, bias)


def _two_operand_reference(x: jax.Array, y: jax.Array) -> jax.Array:
    return x * y


def test_a_reference_of_the_wrong_arity_is_refused_at_declaration() -> None:
    """`vjp="reference"` calls the reference with the operands, then by name the constants it
    names.

    Before: the declaration passed, and jax.grad raised TypeError "missing 1 required
    positional argument: 'y'" from inside JAX's JVP rule.
    """
    with pytest.raises(sk.VjpError) as info:

        @sk.kernel(  # @wrong-arity
            tile={"M": "BM"}, backend="interpret", reference=_two_operand_reference, vjp="reference"
        )
        def double(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
            return sk.load(x) * 2

    assert info.value.where is not None and info.value.where.endswith(f":{_line('wrong-arity')}")
    assert "_two_operand_reference(x)" in str(info.value.expected)
    assert "'y'" in str(info.value.actual)


def test_a_reference_taking_a_constant_by_name_is_accepted() -> None:
    """A reference's parameters after the operands that name constants get them by name."""

    def reference(x: jax.Array, scale: float) -> jax.Array:
        return x * scale

    @sk.kernel(tile={"M": "BM"}, backend="interpret", reference=reference, vjp="reference")
    def scaled_by(
        x: Float[Array, "M N"], *, scale: sk.Const[float] = 2.0, BM: sk.Const[int] = 64
    ) -> Float[Array, "M N"]:
        return sk.load(x) * scale

    x = jnp.ones((100, 8), jnp.float32)
    grad = jax.grad(lambda x: scaled_by(x, scale=3.0).sum())(x)
    np.testing.assert_array_equal(grad, jnp.full_like(x, 3.0))


def _double_backward(x: jax.Array, out: jax.Array, dout: jax.Array) -> tuple[jax.Array]:
    return (2 * dout,)


@pytest.mark.parametrize("vjp", [None, "reference", _double_backward], ids=["none", "ref", "bwd"])
@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_a_kernel_under_linear_transpose_is_not_differentiable(vjp: Any, jitted: bool) -> None:
    """Before: ValueError "Pure callbacks do not support transpose" (the interpreter's launch),
    or NotImplementedError "Transpose rule ... for 'custom_vjp_call' not implemented"."""

    @sk.kernel(tile={"M": "BM"}, backend="interpret", reference=lambda x: 2 * x, vjp=vjp)
    def double(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        return 2 * sk.load(x)

    x = jnp.ones((100, 8), jnp.float32)
    fn = jax.jit(lambda x: double(x)) if jitted else double
    transpose = jax.linear_transpose(fn, x)
    with pytest.raises(sk.NotDifferentiableError) as info:
        transpose(x)  # @transpose
    assert info.value.kernel == "double"
    assert "jax.linear_transpose" in info.value.what
    assert info.value.where is not None and info.value.where.endswith(f":{_line('transpose')}")
    assert "jax.vjp" in str(info.value.fix)
    if vjp is not None:  # the map the fix offers, and the derivatives, still work
        _, vjp_fn = jax.vjp(fn, x)
        np.testing.assert_array_equal(vjp_fn(x)[0], 2 * x)
        np.testing.assert_array_equal(jax.grad(lambda x: fn(x).sum())(x), jnp.full_like(x, 2))
        batched = jnp.stack([x, 3 * x])
        np.testing.assert_array_equal(jax.vmap(fn)(batched), 2 * batched)


def test_a_kernel_on_the_gpu_backend_under_linear_transpose_is_not_differentiable() -> None:
    """The launch is a pallas_call inside the specialization's jit; the refusal is the same."""
    x = jax.ShapeDtypeStruct((100, 8), jnp.float32)
    transpose = jax.linear_transpose(scaled.with_backend("mosaic_gpu"), x)
    with pytest.raises(sk.NotDifferentiableError) as info:
        transpose(jnp.ones((100, 8), jnp.float32))
    assert info.value.kernel == "scaled"


@pytest.mark.parametrize("target", [["sm_90a"], None, "sm_80"], ids=["list", "none", "unknown"])
def test_a_compile_target_that_is_not_a_targets_name_is_refused(target: Any) -> None:
    """Before: TypeError "unhashable type: 'list'" from the compile cache's key for
    `target=["sm_90a"]`; an unknown name was refused already."""
    with pytest.raises(sk.CompileTargetError) as info:
        scaled.compile(jax.ShapeDtypeStruct((100, 8), jnp.float32), target=target)  # @target
    assert info.value.kernel == "scaled"
    assert info.value.where is not None and info.value.where.endswith(f":{_line('target')}")
    assert info.value.expected == "'sm_90a' or 'sm_100a'"
    assert "target='sm_90a'" in str(info.value.fix)


@pytest.mark.parametrize(
    "function",
    ["check_kernel", "run_checks", "probe_cases", "probe_shapes", "parametrize", "cases"],
)
def test_a_plain_function_given_to_sk_testing_is_not_a_kernel(function: str) -> None:
    """Before: AttributeError "'function' object has no attribute 'reference'" (or 'spec')."""

    def plain(x: jax.Array) -> jax.Array:
        return x

    with pytest.raises(sk.NotAKernelError) as info:
        getattr(sk.testing, function)(plain)  # @not-a-kernel
    assert f"sk.testing.{function}" in info.value.what and "`plain`" in info.value.what
    assert info.value.where is not None and info.value.where.endswith(f":{_line('not-a-kernel')}")
    assert "@sk.kernel" in str(info.value.fix)


def test_a_lambda_or_a_value_given_to_check_case_is_not_a_kernel() -> None:
    case = sk.testing.probe_cases(scaled)[0]
    with pytest.raises(sk.NotAKernelError, match="plain function `<lambda>`"):
        sk.testing.check_case(lambda x: x, case)  # type: ignore[arg-type]
    with pytest.raises(sk.NotAKernelError, match="was given a value of type int"):
        sk.testing.run_case(3, case)  # type: ignore[arg-type]


@sk.kernel(batch=("B", "H"), tile={"L": "BL"}, backend="interpret")
def masked_per_head(
    x: Float[Array, "B H L D"], mask: Float[Array, "B H L"], *, BL: sk.Const[int] = 64
) -> Float[Array, "B H L D"]:
    return sk.load(x) * sk.load(mask)[:, None]


@pytest.mark.parametrize("length", [97, 1, 4096])
def test_a_batched_vector_whose_entries_are_not_16_byte_multiples_is_padded(length: int) -> None:
    """A (B, H, L) attention mask beside (B, H, L, D) values: TMA addresses the whole array,
    and its batch strides (L x 4 B) must be multiples of 16 B, so the mask is padded on the
    host. The interpreter was right; cross-lowering failed.

    Before: ValueError "async_copy requires all GMEM strides except the last one to be a
    multiple of 16 bytes" from `kernel.lower` at L = 97 and at L = 1.
    """
    kx, km = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (2, 3, length, 32), jnp.float32)
    mask = jax.random.normal(km, (2, 3, length), jnp.float32)
    np.testing.assert_array_equal(masked_per_head(x, mask), x * mask[..., None])  # one multiply
    plan = masked_per_head.plan(x, mask, backend="mosaic_gpu")
    padded = {op.name: op.gmem_shape for op in plan.operands if op.host_padded}
    x_bytes = 2 * x.size * 4  # read once, written once as the result
    assert plan.cost is not None
    if length * 4 % 16 == 0:
        assert plan.cost.hbm_bytes == x_bytes + mask.size * 4
        assert padded == {}  # unchanged: no padding, no note
        assert not any("batch entries" in note for note in plan.notes)
    else:
        width = -(-length // 4) * 4
        assert padded == {"mask": (2, 3, width)}
        note = next(n for n in plan.notes if "`mask`'s batch entries" in n)
        assert f"{6 * length * 4:,} B read and {6 * width * 4:,} B written" in note
        # The kernel reads the padded mask; the jnp.pad reads the true one and writes it.
        assert plan.cost.hbm_bytes == x_bytes + 6 * width * 4 + 6 * length * 4 + 6 * width * 4
        assert "jnp.pad" in str(masked_per_head.emit(x, mask, backend="mosaic_gpu"))
    masked_per_head.lower(x, mask)  # the check that failed


def test_a_batched_vector_result_along_a_padded_whole_dim_is_written_whole() -> None:
    """A (B, D) result of column sums, D = 97 whole (a block of 104): each entry is written
    as a bulk copy of the whole block.

    Before: the result was "written as [2, 97] and sliced back to [2, 97]", and
    cross-lowering failed with jax's "GMEM strides ... multiple of 16 bytes".
    """

    @sk.kernel(batch="B", backend="interpret")
    def column_sums(x: Float[Array, "B L D"]) -> Float[Array, "B D"]:
        return sk.sum(sk.load(x), axis=0)

    x = jnp.arange(2 * 5 * 97, dtype=jnp.float32).reshape(2, 5, 97) / 100
    np.testing.assert_allclose(column_sums(x), x.sum(axis=1), rtol=1e-6)  # five small sums
    plan = column_sums.plan(x, backend="mosaic_gpu")
    assert plan.results[0].gmem_shape == (2, 104)
    column_sums.lower(x)
