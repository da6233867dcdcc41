"""kmtbook.chapter.Chapter: what a chapter records goes into a flat metrics.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from kmtbook.chapter import Chapter, ParameterError, check_passed_parameters, parse_describe, passed_parameters

REPO = Path(__file__).resolve().parent.parent

PROFILES = {"quick": {"n": 4}, "book": {"n": 8}, "paper": {"n": 16}}


def _chapter(tmp_path, **sizes):
    return Chapter("00_test", device="cpu", seed=1, profile="quick", output_dir=str(tmp_path),
                   sizes=sizes or {"n": 0}, profiles=PROFILES)


def test_profile_fills_unset_sizes_and_explicit_values_win(tmp_path):
    assert _chapter(tmp_path)["n"] == 4
    assert _chapter(tmp_path, n=5)["n"] == 5


def test_metrics_are_flat_and_plain(tmp_path):
    chapter = _chapter(tmp_path)
    chapter.record(value=torch.tensor(1.5), curve=np.arange(3), names=["a", "b"])
    path = chapter.write_metrics()
    metrics = json.loads(path.read_text())
    assert metrics["value"] == 1.5 and metrics["curve"] == [0, 1, 2] and metrics["names"] == ["a", "b"]


def test_a_mapping_is_refused_with_its_name(tmp_path):
    chapter = _chapter(tmp_path)
    with pytest.raises(TypeError, match="'table' is a mapping"):
        chapter.record(table={"a": 1.0})


# --------------------------------------------------------------------------- NaN and infinity


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -math.inf, torch.tensor(float("nan")),
                                   np.float32("inf")])
def test_a_non_finite_number_is_refused_with_its_name(tmp_path, value):
    chapter = _chapter(tmp_path)
    with pytest.raises(ValueError, match="metric 'gap' is not a finite number"):
        chapter.record(gap=value)


def test_a_non_finite_element_of_a_curve_is_refused_with_its_position(tmp_path):
    chapter = _chapter(tmp_path)
    with pytest.raises(ValueError, match=r"metric 'curve' is not a finite number at \[2\]"):
        chapter.record(curve=torch.tensor([1.0, 2.0, float("inf")]))
    with pytest.raises(ValueError, match=r"at \[1\]\[0\]"):
        chapter.record(table=[[1.0], [float("nan")]])


def test_a_missing_value_is_recorded_as_null(tmp_path):
    chapter = _chapter(tmp_path)
    chapter.record(threshold=None)
    assert json.loads(chapter.write_metrics().read_text())["threshold"] is None


def test_metrics_json_is_strict_json_written_in_one_piece(tmp_path):
    chapter = _chapter(tmp_path)
    chapter.record(value=1.5)
    path = chapter.write_metrics()
    text = path.read_text()
    metrics = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
    assert metrics["value"] == 1.5
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"], "no temporary file is left behind"
    # a value smuggled past record() still cannot reach the file, and the old file stays whole
    chapter.metrics["late"] = float("nan")
    with pytest.raises(ValueError, match="metric 'late'"):
        chapter.write_metrics()
    assert path.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


# --------------------------------------------------------------------------- unknown parameters


PARAMETERS_CELL = 'device: str = "auto"  # device\nseed: int = 0  # seed\nn_tasks: int = 0  # tasks\n'


def test_the_parameters_papermill_injected_are_read_from_the_history():
    history = ["", PARAMETERS_CELL, '# Parameters\nseed = 3\nn_taks = 10\n', "chapter = Chapter(...)"]
    assert passed_parameters(history) == (["device", "seed", "n_tasks"], ["seed", "n_taks"])
    # the book build and an interactive session inject nothing: nothing to check
    assert passed_parameters(["", PARAMETERS_CELL, "chapter = Chapter(...)"]) is None


def test_a_misspelt_parameter_is_named_with_the_closest_one():
    with pytest.raises(
        ParameterError, match=r"parameter n_taks is not a parameter of this chapter. Did you mean n_tasks?"
    ):
        check_passed_parameters(["device", "seed", "n_tasks"], ["seed", "n_taks"])
    with pytest.raises(
        ParameterError, match=r"parameter colour is not .*\(nor are speed\)\. Its parameters are device"
    ):
        check_passed_parameters(["device", "seed"], ["colour", "speed"])
    check_passed_parameters(["device", "seed", "n_tasks"], ["seed", "n_tasks"])  # known names pass


def test_a_chapter_in_a_kernel_refuses_an_injected_unknown_parameter(tmp_path, monkeypatch):
    import kmtbook.chapter as book

    monkeypatch.setattr(book, "_kernel_history", lambda: ["", "n: int = 0  # size", "# Parameters\nnn = 5\n", ""])
    with pytest.raises(ParameterError, match=r"parameter nn is not a parameter of this chapter. Did you mean n?"):
        _chapter(tmp_path)
    monkeypatch.setattr(book, "_kernel_history", lambda: ["", "n: int = 0  # size", "# Parameters\nn = 5\n", ""])
    assert _chapter(tmp_path, n=5)["n"] == 5


# --------------------------------------------------------------------------- what a page prints


def test_the_output_folder_is_printed_relative_to_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO / "book")
    chapter = Chapter(
        "00_test", device="cpu", seed=1, profile="quick", output_dir="", sizes={"n": 0}, profiles=PROFILES
    )
    try:
        assert chapter.output_dir == REPO / "results" / "00_test"
        assert "output_dir=results/00_test;" in chapter.describe()
        assert parse_describe(chapter.describe())["output_dir"] == "results/00_test"
        # a relative folder is taken from the repository root, not from the chapter's cwd book/
        relative = Chapter(
            "00_test",
            device="cpu",
            seed=1,
            profile="quick",
            output_dir="results/00_test",
            sizes={"n": 0},
            profiles=PROFILES,
        )
        assert relative.output_dir == REPO / "results" / "00_test"
        # a folder outside the repository is the reader's own choice: printed as given
        outside = _chapter(tmp_path)
        assert f"output_dir={tmp_path};" in outside.describe()
    finally:
        (REPO / "results" / "00_test").rmdir()


def test_an_output_dir_that_cannot_be_made_is_a_parameter_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ParameterError, match=r"parameter output_dir: cannot create the folder .*a_file/sub"):
        Chapter("00_test", device="cpu", seed=1, profile="quick", output_dir=str(blocker / "sub"),
                sizes={"n": 0}, profiles=PROFILES)
