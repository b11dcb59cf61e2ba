"""Test tiers, marked automatically: `unit` (no kernel runs: declarations, binding, layout,
plans, generated source, errors) and `interp` (everything else: kernels run in the
interpreter, lowered for CUDA, or slow for another reason), and among the interp tests the
`quick` ones (under `QUICK_SECONDS`), which `make test` runs beside the unit tier.

A test runs a kernel when one of Pallas' launch primitives is bound: a kernel called in the
interpreter, lowered, exported or run standalone from its generated module all bind it, and
planning or emitting never does. This plugin counts the binds of each test (its call, its
setup, and the fixtures it uses, which may have run for an earlier test), the launches
statickernel's interpreter runs, the child processes it starts (whose kernels it cannot see),
and its time. A recording clears jax's caches before each test, so that a kernel an earlier
test compiled is traced, and counted, again.

`tests/tiers.json` records, per test file, the tests seen to run no kernel in under
`UNIT_SECONDS` (`unit`) and the other tests seen to take under `QUICK_SECONDS` (`quick`); every
other test, a new one included, is `interp` alone until a recording run says otherwise.
`make tiers` is that run: the whole suite with `STATICKERNEL_RECORD_TIERS=1`, which rewrites
the record from what each test did (tests that did not run keep their entry). In a run of the
unit tier alone (`-m unit`), a test that runs a kernel fails, saying so: the record is stale,
and `make tiers` renews it.

The binds are counted through each primitive's `bind_with_trace`, an attribute jax's
`Primitive` lets each primitive set (`def_bind_with_trace`); the primitives are reached
through their private modules, for the tests only. On a jax without it the tiers still select
by the record, and nothing is counted or recorded.
"""

import dataclasses
import json
import os
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import pytest

RECORD = pathlib.Path(__file__).resolve().parent / "tiers.json"
RECORDING = os.environ.get("STATICKERNEL_RECORD_TIERS") == "1"
# A unit test takes at most this long, set-up included, on the machine that records: the unit
# tier is the one a contributor runs before each commit.
UNIT_SECONDS = 2.0
# A quick interp test likewise, with caches cleared: `make test` runs them, with the unit tier,
# within its 12 minutes on 2 cores (at 2 s the quick tier alone took 11).
QUICK_SECONDS = 1.0
# The tiers the record lists tests of, in the order a test is tried for them.
RECORDED = ("unit", "quick")


# The primitives a kernel launch binds, by jax release: `plgpu.kernel` binds `mpmd_map` on
# jax 0.11 and later, `core_map` before; a `pl.pallas_call` binds `pallas_call`.
_LAUNCH_PRIMITIVES = (
    ("jax._src.pallas.pallas_call", "pallas_call_p"),
    ("jax._src.pallas.mpmd", "mpmd_map_p"),
    ("jax._src.pallas.core", "core_map_p"),
)


class _Binds:
    """How many times Pallas' kernel primitive was bound in this process, from any thread."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self.installed = False

    def install(self) -> None:
        import importlib

        for module, name in _LAUNCH_PRIMITIVES:
            try:
                primitive = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError):  # not in this jax
                continue
            self._count_binds(primitive)
            self.installed = True
        self._count_interpreted_launches()
        self._count_child_processes()

    def _count_child_processes(self) -> None:
        """What a child process runs (the command line's `check --lower`, a kernel run in a
        process of its own so that a crash fails one test) is not seen here: a test that
        starts one is counted as if it ran a kernel."""
        import subprocess

        init: Callable[..., None] = subprocess.Popen.__init__

        def counted(popen: Any, *args: Any, **kwargs: Any) -> None:
            with self._lock:
                self.count += 1
            init(popen, *args, **kwargs)

        subprocess.Popen.__init__ = counted  # type: ignore[method-assign]

    def _count_interpreted_launches(self) -> None:
        """A kernel compiled by an earlier test binds nothing when it runs again (jit's caches
        hold it), but each interpreted launch still goes through statickernel's interpreter
        thread."""
        from statickernel.runtime import interpreter

        run: Callable[..., Any] = interpreter._INTERPRETER.run

        def counted(*args: Any) -> Any:
            with self._lock:
                self.count += 1
            return run(*args)

        interpreter._INTERPRETER.run = counted  # type: ignore[method-assign]

    def _count_binds(self, primitive: Any) -> None:
        bind_with_trace: Callable[..., Any] = primitive.bind_with_trace

        def counted(*args: Any) -> Any:
            with self._lock:
                self.count += 1
            return bind_with_trace(*args)

        primitive.def_bind_with_trace(counted)


_BINDS = _Binds()


@dataclasses.dataclass
class _Observed:
    """What one test did in a recording run."""

    binds: int = 0
    seconds: float = 0.0
    fixtures: tuple[str, ...] = ()


_OBSERVED: dict[str, _Observed] = {}
# Fixtures (by the node that defines them and their name) whose set-up ran a kernel or took
# longer than a unit test may: every test that uses one is interp, since whichever of them
# runs first pays for it; and those that took longer than a quick test may, whose users are
# not quick.
_HEAVY_FIXTURES: set[str] = set()
_SLOW_FIXTURES: set[str] = set()
# The tests this process collected, by file: a recording drops recorded names no longer there.
_COLLECTED: dict[str, set[str]] = {}
# Where each xdist worker leaves what it observed for the controller to merge.
_PARTS = RECORD.parent.parent / ".tiers-parts"


def _split(nodeid: str) -> tuple[str, str]:
    path, _, name = nodeid.partition("::")
    return path, name


def _read_record() -> dict[str, dict[str, list[str]]]:
    """The record: for each test file, the names of its tests in each recorded tier."""
    if not RECORD.exists():
        return {}
    return json.loads(RECORD.read_text())


def _fixture_key(fixturedef: Any) -> str:
    return f"{fixturedef.baseid}::{fixturedef.argname}"


def configure(config: pytest.Config) -> None:
    for tier, what in (
        ("unit", "runs no kernel and is fast (recorded in tests/tiers.json)"),
        ("interp", "runs kernels in the interpreter, or is slow (not recorded as unit)"),
        ("quick", "an interp test recorded as fast (tests/tiers.json); make test runs them"),
    ):
        config.addinivalue_line("markers", f"{tier}: {what}")
    _BINDS.install()


def modify_items(items: list[pytest.Item]) -> None:
    record = _read_record()
    for item in items:
        path, name = _split(item.nodeid)
        # Every test collected, whatever `-m` then deselects: a recording of one tier
        # (`make tiers PYTEST_ARGS='-m quick'`) keeps the record of the tests it does not run.
        if RECORDING:
            _COLLECTED.setdefault(path, set()).add(name)
        tiers = record.get(path, {})
        if name in tiers.get("unit", ()):
            item.add_marker("unit")
            continue
        item.add_marker("interp")
        if name in tiers.get("quick", ()):
            item.add_marker("quick")


def _guards_unit_tier(config: pytest.Config) -> bool:
    """Whether this run selects the unit tier without the interp tier (`-m unit`, or `-m
    "unit and not slow"`), so that a unit test that runs a kernel fails."""
    expression = config.getoption("markexpr", "") or ""
    return "unit" in expression and "interp" not in expression


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Iterator[None]:
    before, start = _BINDS.count, time.perf_counter()
    yield
    seconds = time.perf_counter() - start
    if _BINDS.count > before or seconds >= UNIT_SECONDS:
        _HEAVY_FIXTURES.add(_fixture_key(fixturedef))
    if seconds >= QUICK_SECONDS:
        _SLOW_FIXTURES.add(_fixture_key(fixturedef))


_STARTS: dict[str, tuple[int, float]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if RECORDING:
        # What the test does on its own, as in a run of its tier alone: a kernel an earlier
        # test compiled would run from jit's caches without binding a launch primitive.
        jax.clear_caches()
    _STARTS[item.nodeid] = (_BINDS.count, time.perf_counter())
    yield
    before, start = _STARTS.pop(item.nodeid)
    if RECORDING and _BINDS.installed and item.nodeid in _OBSERVED:
        info = getattr(item, "_fixtureinfo", None)
        closure = (
            tuple(
                _fixture_key(d)
                for name in info.names_closure
                for d in info.name2fixturedefs.get(name, ())
            )
            if info is not None
            else ()
        )
        _OBSERVED[item.nodeid] = _Observed(
            binds=_BINDS.count - before, seconds=time.perf_counter() - start, fixtures=closure
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when == "setup" and RECORDING:
        _OBSERVED[item.nodeid] = _Observed()
    if report.skipped and RECORDING:
        # A skipped test did not show what it does: its entry stays as recorded.
        _OBSERVED.pop(item.nodeid, None)
    before, _ = _STARTS.get(item.nodeid, (_BINDS.count, 0.0))
    ran_kernel = _BINDS.count > before
    if (
        ran_kernel
        and report.passed
        and report.when == "call"
        and item.get_closest_marker("unit") is not None
        and _guards_unit_tier(item.config)
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} is recorded as a unit test in tests/tiers.json, but it ran a "
            "kernel or started a process: renew the record with `make tiers` (the test then "
            "runs in the interp tier)"
        )


def _tier(seen: _Observed) -> str:
    """The tier a test's observation puts it in: "unit", "quick" or "interp"."""
    if (
        seen.binds == 0
        and seen.seconds < UNIT_SECONDS
        and not any(f in _HEAVY_FIXTURES for f in seen.fixtures)
    ):
        return "unit"
    if seen.seconds < QUICK_SECONDS and not any(f in _SLOW_FIXTURES for f in seen.fixtures):
        return "quick"
    return "interp"


def finish(session: pytest.Session) -> None:
    """Renews the record from what was observed: an xdist worker leaves its part in a file of
    its own, and the controller (or a run without workers) merges the parts into the record."""
    if not RECORDING or not _BINDS.installed:
        return
    observed = {nodeid: _tier(seen) for nodeid, seen in _OBSERVED.items()}
    collected = {path: sorted(names) for path, names in _COLLECTED.items()}
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:
        _PARTS.mkdir(parents=True, exist_ok=True)
        part = {"observed": observed, "collected": collected}
        (_PARTS / f"{worker}.json").write_text(json.dumps(part))
        return
    if _PARTS.exists():
        for path in sorted(_PARTS.glob("*.json")):
            part = json.loads(path.read_text())
            observed.update(part["observed"])
            for file, names in part["collected"].items():
                _COLLECTED.setdefault(file, set()).update(names)
            path.unlink()
        _PARTS.rmdir()
    _merge_into_record(observed)


def _merge_into_record(observed: dict[str, str]) -> None:
    """Writes each observed test's tier into the record, keeping the tiers of tests that did
    not run, and dropping tests no longer collected from the files that were."""
    record = {
        path: {tier: set(tiers.get(tier, ())) for tier in RECORDED}
        for path, tiers in _read_record().items()
    }
    for path, names in _COLLECTED.items():
        for tier in record.get(path, {}).values():
            tier &= names
    for nodeid, observed_tier in observed.items():
        path, name = _split(nodeid)
        tiers = record.setdefault(path, {tier: set() for tier in RECORDED})
        for tier, names in tiers.items():
            if tier == observed_tier:
                names.add(name)
            else:
                names.discard(name)
    root = RECORD.parent.parent
    kept = {
        path: {tier: sorted(names) for tier, names in tiers.items() if names}
        for path, tiers in sorted(record.items())
        if any(tiers.values()) and (root / path).exists()
    }
    RECORD.write_text(json.dumps(kept, indent=0) + "\n")
