"""kernel.tune: candidates declared with sk.tune, pruned by the plan's rules, ranked by the
plan's model (the measure a CPU-only machine without the [aot] toolchain has), cached on disk
and taken by later calls; and the refusals, each a statickernel error."""

import json
import math
import pathlib
import re
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, BFloat16, Float

import statickernel as sk
from statickernel.tuning import cache, model
from statickernel.tuning.result import Status

SQUARE = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)


def softmax_reference(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x, axis=-1)


@sk.kernel(tile={"M": "BM"}, reference=softmax_reference)
def softmax(
    x: Float[Array, "M N"], *, BM: sk.Const[int] = sk.tune(64, 128, 256)
) -> Float[Array, "M N"]:
    v = sk.load(x, fill=-jnp.inf)
    e = jnp.exp(v - sk.max(v, axis=1, keepdims=True))
    return e / sk.sum(e, axis=1, keepdims=True)


def matmul_reference(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.dot(a, b, preferred_element_type=jnp.float32)


# Declared with the small tiles first: the default is the worse choice at large shapes.
@sk.kernel(tile={"M": "BM", "N": "BN"}, loop={"K": "BK"}, reference=matmul_reference)
def matmul(
    a: BFloat16[Array, "M K"],
    b: BFloat16[Array, "K N"],
    *,
    BM: sk.Const[int] = sk.tune(64, 128),
    BN: sk.Const[int] = sk.tune(64, 128, 256),
    BK: sk.Const[int] = 64,
) -> Float[Array, "M N"]:
    return sk.loop("K", lambda acc: acc + sk.dot(a, b), init=jnp.zeros((BM, BN), jnp.float32))


@pytest.fixture(autouse=True)
def own_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setenv("STATICKERNEL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("STATICKERNEL_AUTOTUNE", raising=False)
    return tmp_path


def _consts(plan: sk.LaunchPlan, *names: str) -> dict[str, Any]:
    return {k: v for k, v in plan.constants if k in names}


# --- the declaration ------------------------------------------------------------------------


def test_the_first_value_is_the_default_and_the_rest_are_candidates() -> None:
    assert softmax.consts["BM"] == 64
    assert softmax.spec.tunables == {"BM": (64, 128, 256)}
    assert matmul.spec.tunables == {"BM": (64, 128), "BN": (64, 128, 256)}
    assert "BK" not in matmul.spec.tunables


@pytest.mark.parametrize(
    ("values", "actual"),
    [((64, 64), "lists 64 twice"), ((64, 0), "must be positive"), ((64, 1.5), "Python int")],
)
def test_bad_candidates_are_refused_at_the_declaration(
    values: tuple[Any, ...], actual: str
) -> None:
    with pytest.raises(sk.ConstantError, match=actual) as info:

        @sk.kernel(tile={"M": "BM"})
        def k(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = sk.tune(*values)
        ) -> Float[Array, "M N"]:
            return sk.load(x)

    assert info.value.constant == "BM" and info.value.fix
    assert info.value.phase is sk.Phase.DECLARATION


# --- ranking by the plan --------------------------------------------------------------------


def test_the_plan_ranks_every_combination_and_prunes_what_the_rules_refuse() -> None:
    result = matmul.tune(SQUARE, SQUARE, by="plan", BK=128)
    result.check_invariants()
    assert result.ranked_by is sk.Ranking.PLAN and result.target == "sm_90a"
    assert result.shapes == ("bfloat16[4096,4096]", "bfloat16[4096,4096]")
    combos = {(c.constants["BM"], c.constants["BN"]) for c in result.table}
    assert combos == {(m, n) for m in (64, 128) for n in (64, 128, 256)}
    (pruned,) = [c for c in result.table if c.status is Status.PRUNED]
    assert pruned.constants == {"BM": 64, "BN": 256}
    assert pruned.reason.startswith("SharedMemoryError: ") and "232,448 B" in pruned.reason
    ranked = [c for c in result.table if c.status is Status.RANKED]
    estimates = [c.estimated_seconds for c in ranked]
    assert estimates == sorted(estimates)  # type: ignore[type-var]
    # 64 x 64 tiles copy each operand twice as often as 128 x 128 ones: the model ranks them
    # last, where the declared default (64, 64) would have taken them. 128 x 64 is as fast
    # by the model (compute-bound), and copies more.
    assert result.best == {"BM": 128, "BN": 128}
    assert ranked[-1].constants == {"BM": 64, "BN": 64}
    text = str(result)
    assert "ranked by: plan" in text and "best: BM=128, BN=128" in text
    assert "pruned: SharedMemoryError" in text


def test_the_copies_the_model_counts_follow_the_tiles() -> None:
    small = matmul.plan(SQUARE, SQUARE, BM=64, BN=64)
    large = matmul.plan(SQUARE, SQUARE, BM=128, BN=128)
    assert model.copied_bytes(small) == 2 * model.copied_bytes(large)
    assert model.estimated_seconds(large) >= large.cost.floor_seconds  # type: ignore[union-attr]


def test_a_launch_with_an_idle_last_wave_is_estimated_slower() -> None:
    schedule = softmax.plan(jax.ShapeDtypeStruct((64 * 133, 128), jnp.float32)).schedule
    assert schedule is not None and not schedule.walks_blocks
    slots = 132 * schedule.ctas_per_sm
    waves = math.ceil(schedule.ctas / slots)
    assert model.wave_efficiency(schedule, 132) == pytest.approx(schedule.ctas / (waves * slots))


# --- the cache and the calls ----------------------------------------------------------------


def test_calls_of_the_tuned_shapes_take_the_cached_best(own_cache: pathlib.Path) -> None:
    assert _consts(matmul.plan(SQUARE, SQUARE), "BM", "BN") == {"BM": 64, "BN": 64}
    matmul.tune(SQUARE, SQUARE, by="plan")
    (entry,) = (own_cache / "tune").glob("matmul-*.json")
    assert json.loads(entry.read_text())["best"] == {"BM": 128, "BN": 128}
    fresh = matmul.bind()  # a kernel with an empty in-memory cache, as a new process has
    assert _consts(fresh.plan(SQUARE, SQUARE), "BM", "BN") == {"BM": 128, "BN": 128}
    # An explicit value wins, and keys a tuning of its own (none cached: the default BN).
    assert _consts(fresh.plan(SQUARE, SQUARE, BM=64), "BM", "BN") == {"BM": 64, "BN": 64}
    # Other shapes were not tuned.
    other = jax.ShapeDtypeStruct((4096, 2048), jnp.bfloat16)
    assert _consts(fresh.plan(SQUARE, other), "BM", "BN") == {"BM": 64, "BN": 64}


def test_calls_after_a_tuning_in_the_same_process_take_it() -> None:
    kernel = matmul.bind()  # a kernel with an empty in-memory cache
    sharing = kernel.with_backend("interpret")  # shares that cache
    other = matmul.bind()  # another kernel of the same declaration, with a cache of its own
    for k in (kernel, sharing, other):
        assert _consts(k.plan(SQUARE, SQUARE, target="sm_90a"), "BM", "BN") == {"BM": 64, "BN": 64}
    result = kernel.tune(SQUARE, SQUARE, by="plan", target="sm_90a")
    assert result.best == {"BM": 128, "BN": 128}
    for k in (kernel, sharing, other):
        assert _consts(k.plan(SQUARE, SQUARE, target="sm_90a"), "BM", "BN") == result.best
    # Another architecture's calls were not tuned.
    assert _consts(kernel.plan(SQUARE, SQUARE, target="sm_100a"), "BN") == {"BN": 64}


def test_a_call_after_a_tuning_in_the_same_process_runs_the_tuned_constants() -> None:
    x = jax.random.normal(jax.random.key(5), (1000, 8), jnp.float32)
    kernel = softmax.bind().with_backend("interpret").with_target("sm_90a")
    np.testing.assert_allclose(np.asarray(kernel(x)), np.asarray(softmax_reference(x)), atol=2e-6)
    assert _consts(kernel.plan(x), "BM") == {"BM": 64}  # the call's specialization
    result = kernel.tune(x, by="plan")
    assert result.best != {"BM": 64}
    got = kernel(x)
    assert _consts(kernel.plan(x), "BM") == dict(result.best)
    np.testing.assert_allclose(np.asarray(got), np.asarray(softmax_reference(x)), atol=2e-6)


def test_autotune_0_ignores_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    matmul.tune(SQUARE, SQUARE, by="plan")
    monkeypatch.setenv("STATICKERNEL_AUTOTUNE", "0")
    assert _consts(matmul.bind().plan(SQUARE, SQUARE), "BM", "BN") == {"BM": 64, "BN": 64}


def test_autotune_force_tunes_new_shapes_on_their_first_call(
    own_cache: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATICKERNEL_AUTOTUNE", "force")
    shape = jax.ShapeDtypeStruct((2048, 4096), jnp.bfloat16)
    plan = matmul.bind().plan(shape, SQUARE)
    assert list((own_cache / "tune").glob("matmul-*.json"))
    assert _consts(plan, "BM", "BN") == dict(matmul.tune(shape, SQUARE, by="plan").best)


def test_a_fixed_constant_keys_its_own_tuning() -> None:
    result = matmul.tune(SQUARE, SQUARE, by="plan", BM=64)
    assert set(result.best) == {"BN"}
    assert all(set(c.constants) == {"BN"} for c in result.table)
    assert _consts(matmul.bind().plan(SQUARE, SQUARE, BM=64), "BN")["BN"] == result.best["BN"]


def test_a_cache_key_changes_with_what_the_choice_depends_on() -> None:
    shapes = [((4096, 4096), "bfloat16")] * 2
    key = cache.tuning_key(matmul.spec, shapes, {}, "sm_90a")
    assert key == cache.tuning_key(matmul.spec, shapes, {}, "sm_90a")
    assert key != cache.tuning_key(matmul.spec, [((4096, 4096), "float16")] * 2, {}, "sm_90a")
    assert key != cache.tuning_key(matmul.spec, shapes, {"BK": 128}, "sm_90a")
    assert key != cache.tuning_key(matmul.spec, shapes, {}, "sm_100a")
    assert key != cache.tuning_key(matmul.spec, shapes, {}, "sm_90a", "NVIDIA H200")
    assert key != cache.tuning_key(softmax.spec, shapes, {}, "sm_90a")


# Shapes where the plan ranks BM=64 first for sm_90a: a tcgen05 MMA (sm_100a) takes 128 rows.
SMALL_A = jax.ShapeDtypeStruct((192, 1024), jnp.bfloat16)
SMALL_B = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)


def test_a_tuning_for_one_target_never_applies_to_another(own_cache: pathlib.Path) -> None:
    hopper = matmul.tune(SMALL_A, SMALL_B, by="plan", target="sm_90a")
    assert hopper.target == "sm_90a" and hopper.best == {"BM": 64, "BN": 64}
    # A later process (a kernel with an empty in-memory cache) plans these shapes for sm_100a
    # with its own defaults, not with Hopper's BM=64, which sm_100a refuses.
    blackwell_plan = matmul.bind().plan(SMALL_A, SMALL_B, target="sm_100a")
    assert _consts(blackwell_plan, "BM")["BM"] == 128
    blackwell = matmul.with_target("sm_100a").tune(SMALL_A, SMALL_B, by="plan")
    assert blackwell.target == "sm_100a" and not blackwell.cached
    assert blackwell.best["BM"] == 128
    # Each target's calls take its own tuning.
    fresh = matmul.bind()
    assert _consts(fresh.plan(SMALL_A, SMALL_B, target="sm_90a"), "BM", "BN") == hopper.best
    assert _consts(fresh.plan(SMALL_A, SMALL_B, target="sm_100a"), "BM", "BN") == blackwell.best
    # The files say what they were tuned for, and with what.
    files = [json.loads(p.read_text()) for p in (own_cache / "tune").glob("matmul-*.json")]
    assert sorted(f["planned_for"] for f in files) == ["sm_100a", "sm_90a"]
    assert all(
        f["versions"] == {"statickernel": sk.__version__, "jax": jax.__version__} for f in files
    )


def test_the_device_measure_tunes_for_the_attached_gpu_alone() -> None:
    from statickernel._targets import live_target

    live = live_target()
    if sk.default_backend() != "mosaic_gpu" or live is None:
        pytest.skip("needs a Hopper or Blackwell GPU")
    other = "sm_100a" if live.name == "sm_90a" else "sm_90a"
    x = jnp.ones((256, 256), jnp.bfloat16)
    with pytest.raises(sk.TuneError, match=f"the tuning is for {other}"):
        matmul.tune(x, x, by="device", target=other)


def _cache_file(own_cache: pathlib.Path) -> pathlib.Path:
    (entry,) = (own_cache / "tune").glob("matmul-*.json")
    return entry


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "is not JSON"),
        ("[]", "holds a JSON array, not a tuning"),
        ("null", "holds a JSON null, not a tuning"),
        ('"BM=128"', "holds a JSON string, not a tuning"),
        ("\udcff", "cannot be read"),
    ],
)
def test_a_cache_file_holding_no_tuning_is_reported_once_and_ignored(
    own_cache: pathlib.Path, text: str, problem: str
) -> None:
    matmul.tune(SQUARE, SQUARE, by="plan")
    entry = _cache_file(own_cache)
    entry.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.warns(sk.TuningCacheWarning) as caught:
        plan = matmul.bind().plan(SQUARE, SQUARE)
    assert _consts(plan, "BM", "BN") == {"BM": 64, "BN": 64}  # the declared defaults
    (warning,) = caught
    message = str(warning.message)
    assert f"the tuning cache file {entry} {problem}" in message
    assert "Delete the file" in message and "force=True" in message
    assert warning.filename == __file__  # the line of the call
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: a second reader is not told again
        assert _consts(matmul.bind().plan(SQUARE, SQUARE), "BM", "BN") == {"BM": 64, "BN": 64}


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d.pop("best"), "holds a malformed tuning (KeyError: 'best')"),
        (lambda d: d.update(best=[128, 128]), "holds a malformed tuning (TypeError"),
        (lambda d: d.update(ranked_by="luck"), "holds a malformed tuning (ValueError"),
        (lambda d: d["candidates"][0].update(seconds="1 us"), "seconds is '1 us', not a number"),
        (lambda d: d.update(best={"BM": 64, "BN": 64}), "best that is not its first ranked"),
    ],
)
def test_a_malformed_tuning_is_reported_and_ignored(
    own_cache: pathlib.Path, edit: Any, problem: str
) -> None:
    matmul.tune(SQUARE, SQUARE, by="plan")
    entry = _cache_file(own_cache)
    data = json.loads(entry.read_text())
    edit(data)
    entry.write_text(json.dumps(data))
    with pytest.warns(sk.TuningCacheWarning, match=re.escape(problem)):
        plan = matmul.bind().plan(SQUARE, SQUARE)
    assert _consts(plan, "BM", "BN") == {"BM": 64, "BN": 64}


def _cache_choosing(own_cache: pathlib.Path, best: dict[str, Any], **fixed: Any) -> pathlib.Path:
    """The cache file of SQUARE's tuning, edited to choose `best` (as its first candidate)."""
    matmul.tune(SQUARE, SQUARE, by="plan", **fixed)
    entry = _cache_file(own_cache)
    data = json.loads(entry.read_text())
    data["best"] = data["candidates"][0]["constants"] = best
    entry.write_text(json.dumps(data))
    return entry


@pytest.mark.parametrize(
    "best", [{"BM": 100, "BN": 64}, {"BM": "128", "BN": 64}, {"BM": 64}, {"BM": 64, "BK": 64}]
)
def test_a_cached_choice_outside_the_candidates_is_reported_and_ignored(
    own_cache: pathlib.Path, best: dict[str, Any]
) -> None:
    entry = _cache_choosing(own_cache, best)
    x = jax.random.normal(jax.random.key(0), SQUARE.shape, jnp.bfloat16)
    with pytest.warns(sk.TuningCacheWarning, match=f"{re.escape(str(entry))} chooses ") as caught:
        plan = matmul.bind().plan(x, x)
    assert "BM in [64, 128]; BN in [64, 128, 256]" in str(caught[0].message)
    assert _consts(plan, "BM", "BN") == {"BM": 64, "BN": 64}
    # Tuning again measures again, and replaces the file.
    again = matmul.bind().tune(SQUARE, SQUARE, by="plan")
    assert not again.cached and again.best == {"BM": 128, "BN": 128}
    assert json.loads(entry.read_text())["best"] == again.best


def test_cached_constants_a_rule_refuses_are_reported_and_the_defaults_run(
    own_cache: pathlib.Path,
) -> None:
    # Both are candidates, but with BK=128 their blocks do not fit in shared memory at
    # SQUARE (the tuning pruned them): the call is not to blame, the file is.
    entry = _cache_choosing(own_cache, {"BM": 64, "BN": 256}, BK=128)
    with pytest.warns(sk.TuningCacheWarning) as caught:
        plan = matmul.bind(BK=128).plan(SQUARE, SQUARE)
    assert _consts(plan, "BM", "BN", "BK") == {"BM": 64, "BN": 64, "BK": 128}
    message = str(caught[0].message)
    assert f"{entry} gives constants that the kernel refuses at these shapes" in message
    assert "SharedMemoryError" in message and "Delete the file" in message
    # An error of the call's own is still the call's, and the file is not blamed for it.
    wrong = jax.ShapeDtypeStruct((2048, 4096), jnp.bfloat16)
    shapes = [((4096, 4096), "bfloat16"), ((2048, 4096), "bfloat16")]
    key = cache.tuning_key(matmul.spec, shapes, {"BK": 128}, "sm_90a")
    data = {**json.loads(entry.read_text()), "key": key}
    data["best"] = data["candidates"][0]["constants"] = {"BM": 128, "BN": 128}
    cache.path_of(key, "matmul").write_text(json.dumps(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(sk.ShapeError):
            matmul.bind(BK=128).plan(SQUARE, wrong)


@pytest.mark.parametrize(("m", "n"), [(1, 7), (97, 129), (300, 1000)])
def test_a_tuned_kernel_matches_its_reference(m: int, n: int) -> None:
    x = jax.random.normal(jax.random.key(m * n), (m, n), jnp.float32)
    result = softmax.tune(x, by="plan")
    kernel = softmax.bind()
    plan = kernel.plan(x, backend="interpret")
    assert _consts(plan, "BM") == dict(result.best)
    got = kernel.with_backend("interpret")(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(softmax_reference(x)), atol=2e-6)


# --- refusals -------------------------------------------------------------------------------


def test_a_kernel_without_candidates_has_nothing_to_tune() -> None:
    from add import add

    x = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    with pytest.raises(sk.TuneError, match="no constant left to tune") as info:
        add.tune(x, x)
    assert "sk.tune(" in (info.value.fix or "") and info.value.kernel == "add"


def test_fixing_every_candidate_leaves_nothing_to_tune() -> None:
    with pytest.raises(sk.TuneError, match="no constant left") as info:
        matmul.tune(SQUARE, SQUARE, BM=64, BN=64)
    assert "all fixed" in str(info.value.actual)


def test_an_unknown_fixed_constant_is_an_override_error() -> None:
    with pytest.raises(sk.OverrideError, match="not a constant"):
        matmul.tune(SQUARE, SQUARE, BX=64)


def test_when_every_candidate_is_refused_none_can_be_chosen() -> None:
    with pytest.raises(sk.NoCandidateError, match="none of the 3 candidates") as info:
        matmul.tune(SQUARE, SQUARE, by="plan", BM=64, BK=512)
    assert "TmaBoxError: the block along K has 512 elements" in str(info.value.actual)


@pytest.mark.parametrize(("by", "match"), [("fastest", "unknown"), ("device", "CUDA device")])
def test_a_measure_this_machine_lacks_is_refused(by: str, match: str) -> None:
    if by == "device" and sk.default_backend() == "mosaic_gpu":
        pytest.skip("this machine has a GPU")
    with pytest.raises(sk.TuneError, match=match):
        matmul.tune(SQUARE, SQUARE, by=by)


def test_an_unknown_autotune_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATICKERNEL_AUTOTUNE", "yes")
    with pytest.raises(sk.TuneError, match="STATICKERNEL_AUTOTUNE") as info:
        matmul.bind().plan(SQUARE, SQUARE)
    assert info.value.actual == "'yes'" and "force" in (info.value.fix or "")
    assert info.value.kernel == "matmul" and info.value.expected == "0, 1 or force"
    # The line of the call that read it, as for every error a call raises.
    assert (info.value.where or "").startswith("tests/tuning/test_tune.py:")
    assert "STATICKERNEL_AUTOTUNE" in info.value.what


def test_a_second_tuning_reads_the_cache_and_says_so() -> None:
    first = matmul.tune(SQUARE, SQUARE, by="plan")
    again = matmul.bind().tune(SQUARE, SQUARE, by="plan")
    assert not first.cached and again.cached
    assert "(from the cache)" in str(again).splitlines()[0]
    assert again.best == first.best and again.table == first.table
    assert not matmul.tune(SQUARE, SQUARE, by="plan", force=True).cached


def test_a_cache_that_cannot_be_written_warns_and_the_result_stands(
    own_cache: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = own_cache / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("STATICKERNEL_CACHE_DIR", str(blocker))
    with pytest.warns(sk.TuningCacheWarning, match="could not be cached under .*a-file"):
        result = matmul.tune(SQUARE, SQUARE, by="plan")
    assert result.best == {"BM": 128, "BN": 128}
    assert _consts(matmul.bind().plan(SQUARE, SQUARE), "BM", "BN") == {"BM": 64, "BN": 64}


class _OnTheInterpreter:
    """The softmax kernel seen by the device measure as a GPU kernel, run by the interpreter
    (and, with `wrong`, returning wrong numbers): the measure's logic without a GPU."""

    def __init__(self, wrong: bool = False) -> None:
        self.spec, self.consts = softmax.spec, softmax.consts
        self.backend: str | None = "mosaic_gpu"
        self.target: str | None = None
        self.reference, self.wrong = softmax.reference, wrong

    def plan(
        self, *args: Any, backend: str | None = None, target: str | None = None, **overrides: Any
    ) -> sk.LaunchPlan:
        return softmax.plan(*args, backend=backend, target=target, **overrides)

    def compile(self, *args: Any, target: str = "sm_90a", **overrides: Any) -> sk.CompileReport:
        raise AssertionError("the device measure does not compile")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        assert kwargs.pop("backend") == "mosaic_gpu"
        out = softmax.with_backend("interpret")(*args, **kwargs)
        return out * 0 if self.wrong else out


def test_the_device_measure_checks_then_times_each_candidate() -> None:
    from statickernel.tuning.measure import DeviceMeasure

    x = jax.random.normal(jax.random.key(2), (100, 64), jnp.float32)
    measure = DeviceMeasure("a device", reps=2, warmup=1)
    timed = measure.measure(_OnTheInterpreter(), [x], {"BM": 64})
    assert timed.status is Status.RANKED and timed.seconds is not None and timed.seconds > 0
    wrong = measure.measure(_OnTheInterpreter(wrong=True), [x], {"BM": 64})
    assert wrong.status is Status.FAILED and wrong.seconds is None
    assert wrong.reason.startswith("differs from the reference: ")
    pruned = measure.measure(_OnTheInterpreter(), [x], {"BM": 100})
    assert pruned.status is Status.PRUNED and pruned.reason.startswith("BlockAlignmentError")
