"""Every chapter runs under papermill in the quick profile and writes what the contract promises."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jupytext
import papermill as pm
import pytest
from _book_site import quick_chapter, run_chapter
from chapter_cases import CASES
from test_machine_paths import machine_paths_in_outputs, stderr_outputs

from kmtbook.chapter_specs import SPECS
from kmtbook.reference_metrics import check_metrics, drift_report

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = sorted(p.name for p in BOOK.glob("[0-9]*.md"))
COMMON = {"device": "str", "seed": "int", "profile": "str", "output_dir": "str"}


def _device() -> str:
    return os.environ.get("KMT_DEVICE", "cpu")


def _run(name: str, out: Path, parameters: dict) -> Path:
    run_chapter(
        BOOK / name, out, {"device": _device(), "profile": "quick", "output_dir": str(out / "results"), **parameters}
    )
    return out / "results"


def test_every_chapter_has_a_case():
    assert CHAPTERS, "no chapters found under book/"
    missing = sorted(set(CHAPTERS) - set(CASES))
    assert not missing, f"chapters without a test case in tests/chapter_cases.py: {missing}"
    stale = sorted(set(CASES) - set(CHAPTERS))
    assert not stale, f"test cases for chapters that do not exist: {stale}"


def test_every_chapter_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    for name in CHAPTERS:
        assert f"book/{Path(name).stem}" in toc, f"{name} is not listed in _toc.yml"


@pytest.mark.parametrize("name", CHAPTERS)
def test_parameters_cell(name):
    nb = jupytext.read(BOOK / name)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "exactly one cell must be tagged 'parameters'"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code is cells[0], "the parameters cell must be the first code cell"
    declared = pm.inspect_notebook(nb)
    assignments = [ln for ln in cells[0].source.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    # papermill skips lines it cannot parse (an '=' or an odd quote in a comment): every line must parse.
    assert len(declared) == len(assignments), f"papermill parsed {sorted(declared)} of {assignments}"
    for pname, type_name in COMMON.items():
        assert pname in declared, f"parameter {pname} is missing"
        assert declared[pname]["inferred_type_name"] == type_name
    for pname, info in declared.items():
        assert info["inferred_type_name"] not in ("None", ""), f"parameter {pname} has no type annotation"
        assert info["help"].strip(), f"parameter {pname} has no help comment"
    # kmtbook.open_chapter checks exactly the parameters the cell declares, with the declared types
    spec = SPECS[Path(name).stem]
    own = [pname for pname in declared if pname not in COMMON]
    assert own == list(spec.parameters), "the parameters cell and kmtbook/chapter_specs.py list the same names"
    for pname, p in spec.parameters.items():
        assert declared[pname]["inferred_type_name"] == p.kind.__name__, pname
        if p.is_size:
            assert declared[pname]["default"] in ("0", "0.0"), f"size {pname} must default to 0 (the profile's value)"
    opened = [c for c in nb.cells if c.cell_type == "code" and "open_chapter(" in c.source]
    assert len(opened) == 1 and f'open_chapter("{Path(name).stem}", globals())' in opened[0].source
    assert not {"remove-input", "remove-cell"} & set(opened[0].metadata.get("tags", [])), "the call is shown"


@pytest.mark.notebook
@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_runs_and_writes_metrics(name):
    _, check = CASES[name]
    # Kept in _build/quick/<stem>/ (notebook and results), run once per test run: tests/test_browser.py
    # builds the book from them (on several workers, whichever asks first runs the chapter).
    out = quick_chapter(Path(name).stem)
    results = out / "results"
    metrics = json.loads((results / "metrics.json").read_text())
    assert metrics["profile"] == "quick"
    assert metrics["chapter"] == Path(name).stem
    assert metrics["figures"], "a chapter draws at least one figure"
    for label in metrics["figures"]:
        assert label.startswith("fig-")
        for ext in ("png", "pdf"):
            f = results / f"{label}.{ext}"
            assert f.is_file() and f.stat().st_size > 1000, f"missing or empty figure file {f.name}"
        source = (BOOK / name).read_text()
        assert f"name: {label}" in source, f"{label} is saved but has no labelled figure cell"
    executed = json.loads((out / f"{Path(name).stem}.ipynb").read_text())
    printed = machine_paths_in_outputs(executed)
    assert not printed, f"the chapter prints absolute paths of this machine: {printed[:3]}"
    raw = stderr_outputs(executed)
    assert not raw, f"the chapter prints to stderr (catch what it expects, say it in words): {raw[:3]}"
    check(metrics)
    # The published numbers of the quick run held to the quick profile's reference (its own random
    # streams: on another device the draws differ, so only the CPU run is compared).
    if _device() == "cpu":
        stem = Path(name).stem
        report = drift_report(check_metrics(ROOT, "quick", {stem: metrics}, chapters=[stem]), "quick")
        assert not report, report


@pytest.mark.notebook
def test_bad_parameter_is_named(tmp_path):
    name = CHAPTERS[0]
    with pytest.raises(pm.PapermillExecutionError) as err:
        _run(name, tmp_path, {"seed": -3})
    assert "seed" in str(err.value)
    with pytest.raises(pm.PapermillExecutionError) as err:
        _run(name, tmp_path, {"profile": "fast"})
    assert "profile" in str(err.value)


@pytest.mark.notebook
def test_misspelt_parameter_fails_the_run_and_is_named(tmp_path):
    # papermill itself only warns ("Passed unknown parameter") and runs with the profile's value
    with pytest.raises(pm.PapermillExecutionError) as err:
        _run(CHAPTERS[0], tmp_path, {"n_taks": 10})
    message = str(err.value)
    assert "ParameterError" in message and "parameter n_taks is not a parameter of this chapter" in message
    assert "Did you mean n_tasks?" in message
    assert not (tmp_path / "results" / "metrics.json").exists(), "the chapter stops in its first cell"
