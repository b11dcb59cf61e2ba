"""sk.profile: the launches built inside it carry Mosaic GPU's profiler options, as their own
specializations; the interpreter runs them exactly; lower and compile ignore the profile."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import statickernel as sk
from softmax import softmax, softmax_reference

X = jax.random.normal(jax.random.key(1), (130, 100), jnp.float32)


def test_a_profiled_launch_carries_the_profilers_options(tmp_path: pathlib.Path) -> None:
    plain = softmax.emit(X)
    with sk.profile(tmp_path / "traces", space=512) as chosen:
        profiled = softmax.emit(X)
        plan = softmax.plan(X)
    assert chosen.directory == str((tmp_path / "traces").resolve()) and chosen.space == 512
    assert (tmp_path / "traces").is_dir()
    assert "profile_space=512," in profiled and f'profile_dir="{chosen.directory}"' in profiled
    assert "profile_space" not in plain and "profile_space" not in softmax.emit(X)
    assert plan.profile == chosen and f"  profile: {chosen}" in str(plan)
    assert softmax.plan(X).profile is None


def test_the_interpreter_runs_a_profiled_launch_exactly(tmp_path: pathlib.Path) -> None:
    with sk.profile(tmp_path):
        got = softmax.with_backend("interpret")(X)
    np.testing.assert_allclose(np.asarray(got), np.asarray(softmax_reference(X)), atol=1e-6)


def test_lower_and_compile_ignore_the_profile(tmp_path: pathlib.Path) -> None:
    with sk.profile(tmp_path):
        text = softmax.lower(X).as_text()
        inner = softmax.emit(X)
        with sk.unprofiled():
            assert "profile_space" not in softmax.emit(X)
    assert "mosaic_gpu" in text and "profile_space" in inner


@pytest.mark.parametrize(
    ("directory", "space", "match"),
    [("traces", 0, "positive int"), ("traces", True, "positive int"), ("", 64, "a folder")],
)
def test_bad_profiler_settings_are_refused(
    directory: str, space: int, match: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(sk.BackendError, match=match) as info, sk.profile(directory, space=space):
        pass
    assert info.value.fix


def test_bad_settings_are_refused_at_the_callers_line(tmp_path: pathlib.Path) -> None:
    with pytest.raises(sk.BackendError, match="positive int") as info:
        sk.profile(tmp_path, space=0)  # refused at the call, before any `with`
    assert (info.value.where or "").startswith("tests/runtime/test_profiling.py:")
    assert "space=4096" in (info.value.fix or "")


@pytest.mark.parametrize("below", [False, True])
def test_a_file_where_the_folder_would_be_is_refused(tmp_path: pathlib.Path, below: bool) -> None:
    taken = tmp_path / "traces"
    taken.write_text("not a folder")
    directory = taken / "run1" if below else taken
    with pytest.raises(sk.BackendError, match="a file is in the way") as info:
        sk.profile(directory)
    assert (info.value.where or "").startswith("tests/runtime/test_profiling.py:")
    assert str(directory) in str(info.value.actual) and "not of a file" in (info.value.fix or "")
    assert taken.read_text() == "not a folder"
