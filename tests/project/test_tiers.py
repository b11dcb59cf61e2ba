"""The tiers' record (tests/tiers.json) and how a recording run renews it (tests/tiers.py)."""

import json
import pathlib

import pytest

import tiers

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_record_names_only_test_files_that_exist() -> None:
    record = json.loads(tiers.RECORD.read_text())
    assert record, "tests/tiers.json is empty: renew it with `make tiers`"
    for path, names in record.items():
        assert (REPO / path).is_file(), path
        assert names == sorted(set(names)), path


def test_the_representative_cases_are_interp_and_their_coverage_check_is_unit() -> None:
    record = json.loads(tiers.RECORD.read_text())
    units = set(record.get("tests/gallery/test_representatives.py", ()))
    assert "test_every_form_and_schedule_has_a_case" in units
    assert not [name for name in units if name.startswith("test_the_case_matches")]


def _observed(seconds: float = 0.1, binds: int = 0, fixtures: tuple[str, ...] = ()) -> object:
    return tiers._Observed(binds=binds, seconds=seconds, fixtures=fixtures)


def test_a_test_is_unit_when_it_runs_no_kernel_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "_HEAVY_FIXTURES", {"tests/x.py::gallery"})
    assert tiers._is_unit(_observed())  # type: ignore[arg-type]
    assert not tiers._is_unit(_observed(binds=1))  # type: ignore[arg-type]
    assert not tiers._is_unit(_observed(seconds=tiers.UNIT_SECONDS))  # type: ignore[arg-type]
    # A fixture that ran a kernel (or took long) for an earlier test makes its users interp.
    assert not tiers._is_unit(_observed(fixtures=("tests/x.py::gallery",)))  # type: ignore[arg-type]


def test_a_recording_renews_what_ran_and_keeps_the_rest(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path
    (root / "tests").mkdir()
    for name in ("test_a.py", "test_b.py"):
        (root / "tests" / name).write_text("")
    record = root / "tests" / "tiers.json"
    record.write_text(
        json.dumps({"tests/test_a.py": ["test_gone", "test_kept"], "tests/test_b.py": ["test_b"]})
    )
    monkeypatch.setattr(tiers, "RECORD", record)
    monkeypatch.setattr(tiers, "_COLLECTED", {"tests/test_a.py": {"test_kept", "test_new"}})
    tiers._merge_into_record({"tests/test_a.py::test_new": True})
    assert json.loads(record.read_text()) == {
        "tests/test_a.py": ["test_kept", "test_new"],  # a test no longer collected leaves it
        "tests/test_b.py": ["test_b"],  # a file that did not run keeps its entry
    }
    tiers._merge_into_record({"tests/test_a.py::test_kept": False})  # now runs a kernel
    assert json.loads(record.read_text())["tests/test_a.py"] == ["test_new"]
