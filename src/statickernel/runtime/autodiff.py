"""Derivatives of kernels: `vjp="reference"`, a declared backward, or none.

A generated kernel has no derivative rule of its own. `vjp=` gives it one, in one of two
forms, and every specialization wraps its launch in the matching JAX rule:

- `FromReference`: a `jax.custom_jvp` whose rule is `jax.jvp` of the kernel's reference, on
  the specialization's constants. The primal is the kernel's output; only the tangent comes
  from the reference. One JVP rule serves forward mode, and reverse mode through JAX's
  linearize and transpose.
- `DeclaredBackward`: a `jax.custom_vjp` whose residuals are the operands and the results,
  and whose backward is the user's function, called as
  `backward(*operands, *results, *cotangents, **constants_it_names)`. Reverse mode only:
  JAX has no forward mode through a custom VJP.

Without `vjp=`, a `jax.custom_jvp` guard turns JAX's "no differentiation rule" failure into
a `NotDifferentiableError`.
"""

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import numpy as np
from jax.extend.core import Primitive

from .._compat import (
    register_batching_rule,
    register_jvp_rule,
    register_lowering,
    register_transpose_rule,
)
from .._compiler.declare.spec import KernelSpec
from .._errors import BackwardError, NotDifferentiableError, VjpError
from .._where import call_site
from .backend import backend

__all__ = [
    "DeclaredBackward",
    "Derivative",
    "FromReference",
    "backward_signature",
    "differentiable",
    "named_constants",
    "parse_vjp",
]


@dataclasses.dataclass(frozen=True)
class FromReference:
    """Derivatives from JAX's derivative of the kernel's reference."""

    reference: Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class DeclaredBackward:
    """Derivatives from a backward function the declaration names."""

    backward: Callable[..., Any]

    def forward_mode_refused(self, kernel: str) -> NotDifferentiableError:
        """JAX's TypeError for `jax.jvp` of a custom VJP, as a statickernel error."""
        name = getattr(self.backward, "__name__", "backward")
        return NotDifferentiableError(
            "it was differentiated in forward mode, and its declared backward gives reverse "
            "mode only",
            kernel=kernel,
            where=call_site(),
            expected="jax.grad, jax.vjp or jax.value_and_grad: reverse mode, which "
            f"`{name}` computes",
            actual="jax.jvp, jax.jacfwd or another forward-mode transform",
            fix='use reverse mode (jax.vjp, jax.jacrev), or declare vjp="reference" to '
            "differentiate the reference in both modes",
        )


Derivative: TypeAlias = FromReference | DeclaredBackward | None

# How JAX says that a custom VJP met forward mode; a kernel turns it into its own error.
JVP_OF_CUSTOM_VJP = "can't apply forward-mode autodiff (jvp) to a custom_vjp function"


def named_constants(
    fn: Callable[..., Any], positional: int, consts: Mapping[str, Any]
) -> dict[str, Any]:
    """The constants `fn` takes by name: its parameters after the first `positional` that a
    constant of the kernel names (e.g. `eps`), with their values in `consts`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C function with no signature
        return {}
    return {
        p.name: consts[p.name]
        for p in params[positional:]
        if p.name in consts and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def backward_signature(spec: KernelSpec) -> str:
    """The signature a declared backward of `spec` has, e.g. `(x, weight, out, dout, *, eps)`."""
    results = [r.name for r in spec.results]
    names = [o.name for o in spec.operands] + results + [f"d{r}" for r in results]
    # Block sizes and stage counts shape the launch, not the math: a backward seldom needs them.
    launch_only = set(spec.block_map.values()) | {spec.stages}
    consts = [c.name for c in spec.consts if c.name not in launch_only]
    return f"({', '.join(names)}{', *, ' + ', '.join(consts) if consts else ''})"


def parse_vjp(vjp: Any, spec: KernelSpec) -> Derivative:
    """The derivative `vjp=` declares for `spec`, checked now."""
    err: dict[str, Any] = dict(kernel=spec.name, where=spec.location)
    if vjp is None:
        return None
    if spec.update is not None:
        raise VjpError(
            f"vjp= is given to a kernel that updates `{spec.update}` in place",
            **err,
            operand=spec.update,
            expected="no vjp= on a kernel with update=",
            actual=repr(vjp)[:120],
            fix="drop vjp=; differentiate a jnp function of the same update where a "
            "derivative is needed",
        )
    if isinstance(vjp, str) and vjp == "reference":
        if spec.reference is None:
            raise VjpError(
                'vjp="reference" differentiates the reference, and the kernel declares none',
                **err,
                expected="reference= a plain jnp function computing the kernel's result",
                actual="reference=None",
                fix=f'add reference=my_reference to @sk.kernel(...) next to vjp="reference", '
                f"or declare a backward: vjp=my_backward, with my_backward"
                f"{backward_signature(spec)}",
            )
        _check_reference_takes_operands(spec.reference, spec)
        return FromReference(spec.reference)
    if isinstance(vjp, str) or not callable(vjp):
        raise VjpError(
            'vjp= is neither "reference" nor a backward function',
            **err,
            expected='vjp="reference", or a function backward'
            f"{backward_signature(spec)} returning one cotangent per operand",
            actual=repr(vjp)[:120],
            fix='write vjp="reference" to differentiate the reference, or pass the backward '
            "function itself",
        )
    positional = len(spec.operands) + 2 * len(spec.results)
    consts = spec.const_defaults
    try:
        sig = inspect.signature(vjp)
    except (TypeError, ValueError):
        return DeclaredBackward(vjp)  # no signature to check: the call will tell
    try:
        sig.bind(*range(positional), **named_constants(vjp, positional, consts))
    except TypeError as exc:
        raise VjpError(
            "its backward cannot take the operands, the results and their cotangents",
            **err,
            expected=f"a backward taking {positional} positional arguments: "
            f"{getattr(vjp, '__name__', 'backward')}{backward_signature(spec)}",
            actual=f"{getattr(vjp, '__name__', 'backward')}{sig}: {exc}",
            fix="take the operands, then the results, then one cotangent per result, "
            "then by keyword the constants it needs",
        ) from None
    return DeclaredBackward(vjp)


def _check_reference_takes_operands(reference: Callable[..., Any], spec: KernelSpec) -> None:
    """The reference is called as `reference(*operands, **constants_it_names)` by the JVP
    rule: one that cannot take that call fails inside JAX's differentiation, far from here."""
    try:
        sig = inspect.signature(reference)
    except (TypeError, ValueError):
        return  # no signature to check: the call will tell
    positional = len(spec.operands)
    try:
        sig.bind(*range(positional), **named_constants(reference, positional, spec.const_defaults))
    except TypeError as exc:
        name = getattr(reference, "__name__", "reference")
        operands = ", ".join(o.name for o in spec.operands)
        raise VjpError(
            'vjp="reference" differentiates the reference, which cannot take the operands',
            kernel=spec.name,
            where=spec.location,
            expected=f"a reference taking {positional} positional argument(s): "
            f"{name}({operands}), then by name the constants it needs",
            actual=f"{name}{sig}: {exc}",
            fix=f"make `{name}` take the kernel's operands in their order ({operands}); "
            "a constant it needs is a parameter named as the constant",
        ) from None


def differentiable(
    launch: Callable[..., Any],
    derivative: Derivative,
    spec: KernelSpec,
    consts: Mapping[str, Any],
    backend_name: str = "interpret",
) -> Callable[..., Any]:
    """`launch` with the derivative rule `derivative` gives it, for the specialization whose
    constants are `consts` and which runs on `backend_name`: the kernels a declared backward
    calls run there too, unless they name a backend of their own."""
    if spec.update is not None:
        # Its launch holds a mutable array (the operand it updates), which jax.custom_jvp
        # cannot trace: a guard on the operands refuses derivatives instead.
        fn = _guarded_operands(launch, spec)
    elif isinstance(derivative, FromReference):
        fn = _from_reference(launch, derivative.reference, spec, consts)
    elif isinstance(derivative, DeclaredBackward):
        fn = _declared_backward(launch, derivative.backward, spec, consts, backend_name)
    else:
        fn = _not_differentiable(launch, spec)
    refusal = _transpose_refusal(spec.name, derivative, spec.update)

    def not_transposable(*args: Any) -> Any:
        results, tree = jax.tree.flatten(fn(*args))
        return jax.tree.unflatten(tree, _not_transposable_p.bind(*results, refusal=refusal))

    return not_transposable


@dataclasses.dataclass(frozen=True)
class _TransposeRefusal:
    """What jax.linear_transpose of a kernel is told: the transforms its derivative supports."""

    kernel: str
    supported: str
    fix: str


def _transpose_refusal(
    kernel: str, derivative: Derivative, update: str | None = None
) -> _TransposeRefusal:
    vjp = "take `_, transpose = jax.vjp(kernel, *operands)`: for a linear kernel it is the same map"
    jnp_fn = "or transpose a jnp function (the kernel's reference, say)"
    if update is not None:
        supported = f"none: it updates `{update}` in place, which has no derivative rule"
        return _TransposeRefusal(kernel, supported, "transpose a jnp function of the same map")
    if isinstance(derivative, FromReference):
        supported = 'jax.grad, jax.vjp, jax.jvp and jax.linearize, through vjp="reference"'
        return _TransposeRefusal(kernel, supported, f"{vjp}; {jnp_fn}")
    if isinstance(derivative, DeclaredBackward):
        supported = "jax.grad and jax.vjp, through its declared backward"
        return _TransposeRefusal(kernel, supported, f"{vjp}; {jnp_fn}")
    supported = 'none: it declares no derivative (vjp="reference" or vjp=backward)'
    return _TransposeRefusal(kernel, supported, f"declare vjp=, then {vjp}; {jnp_fn}")


# An identity on a kernel's results whose transpose raises: jax.linear_transpose of a kernel
# would otherwise reach its launch (a host callback, a pallas_call, a custom_vjp) and fail
# without naming the kernel. Its tangents pass through untouched, so jax.grad and jax.vjp,
# which transpose the derivative rule's tangents and never the launch, do not meet it.
_not_transposable_p = Primitive("statickernel_not_transposable")
_not_transposable_p.multiple_results = True
_not_transposable_p.def_impl(lambda *args, **_: args)
_not_transposable_p.def_abstract_eval(lambda *avals, **_: avals)
register_lowering(_not_transposable_p, lambda ctx, *operands, **_: operands)


def _batch_not_transposable(args: Any, dims: Any, **params: Any) -> Any:
    return _not_transposable_p.bind(*args, **params), dims


def _jvp_not_transposable(primals: Any, tangents: Any, **params: Any) -> Any:
    return _not_transposable_p.bind(*primals, **params), list(tangents)


def _transpose_not_transposable(cotangents: Any, *results: Any, refusal: _TransposeRefusal) -> Any:
    raise NotDifferentiableError(
        "it was transposed as a linear function (jax.linear_transpose), which a kernel is not",
        kernel=refusal.kernel,
        where=call_site(),
        expected=f"the transforms the kernel supports: {refusal.supported}",
        actual="jax.linear_transpose",
        fix=refusal.fix,
    ).with_traceback(None)


register_batching_rule(_not_transposable_p, _batch_not_transposable)
register_jvp_rule(_not_transposable_p, _jvp_not_transposable)
register_transpose_rule(_not_transposable_p, _transpose_not_transposable)


# An identity on a kernel's operands whose JVP raises: the guard of a kernel that updates an
# operand in place, whose launch a jax.custom_jvp cannot hold. Tangents reach it before the
# launch, so a derivative through the kernel fails here, naming it.
_not_differentiable_p = Primitive("statickernel_not_differentiable")
_not_differentiable_p.multiple_results = True
_not_differentiable_p.def_impl(lambda *args, **_: args)
_not_differentiable_p.def_abstract_eval(lambda *avals, **_: avals)
register_lowering(_not_differentiable_p, lambda ctx, *operands, **_: operands)
register_batching_rule(
    _not_differentiable_p,
    lambda args, dims, **params: (_not_differentiable_p.bind(*args, **params), dims),
)


def _jvp_not_differentiable(primals: Any, tangents: Any, *, spec: KernelSpec) -> Any:
    raise _derivative_refused(spec)


register_jvp_rule(_not_differentiable_p, _jvp_not_differentiable)


def _guarded_operands(launch: Callable[..., Any], spec: KernelSpec) -> Callable[..., Any]:
    def guarded(*args: Any) -> Any:
        return launch(*_not_differentiable_p.bind(*args, spec=spec))

    return guarded


def _derivative_refused(spec: KernelSpec) -> NotDifferentiableError:
    if spec.update is not None:
        return NotDifferentiableError(
            f"it was differentiated, and it updates `{spec.update}` in place, which has no "
            "derivative rule",
            kernel=spec.name,
            where=call_site() or spec.location,
            expected="a kernel that updates an operand in place, used outside jax.grad, "
            "jax.jvp and jax.vjp",
            actual="a differentiation transform",
            fix="differentiate a jnp function of the same update (its reference), or stop "
            "the gradient at the kernel's operands with jax.lax.stop_gradient",
        )
    return NotDifferentiableError(
        "it was differentiated, and it declares no derivative",
        kernel=spec.name,
        where=call_site() or spec.location,
        expected="a kernel used outside jax.grad, jax.jvp and jax.vjp, or one declared "
        'with vjp="reference" or vjp=backward',
        actual="a differentiation transform",
        fix='declare @sk.kernel(..., vjp="reference") to differentiate its reference, or '
        f"vjp=my_backward with my_backward{backward_signature(spec)} returning one "
        "cotangent per operand",
    )


def _not_differentiable(launch: Callable[..., Any], spec: KernelSpec) -> Callable[..., Any]:
    @jax.custom_jvp
    def guarded(*args: Any) -> Any:
        return launch(*args)

    @guarded.defjvp
    def _no_derivative(primals: Any, tangents: Any) -> Any:
        raise _derivative_refused(spec)

    return guarded


def _from_reference(
    launch: Callable[..., Any],
    reference: Callable[..., Any],
    spec: KernelSpec,
    consts: Mapping[str, Any],
) -> Callable[..., Any]:
    named = named_constants(reference, len(spec.operands), consts)

    def reference_on(*args: Any) -> Any:
        return reference(*args, **named)

    @jax.custom_jvp
    def differentiated(*args: Any) -> Any:
        return launch(*args)

    @differentiated.defjvp
    def _reference_jvp(primals: Any, tangents: Any) -> Any:
        # The kernel again, not its bare launch: a second derivative (jax.hessian) of this
        # rule differentiates the primal too, and gets the reference's derivative again.
        out = differentiated(*primals)
        _, tangent = jax.jvp(reference_on, tuple(primals), tuple(tangents))
        return out, _tangents_like(out, tangent, spec)

    return differentiated


def _tangents_like(out: Any, tangent: Any, spec: KernelSpec) -> Any:
    """The reference's tangents in the structure and dtypes of the kernel's results: a
    reference may compute in float32, or return a list where the kernel returns a tuple."""
    outs, tree = jax.tree.flatten(out)
    tangents = jax.tree.leaves(tangent)
    if len(tangents) != len(outs) or any(
        np.shape(t) != np.shape(o) for t, o in zip(tangents, outs, strict=False)
    ):
        raise BackwardError(
            "its reference returns results of other shapes than the kernel's, so its "
            "derivative cannot be the kernel's",
            kernel=spec.name,
            where=call_site() or spec.location,
            operand=", ".join(r.name for r in spec.results),
            expected=[tuple(np.shape(o)) for o in outs],
            actual=[tuple(np.shape(t)) for t in tangents],
            fix="make the reference return what the kernel returns, for the same operands",
        )
    fixed = [
        t.astype(o.dtype)
        if jax.numpy.issubdtype(o.dtype, jax.numpy.inexact)
        else np.zeros(np.shape(o), jax.dtypes.float0)
        for t, o in zip(tangents, outs, strict=True)
    ]
    return jax.tree.unflatten(tree, fixed)


def _declared_backward(
    launch: Callable[..., Any],
    backward: Callable[..., Any],
    spec: KernelSpec,
    consts: Mapping[str, Any],
    backend_name: str,
) -> Callable[..., Any]:
    positional = len(spec.operands) + 2 * len(spec.results)
    named = named_constants(backward, positional, consts)

    @jax.custom_vjp
    def differentiated(*args: Any) -> Any:
        return launch(*args)

    def forward(*args: Any) -> Any:
        out = differentiated(*args)  # not the bare launch: a second derivative needs its rule
        return out, (args, out)  # the residuals: the operands and the results

    def reverse(residuals: Any, cotangent: Any) -> tuple[Any, ...]:
        args, out = residuals
        results = tuple(out) if spec.result_is_tuple else (out,)
        cotangents = tuple(cotangent) if spec.result_is_tuple else (cotangent,)
        with backend(backend_name):  # a backward kernel runs where its forward does
            got = backward(*args, *results, *cotangents, **named)
        return _check_cotangents(got, args, backward, spec)

    differentiated.defvjp(forward, reverse)
    return differentiated


def _check_cotangents(
    got: Any, args: Sequence[Any], backward: Callable[..., Any], spec: KernelSpec
) -> tuple[Any, ...]:
    """The backward's cotangents, one per operand, checked against the operands."""
    name = getattr(backward, "__name__", "backward")
    err: dict[str, Any] = dict(kernel=spec.name, where=call_site() or spec.location)
    if len(spec.operands) == 1 and not isinstance(got, tuple | list):
        got = (got,)
    if not isinstance(got, tuple | list) or len(got) != len(spec.operands):
        count = len(got) if isinstance(got, tuple | list) else type(got).__name__
        raise BackwardError(
            f"its backward `{name}` returned {count} cotangent(s) for "
            f"{len(spec.operands)} operand(s)",
            **err,
            expected=f"a tuple of {len(spec.operands)}: one cotangent per operand, "
            f"({', '.join('d' + o.name for o in spec.operands)})",
            actual=count,
            fix=f"return one cotangent per operand from `{name}`, in the operands' order; "
            "None for an operand with no gradient",
        )
    checked: list[Any] = []
    for op, arg, cot in zip(spec.operands, args, got, strict=True):
        dtype = np.dtype(arg.dtype)
        if cot is None:
            checked.append(None)
            continue
        if not jax.numpy.issubdtype(dtype, jax.numpy.inexact):
            raise BackwardError(
                f"its backward `{name}` returned a cotangent for an integer operand",
                **err,
                operand=op.name,
                expected=f"None: a {dtype} operand has no gradient",
                actual=f"an array of shape {tuple(np.shape(cot))}",
                fix=f"return None for `{op.name}` from `{name}`",
            )
        shape, cot_dtype = tuple(np.shape(cot)), np.dtype(getattr(cot, "dtype", None))
        if shape != tuple(arg.shape) or cot_dtype != dtype:
            raise BackwardError(
                f"its backward `{name}` returned a cotangent unlike its operand",
                **err,
                operand=op.name,
                expected=f"shape {tuple(arg.shape)}, dtype {dtype}: the operand's",
                actual=f"shape {shape}, dtype {cot_dtype}",
                fix=f"return d{op.name} with `{op.name}`'s shape, cast with "
                f".astype({op.name}.dtype)",
            )
        checked.append(cot)
    return tuple(checked)
