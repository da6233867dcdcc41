"""The built book, opened in headless Chromium and read page by page as a student would.

The book is built (warnings as errors) from the quick-profile notebooks that test_notebooks.py
executed, with the real configuration and extension; then every page is loaded from a local
server and checked for broken images, missing figures, unresolved references, maths that did not
render, resources fetched from the network and errors on the browser console. The figure files,
the rerun box and the executed-notebook download of every chapter are checked too, and one
downloaded notebook is run under papermill as it is. axe-core (pinned in tests/browser/, installed by
the nox tests session) checks every page against the WCAG 2.0/2.1 A and AA rules in the theme's light
and dark modes, at 1 280 and 390 px; the formulas reach a screen reader as MathML; and the pages
opened from disk log no error and name their version.

Without Chromium (Debian: ``apt-get install chromium chromium-driver``) the browser tests skip,
except under CI (``CI`` set), where they fail: CI must read the book. So do the axe-core tests
without axe-core (``npm ci`` in tests/browser/).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import _accessibility as a11y
import _book_site as site
import pytest
import yaml
from chapter_cases import CASES

from kmtbook.sphinx_ext.assets import WIDE_FIGURE

# the tests of the book built from the quick runs, on one worker: it builds the book once and reads it
# while the other workers run the other tests (tests/conftest.py, quick_book)
pytestmark = pytest.mark.xdist_group("built-book")

IGNORED_CONSOLE = (
    # The browser asks the server root for /favicon.ico on its own; no page links it.
    re.compile(r"/favicon\.ico - Failed to load resource"),
)


def _device() -> str:
    return os.environ.get("KMT_DEVICE", "cpu")


@pytest.fixture(scope="module")
def html(quick_book: Path) -> Path:
    """The book built from the quick-profile chapters (tests/conftest.py), shared with test_printed_book.py."""
    return quick_book


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


# What a page must not show: the probe's list, and how a problem is named (with the first few items).
PAGE_FAULTS = (
    ("brokenImages", "broken images", 10),
    ("mathUnrendered", "maths blocks not rendered, e.g.", 3),
    ("mathErrors", "MathJax errors", 3),
    ("rawMathInTables", "TeX left unrendered in a table, e.g.", 3),
    ("unresolvedXrefs", "unresolved references", 5),
    ("questionMarks", "unnumbered references", 5),
    ("cutCells", "table cells cut short", 3),
    ("external", "resources loaded from the network (the book must read offline)", 5),
)


def _problems(name: str, page: dict) -> list[str]:
    out = [f"{what} {page[key][:first]}" for key, what, first in PAGE_FAULTS if page[key]]
    bad = [f["id"] or "(no id)" for f in page["figures"] if not f["ok"]]
    if bad:
        out.append(f"figures without a loaded image {bad}")
    if page["mathTotal"] and not page["mathjaxVersion"]:
        out.append("MathJax did not load")
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
    assert "Parameters inferred for notebook" not in box, "the box shows a table, not papermill's raw help text"
    tables = page["parameterTables"]
    assert len(tables) == 1 and tables[0]["visible"], "the rerun box shows the parameters as one visible table"
    assert tables[0]["header"][:3] == ["parameter", "type", "meaning"]
    assert [h.split()[0] for h in tables[0]["header"][3:]] == ["quick", "book", "paper"]
    assert tables[0]["rows"] == len(_parameter_names(stem)), "one row per parameter of the parameters cell"
    for name in ("device", "seed", "profile", "output_dir"):
        assert name in box
    assert any(link.endswith(f"_sources/book/{stem}.ipynb") for link in page["notebookDownload"])


def _parameter_names(stem: str) -> list[str]:
    """The names the chapter's parameters cell assigns."""
    import ast

    import jupytext

    cell = next(c for c in jupytext.read(site.BOOK / f"{stem}.md").cells
                if "parameters" in c.metadata.get("tags", []))
    return [node.target.id if isinstance(node, ast.AnnAssign) else node.targets[0].id
            for node in ast.parse(cell.source).body if isinstance(node, (ast.Assign, ast.AnnAssign))]


def test_parameter_tables_are_not_clipped(pages):
    """At 1280 px (the browser's window) no chapter's parameter table is cut off or scrolls sideways."""
    problems = [f"{name}: {problem}" for name, page in pages.items() for table in page["parameterTables"]
                for problem in table["clipped"]]
    assert not problems, "clipped parameter tables:\n" + "\n".join(problems)


# A caption stands alone on a slide: it names its data in words. A parameter name of the chapter
# (an identifier such as n_tasks) or a pointer to the page ("printed above") does not.
PAGE_POINTERS = re.compile(r"\b(printed|shown|listed|given) (above|below)\b|\bthe (cell|table|output) above\b", re.I)


def _caption_problems(stem: str, label: str, caption: str) -> list[str]:
    caption = " ".join(caption.split())
    text = re.sub(r"^Fig\. \d+\.\d+\s*", "", caption)
    if not text:
        return [f"{stem} {label}: no caption"]
    problems = []
    for name in _parameter_names(stem):
        identifier = "_" in name or any(ch.isdigit() for ch in name)
        # a word that is also a parameter ("steps") counts when used as a name: "steps clustering steps"
        pattern = rf"(?<![\w-]){re.escape(name)}(?![\w-])" if identifier \
            else rf"\b{re.escape(name)} (?:\w+ ){{0,2}}{re.escape(name)}\b"
        if re.search(pattern, text):
            problems.append(f"{stem} {label}: the caption uses the parameter name {name!r}")
    if PAGE_POINTERS.search(text):
        problems.append(f"{stem} {label}: the caption points at the page ({PAGE_POINTERS.search(text).group(0)!r})")
    return problems


def test_figure_captions_stand_alone(pages):
    """Every figure of every chapter has a caption without parameter names or pointers to the page."""
    problems = []
    for stem in site.chapter_stems():
        for figure in pages[_chapter_page(stem)]["figures"]:
            if figure["id"].startswith("fig-"):
                problems += _caption_problems(stem, figure["id"], figure["caption"])
    assert not problems, f"{len(problems)} captions do not stand alone:\n" + "\n".join(problems)


def _version() -> str:
    return tomllib.loads((site.ROOT / "pyproject.toml").read_text())["project"]["version"]


def _is_commit(sha: str) -> bool:
    import subprocess

    proc = subprocess.run(["git", "-C", str(site.ROOT), "cat-file", "-e", f"{sha}^{{commit}}"], capture_output=True)
    return proc.returncode == 0


def _citation_problems(where: str, text: str) -> list[str]:
    """A citation names the version and a real commit of the repository (or says it has none), and
    holds no placeholder."""
    problems = []
    placeholder = PLACEHOLDERS.search(text)
    if placeholder:
        problems.append(f"{where}: placeholder {placeholder.group(0)!r}")
    if f"version {_version()}" not in text.replace("Version", "version"):
        problems.append(f"{where}: no 'version {_version()}'")
    commits = re.findall(r"commit ([0-9a-f]{12,40})\b", text)
    if not commits and "no commit recorded" not in text:
        problems.append(f"{where}: neither a commit nor 'no commit recorded'")
    problems += [f"{where}: commit {sha} is not a commit of this repository" for sha in commits if not _is_commit(sha)]
    return problems


PLACEHOLDERS = re.compile(r"<[^<>\n]*(?:url|URL|address|link)[^<>\n]*>|\bTODO\b|\bFIXME\b|\bTBD\b|\bxxx+\b|"
                          r"example\.(?:com|org)|\bhttps?://(?:localhost|127\.0\.0\.1)\b", re.I)


def test_cite_page_is_complete(pages, html):
    """The cite page gives the book's BibTeX with version and commit, and a figure's citation, with no
    placeholder; the build publishes its own CITATION.cff."""
    page = pages["book/cite.html"]
    text = page["mainText"]
    problems = _citation_problems("book/cite.html", text)
    assert "@misc{kmtbook" in text and "@inproceedings{clarkson2026transformer" in text
    assert re.search(r"Fig\. \d+\.\d+ \(fig-[\w-]+\)", text), "the cite page shows how to cite one figure"
    cff = yaml.safe_load((html / "CITATION.cff").read_text())
    assert str(cff["version"]) == _version()
    if cff.get("commit") and not _is_commit(cff["commit"]):
        problems.append(f"CITATION.cff: commit {cff['commit']} is not a commit of this repository")
    assert not problems, "\n".join(problems)


def test_every_page_and_figure_can_be_cited(pages):
    """Each page ends with a citation line; each figure has a 'Cite this figure' line with its
    chapter-qualified number, its file figures/<label>.png and the BibTeX key."""
    problems = []
    for name, page in pages.items():
        if not page["pageCite"]:
            problems.append(f"{name}: no 'Cite this page' line")
        for line in page["pageCite"]:
            problems += _citation_problems(f"{name} (page citation)", line)
        numbers = {f["id"]: f["number"].strip() for f in page["figures"]}
        for cite in page["figureCites"]:
            if not cite["id"].startswith("fig-"):
                continue
            label, text = cite["id"], cite["text"]
            if text is None:
                problems.append(f"{name}: figure {label} has no 'Cite this figure' line")
                continue
            number = re.match(r"Fig\. \d+\.\d+", numbers.get(label, ""))
            if number is None or number.group(0) not in text:
                problems.append(f"{name}: the citation of {label} lacks its number {numbers.get(label)!r}")
            if not any(link.endswith(f"figures/{label}.png") for link in cite["links"]):
                problems.append(f"{name}: the citation of {label} does not link figures/{label}.png")
            if not re.search(r"\\cite\[Fig\. [\d.]+\]\{kmtbook\d*\}", text):
                problems.append(f"{name}: the citation of {label} gives no BibTeX key")
            problems += _citation_problems(f"{name} ({label})", text)
    assert not problems, "\n".join(problems[:40])


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
    """The figures page shows every figure once, grouped by chapter, as a thumbnail at least 200 px wide
    that opens the figure in its chapter, with the paper figure it reproduces and PNG and PDF files of
    stable names; the page is under a third of the height of the caption table it replaced."""
    every = [f["id"] for name, page in pages.items() if re.match(r"book/\d", name) for f in page["figures"]]
    assert len(every) == len(set(every)), "figure labels must be unique across the book"
    register = pages["book/figures.html"]
    by_chapter = {name: [f["id"] for f in page["figures"]]
                  for name, page in pages.items() if re.match(r"book/\d", name)}
    grids = register["gallery"]
    numbers = [int(re.match(r"(\d+)\.", g["chapter"]).group(1)) for g in grids]  # "5. Training ... (profile)"
    with_figures = sum(1 for f in by_chapter.values() if f)
    assert numbers == sorted(numbers) and len(grids) == with_figures, "one group per chapter"
    cards = [card for grid in grids for card in grid["cards"]]
    labels = [re.search(r"fig-[\w-]+", card["text"]).group(0) for card in cards]
    in_order = [label for name in sorted(by_chapter) for label in by_chapter[name]]
    assert labels == in_order, "one card per figure, in reading order"
    reproduces = {label: card["text"].split("\n")[-1].split(" · ")[0] for label, card in zip(labels, cards)}
    unstated = [label for label, what in reproduces.items()
                if not (what == "beyond the paper" or re.match(r"(Fig\.|Table) \d|the ", what))]
    assert not unstated, f"the gallery does not say what these figures reproduce: {unstated}"
    missing = [label for label, card in zip(labels, cards)
               if not (card["thumbnail"] and card["thumbnail"]["loaded"] and card["thumbnail"]["width"] >= 200
                       and re.search(rf"book/\d\w*\.html#{label}$", card["thumbnail"]["href"]))]
    assert not missing, f"figures without a thumbnail of 200 px or more that opens them in their chapter: {missing}"
    print(f"figures page at 1280 px: {register['pageHeight']} px tall")
    # the caption table it replaced was 18 136 px tall at 1280 px (issue 42)
    assert register["pageHeight"] < 18_136 / 3, "the gallery must stay under a third of the caption table's height"
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
    """CITATION.cff, the package and the How-to-cite page give the same version and paper; the page
    types no version or address (the build writes them)."""
    import kmtlib

    version = _version()
    assert kmtlib.__version__ == version
    cff = yaml.safe_load((site.ROOT / "CITATION.cff").read_text())
    assert str(cff["version"]) == version
    assert "2506.19125" in json.dumps(cff["preferred-citation"])
    cite = (site.BOOK / "cite.md").read_text()
    assert "@inproceedings{clarkson2026transformer" in cite and "```{book-citation}" in cite
    assert f"ersion {version}" not in cite and not PLACEHOLDERS.search(cite)
    # one licence story: text and figures under CC BY 4.0, code under MIT, each in its own file, and the
    # cite page and the figures page say which applies to what
    assert sorted(cff["license"]) == ["CC-BY-4.0", "MIT"]
    assert (site.ROOT / "LICENSE").read_text().startswith("MIT License")
    assert "Creative Commons Attribution 4.0" in (site.ROOT / "LICENSE-CC-BY-4.0").read_text()
    for page in ("cite.md", "figures.md"):
        text = (site.BOOK / page).read_text()
        assert "CC BY 4.0" in text and "MIT" in text, f"{page} does not say which licence applies to what"
    # what a published copy adds, in the reader's words, not the build's configuration names
    assert "a published copy adds" in cite.lower()
    assert not re.search(r"html_baseurl|\$\{\{|KMT_[A-Z_]+|github\.server_url", cite)


def _layout_problems(name: str, seen: dict, allow_scroll: bool) -> list[str]:
    out = [f"{name}: the page is wider than the window: it scrolls sideways"] if seen["pageScrollsSideways"] else []
    out += [f"{name}: table {t['table']} is cut off ({t['width']} px in a {t['column']} px column, no scroll bar)"
            for t in seen["tables"] if t["cutOff"]]
    # the index's results table never scrolls: on a phone each claim is a card
    out += [f"{name}: table {t['table']} scrolls sideways ({t['width']} px in a {t['column']} px column; "
            f"{t['holder']})"
            for t in seen["tables"] if t["scrolls"] and (not allow_scroll or "kmt-results" in t["table"])]
    out += [f"{name}: words broken across lines {seen['brokenWords'][:5]}"] if seen["brokenWords"] else []
    return out


def test_pages_read_on_a_phone(html, base):
    """At a phone's 390 px no page is wider than the window, no table is cut off (a wide one scrolls
    in its own container; the index's results table does not scroll at all) and no word in a table
    or the rerun box is broken across lines."""
    names = sorted(str(p.relative_to(html)) for p in (html / "book").glob("*.html"))
    problems = []
    with site.chromium() as driver:
        site.as_phone(driver)
        for name in names:
            seen = site.layout(driver, base + name)
            problems += _layout_problems(name, seen, allow_scroll=True)
            # a row of panels shrunk to the phone's width is unreadable: it keeps 600 px and scrolls in its box,
            # at the style sheet's 640 px (not the width the notebook gave the image: Figs. 5.2, 5.3 were
            # 1 081 and 933 px), in a box a keyboard can focus, with a visible line saying that it scrolls
            wide = [f for f in seen["figures"] if f["aspect"] >= WIDE_FIGURE]
            problems += [f"{name}: the wide figure {f['id']} is shown {f['width']} px wide (600 to 640)"
                         for f in wide if not 600 <= f["width"] <= 641]
            problems += [f"{name}: the wide figure {f['id']} scrolls in no box a keyboard can focus ({f['box']})"
                         for f in wide if not (f["box"] and f["box"]["tabindex"] == "0" and f["box"]["name"])]
            problems += [f"{name}: nothing says that the wide figure {f['id']} scrolls sideways"
                         for f in wide if f["box"] and f["box"]["scrolls"] and not f["cueShown"]]
    assert not problems, "at 390 px:\n" + "\n".join(problems)


def test_the_figure_register_and_the_results_table_fit_a_desktop_window(html, base):
    """At 1280 px no page is wider than the window or breaks a word in a table or the rerun box, and
    the register of figures and the index's results table fit the content column: nothing cut off,
    no sideways scrolling; the results table is under 2 500 px tall."""
    names = sorted(str(p.relative_to(html)) for p in (html / "book").glob("*.html"))
    problems = []
    with site.chromium() as driver:
        for name in names:
            seen = site.layout(driver, base + name)
            fitted = name in ("book/index.html", "book/figures.html")
            # the figures page is a gallery now (test_figure_register_and_files); the index keeps its table
            assert seen["tables"] or name != "book/index.html", f"{name}: no results table"
            problems += _layout_problems(name, seen, allow_scroll=not fitted)
            if name == "book/index.html":
                results = [t for t in seen["tables"] if "kmt-results" in t["table"]]
                assert results, "the index's results table is not marked kmt-results"
                print(f"index results table at 1280 px: {results[0]['height']} px for {results[0]['rows']} rows")
                # one short sentence per row (the chapter holds the rest): the old table of long cells was 7 033 px
                if results[0]["height"] >= 2500:
                    problems.append(f"the index's results table is {results[0]['height']} px tall (at most 2 500)")
    assert not problems, "at 1280 px:\n" + "\n".join(problems)


def test_the_figures_page_weighs_under_a_megabyte_with_the_interactive_figures(html, base, pages):
    """The figures page and everything it loads for itself (its thumbnails: at the size shown, WebP,
    lazily loaded), scrolled to its end, weigh under 1 MB as every chapter does (it was 4.9 MB: 51
    thumbnails of 480 px PNG; the theme's styles, scripts and fonts, the same for every page and
    cached, are counted apart); the animations and sliders (a page of their own beside the PNG) are in
    it, their still as the thumbnail, with a link to that page."""
    with site.chromium() as driver:
        weight = site.page_weight(driver, base + "book/figures.html")
    print(f"figures page: {weight['own']} bytes of its own, {weight['bytes']} with the theme's files, "
          f"{weight['resources']} resources ({weight['images']} images)")
    assert weight["own"] < 1_000_000, weight
    moving = sorted(p.stem for p in (html / "figures").glob("fig-*.html"))
    assert moving, "no animation or slider published beside its PNG"
    links = pages["book/figures.html"]["links"]
    assert not [label for label in moving if f"{base}figures/{label}.html" not in links]


def test_every_page_weighs_under_a_megabyte(html):
    """A page carries its animations and sliders inline (their frames as data: images): every page of
    the book, and every figure's page of its own, stays under 1 MB."""
    weights = {str(p.relative_to(html)): p.stat().st_size for p in html.rglob("*.html")}
    print("heaviest pages:", sorted(weights.items(), key=lambda item: -item[1])[:4])
    heavy = {name: size for name, size in weights.items() if size >= 1_000_000}
    assert not heavy, f"pages of 1 MB or more (bytes): {heavy}"


def test_the_book_as_one_pdf(html):
    """The index links the whole book as one PDF, printed from the same build with its maths typeset."""
    from kmtbook.book_pdf import PDF_NAME

    pdf = html / PDF_NAME
    assert pdf.is_file() and pdf.read_bytes().startswith(b"%PDF"), f"{pdf} is missing"
    assert f'href="../{PDF_NAME}"' in (html / "book" / "index.html").read_text()
    from pypdf import PdfReader

    text = "".join(page.extract_text() or "" for page in PdfReader(pdf).pages)
    # Sphinx writes inline maths as \( ... \) for MathJax: left in the text, MathJax had not run
    assert "\\(" not in text, "maths printed as TeX source: MathJax had not typeset the page before printing"
    missing = [n for n in range(1, len(site.chapter_stems()) + 1) if f"Fig. {n}.1" not in text]
    assert not missing, f"the PDF lacks the first figure of chapter(s) {missing}"


def _output_problems(name: str, seen: dict, phone: bool) -> list[str]:
    """Text outputs wider than their box: at a desktop's width none; on a phone, only in a box that
    scrolls by itself (the page itself never scrolls sideways: :func:`_layout_problems`)."""
    out = []
    for o in seen["outputs"]:
        if (o["overflows"] and (not phone or not o["ownScroll"])) or o["pastColumn"]:
            out.append(f"{name}: output {o['text']!r} is {o['scrollWidth']} px wide in a {o['clientWidth']} px box"
                       + (" that does not scroll by itself" if phone and not o["ownScroll"] else ""))
    return out


def test_every_text_output_fits_its_box(html, base):
    """At 1280 px every text output of a chapter (printouts, reprs) fits the content column; at 390 px
    one that is wider scrolls in its own box and does not widen the page."""
    names = sorted(str(p.relative_to(html)) for p in (html / "book").glob("*.html"))
    problems, counted = [], 0
    with site.chromium() as driver:
        for name in names:
            seen = site.layout(driver, base + name)
            counted += len(seen["outputs"])
            problems += _output_problems(name, seen, phone=False)
            if name in ("book/index.html", "book/figures.html", "book/13_your_data.html"):
                print(f"{name} at 1280 px: {seen['pageHeight']} px tall")
        site.as_phone(driver)
        for name in names:
            seen = site.layout(driver, base + name)
            problems += _output_problems(name, seen, phone=True)
            problems += [f"{name}: the page is wider than the window at 390 px"] if seen["pageScrollsSideways"] else []
    assert counted, "no text output found at all: the probe is broken"
    assert not problems, f"{len(problems)} text outputs do not fit:\n" + "\n".join(problems)


# --------------------------------------------------------------------------- every reader: WCAG 2.1 AA


@pytest.fixture(scope="module")
def axe() -> str:
    """axe-core's version, from the pinned copy the nox tests session installs (tests/browser/)."""
    reason = a11y.axe_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the accessibility check must run in CI: {reason}")
        pytest.skip(reason)
    return a11y.pinned_axe_version()


def _reader_pages(html: Path) -> list[str]:
    """Every page a reader can open: the book's pages, the figures' own pages, search and index (the
    root index.html only redirects to book/index.html)."""
    pages = [str(p.relative_to(html)) for p in sorted(html.rglob("*.html"))]
    return [p for p in pages if p != "index.html" and not p.startswith(("_static/", "_sources/"))]


def _axe_report(found: dict[str, dict[str, list[str]]], pages: dict[str, set[str]], total: int) -> str:
    """One paragraph per rule: its id, how many elements on how many pages, which pages, a few targets."""
    lines = [f"{total} axe-core violations of WCAG 2.0/2.1 A and AA:"]
    for rule in sorted(found):
        where = sorted(pages[rule])
        targets = [t for ts in found[rule].values() for t in ts]
        lines.append(f"- {rule}: {len(targets)} elements on {len(where)} page(s) {where[:8]}; e.g. {targets[:3]}")
    return "\n".join(lines)


@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_passes_axe_in_light_and_dark_mode(html, base, axe, width):
    """axe-core finds no violation of the WCAG 2.0 and 2.1 rules of levels A and AA on any page, in the
    theme's light mode and in its dark mode (the mode checked to be the one shown, by the page's
    background), at a desktop's 1 280 px and at a phone's 390 px."""
    names = _reader_pages(html)
    assert "book/references.html" in names and any(n.startswith("book/0") for n in names)
    found: dict[str, dict[str, list[str]]] = {}
    pages: dict[str, set[str]] = {}
    total = 0
    with site.chromium() as driver:
        if width == 390:
            site.as_phone(driver)
        for mode in ("light", "dark"):
            for name in names:
                shown = a11y.show_mode(driver, base + name, mode)
                if shown["theme"] is None and name.startswith("figures/"):
                    if mode == "dark":
                        continue  # a figure's own page has no theme and one look: checked in the light pass
                else:
                    assert shown["theme"] == mode and \
                        a11y.dark_background(shown["background"]) == (mode == "dark"), \
                        f"{name} is not shown in {mode} mode: {shown}"
                result = a11y.axe_violations(driver)
                assert result["version"] == axe
                for violation in result["violations"]:
                    targets = [node["target"] for node in violation["nodes"]]
                    total += len(targets)
                    found.setdefault(violation["id"], {})[f"{name} ({mode})"] = targets
                    pages.setdefault(violation["id"], set()).add(f"{name} ({mode})")
    assert not found, f"at {width} px: " + _axe_report(found, pages, total)


def test_every_formula_reaches_a_screen_reader(html, base):
    """Each formula MathJax renders carries its MathML (MathJax's assistive MathML, loaded with the page
    by its configuration, not left to its menu), and Chromium's accessibility tree, what a screen
    reader is given, holds a MathML formula for every formula shown."""
    from kmtbook.sphinx_ext.assets import ASSISTIVE_MML

    checked = 0
    with site.chromium() as driver:
        for stem in site.chapter_stems()[:3]:
            driver.get(base + _chapter_page(stem))
            seen = driver.execute_async_script(r"""
const done = arguments[arguments.length - 1];
MathJax.startup.promise.then(() => {
  const all = [...document.querySelectorAll('mjx-container')];
  done({load: ((MathJax.config.loader || {}).load || []),
        total: all.length,
        withMathML: all.filter(c => c.querySelector(':scope > mjx-assistive-mml > math')).length,
        shown: all.filter(c => c.checkVisibility({visibilityProperty: true})).length,
        sample: (all.map(c => c.querySelector('mjx-assistive-mml > math')).find(m => m) || {}).outerHTML || ''});
});""")
            tree = driver.execute_cdp_cmd("Accessibility.getFullAXTree", {})["nodes"]
            exposed = sum(1 for n in tree if n.get("role", {}).get("value") == "MathMLMath" and not n.get("ignored"))
            assert ASSISTIVE_MML in seen["load"], f"{stem}: MathJax is not asked to load {ASSISTIVE_MML}"
            assert seen["total"] and seen["withMathML"] == seen["total"], f"{stem}: formulas without MathML {seen}"
            assert "<mi>" in seen["sample"] or "<mn>" in seen["sample"], seen["sample"]
            assert exposed == seen["shown"], (f"{stem}: {seen['shown']} formulas shown, {exposed} in the "
                                              "accessibility tree")
            checked += seen["total"]
    print(f"formulas with MathML for screen readers: {checked}")


def test_pages_opened_from_disk_log_no_error_and_name_their_version(html):
    """Opened from disk (file://, as the README says), no page logs an error on the browser console
    (the theme's fetch of the version list, which file:// refuses, is not made), and the version menu
    names this build's version and links to the same page of this build."""
    import kmtlib
    from kmtbook.citation import version_slot

    version = version_slot(kmtlib.__version__, os.environ)
    names = ["index.html", *_reader_pages(html)]
    problems = []
    with site.chromium() as driver:
        for name in names:
            driver.get((html / name).as_uri())
            if name == "index.html":  # it sends the reader on to the book's first page
                from selenium.webdriver.support.ui import WebDriverWait

                WebDriverWait(driver, 20).until(lambda d: d.current_url.endswith("book/index.html")
                                                and d.execute_script("return document.readyState") == "complete")
            driver.execute_async_script(a11y.SETTLE, "")
            menu = driver.execute_script(
                "const b = document.querySelector('.version-switcher__button');"
                "const links = [...document.querySelectorAll('.version-switcher__menu a')];"
                "return {button: b ? b.innerText.trim() : null, location: location.href,"
                "        links: links.map(a => [a.innerText.trim(), a.href])};")
            errors = [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
            problems += [f"{name}: console error {message[:200]}" for message in errors]
            if name.startswith("figures/"):
                continue  # a figure's own page has no theme, hence no menu
            here = menu["location"].split("#")[0]
            if menu["button"] != version:
                problems.append(f"{name}: the version menu shows {menu['button']!r}, not {version!r}")
            if not menu["links"] or any(text != version or href != here for text, href in menu["links"]):
                problems.append(f"{name}: the version menu lists {menu['links']}, not {version!r} at {here}")
    assert not problems, "opened from disk:\n" + "\n".join(problems)
