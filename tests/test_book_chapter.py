"""kmtbook.open_chapter and kmtbook.chapter.Chapter: parameters checked against the chapter's spec,
and what a chapter records goes into a flat metrics.json."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from kmtbook.chapter import open_chapter, parse_describe
from kmtbook.chapter_specs import SPECS
from kmtbook.parameters import (
    COMMON,
    ChapterSpec,
    ParameterError,
    check_parameter,
    check_passed_parameters,
    option,
    passed_parameters,
    size,
)

REPO = Path(__file__).resolve().parent.parent

SPEC = ChapterSpec("00_test", {"n": size(int, quick=4, book=8, paper=16, minimum=1)})


def _values(tmp_path, **values):
    return {"device": "cpu", "seed": 1, "profile": "quick", "output_dir": str(tmp_path), "n": 0, **values}


def _chapter(tmp_path, spec=SPEC, **values):
    return open_chapter(spec, _values(tmp_path, **values))


def test_profile_fills_unset_sizes_and_explicit_values_win(tmp_path):
    assert _chapter(tmp_path)["n"] == 4
    assert _chapter(tmp_path, profile="paper")["n"] == 16
    chapter = _chapter(tmp_path, n=5)
    assert chapter["n"] == 5 and chapter.overridden == ["n"]
    assert "n=5 (overridden: n)" in chapter.describe()


# --------------------------------------------------------------------------- checks against the spec


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"seed": -3}, r"parameter seed must be >= 0, got -3"),
        ({"seed": 1.5}, r"parameter seed must be of type int, got float 1.5"),
        ({"seed": True}, r"parameter seed must be of type int, got bool True"),
        ({"profile": "fast"}, r"parameter profile must be one of 'quick', 'book', 'paper', got 'fast'"),
        ({"output_dir": 3}, r"parameter output_dir must be of type str"),
        ({"device": "tpu"}, r"parameter device: "),
        ({"n": -2}, r"parameter n must be >= 1, got -2"),
        ({"n": "4"}, r"parameter n must be of type int, got str '4'"),
    ],
)
def test_a_bad_value_is_named(tmp_path, values, message):
    with pytest.raises(ParameterError, match=message):
        _chapter(tmp_path, **values)


def test_a_bad_value_stops_the_chapter_before_it_writes(tmp_path):
    with pytest.raises(ParameterError, match="parameter n"):
        _chapter(tmp_path / "out", n=-1)
    assert not (tmp_path / "out").exists()


def test_float_parameters_take_integers_and_refuse_nan():
    assert check_parameter("gamma", 3, float, minimum=1e-6) == 3
    with pytest.raises(ParameterError, match="parameter gamma must be a number, got NaN"):
        check_parameter("gamma", float("nan"), float)
    with pytest.raises(ParameterError, match=r"parameter gamma must be <= 10"):
        check_parameter("gamma", 11.0, float, maximum=10)


def test_a_bound_may_name_another_parameter_or_compute_from_them(tmp_path):
    spec = ChapterSpec(
        "00_test",
        {
            "n": size(int, quick=4, book=8, paper=16, minimum=1),
            "k": size(int, quick=2, book=2, paper=2, minimum=1, maximum="n"),
            "steps": size(int, quick=10, book=10, paper=10, minimum=lambda v: 2 * v["every"], multiple_of="every"),
            "every": size(int, quick=5, book=5, paper=5, minimum=1),
            "folder": option(str),
        },
    )
    values = {"k": 0, "steps": 0, "every": 0, "folder": ""}
    chapter = _chapter(tmp_path, spec, **values)
    assert chapter.sizes == {"n": 4, "k": 2, "steps": 10, "every": 5}  # options are checked, not sizes
    with pytest.raises(ParameterError, match=r"parameter k must be <= 4, got 5"):
        _chapter(tmp_path, spec, **{**values, "k": 5})
    with pytest.raises(ParameterError, match=r"parameter steps must be >= 10, got 5"):
        _chapter(tmp_path, spec, **{**values, "steps": 5})
    with pytest.raises(ParameterError, match=r"parameter steps \(12\) must be a multiple of every \(5\)"):
        _chapter(tmp_path, spec, **{**values, "steps": 12})
    with pytest.raises(ParameterError, match=r"parameter folder must be of type str"):
        _chapter(tmp_path, spec, **{**values, "folder": None})


def test_a_parameter_of_the_spec_that_the_notebook_does_not_set_is_named(tmp_path):
    values = _values(tmp_path)
    del values["n"]
    with pytest.raises(ParameterError, match=r"parameter n is in the spec of 00_test but its parameters cell"):
        open_chapter(SPEC, values)


@pytest.mark.parametrize("stem", sorted(SPECS))
def test_every_chapter_spec_has_a_value_for_every_size_in_every_profile(stem, tmp_path):
    spec = SPECS[stem]
    assert spec.stem == stem and not set(spec.parameters) & set(COMMON)
    for profile in ("quick", "book", "paper"):
        given = {name: (0 if p.is_size else "" if p.kind is str else 1.0) for name, p in spec.parameters.items()}
        values, overridden = spec.resolve({**_values(tmp_path, profile=profile), **given})
        assert overridden == [] and values["profile"] == profile
        assert {name: values[name] for name in spec.profile_sizes(profile)} == spec.profile_sizes(profile)


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


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -math.inf, torch.tensor(float("nan")), np.float32("inf")]
)
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


def test_metrics_json_has_the_permissions_of_any_new_file(tmp_path):
    chapter = _chapter(tmp_path)
    chapter.record(value=1.0)
    umask = os.umask(0o022)
    try:
        mode = chapter.write_metrics().stat().st_mode & 0o777
    finally:
        os.umask(umask)
    assert mode == 0o644, oct(mode)  # as a figure written beside it (the temporary file of the rename was 0600)


# --------------------------------------------------------------------------- unknown parameters


PARAMETERS_CELL = 'device: str = "auto"  # device\nseed: int = 0  # seed\nn_tasks: int = 0  # tasks\n'


def test_the_parameters_papermill_injected_are_read_from_the_history():
    history = ["", PARAMETERS_CELL, "# Parameters\nseed = 3\nn_taks = 10\n", "chapter = kmtbook.open_chapter(...)"]
    assert passed_parameters(history) == (["device", "seed", "n_tasks"], ["seed", "n_taks"])
    # the book build and an interactive session inject nothing: nothing to check
    assert passed_parameters(["", PARAMETERS_CELL, "chapter = kmtbook.open_chapter(...)"]) is None
    # a downloaded notebook's install cell comes first; its constants are no parameters of the chapter
    from kmtbook.install_cell import install_cell

    install = install_cell("https://github.com/owner/kmt-book", "v0.1.0", "torch==2.13.0", "https://x.invalid/")
    history = ["", install.source, PARAMETERS_CELL, "# Parameters\nseed = 3\n"]
    assert passed_parameters(history) == (["device", "seed", "n_tasks"], ["seed"])


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

    monkeypatch.setattr(book, "kernel_history", lambda: ["", "n: int = 0  # size", "# Parameters\nnn = 5\n", ""])
    with pytest.raises(ParameterError, match=r"parameter nn is not a parameter of this chapter. Did you mean n?"):
        _chapter(tmp_path)
    monkeypatch.setattr(book, "kernel_history", lambda: ["", "n: int = 0  # size", "# Parameters\nn = 5\n", ""])
    assert _chapter(tmp_path, n=5)["n"] == 5


# --------------------------------------------------------------------------- what a page prints


def test_the_output_folder_is_printed_relative_to_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO / "book")
    chapter = _chapter(tmp_path, output_dir="")
    try:
        assert chapter.output_dir == REPO / "results" / "00_test"
        assert "output_dir=results/00_test;" in chapter.describe()
        assert parse_describe(chapter.describe())["output_dir"] == "results/00_test"
        # a relative folder is taken from the repository root, not from the chapter's cwd book/
        relative = _chapter(tmp_path, output_dir="results/00_test")
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
        _chapter(tmp_path, output_dir=str(blocker / "sub"))
