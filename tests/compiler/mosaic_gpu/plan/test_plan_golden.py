"""The plans of the gallery, pinned: `str(plan)` and `plan --json` of every golden case
(`gallery_cases.py`), for the Mosaic GPU launch on each GPU target, so that a planning
change fails here, in seconds, and not only through the generated source.

`tests/compiler/mosaic_gpu/plan/golden/<target>/<case>.txt` holds a case's printed plan, then its JSON;
a case the target refuses holds the refusal. When a change is intended, regenerate and
review the diff:

    STATICKERNEL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/compiler/mosaic_gpu/plan/test_plan_golden.py
"""

import difflib
import json
import os
import pathlib
import re

import pytest

import statickernel as sk
from gallery_cases import KERNELS, SCHEDULES, kernel_of, structs
from statickernel.cli.json_output import plan_to_json

REPO = pathlib.Path(__file__).resolve().parents[4]
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
UPDATE_GOLDEN = os.environ.get("STATICKERNEL_UPDATE_GOLDEN") == "1"
TARGETS = ("sm_90a", "sm_100a")
CASES = [*KERNELS, *SCHEDULES]


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # A plan names the kernel's file relative to the working directory.
    monkeypatch.chdir(REPO)


def planned(name: str, target: str) -> str:
    """The case's plan for `target`, printed and as JSON, or the target's refusal."""
    kernel = kernel_of(name).with_target(target)
    try:
        plan = kernel.plan(*structs(name), backend="mosaic_gpu")
    except sk.StaticKernelError as exc:
        # The refusal points at the call, this module's line: pinned as the call.
        message = re.sub(r"(\n  at: +)\S+", r"\1(the call)", str(exc), count=1)
        return f"refused: {type(exc).__name__}\n{message}\n"
    facts = json.dumps(plan_to_json(plan), indent=1, sort_keys=True)
    return f"{plan}\n\n--- plan --json ---\n{facts}\n"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CASES)
def test_plan_matches_golden_file(name: str, target: str) -> None:
    text = planned(name, target)
    path = GOLDEN / target / f"{name}.txt"
    if UPDATE_GOLDEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), (
        f"{path.relative_to(REPO)} is missing; run with STATICKERNEL_UPDATE_GOLDEN=1"
    )
    golden = path.read_text(encoding="utf-8")
    if text != golden:
        diff = "".join(
            difflib.unified_diff(
                golden.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"{path.relative_to(REPO)} (golden)",
                tofile="planned now",
            )
        )
        pytest.fail(
            f"the plan of {name} for {target} changed:\n{diff}\nIf intended, regenerate the "
            "golden files with STATICKERNEL_UPDATE_GOLDEN=1 (see this module's docstring) and "
            "review the diff."
        )


def test_golden_files_cover_the_gallery() -> None:
    if UPDATE_GOLDEN:
        pytest.skip("the golden files are being regenerated")
    for target in TARGETS:
        assert sorted(p.stem for p in (GOLDEN / target).glob("*.txt")) == sorted(CASES)
