"""The differential fuzzer for kernel bodies: random row-local bodies, run as kernels on ragged
shapes, must compute what the same body computes with plain jnp on the whole arrays.

Each case (tests/body_fuzz.py draws it) is a real module imported from a temporary file, so the
decorator reads real annotations and errors point at real lines; a failure prints the module
with its line numbers. The kernel runs in the Mosaic GPU interpreter at a shape that is not a
multiple of its blocks, called directly, inside `jax.jit` or under `jax.vmap`. The reference is
the same function from the same file, run on the whole arrays with `sk.load` returning the
array and the reductions jnp's. The results must agree: NaN and infinities at the same
positions, and the finite values within the tolerance of the narrowest float taking part,
relative to the row's scale, plus a few times the rounding noise measured by evaluating the
reference in other orders (see `body_fuzz.expected_results`).

A case fails on a wrong value, a wrong shape or dtype, any exception that is not a
`sk.StaticKernelError`, a StaticKernelError that does not point at the module or the call, or
a crash of the process. A body statickernel refuses with a StaticKernelError is skipped and
counted, and the summary lists each refusal: the bodies use only documented ops, so a refusal
is a bug too, pinned by its own test below once seen.

The run does not stop at the first failing case: failures are grouped by their symptom and the
report shows the shortest bodies of each group. The cases run in a child process, so that a
case which kills the process is reported with its source. Settings come from the environment:
- BODY_FUZZ_EXAMPLES: the number of cases (default 300);
- BODY_FUZZ_SEED: a seed, instead of the fixed derandomized sequence;
- BODY_FUZZ_SHRINK=1: raise at the first failure and let hypothesis shrink it (in this
  process: a case that crashes the process ends the session);
- BODY_FUZZ_REPORT: a file for the whole report, with every refusal's example and how often
  each op form was drawn.

Below the fuzzer are the regression cases: each bug it found, as the smallest body that shows
it, written out as a user would write it.
"""

import atexit
import collections
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, event, given, seed, settings
from jaxtyping import Array, Float

import statickernel as sk
from body_fuzz import (
    KERNEL_NAME,
    Case,
    Expected,
    Problem,
    cases,
    compare,
    expected_results,
    make_args,
    reference_function,
)
from generated_modules import write_and_import

EXAMPLES = int(os.environ.get("BODY_FUZZ_EXAMPLES", "300"))
SEED = os.environ.get("BODY_FUZZ_SEED")
SHRINK = os.environ.get("BODY_FUZZ_SHRINK") == "1"
REPORT = os.environ.get("BODY_FUZZ_REPORT")

_MODULE_DIR = pathlib.Path(tempfile.mkdtemp(prefix="statickernel_bodies_"))
atexit.register(shutil.rmtree, _MODULE_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _interpreter_by_default(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("STATICKERNEL_BACKEND", raising=False)
    sk.set_backend(None)
    yield


# --- running one case --------------------------------------------------------------------------


class CaseFailure(AssertionError):
    """A case that broke the invariant; `symptom` groups it with others like it."""

    def __init__(self, symptom: str, case: Case, details: str):
        self.symptom = symptom
        self.case = case
        self.details = details
        super().__init__(f"{symptom}\n{details}\n{case.describe()}")


@dataclasses.dataclass
class Refusal(Exception):
    stage: str  # "declaration" or "call"
    error: sk.StaticKernelError


def _module_path(case: Case) -> pathlib.Path:
    digest = hashlib.sha1(case.source.encode()).hexdigest()[:16]
    return _MODULE_DIR / f"fuzzed_{digest}.py"


def declare(case: Case) -> tuple[sk.Kernel[..., Any], pathlib.Path]:
    """Imports the case's module from its own file; a refusal raises Refusal."""
    path = _module_path(case)
    try:
        module = write_and_import(path, case.source)
    except sk.StaticKernelError as exc:
        _check_location(exc, case, path.name)
        raise Refusal("declaration", exc) from None
    except Exception as exc:
        raise _unexpected("declaration", exc, case) from None
    return getattr(module, KERNEL_NAME), path


def _check_location(exc: sk.StaticKernelError, case: Case, *files: str) -> None:
    if not (exc.where and any(f in exc.where for f in files)):
        raise CaseFailure(
            f"{type(exc).__name__} not located in the kernel's module",
            case,
            f"where={exc.where!r}\n{exc}",
        )


def _unexpected(stage: str, exc: BaseException, case: Case) -> CaseFailure:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    # Numbers vary from case to case; the symptom keeps the words.
    words = re.sub(r"\d+", "N", text)[:100]
    return CaseFailure(
        f"{type(exc).__name__} at the {stage}: {words}", case, f"{type(exc).__name__}: {exc}"
    )


def run_case(case: Case) -> None:
    """Runs one case; raises CaseFailure if it breaks the invariant, Refusal if refused."""
    kernel, path = declare(case)
    args = make_args(case)
    calls = [args]
    try:
        if case.how == "vmap":  # a batch of two: each element is checked on its own
            calls.append(make_args(case, salt=1))
            batched = jax.vmap(kernel)(*(jnp.stack(pair) for pair in zip(*calls, strict=True)))
            parts = batched if isinstance(batched, tuple) else (batched,)
            results = [tuple(p[i] for p in parts) for i in range(len(calls))]
        else:
            got = jax.jit(kernel)(*args) if case.how == "jit" else kernel(*args)
            results = [got if isinstance(got, tuple) else (got,)]
    except sk.StaticKernelError as exc:
        # A call error points at the call, or at the body's line it concerns.
        _check_location(exc, case, path.name, pathlib.Path(__file__).name)
        raise Refusal("call", exc) from None
    except Exception as exc:
        raise _unexpected("call", exc, case) from None
    reference = reference_function(case.source, str(path))
    problems: list[Problem] = []
    for element, (call_args, got_parts) in enumerate(zip(calls, results, strict=True)):
        try:
            want = expected_results(case, reference, call_args)
        except Exception as exc:  # the generator wrote a body jnp itself cannot run
            raise _unexpected("reference", exc, case) from None
        where = f"batch element {element}, " if case.how == "vmap" else ""
        for i, (g, w, kind) in enumerate(zip(got_parts, want, case.results, strict=True)):
            found = compare(g, w, case.precision)
            problems += [p._replace(text=f"{where}result {i} ({kind}): {p.text}") for p in found]
    if problems:
        symptom = "wrong " + ", ".join(sorted({p.symptom for p in problems}))
        raise CaseFailure(symptom, case, "\n".join(p.text for p in problems))


# --- the fuzzer --------------------------------------------------------------------------------
#
# The cases run in a child process, which writes one JSON line as each case starts and one with
# its outcome. A case that kills the process (XLA aborts on some kernels) or hangs is then
# reported with its source, and the run goes on in a new child with another seed, for the
# cases that are left.

CRASH_RESTARTS = 5


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=SEED is None,
        database=None,
        deadline=None,
        print_blob=True,
        # Every case compiles a kernel, so shrinking takes minutes; only when asked for.
        phases=[Phase.explicit, Phase.generate, *([Phase.shrink] if SHRINK else [])],
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


def _fuzzer(examples: int, seed_value: int | None, record: Any) -> Any:
    """The hypothesis test: runs `examples` cases and passes each outcome to `record`."""

    def one(case: Case) -> None:
        record({"start": case.describe(), "ops": list(case.ops)})
        try:
            run_case(case)
        except Refusal as refusal:
            error = refusal.error
            text = f"{refusal.stage}: {type(error).__name__}: {error.what}"
            record({"refused": re.sub(r"\d+", "N", text), "example": f"{error}\n{case.describe()}"})
            event(f"refused: {type(error).__name__}")
            assume(False)
        except CaseFailure as failure:
            record({"failed": failure.symptom, "details": failure.details, "case": case.describe()})
            if SHRINK:
                raise
            event(f"failed: {failure.symptom}")
            return
        record({"compared": True})

    test = _settings(examples)(given(case=cases())(one))
    return seed(seed_value)(test) if seed_value is not None else test


@dataclasses.dataclass
class Run:
    """What the children recorded, read back."""

    starts: int = 0
    compared: int = 0
    refusals: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    refused_examples: dict[str, str] = dataclasses.field(default_factory=dict)
    failures: dict[str, list[tuple[str, str]]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )  # symptom -> (details, case)
    ops: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    valid: int = 0  # cases compared or failed: what counts toward the examples
    last_start: str | None = None  # the case running when a child stopped

    def read(self, path: pathlib.Path) -> None:
        self.last_start = None
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if "start" in entry:
                self.starts += 1
                self.ops.update(entry["ops"])
                self.last_start = entry["start"]
                continue
            self.last_start = None
            if "refused" in entry:
                self.refusals[entry["refused"]] += 1
                self.refused_examples.setdefault(entry["refused"], entry["example"])
            elif "failed" in entry:
                self.failures[entry["failed"]].append((entry["details"], entry["case"]))
                self.valid += 1
            else:
                self.compared += 1
                self.valid += 1

    def summary(self) -> str:
        failed = sum(len(v) for v in self.failures.values())
        lines = [
            f"body fuzz: {self.starts} cases, {self.compared} compared with jnp, "
            f"{sum(self.refusals.values())} refused, {failed} failed"
        ]
        for text, count in self.refusals.most_common():
            lines.append(f"  refused {count}x: {text}")
        for symptom, found in sorted(self.failures.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  failed {len(found)}x: {symptom}")
        return "\n".join(lines)

    def coverage(self) -> str:
        return "\n".join(f"  {count:5d}  {op}" for op, count in sorted(self.ops.items()))

    def report(self) -> str:
        parts = [self.summary()]
        for symptom, found in sorted(self.failures.items(), key=lambda kv: -len(kv[1])):
            parts.append(f"\n=== {len(found)}x {symptom}")
            for details, case in sorted(found, key=lambda f: len(f[1]))[:2]:
                parts.append(f"{details}\n{case}\n")
        for text, example in self.refused_examples.items():
            parts.append(f"\n=== refused: {text}\n{example}")
        return "\n".join(parts)


def fuzz_isolated(examples: int) -> Run:
    """Runs the fuzzer in child processes until `examples` cases have been compared."""
    run = Run()
    base_seed = int(SEED) if SEED is not None else None
    with tempfile.TemporaryDirectory(prefix="statickernel_bodies_run_") as tmp:
        for attempt in range(CRASH_RESTARTS + 1):
            left = examples - run.valid
            if left <= 0:
                break
            records = pathlib.Path(tmp) / f"records_{attempt}.jsonl"
            # The first child follows the fixed sequence (or the given seed); after a crash,
            # another seed gives the cases that are left.
            child_seed = base_seed if attempt == 0 else (base_seed or 0) + attempt
            command = [sys.executable, __file__, str(records), str(left), str(child_seed)]
            try:
                done = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=max(900, 6 * left),
                    cwd=pathlib.Path(__file__).parent,
                    # The child imports the shared helpers of tests/, as conftest.py lets
                    # the suite do.
                    env={**os.environ, "PYTHONPATH": _child_path()},
                )
                returncode, stderr = done.returncode, done.stderr
            except subprocess.TimeoutExpired as exc:
                returncode, stderr = "timeout", str(exc.stderr or "")
            run.read(records)
            if returncode == 0:
                break
            tail = _stderr_summary(stderr)
            if run.last_start is None:
                run.failures["the fuzzer's process failed"].append((tail, ""))
                break
            symptom = f"the process died ({returncode}) running the case"
            run.failures[symptom].append((tail, run.last_start))
            run.valid += 1
    return run


def _stderr_summary(stderr: str) -> str:
    """What a dead child said: the lines naming the failed check, and its last lines."""
    lines = stderr.strip().splitlines()
    said = [line for line in lines if re.search(r"RET_CHECK|Check failed|Fatal|Error|error:", line)]
    return "\n".join([*said[:4], *lines[-6:]])


def _child(records: str, examples: int, seed_value: int | None) -> None:
    with open(records, "a") as out:

        def record(entry: dict[str, Any]) -> None:
            out.write(json.dumps(entry) + "\n")
            out.flush()

        sk.set_backend(None)
        _fuzzer(examples, seed_value, record)()


@pytest.mark.slow
def test_bodies_compute_what_jnp_computes(capsys: pytest.CaptureFixture[str]) -> None:
    if SHRINK:  # in this process, so that hypothesis shrinks and prints the first failure
        _fuzzer(EXAMPLES, int(SEED) if SEED else None, lambda entry: None)()
        return
    run = fuzz_isolated(EXAMPLES)
    with capsys.disabled():  # shown without -s
        print("\n" + run.summary())
    if REPORT:
        pathlib.Path(REPORT).write_text(f"{run.report()}\n\nops used:\n{run.coverage()}\n")
    assert not run.failures, run.report()
    # The run must stay useful: a generator whose bodies were mostly refused proves little.
    assert run.compared >= EXAMPLES * 0.9, run.summary()


# --- regression cases --------------------------------------------------------------------------
#
# Each is the smallest body the fuzzer found for one bug, written out as a user writes it, with
# the symptom seen before the fix. The expected values are plain jnp on the whole array, or
# spelled out where jnp on the CPU is not a reliable reference.


def _rows(m: int, n: int, dtype: Any = jnp.float32, shift: float = 0.0, key: int = 0) -> jax.Array:
    rng = np.random.default_rng([m, n, key])
    return jnp.asarray(rng.standard_normal((m, n), np.float32) + shift, dtype)


def _check(got: Any, want: Any, precision: str = "float32") -> None:
    want = np.asarray(want)
    exact = Expected(want, np.zeros(want.shape, np.float32), np.zeros(want.shape, bool))
    problems = compare(got, exact, precision)
    assert not problems, "\n".join(p.text for p in problems)


def test_a_constant_block_summed_along_the_row_counts_every_column() -> None:
    """Before: 0.5 per row, as if the row held one element (a constant block is held as its
    scalar, and the sum of a scalar was the scalar)."""

    @sk.kernel(tile={"M": "BM"})
    def fuzzed(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
        xv = sk.load(x)
        t0 = xv + xv
        t1 = jnp.ones_like(t0)
        t2 = jax.lax.integer_pow(t1, 4)
        t3 = t2 * 0.5
        return sk.sum(t3, axis=1)

    x = _rows(100, 2, jnp.bfloat16, shift=-8.0)
    _check(fuzzed(x), jnp.full((100,), 1.0, jnp.bfloat16), "bfloat16")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (lambda v: sk.sum(jnp.ones_like(v), axis=1), lambda x: jnp.full(x.shape[:1], x.shape[1])),
        (
            lambda v: sk.sum(jnp.full_like(v, 2.0), axis=1),
            lambda x: jnp.full(x.shape[:1], 2.0 * x.shape[1]),
        ),
        (lambda v: jnp.mean(jnp.full_like(v, -0.5), axis=1), lambda x: jnp.full(x.shape[:1], -0.5)),
        (
            lambda v: sk.sum(v, axis=1) / sk.sum(jnp.ones_like(v), axis=1),
            lambda x: jnp.mean(x, axis=1),
        ),
    ],
    ids=["sum-ones_like", "sum-full_like", "mean-full_like", "sum-over-count"],
)
def test_row_reductions_of_constant_blocks(body: Any, expected: Any) -> None:
    """Before: the sum was the constant itself (1.0, 2.0) and the mean the constant over N."""

    @sk.kernel(tile={"M": "BM"})
    def reduced(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
        return body(sk.load(x, fill=jnp.nan))

    x = _rows(70, 100)
    _check(reduced(x), expected(x).astype(jnp.float32))


def test_a_row_vector_spread_by_ones_like_sums_to_n_times_the_vector() -> None:
    """Before: the sum was the row vector itself, not N times it."""

    @sk.kernel(tile={"M": "BM"})
    def fuzzed(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
        xv = sk.load(x)
        t0 = sk.max(xv, axis=1)
        t1 = t0[:, None] * jnp.ones_like(xv)
        return sk.sum(t1, axis=1)

    x = _rows(70, 100)
    _check(fuzzed(x), 100 * jnp.max(x, axis=1))


def test_a_column_vector_spread_over_a_block_reduces_along_the_row() -> None:
    """Before: UnsupportedOpError at the declaration, "the body reduces a block or a vector to a
    scalar", for an elementwise op and a row reduction."""

    @sk.kernel(tile={"M": "BM"})
    def fuzzed(
        x: Float[Array, "M N"],
        w: Float[Array, " N"],
        *,
        BM: sk.Const[int] = 64,
        eps: sk.Const[float] = 0.001,
    ) -> Float[Array, "M N"]:
        xv = sk.load(x, fill=-float("inf"))
        wv = sk.load(w, fill=jnp.inf)
        t0 = wv + jnp.zeros_like(xv)
        return t0 * jax.lax.rsqrt(jnp.mean(t0 * t0, axis=1, keepdims=True) + eps)

    x, w = _rows(93, 8), _rows(1, 8, key=1)[0]
    t0 = w + jnp.zeros_like(x)
    _check(fuzzed(x, w), t0 * jax.lax.rsqrt(jnp.mean(t0 * t0, axis=1, keepdims=True) + 0.001))


@pytest.mark.parametrize(
    ("body", "result"),
    [
        (lambda v: jnp.where(v > 0, v, 0.0), "M N"),
        (lambda v: jnp.where((v > -1.0) & (v < 1.0), 0.0, v), "M N"),
        (lambda v: jnp.where(v > 0, 1.0, -1.0), "M N"),
        (lambda v: sk.max(jax.lax.logistic(jnp.where(v > 0, 1.0, -1.0)), axis=1), " M"),
        (lambda v: jnp.where(sk.max(v, axis=1, keepdims=True) > 0, v, 0.0), "M N"),
    ],
    ids=["block-scalar", "scalar-block", "scalar-scalar", "scalar-scalar-reduced", "row-condition"],
)
def test_where_with_scalar_branches(body: Any, result: str) -> None:
    """Before: TypeError at the call, "select cases must have the same shapes, got [(), (64,
    256)]" (or "select `which` must be scalar or have the same shape as cases")."""

    @sk.kernel(tile={"M": "BM"})
    def selected(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, result]:
        return body(sk.load(x, fill=-float("inf")))

    x = _rows(85, 118)
    _check(selected(x), body(x))


@pytest.mark.parametrize("fill", [jnp.nan, float("nan"), -float("inf"), jnp.inf, -0.0])
def test_special_fills_never_reach_the_result(fill: float) -> None:
    """Before: NameError at the call, "name 'nan' is not defined", for a nan fill."""

    @sk.kernel(tile={"M": "BM"})
    def fuzzed(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
        xv = sk.load(x, fill=fill)
        t0 = jax.lax.rsqrt(jnp.abs(xv) + 0.5)
        return sk.max(t0, axis=1) + sk.sum(t0, axis=1)

    x = _rows(20, 148, shift=-8.0)
    t0 = jax.lax.rsqrt(jnp.abs(x) + 0.5)
    _check(fuzzed(x), jnp.max(t0, axis=1) + jnp.sum(t0, axis=1))


def test_constant_results_do_not_crash_the_compiler() -> None:
    """Before: the process died (SIGABRT in XLA's CSE, "cannot remove instruction ... constant(nan),
    control-predecessors") compiling a kernel that returns a constant block and a row value
    of it. Run in a child process, so that a crash fails this test alone."""
    code = textwrap.dedent(
        """
        import jax.numpy as jnp
        import numpy as np
        from jaxtyping import Array, Float

        import statickernel as sk


        @sk.kernel(tile={"M": "BM"})
        def fuzzed(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64
        ) -> tuple[Float[Array, "M N"], Float[Array, " M"]]:
            xv = sk.load(x)
            t0 = jnp.full_like(xv, 2.0)
            t1 = jnp.where(t0 > t0, t0, 0.0)
            return t1, jnp.squeeze(sk.max(t0, axis=1, keepdims=True) * 0 + 1.0, axis=1)


        block, row = fuzzed(jnp.ones((128, 16), jnp.float32))
        assert np.array_equal(block, np.zeros((128, 16))), block
        assert np.array_equal(row, np.ones(128)), row
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, _stderr_summary(done.stderr)


def test_row_max_and_min_carry_nan() -> None:
    """Found as a softmax of a row holding +inf (all NaN), whose row min came back +inf.

    Before: the kernel's row max and min skipped NaN elements (-inf for a row of NaN) in the
    interpreter, which reduces with XLA on the CPU; jnp's max carries NaN (XLA's own CPU max
    skips it too for 64 rows or more, so the expected values are spelled out)."""

    @sk.kernel(tile={"M": "BM"})
    def fuzzed(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, " M"]:
        xv = sk.load(x, fill=-float("inf"))
        t0 = xv * xv
        t1 = jnp.exp(t0 - jnp.max(t0, axis=1, keepdims=True))
        t2 = t1 / jnp.sum(t1, axis=1, keepdims=True)
        return jnp.min(t2, axis=1)

    @sk.kernel(tile={"M": "BM"})
    def extremes(
        x: Float[Array, "M N"], *, BM: sk.Const[int] = 64
    ) -> tuple[Float[Array, " M"], Float[Array, " M"]]:
        v = sk.load(x)
        return sk.max(v, axis=1), sk.min(v, axis=1)

    x = np.array(_rows(8, 256))
    x[:, 5] = np.inf
    _check(fuzzed(jnp.asarray(x)), np.full(8, np.nan, np.float32))
    for m, n in ((4, 256), (70, 100), (130, 300)):  # N aligned and ragged; few rows and many
        y = np.ones((m, n), np.float32)
        y[0, :] = np.nan
        y[1, 3] = np.nan
        y[2, 0] = -5.0
        want_high = np.where(np.isnan(y).any(axis=1), np.nan, 1.0).astype(np.float32)
        want_low = want_high.copy()
        want_low[2] = -5.0
        high, low = extremes(jnp.asarray(y))
        _check(high, want_high)
        _check(low, want_low)


def test_jax_nn_softmax_in_a_body() -> None:
    """Before: UnsupportedOpError at the declaration, "the body uses `stop_gradient` (primitive
    `stop_gradient`), which Mosaic GPU cannot lower". jax.nn.softmax is the gallery's softmax
    with a stop_gradient on the row max, an identity in the forward pass."""

    @sk.kernel(tile={"M": "BM"})
    def fuzzed(x: Float[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float[Array, "M N"]:
        xv = sk.load(x, fill=-jnp.inf)
        return jax.nn.softmax(xv, axis=1)

    x = _rows(70, 100, shift=-8.0)
    _check(fuzzed(x), jax.nn.softmax(x, axis=1))


def _child_path() -> str:
    tests = str(pathlib.Path(__file__).resolve().parents[3])
    return os.pathsep.join([tests, *filter(None, [os.environ.get("PYTHONPATH")])])


if __name__ == "__main__":  # a child of fuzz_isolated: RECORDS EXAMPLES SEED
    _child(sys.argv[1], int(sys.argv[2]), None if sys.argv[3] == "None" else int(sys.argv[3]))
