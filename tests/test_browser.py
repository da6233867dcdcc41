"""The built book, opened in headless Chromium and read page by page as a student would.

The book is built (warnings as errors) from the quick-profile notebooks that test_notebooks.py
executed, with the real configuration and extension; then every page is loaded from a local
server and checked for broken images, missing figures, unresolved references, maths that did not
render, resources fetched from the network and errors on the browser console. The figure files,
the rerun box and the executed-notebook download of every chapter are checked too, and one
downloaded notebook is run under papermill as it is.

Without Chromium (Debian: ``apt-get install chromium chromium-driver``) the browser tests skip,
except under CI (``CI`` set), where they fail: CI must read the book.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import _book_site as site
import pytest
import yaml
from chapter_cases import CASES

IGNORED_CONSOLE = (
    # The browser asks the server root for /favicon.ico on its own; no page links it.
    re.compile(r"/favicon\.ico - Failed to load resource"),
)


def _device() -> str:
    return os.environ.get("KMT_DEVICE", "cpu")


@pytest.fixture(scope="module")
def html() -> Path:
    reason = site.browser_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the browser check must run in CI: {reason}")
        pytest.skip(reason)
    notebooks = {}
    for stem in site.chapter_stems():
        notebook = site.executed_notebook(stem)
        source = site.BOOK / f"{stem}.md"
        if not notebook.is_file() or notebook.stat().st_mtime < source.stat().st_mtime:
            # Not run by test_notebooks.py in this session (e.g. this file alone): run it now.
            parameters, _ = CASES[source.name]
            out = notebook.parent
            site.run_chapter(source, out, {"device": _device(), "profile": "quick", "seed": 11,
                                           "output_dir": str(out / "results"), **parameters})
        notebooks[stem] = notebook
    return site.build_site(notebooks, site.QUICK / "site")


@pytest.fixture(scope="module")
def base(html: Path):
    """The built book on a local web server (loopback only), for the module's tests."""
    with site.serve(html) as url:
        yield url


@pytest.fixture(scope="module")
def pages(html: Path, base: str) -> dict[str, dict]:
    """Every page of the book, loaded and probed once: page path -> what the browser saw."""
    names = ["index.html", *sorted(str(p.relative_to(html)) for p in (html / "book").glob("*.html"))]
    seen = {}
    with site.chromium() as driver:
        for name in names:
            # The root index.html only redirects (meta refresh) to the book's first page.
            seen[name] = site.probe(
                driver, base + name, redirects_to="book/index.html" if name == "index.html" else None
            )
            seen[name]["base"] = base
    return seen


def _chapter_page(stem: str) -> str:
    return f"book/{stem}.html"


def _problems(name: str, page: dict) -> list[str]:
    out = []
    if page["brokenImages"]:
        out.append(f"broken images {page['brokenImages']}")
    bad = [f["id"] or "(no id)" for f in page["figures"] if not f["ok"]]
    if bad:
        out.append(f"figures without a loaded image {bad}")
    if page["mathTotal"] and not page["mathjaxVersion"]:
        out.append("MathJax did not load")
    if page["mathUnrendered"]:
        out.append(f"{len(page['mathUnrendered'])} maths blocks not rendered, e.g. {page['mathUnrendered'][:3]}")
    if page["mathErrors"]:
        out.append(f"MathJax errors {page['mathErrors'][:3]}")
    if page["unresolvedXrefs"]:
        out.append(f"unresolved references {page['unresolvedXrefs'][:5]}")
    if page["questionMarks"]:
        out.append(f"unnumbered references {page['questionMarks'][:5]}")
    if page["external"]:
        out.append(f"resources loaded from the network (the book must read offline) {page['external'][:5]}")
    console = [e["message"] for e in page["console"] if not any(p.search(e["message"]) for p in IGNORED_CONSOLE)]
    if console:
        out.append(f"console errors {console[:3]}")
    return [f"{name}: {p}" for p in out]


def test_every_page_reads_cleanly(pages):
    assert "book/index.html" in pages and len(pages) >= len(site.chapter_stems()) + 2
    problems = [p for name, page in pages.items() for p in _problems(name, page)]
    assert not problems, "\n".join(problems)
    assert any(page["mathTotal"] for page in pages.values()), "no maths found at all: the probe is broken"


@pytest.mark.parametrize("stem", site.chapter_stems())
def test_chapter_page(pages, stem):
    """Each labelled figure is on its page with an image, a chapter-qualified number and a caption;
    the page opens with the overview, offers the rerun box and the executed notebook."""
    page = pages[_chapter_page(stem)]
    source = (site.BOOK / f"{stem}.md").read_text()
    labels = re.findall(r"name:\s*(fig-[\w-]+)", source)
    assert labels, "a chapter has labelled figures"
    figures = {f["id"]: f for f in page["figures"]}
    chapter_number = None
    for label in labels:
        assert label in figures, f"figure {label} is missing from the page"
        fig = figures[label]
        assert fig["ok"], f"figure {label} has no image"
        match = re.match(r"Fig\. (\d+)\.(\d+)", fig["number"].strip())
        assert match, f"figure {label} has no chapter-qualified number: {fig['number']!r}"
        chapter_number = chapter_number or match.group(1)
        assert match.group(1) == chapter_number
        assert len(fig["caption"]) > 60, f"the caption of {label} is too short to stand alone"
    for part in ("What it shows.", "What the paper reports.", "What this book measured."):
        assert part in page["overview"], f"the opening box 'In this chapter' lacks {part!r}"
    assert page["rerunAfterOverview"], "the rerun box follows the opening box"
    box = page["rerunBox"]
    assert "papermill" in box and f"{stem}.md" in box, "the rerun box names the papermill command"
    assert f"Parameters inferred for notebook '{stem}.ipynb'" in box, "the box carries papermill's help text"
    for name in ("device: str", "seed: int", "profile: str", "output_dir: str"):
        assert name in box
    assert any(link.endswith(f"_sources/book/{stem}.ipynb") for link in page["notebookDownload"])


def test_links_resolve(pages):
    """Every link inside the book reaches a page that exists and, with a fragment, an element of it."""
    base = next(iter(pages.values()))["base"]
    ids = {page["url"].split("#")[0]: set(page["ids"]) for page in pages.values()}
    status: dict[str, int] = {}
    problems = []
    for name, page in pages.items():
        for link in page["links"]:
            if not link.startswith(base):
                continue
            target, fragment = site.split_link(link)
            if target not in status:
                status[target] = site.fetch(target)[0]
            if status[target] != 200:
                problems.append(f"{name}: {link} answers {status[target]}")
            elif fragment and target in ids and fragment not in ids[target]:
                problems.append(f"{name}: {link} points at a missing anchor")
    assert not problems, "\n".join(problems[:20])


def test_figure_register_and_files(pages, html):
    """The figures page lists every figure once, with PNG and PDF files of stable names."""
    every = [f["id"] for name, page in pages.items() if re.match(r"book/\d", name) for f in page["figures"]]
    assert len(every) == len(set(every)), "figure labels must be unique across the book"
    register = pages["book/figures.html"]
    base = register["base"]
    for label in every:
        png = f"{base}figures/{label}.png"
        pdf = f"{base}figures/{label}.pdf"
        assert png in register["links"] and pdf in register["links"], f"{label} is not in the register with both files"
        code, data = site.fetch(png)
        assert code == 200 and data.startswith(b"\x89PNG"), f"{png} is not a PNG"
        code, data = site.fetch(pdf)
        assert code == 200 and data.startswith(b"%PDF"), f"{pdf} is not a PDF"
        anchors = [link for link in register["links"] if link.endswith(f"#{label}")]
        assert anchors, f"the register does not link {label} on its page"


def test_downloaded_notebook_runs_under_papermill(pages, html, tmp_path):
    """The executed notebook a reader downloads runs under papermill as it is, outside book/."""
    stem = site.chapter_stems()[0]
    notebook = html / "_sources" / "book" / f"{stem}.ipynb"
    nb = json.loads(notebook.read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "the executed notebook keeps its parameters cell"
    assert any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), "it is the executed notebook"
    parameters, check = CASES[f"{stem}.md"]
    out = tmp_path / "run"
    site.run_chapter(
        notebook,
        out,
        {"device": _device(), "profile": "quick", "seed": 5, "output_dir": str(out / "results"), **parameters},
        cwd=tmp_path,
    )
    metrics = json.loads((out / "results" / "metrics.json").read_text())
    assert metrics["chapter"] == stem and metrics["seed"] == 5
    check(metrics)


def test_citation_metadata_agrees():
    """CITATION.cff, the package version and the How-to-cite page give the same version and paper."""
    version = tomllib.loads((site.ROOT / "pyproject.toml").read_text())["project"]["version"]
    cff = yaml.safe_load((site.ROOT / "CITATION.cff").read_text())
    assert str(cff["version"]) == version
    assert "2506.19125" in json.dumps(cff["preferred-citation"])
    cite = (site.BOOK / "cite.md").read_text()
    assert f"Version {version}" in cite and f"version {version}" in cite
    assert "@inproceedings{clarkson2026transformer" in cite and "@misc{kmtbook" in cite
