"""The ``{metric}`` role (kmtbook.sphinx_ext.metrics): a page states a chapter's number from the
metrics.json of the run that page shows, and a number that is not there fails a ``-W`` build by name.
The small projects built here load the whole extension, so the citation test of a build is here too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kmtbook.sphinx_ext.metrics import _METRIC, format_metric, metric_value

RUN = "20260101T000000Z-1-000001"


def _project(tmp_path: Path, index: str, metrics: dict | None, run: str = RUN) -> Path:
    """A two-page Sphinx project: a chapter whose page prints its run line, and an index."""
    src, results = tmp_path / "src", tmp_path / "results"
    src.mkdir()
    results.mkdir()
    (src / "conf.py").write_text('extensions = ["myst_parser", "kmtbook.sphinx_ext"]\nkmt_offline_mathjax = False\n'
                                 'root_doc = "index"\n')
    (src / "01_demo.md").write_text(
        "# Demo chapter\n\n```text\nprofile=quick, device=cpu, seed=0; n=4; "
        f"output_dir={results}; run={run}\n```\n\nOn its own page: {{metric}}`gap:.2f`.\n")
    (src / "index.md").write_text(f"# Index\n\n{index}\n\n```{{toctree}}\n01_demo\n```\n")
    if metrics is not None:
        (results / "metrics.json").write_text(json.dumps({**metrics, "run_id": RUN}))
    return src


def _build(src: Path) -> subprocess.CompletedProcess:
    out = src.parent / "html"
    return subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q", str(src), str(out)],
                          capture_output=True, text=True, timeout=300)


def test_format_metric():
    assert format_metric(8.9e-16, ".1e") == "8.9 × 10⁻¹⁶"
    assert format_metric(1e-15, ".0e") == "10⁻¹⁵"
    assert format_metric(3162.3, ".0e") == "3 × 10³" and format_metric(0.0, ".0e") == "0"
    assert format_metric(5.2634, ".2f") == "5.26" and format_metric(0.62, ".0%") == "62%"
    assert format_metric(2063, "") == "2063" and format_metric(True, "") == "True"


def test_a_metric_reference_names_chapter_metric_index_and_format():
    fields = _METRIC.match("05_training:main_model_median[-1]:.2f").groupdict()
    assert fields == {"chapter": "05_training", "name": "main_model_median", "index": "-1", "spec": ".2f"}
    assert _METRIC.match("exact_tasks").groupdict() == {"chapter": None, "name": "exact_tasks", "index": None,
                                                        "spec": None}
    assert _METRIC.match("05_training:1bad") is None and _METRIC.match("a:b:c:d") is None


def test_metric_value_says_why_a_number_is_missing(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "metrics.json").write_text(json.dumps({"gap": 0.5, "curve": [1.0, 2.0], "lost": None, "run_id": RUN}))
    run = {"profile": "quick", "device": "cpu", "seed": "0", "sizes": "", "output_dir": str(results), "run": RUN}
    env = SimpleNamespace(kmt_pages={"part/01_demo": {"run": run}, "02_norun": {"run": None}})
    app = SimpleNamespace(env=env, srcdir=str(tmp_path))
    assert metric_value(app, "01_demo", "gap", "") == (0.5, "")
    assert metric_value(app, "01_demo", "curve", "-1") == (2.0, "")
    assert metric_value(app, "01_demo", "curve", "2") == (None, "metric 'curve' of part/01_demo has no element [2]")
    assert metric_value(app, "01_demo", "gap", "0") == (None, "metric 'gap' of part/01_demo has no element [0]")
    assert metric_value(app, "01_demo", "lost", "")[1].endswith("is null (not measured by this run)")
    assert metric_value(app, "01_demo", "other", "") == (None, "part/01_demo recorded no metric 'other'")
    assert metric_value(app, "07_nowhere", "gap", "") == (None, "no chapter 07_nowhere in this build")
    assert metric_value(app, "02_norun", "gap", "") == (None, "its page printed no run line (Chapter.describe)")


def test_a_number_over_every_chapter_is_the_least_or_greatest_they_recorded(tmp_path):
    """``chapters:min_<name>`` / ``chapters:max_<name>`` (the index's launch times: the chapters' wall_seconds)."""
    pages = {}
    for stem, seconds in (("01_a", 4.0), ("02_b", 25.5), ("03_c", 9.0)):
        results = tmp_path / stem
        results.mkdir()
        (results / "metrics.json").write_text(json.dumps({"wall_seconds": seconds, "run_id": RUN}))
        run = {"profile": "book", "device": "cpu", "seed": "0", "sizes": "", "output_dir": str(results), "run": RUN}
        pages[f"book/{stem}"] = {"chapter": True, "run": run}
    pages["book/index"] = {"chapter": False, "run": None}
    app = SimpleNamespace(env=SimpleNamespace(kmt_pages=pages), srcdir=str(tmp_path))
    assert _METRIC.match("chapters:max_wall_seconds:.0f").group("chapter") == "chapters"
    assert metric_value(app, "chapters", "min_wall_seconds", "") == (4.0, "")
    assert metric_value(app, "chapters", "max_wall_seconds", "") == (25.5, "")
    assert metric_value(app, "chapters", "mean_wall_seconds", "")[0] is None
    assert metric_value(app, "chapters", "max_figures", "") == (None, "book/01_a recorded no metric 'figures'")


def test_the_page_shows_the_number_of_the_run(tmp_path):
    index = ("| claim | this build |\n| --- | --- |\n"
             "| gap | {metric}`01_demo:gap:.3f` |\n| last | {metric}`01_demo:curve[-1]:.1f` |")
    src = _project(tmp_path, index, {"gap": 0.12345, "curve": [3.0, 2.5]})
    proc = _build(src)
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "html" / "index.html").read_text()
    assert ">0.123<" in html and ">2.5<" in html
    assert ">0.12<" in (tmp_path / "html" / "01_demo.html").read_text()


@pytest.mark.parametrize("case, needle", [
    ("missing metric", "recorded no metric 'other'"),
    ("no metrics file", "metrics.json is missing"),
    ("another run", "written by another run"),
    ("no element", "has no element [5]"),
    ("unknown chapter", "no chapter 07_nowhere"),
])
def test_a_number_that_is_not_there_fails_the_build(tmp_path, case, needle):
    reference = {"missing metric": "01_demo:other", "no element": "01_demo:curve[5]",
                 "unknown chapter": "07_nowhere:gap"}.get(case, "01_demo:gap")
    metrics = None if case == "no metrics file" else {"gap": 0.1, "curve": [1.0]}
    src = _project(tmp_path, f"Value: {{metric}}`{reference}`.", metrics,
                   run="20260101T000000Z-2-000002" if case == "another run" else RUN)
    proc = _build(src)
    assert proc.returncode != 0
    assert needle in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- citations and the register


def test_the_published_address_comes_from_one_place(tmp_path, monkeypatch):
    """Without an address the page's citation names its path; with KMT_BOOK_URL (set at publish time)
    every citation and the build's CITATION.cff carry that address."""
    import yaml

    import kmtlib

    src = _project(tmp_path, "Value: {metric}`01_demo:gap`.", {"gap": 0.1})
    monkeypatch.delenv("KMT_BOOK_URL", raising=False)
    proc = _build(src)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "html" / "01_demo.html").read_text()
    assert "Cite this page:" in page and "01_demo.html in the book" in page
    assert f"version {kmtlib.__version__}" in page and "http" not in page.split("Cite this page:")[1].split("</p>")[0]
    cff = yaml.safe_load((tmp_path / "html" / "CITATION.cff").read_text())
    assert cff["version"] == kmtlib.__version__ and "url" not in cff

    monkeypatch.setenv("KMT_BOOK_URL", "https://readers.invalid/kmt-book")
    proc = _build(src)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "html" / "01_demo.html").read_text()
    assert 'href="https://readers.invalid/kmt-book/dev/01_demo.html"' in page
    cff = yaml.safe_load((tmp_path / "html" / "CITATION.cff").read_text())
    assert cff["url"] == "https://readers.invalid/kmt-book/dev/"


def test_the_reference_table_shows_the_comparison_and_a_moved_number_fails_the_build(tmp_path):
    from kmtbook.reference_metrics import reference_path, write_references

    # a repository around the project: the table reads the quick profile's references there
    (tmp_path / "kmtlib").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "data" / "book_build").mkdir(parents=True)
    entry = {"value": 0.5, "kind": "sampled", "tolerance": 0.01, "reason": "three standard errors", "commit": "c0"}
    write_references(reference_path(tmp_path, "quick"), "quick", {"01_demo:gap": entry})
    src = _project(tmp_path, "```{reference-check}\n```", {"gap": 0.505})
    built = _build(src)
    assert built.returncode == 0, built.stderr
    html = (tmp_path / "html" / "index.html").read_text()
    assert "01_demo:gap" in html and "within" in html and "three standard errors" in html
    (tmp_path / "results" / "metrics.json").write_text(json.dumps({"gap": 0.52, "run_id": RUN}))
    shutil.rmtree(tmp_path / "html")  # (a new build: the chapters ran again)
    built = _build(src)
    assert built.returncode != 0 and "01_demo:gap moved from its reference 0.5 to 0.52" in built.stderr
