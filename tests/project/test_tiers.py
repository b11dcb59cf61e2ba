"""The tiers' record (tests/tiers.json) and how a recording run renews it (tests/tiers.py)."""

import json
import pathlib
import subprocess
import sys

import pytest

import tiers

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_record_names_only_test_files_that_exist() -> None:
    record = json.loads(tiers.RECORD.read_text())
    assert record, "tests/tiers.json is empty: renew it with `make tiers`"
    for path, recorded in record.items():
        assert (REPO / path).is_file(), path
        assert set(recorded) <= set(tiers.RECORDED), path
        for names in recorded.values():
            assert names == sorted(set(names)), path
        assert not set(recorded.get("unit", ())) & set(recorded.get("quick", ())), path


def test_the_representative_cases_are_interp_and_their_coverage_check_is_unit() -> None:
    record = json.loads(tiers.RECORD.read_text())
    units = set(record.get("tests/gallery/test_representatives.py", {}).get("unit", ()))
    assert "test_every_form_and_schedule_has_a_case" in units
    assert not [name for name in units if name.startswith("test_the_case_matches")]


def _observed(seconds: float = 0.1, binds: int = 0, fixtures: tuple[str, ...] = ()) -> object:
    return tiers._Observed(binds=binds, seconds=seconds, fixtures=fixtures)


def test_a_test_is_unit_when_it_runs_no_kernel_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "_HEAVY_FIXTURES", {"tests/x.py::gallery", "tests/x.py::sweep"})
    monkeypatch.setattr(tiers, "_SLOW_FIXTURES", {"tests/x.py::sweep"})
    assert tiers._tier(_observed()) == "unit"  # type: ignore[arg-type]
    assert tiers._tier(_observed(binds=1)) == "quick"  # type: ignore[arg-type]
    slow_launch = _observed(binds=1, seconds=tiers.QUICK_SECONDS)
    assert tiers._tier(slow_launch) == "interp"  # type: ignore[arg-type]
    assert tiers._tier(_observed(seconds=tiers.UNIT_SECONDS)) == "interp"  # type: ignore[arg-type]
    # A fixture that ran a kernel (or took long) for an earlier test makes its users interp.
    gallery = _observed(fixtures=("tests/x.py::gallery",))
    assert tiers._tier(gallery) == "quick"  # type: ignore[arg-type]
    assert tiers._tier(_observed(fixtures=("tests/x.py::sweep",))) == "interp"  # type: ignore[arg-type]


def test_a_recording_renews_what_ran_and_keeps_the_rest(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path
    (root / "tests").mkdir()
    for name in ("test_a.py", "test_b.py"):
        (root / "tests" / name).write_text("")
    record = root / "tests" / "tiers.json"
    record.write_text(
        json.dumps(
            {
                "tests/test_a.py": {"unit": ["test_gone", "test_kept"]},
                "tests/test_b.py": {"unit": ["test_b"], "quick": ["test_c"]},
            }
        )
    )
    monkeypatch.setattr(tiers, "RECORD", record)
    monkeypatch.setattr(tiers, "_COLLECTED", {"tests/test_a.py": {"test_kept", "test_new"}})
    tiers._merge_into_record({"tests/test_a.py::test_new": "quick"})
    assert json.loads(record.read_text()) == {
        # a test no longer collected leaves the record
        "tests/test_a.py": {"unit": ["test_kept"], "quick": ["test_new"]},
        # a file that did not run keeps its entry
        "tests/test_b.py": {"unit": ["test_b"], "quick": ["test_c"]},
    }
    tiers._merge_into_record({"tests/test_a.py::test_kept": "interp"})  # now slow
    assert json.loads(record.read_text())["tests/test_a.py"] == {"quick": ["test_new"]}


class _Item:
    """What `tiers.modify_items` reads of a collected test, and the markers it adds."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.markers: list[str] = []

    def add_marker(self, marker: str) -> None:
        self.markers.append(marker)


def test_a_recording_of_one_tier_keeps_the_others(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make tiers PYTEST_ARGS='-m quick'` runs the quick tests alone: the unit tests of the same
    # files, collected and then deselected, keep their record.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    record = tmp_path / "tests" / "tiers.json"
    record.write_text(json.dumps({"tests/test_a.py": {"unit": ["test_u"], "quick": ["test_q"]}}))
    monkeypatch.setattr(tiers, "RECORD", record)
    monkeypatch.setattr(tiers, "RECORDING", True)
    monkeypatch.setattr(tiers, "_COLLECTED", {})
    items = [_Item("tests/test_a.py::test_u"), _Item("tests/test_a.py::test_q")]
    tiers.modify_items(items)  # type: ignore[arg-type]
    assert [item.markers for item in items] == [["unit"], ["interp", "quick"]]
    tiers._merge_into_record({"tests/test_a.py::test_q": "interp"})  # the quick one, now slow
    assert json.loads(record.read_text()) == {"tests/test_a.py": {"unit": ["test_u"]}}


def test_a_child_process_counts_as_a_kernel_run() -> None:
    # What the child runs is not seen from here: `statickernel check --lower` lowers kernels.
    before = tiers._BINDS.count
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert tiers._BINDS.count > before
