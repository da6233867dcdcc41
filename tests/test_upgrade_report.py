"""The upgrade report (kmtbook/upgrade_report.py, run by ``nox -s upgrade``): what a scratch lock of the newest
versions changes. Held to the real quick-profile references and the real lock: a build that moves one guarded
number and loses one chapter is reported as exactly that, and a real papermill run that fails is named with
its error's last line."""

from __future__ import annotations

import ast
import json
import shutil
import textwrap
from pathlib import Path

import papermill as pm
import pytest
from _demo_chapter import demo_chapter

from kmtbook import upgrade_report as up
from kmtbook.reference_file import parse_key, read_references
from kmtbook.reference_metrics import chapter_stems, reference_path

ROOT = Path(__file__).resolve().parent.parent


def _metrics_from_references(entries: dict) -> dict[str, dict]:
    """A quick-profile build that reproduces every reference exactly: each chapter's metrics.json rebuilt from
    the reference file's own keys and values (a list metric long enough for every element it names)."""
    lists: dict[tuple[str, str], dict[int, object]] = {}
    metrics: dict[str, dict] = {}
    for key, entry in entries.items():
        chapter, name, index = parse_key(key)
        chapter_metrics = metrics.setdefault(chapter, {"profile": "quick", "chapter": chapter})
        if index is None:
            chapter_metrics[name] = entry["value"]
        else:
            lists.setdefault((chapter, name), {})[index] = entry["value"]
    for (chapter, name), elements in lists.items():
        length = max(i + 1 if i >= 0 else -i for i in elements)
        values: list[object] = [0.0] * length
        for i, value in elements.items():
            values[i] = value
        metrics[chapter][name] = values
    return metrics


def _moved(entry: dict) -> object:
    """A value beyond the entry's tolerance, of the entry's type."""
    value = entry["value"]
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 10 * (entry["tolerance"] or 0) + 1
    return f"{value} (moved)"


def test_the_report_names_exactly_the_moved_number_and_the_failed_chapter():
    entries = read_references(reference_path(ROOT, "quick"))
    metrics = _metrics_from_references(entries)
    assert sorted(metrics) == chapter_stems(ROOT), "the quick references cover every chapter"
    guarded = [k for k, e in entries.items() if e["kind"] != "not guarded"]
    moved_key = guarded[len(guarded) // 2]
    moved_chapter, name, index = parse_key(moved_key)
    failed_chapter = next(s for s in chapter_stems(ROOT) if s != moved_chapter)
    if index is None:
        metrics[moved_chapter][name] = _moved(entries[moved_key])
    else:
        metrics[moved_chapter][name][index] = _moved(entries[moved_key])
    del metrics[failed_chapter]  # the failed chapter wrote nothing
    runs = [up.ChapterRun(s, "failed", "ModuleNotFoundError: No module named 'pandas'", 3.0) if s == failed_chapter
            else up.ChapterRun(s, "ran", None, 10.0) for s in chapter_stems(ROOT)]

    old = up.read_pins(ROOT / "requirements" / "constraints.txt")
    new = dict(old)
    bumped = sorted(old)[0]
    new[bumped] = old[bumped] + ".post9"
    new["an-added-package"] = "1.0"
    changes = up.version_changes(old, new)
    assert changes == sorted([{"package": "an-added-package", "old": None, "new": "1.0"},
                              {"package": bumped, "old": old[bumped], "new": old[bumped] + ".post9"}],
                             key=lambda change: change["package"])

    report = up.build_report(ROOT, changes, runs, metrics, old_lock="requirements/constraints.txt",
                             new_lock="_build/upgrade/lock/constraints.txt")
    assert [m["key"] for m in report["moved_numbers"]] == [moved_key]
    assert report["moved_numbers"][0]["reference"] == entries[moved_key]["value"]
    assert [(f["chapter"], f["error"]) for f in report["failed_chapters"]] == [
        (failed_chapter, "ModuleNotFoundError: No module named 'pandas'")]
    # the failed chapter's numbers are not compared (it is reported as failed, not as 'missing')
    compared = len([k for k, e in entries.items() if e["kind"] != "not guarded" and parse_key(k)[0] != failed_chapter])
    assert report["numbers_compared"] == compared
    assert up.exit_status(report) == 1

    text = up.markdown(report)
    assert f"| {moved_chapter} | {moved_key.split(':', 1)[1]} |" in text
    assert f"| {failed_chapter} | failed | `ModuleNotFoundError: No module named 'pandas'` |" in text
    assert f"| {bumped} | `{old[bumped]}` | `{old[bumped]}.post9` |" in text
    assert "2 package(s) change version, 1 guarded number(s) move" in text and "1 chapter(s) fail" in text


def test_a_build_within_its_references_reports_nothing_and_passes(tmp_path):
    metrics = _metrics_from_references(read_references(reference_path(ROOT, "quick")))
    runs = [up.ChapterRun(s, "ran", None, 1.0) for s in chapter_stems(ROOT)]
    report = up.build_report(ROOT, [], runs, metrics, old_lock="a", new_lock="b")
    assert report["moved_numbers"] == [] and report["failed_chapters"] == []
    assert report["numbers_compared"] > 100
    md, js = up.write_report(report, tmp_path / "out")
    assert json.loads(js.read_text()) == report
    assert "None: the scratch lock holds the committed versions." in md.read_text()
    assert up.exit_status(report) == 0


def test_a_moved_number_fails_only_when_strict():
    report = {"failed_chapters": [], "moved_numbers": [{"key": "01_kmeans_and_lloyd:x"}]}
    assert up.exit_status(report) == 0 and up.exit_status(report, strict=True) == 1


def test_the_last_line_of_a_notebook_error():
    err = pm.PapermillExecutionError(3, 4, "import nothing", "ModuleNotFoundError", "No module named 'nothing'",
                                     ["Traceback ...", "ModuleNotFoundError: No module named 'nothing'"])
    assert up.last_line(err) == "ModuleNotFoundError: No module named 'nothing'"
    assert up.last_line(TimeoutError("cell 5 ran\nlonger than 1800 s")) == "longer than 1800 s"


def test_the_quick_runs_are_those_of_the_tests():
    """The chapters run with the seed and the parameters of tests/test_notebooks.py (tests/_book_site.py,
    quick_parameters), whose runs the quick references record."""
    source = (ROOT / "tests" / "_book_site.py").read_text()
    function = source[source.index("def quick_parameters("):source.index("def quick_chapter(")]
    assert f'"seed": {up.SEED},' in function and "**parameters}" in function
    assert sorted(up.load_cases(ROOT)) == chapter_stems(ROOT)
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    sessions = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert "upgrade" in sessions




@pytest.mark.notebook
def test_real_runs_report_a_failing_chapter_and_a_broken_check(tmp_path):
    """Two stand-in chapters run by papermill: one stops on an error, one runs but breaks its check in
    tests/chapter_cases.py; both are failures named by their last line, and the command writes its whole report
    and exits 1."""
    root = tmp_path / "repo"
    (root / "book").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "data" / "book_build").mkdir(parents=True)
    (root / "requirements").mkdir()
    stop = 'raise ValueError("the solver did not converge at step 3")'
    write = ("import json, pathlib\np = pathlib.Path(output_dir)\np.mkdir(parents=True, exist_ok=True)\n"
             "(p / 'metrics.json').write_text(json.dumps({'profile': profile, 'chapter': '02_writes', 'x': seed}))")
    (root / "book" / "01_stops.md").write_text(demo_chapter("Stops", stop))
    (root / "book" / "02_writes.md").write_text(demo_chapter("Writes", write))
    (root / "tests" / "chapter_cases.py").write_text(textwrap.dedent("""\
        def check(m):
            assert m["x"] == 12, f"x is {m['x']}, not 12"

        CASES = {"01_stops.md": ({}, check), "02_writes.md": ({}, check)}
        """))
    entry = {"value": 11, "kind": "exact", "tolerance": 0, "reason": "the seed", "commit": "abc"}
    (root / "data" / "book_build" / "reference_metrics_quick.json").write_text(
        json.dumps({"profile": "quick", "entries": {"02_writes:x": entry}}))
    shutil.copy(ROOT / "requirements" / "constraints.txt", root / "requirements" / "constraints.txt")
    out = tmp_path / "upgrade"
    (out / "lock").mkdir(parents=True)
    (out / "lock" / "constraints.txt").write_text("numpy==0.0.1\n")
    status = up.main(["--root", str(root), "--old", str(root / "requirements"), "--new", str(out / "lock"),
                      "--out", str(out), "--timeout", "120"])
    assert status == 1
    report = json.loads((out / up.REPORT_JSON).read_text())
    assert [(f["chapter"], f["status"], f["error"]) for f in report["failed_chapters"]] == [
        ("01_stops", "failed", "ValueError: the solver did not converge at step 3"),
        ("02_writes", "check failed", "AssertionError: x is 11, not 12")]
    assert report["moved_numbers"] == []  # 02_writes ran and its number is the reference's
    assert [c["package"] for c in report["version_changes"]] == sorted(up.read_pins(root / "requirements" /
                                                                                    "constraints.txt"))
    assert "ValueError: the solver did not converge at step 3" in (out / up.REPORT_MD).read_text()
