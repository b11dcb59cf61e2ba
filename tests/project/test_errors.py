"""One exception class per hardware rule, whichever phase finds it.

The declaration checks the default constants on probe sizes (at the decorator, and again in
`kernel.bind`); a call checks the dims it binds and the constants it overrides. The same rule
broken in either is the same class, `exc.phase` says which check found it, and, for one release,
the `except sk.HardwareLimitError` and `except sk.PlanError` clauses that the phase used to
choose between still catch it.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, BFloat16, Float16, Float32

import statickernel as sk
from statickernel._errors import ErrorContext

S = jax.ShapeDtypeStruct
F32 = jnp.float32
BF16 = jnp.bfloat16


def declare_rows(bm: int) -> sk.Kernel[..., Any]:
    @sk.kernel(tile={"M": "BM"}, backend="interpret")
    def rows(x: Float32[Array, "M N"], *, BM: sk.Const[int] = bm) -> Float32[Array, "M N"]:
        return sk.load(x) * 2.0

    return rows


def declare_tiles(bm: int, bn: int) -> sk.Kernel[..., Any]:
    @sk.kernel(tile={"M": "BM", "N": "BN"}, backend="interpret")
    def tiles(
        x: Float32[Array, "M N"],
        y: Float32[Array, "M N"],
        *,
        BM: sk.Const[int] = bm,
        BN: sk.Const[int] = bn,
    ) -> Float32[Array, "M N"]:
        return sk.load(x) + sk.load(y)

    return tiles


def declare_matmul(*, bk: int = 64, stages: int = 2) -> sk.Kernel[..., Any]:
    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, backend="interpret")
    def mm(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 256,
        BK: sk.Const[int] = bk,
        stages: sk.Const[int] = stages,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), F32))

    return mm


ROWS = declare_rows(64)
TILES = declare_tiles(64, 64)
MATMUL = declare_matmul()
X = S((300, 100), F32)
AB = (S((256, 1024), BF16), S((1024, 512), BF16))


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule, broken three ways: by a declaration's defaults, by `bind`, by a call."""

    cls: type[sk.HardwareRuleError]
    declare: Callable[[], Any]
    rebind: Callable[[], Any]
    call: Callable[[], Any]
    same_what: bool = True
    """Whether the three messages say the same first line (shared memory is counted with the
    widest dtypes allowed at the declaration, and says so)."""


RULES = {
    "tma-box": Rule(
        sk.TmaBoxError,
        lambda: declare_rows(512),
        lambda: ROWS.bind(BM=512),
        lambda: ROWS.plan(X, BM=512),
    ),
    "row-alignment": Rule(
        sk.BlockAlignmentError,
        lambda: declare_rows(100),
        lambda: ROWS.bind(BM=100),
        lambda: ROWS.plan(X, BM=100),
    ),
    "column-alignment": Rule(
        sk.BlockAlignmentError,
        lambda: declare_tiles(64, 12),
        lambda: TILES.bind(BN=12),
        lambda: TILES.plan(X, X, BN=12),
    ),
    "shared-memory": Rule(
        sk.SharedMemoryError,
        lambda: declare_tiles(256, 256),
        lambda: TILES.bind(BM=256, BN=256),
        lambda: TILES.plan(S((512, 512), F32), S((512, 512), F32), BM=256, BN=256),
        same_what=False,
    ),
    "pipeline-stages": Rule(
        sk.SharedMemoryError,
        lambda: declare_matmul(stages=5),
        lambda: MATMUL.bind(stages=5),
        lambda: MATMUL.plan(*AB, stages=5),
    ),
    "wgmma-k": Rule(
        sk.DotShapeError,
        lambda: declare_matmul(bk=24),
        lambda: MATMUL.bind(BK=24),
        lambda: MATMUL.plan(*AB, BK=24),
    ),
}


def raised(fn: Callable[[], Any]) -> sk.StaticKernelError:
    with pytest.raises(sk.StaticKernelError) as info:
        fn()
    return info.value


@pytest.mark.parametrize("rule", RULES.values(), ids=RULES.keys())
def test_the_same_rule_is_the_same_class_in_every_phase(rule: Rule) -> None:
    declared, rebound, called = raised(rule.declare), raised(rule.rebind), raised(rule.call)
    assert type(declared) is type(rebound) is type(called) is rule.cls
    assert declared.phase is rebound.phase is sk.Phase.DECLARATION
    assert called.phase is sk.Phase.CALL
    # Probe sizes are not the user's: only a call has bindings.
    assert declared.bindings == rebound.bindings == {}
    assert called.bindings
    assert declared.dim == rebound.dim == called.dim
    assert rebound.what == called.what if rule.same_what else rebound.what != called.what
    assert declared.fix and rebound.fix and called.fix


@pytest.mark.parametrize("rule", RULES.values(), ids=RULES.keys())
def test_the_old_except_clauses_still_catch(rule: Rule) -> None:
    for declaration in (rule.declare, rule.rebind):
        with pytest.raises(sk.HardwareLimitError):
            declaration()
        with pytest.raises(sk.DeclarationError):
            declaration()
    with pytest.raises(sk.PlanError):
        rule.call()
    with pytest.raises(sk.CallError):
        rule.call()
    # An `except` clause, as user code writes it.
    try:
        rule.call()
    except sk.PlanError as exc:
        assert type(exc) is rule.cls
    try:
        rule.declare()
    except sk.HardwareLimitError as exc:
        assert type(exc) is rule.cls


def test_messages_of_bind_and_call_differ_only_in_location_and_bindings() -> None:
    rebound = raised(lambda: ROWS.bind(BM=512))
    called = raised(lambda: ROWS(jnp.ones((300, 100), F32), BM=512))

    def facts(exc: sk.StaticKernelError) -> list[str]:
        return [
            line for line in str(exc).splitlines() if not line.startswith(("  at:", "  bindings:"))
        ]

    assert facts(rebound) == facts(called)
    assert "  bindings: M=300, N=100" in str(called).splitlines()
    assert not any(line.startswith("  bindings:") for line in str(rebound).splitlines())


# --- rules only one phase can break ----------------------------------------------------------


def declare_mixed_dot() -> None:
    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def mixed(
        a: BFloat16[Array, "M K"],
        b: Float16[Array, "K N"],
        *,
        BM: sk.Const[int] = 128,
        BN: sk.Const[int] = 128,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), F32))


def declare_f32_dot_k_n() -> None:
    @sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"})
    def f32(
        a: Float32[Array, "M K"],
        b: Float32[Array, "K N"],
        *,
        BM: sk.Const[int] = 64,
        BN: sk.Const[int] = 64,
        BK: sk.Const[int] = 32,
    ) -> Float32[Array, "M N"]:
        return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), F32))


def declare_whole_dim_in_a_loop() -> None:
    @sk.kernel(tile={"M": "BM"}, loop={"K": "BK"})
    def wide(
        a: BFloat16[Array, "M K"],
        b: BFloat16[Array, "K N"],
        *,
        BM: sk.Const[int] = 64,
        BK: sk.Const[int] = 64,
    ) -> Float32[Array, "M N"]:
        init = jnp.zeros((BM, sk.dim("N")), F32)
        return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=init)


DECLARATION_ONLY = {
    "dot-dtypes": (sk.DotDtypeError, declare_mixed_dot),
    "dot-f32-layout": (sk.DotLayoutError, declare_f32_dot_k_n),
    "loop-operand": (sk.LoopOperandError, declare_whole_dim_in_a_loop),
}
CALL_ONLY = {
    "int32-dim": (sk.Int32LimitError, lambda: ROWS.plan(S((2**31 + 5, 64), F32))),
    "int32-offset": (sk.Int32LimitError, lambda: ROWS.plan(S((2**31 - 1, 64), F32), BM=192)),
    "grid-y": (sk.GridLimitError, lambda: TILES.plan(*[S((64 * 70_000, 128), F32)] * 2)),
}


@pytest.mark.parametrize(("cls", "declare"), DECLARATION_ONLY.values(), ids=DECLARATION_ONLY.keys())
def test_structural_rules_are_found_by_the_declaration(
    cls: type[sk.HardwareRuleError], declare: Callable[[], Any]
) -> None:
    exc = raised(declare)
    assert type(exc) is cls
    assert exc.phase is sk.Phase.DECLARATION and exc.bindings == {}
    with pytest.raises(sk.HardwareLimitError):
        declare()
    with pytest.raises(sk.HardwareRuleError):
        declare()


@pytest.mark.parametrize(("cls", "call"), CALL_ONLY.values(), ids=CALL_ONLY.keys())
def test_size_limits_are_found_by_the_call(
    cls: type[sk.HardwareRuleError], call: Callable[[], Any]
) -> None:
    exc = raised(call)
    assert type(exc) is cls
    # `bindings` are the dims bound so far: none yet when the first dim is past int32.
    assert exc.phase is sk.Phase.CALL
    with pytest.raises(sk.PlanError):
        call()
    with pytest.raises(sk.HardwareRuleError):
        call()


# --- the phase of the other errors --------------------------------------------------------------


def test_every_error_from_an_entry_point_has_its_phase() -> None:
    def bad_annotation() -> None:
        @sk.kernel
        def k(x: jax.Array) -> Float32[Array, "M N"]:
            return sk.load(x)

    assert raised(bad_annotation).phase is sk.Phase.DECLARATION
    assert raised(lambda: ROWS.bind(FOO=1)).phase is sk.Phase.DECLARATION
    assert raised(lambda: ROWS(jnp.ones((300, 100), F32), FOO=1)).phase is sk.Phase.CALL
    assert raised(lambda: ROWS(jnp.ones((300,), F32))).phase is sk.Phase.CALL
    assert raised(lambda: ROWS.plan(X, backend="cuda")).phase is sk.Phase.CALL


def test_phase_is_a_string_enum() -> None:
    assert sk.Phase.CALL == "call" and sk.Phase.DECLARATION == "declaration"
    assert sk.StaticKernelError("it failed").phase is None


# --- the context the checks build their errors with ---------------------------------------------


def test_the_context_adds_location_bindings_and_phase() -> None:
    ctx = ErrorContext("k", "file.py:3", sk.Phase.CALL)
    sizes = {"M": 300}
    bound = ctx.bound(sizes)
    sizes["N"] = 100  # bound() copied them
    exc = bound.error(sk.TmaBoxError, "too big", dim="M", expected="<= 256", actual=512, fix="f")
    direct = sk.TmaBoxError(
        "too big",
        kernel="k",
        where="file.py:3",
        dim="M",
        expected="<= 256",
        actual=512,
        bindings={"M": 300},
        fix="f",
    )
    assert type(exc) is sk.TmaBoxError
    assert str(exc) == str(direct)
    assert exc.phase is sk.Phase.CALL and direct.phase is None
    assert exc.bindings == {"M": 300} and ctx.bindings == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.kernel = "other"  # type: ignore[misc]


def test_constant_also_fills_operand() -> None:
    exc = sk.OverrideError("bad", constant="BM")
    assert exc.constant == exc.operand == "BM"
    assert "  in:       constant `BM`" in str(exc)
    other = sk.ShapeError("bad", operand="x")
    assert other.operand == "x" and other.constant is None
    assert "  in:       operand `x`" in str(other)
    from_ctx = ErrorContext("k", None).error(sk.OverrideError, "bad", constant="BM")
    assert from_ctx.operand == "BM" and str(from_ctx) == "kernel `k`: " + str(exc)
