"""Shared test setup: the example gallery on sys.path, and the hypothesis profiles.

Profiles: "ci" (derandomized, loaded when CI is set), "dev" (the local default) and
"thorough" (300 examples). HYPOTHESIS_PROFILE=<name> picks one explicitly.
"""

import os
import pathlib
import sys

import pytest
from hypothesis import settings

EXAMPLES_DIR = pathlib.Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES_DIR) not in sys.path:
    sys.path.insert(0, str(EXAMPLES_DIR))
# The tests sit in folders that mirror the package's; their shared helpers (tolerances,
# gallery_cases, markers, the fuzzers' generators) stay here, importable from every folder.
TESTS_DIR = pathlib.Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# Every new (M, N) compiles a new specialization, so no example meets hypothesis' default
# 200 ms deadline on the interpreter. The profiles start from hypothesis' plain defaults, not
# from the "ci" profile hypothesis itself loads when CI is set.
_BASE = settings.get_profile("default")
settings.register_profile(
    "ci", _BASE, derandomize=True, max_examples=25, deadline=None, print_blob=True
)
settings.register_profile("dev", _BASE, max_examples=25, deadline=None)
settings.register_profile("thorough", _BASE, max_examples=300, deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

# Tunings cached by kernel.tune are read by later calls: the tests keep theirs in a folder of
# their own, so that none reads a tuning cached on this machine outside the tests.
if "STATICKERNEL_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["STATICKERNEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="statickernel-tests-")


# The unit and interp tiers, marked automatically (see tests/tiers.py).
import tiers  # noqa: E402 - needs tests/ on sys.path, set above
from tiers import (  # noqa: E402
    pytest_fixture_setup,
    pytest_runtest_makereport,
    pytest_runtest_protocol,
)

__all__ = ["pytest_fixture_setup", "pytest_runtest_makereport", "pytest_runtest_protocol"]


def pytest_configure(config: pytest.Config) -> None:
    tiers.configure(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tiers.modify_items(items)


def pytest_sessionfinish(session: pytest.Session) -> None:
    tiers.finish(session)
