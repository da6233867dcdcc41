"""The figure files a reader downloads (kmtbook.figure_files): a visible credit line at their foot, the
publishing build's citation in their metadata, the figure shown on the page left clean, a set for
slides per chapter; and a rebuild from the same execution under another version publishes files that
name that version, not the one the chapter ran under."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from PIL import Image

import kmtlib
from kmtbook import figure_files
from kmtbook.citation import read_citation
from kmtbook.figure_metadata import credit

ROOT = Path(__file__).resolve().parent.parent
SITE = "https://readers.invalid/kmt-book"
RUN = "20260101T000000Z-1-000001"
LABEL = "fig-lloyd-trajectory"  # a figure of chapter 01 (kmtbook.paper_figures knows it)


def _published(version: str = "9.9.9", url: str | None = SITE, slot: str | None = None):
    environ = {"KMT_BOOK_VERSION": slot} if slot else {}
    citation = read_citation(ROOT, version, url, environ)
    figure = figure_files.published_figure(citation, label=LABEL, number="Fig. 1.2",
                                           chapter="Chapter 1, k-means and Lloyd's algorithm",
                                           title="Ten iterations of Lloyd's algorithm",
                                           page=f"book/01_kmeans_and_lloyd.html#{LABEL}")
    return citation, figure


def _drawn_figure(folder: Path, version: str) -> tuple[Path, Path]:
    """A figure's PNG and PDF as a chapter's run writes them (Chapter.save_figure), under ``version``."""
    from matplotlib.figure import Figure

    old = credit(read_citation(ROOT, version, None, {}), "01_kmeans_and_lloyd", LABEL, "Lloyd's trajectory.")
    fig = Figure(figsize=(6, 2))
    ax = fig.subplots()
    ax.plot([0, 1, 2], [3, 1, 2])
    folder.mkdir(parents=True, exist_ok=True)
    png, pdf = folder / f"{LABEL}.png", folder / f"{LABEL}.pdf"
    fig.savefig(png, dpi=150, metadata=old.png_metadata("Someone"))
    fig.savefig(pdf, metadata=old.pdf_metadata("Someone"))
    return png, pdf


def _pdf_text(path: Path) -> str:
    from pypdf import PdfReader

    return " ".join((page.extract_text() or "") for page in PdfReader(path).pages)


def test_the_credit_line_names_number_version_licence_and_versioned_address():
    _, figure = _published(slot=None)
    assert figure.line() == f"Fig. 1.2, kmt-book v9.9.9, CC BY 4.0, {SITE}/dev/book/01_kmeans_and_lloyd.html#{LABEL}"
    _, local = _published(url=None)
    assert local.line().endswith(f"book/01_kmeans_and_lloyd.html#{LABEL} in the book's HTML")  # no invented address


def test_a_long_credit_line_shrinks_then_wraps_within_the_width():
    text = f"Fig. 1.2, kmt-book v9.9.9, CC BY 4.0, {SITE}/v9.9.9/book/01_kmeans_and_lloyd.html#{LABEL}"
    lines, size = figure_files.fit_lines(text, 10_000, 7, 5)
    assert lines == [text] and size == 7
    lines, size = figure_files.fit_lines(text, 150, 7, 5)
    assert size == 5 and len(lines) > 1 and "".join(lines).replace(" ", "") == text.replace(" ", "")
    assert all(figure_files._width(line, size) <= 150 for line in lines)


def test_a_published_png_carries_its_credit_below_the_figure_and_the_build_in_its_chunks(tmp_path):
    png, _ = _drawn_figure(tmp_path / "run", "0.0.1")
    _, figure = _published()
    target = tmp_path / "figures" / f"{LABEL}.png"
    figure_files.stamp_png(png, target, figure, "kmt-book contributors")
    with Image.open(png) as drawn, Image.open(target) as published:
        assert published.width == drawn.width and published.height > drawn.height  # a strip below, nothing cut
        # the figure itself is the drawn one, pixel for pixel; the strip holds dark text on white
        assert published.convert("RGB").crop((0, 0, drawn.width, drawn.height)).tobytes() == \
            drawn.convert("RGB").tobytes()
        strip = published.convert("L").crop((0, drawn.height, drawn.width, published.height))
        darkest, lightest = strip.getextrema()
        assert darkest < 100 and lightest == 255
        chunks = published.text  # type: ignore[attr-defined]
    assert chunks["Version"] == "9.9.9" and chunks["Figure"] == "Fig. 1.2" and chunks["Label"] == LABEL
    assert chunks["Chapter"].startswith("Chapter 1") and chunks["Credit"] == figure.line()
    assert "Chapter 1, k-means and Lloyd's algorithm, Fig. 1.2 (fig-lloyd-trajectory)" in chunks["Description"]
    assert chunks["Source"] == f"{SITE}/dev/book/01_kmeans_and_lloyd.html#{LABEL}"


def test_a_published_pdf_carries_its_credit_below_the_figure_and_the_build_in_its_information(tmp_path):
    from pypdf import PdfReader

    _, pdf = _drawn_figure(tmp_path / "run", "0.0.1")
    _, figure = _published()
    target = tmp_path / "figures" / f"{LABEL}.pdf"
    figure_files.stamp_pdf(pdf, target, figure, "kmt-book contributors")
    drawn, published = PdfReader(pdf).pages[0], PdfReader(target).pages[0]
    assert float(published.mediabox.width) == float(drawn.mediabox.width)
    assert float(published.mediabox.height) > float(drawn.mediabox.height)
    assert figure.line().replace(" ", "") in _pdf_text(target).replace(" ", "").replace("\n", "")
    assert figure.line() not in _pdf_text(pdf)
    info = PdfReader(target).metadata
    assert "Fig. 1.2" in info["/Keywords"] and "version 9.9.9" in info["/Keywords"]
    assert "Fig. 1.2 (fig-lloyd-trajectory)" in info["/Subject"] and "CC BY 4.0" in info["/Subject"]


def test_a_set_for_slides_holds_the_files_and_their_citations(tmp_path):
    png, pdf = _drawn_figure(tmp_path / "run", "0.0.1")
    _, figure = _published()
    zipped = tmp_path / "slides.zip"
    figure_files.slide_set(zipped, "Chapter 1, k-means and Lloyd's algorithm", [(figure, [png, pdf])])
    with zipfile.ZipFile(zipped) as archive:
        assert sorted(archive.namelist()) == sorted([png.name, pdf.name, figure_files.CITATIONS_NAME])
        text = archive.read(figure_files.CITATIONS_NAME).decode()
    assert figure.line() in text and figure.credit.citation in text
    again = tmp_path / "again.zip"
    figure_files.slide_set(again, "Chapter 1, k-means and Lloyd's algorithm", [(figure, [png, pdf])])
    assert again.read_bytes() == zipped.read_bytes()  # the same files give the same zip


# --------------------------------------------------------------------------- a build, then a rebuild


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A Sphinx project of an index and chapter 01 whose run (under kmt-book 0.0.1, with no address) drew
    fig-lloyd-trajectory: the chapter's page prints its run line and shows the figure."""
    src, results = tmp_path / "src", tmp_path / "results"
    src.mkdir(parents=True)
    png, _ = _drawn_figure(results, "0.0.1")
    (results / "metrics.json").write_text(json.dumps({"run_id": RUN}))
    (src / "conf.py").write_text('extensions = ["myst_parser", "kmtbook.sphinx_ext"]\nkmt_offline_mathjax = False\n'
                                 'root_doc = "index"\nnumfig = True\nhtml_theme = "sphinx_book_theme"\n')
    (src / "shown.png").write_bytes(png.read_bytes())
    (src / "01_kmeans_and_lloyd.md").write_text(
        "# Lloyd\n\n```text\nprofile=quick, device=cpu, seed=0; n=4; "
        f"output_dir={results}; run={RUN}\n```\n\n"
        f"```{{figure}} shown.png\n:name: {LABEL}\n:alt: Line chart of a made-up objective against the step.\n\n"
        "Lloyd's trajectory. Two lines.\n```\n")
    (src / "index.md").write_text("# Index\n\n```{toctree}\n:numbered:\n01_kmeans_and_lloyd\n```\n")
    return src, results


def _build(src: Path, version: str, slot: str | None) -> subprocess.CompletedProcess:
    """Build ``src`` (its output kept between builds, as a warm cache is) with kmtlib reporting ``version``."""
    env = {**os.environ, "KMT_BOOK_URL": SITE}
    env.pop("KMT_BOOK_VERSION", None)
    if slot:
        env["KMT_BOOK_VERSION"] = slot
    script = ("import sys, kmtlib; kmtlib.__version__ = sys.argv[1]; from sphinx.cmd.build import main; "
              "sys.exit(main(sys.argv[2:]))")
    return subprocess.run([sys.executable, "-c", script, version, "-b", "html", "-W", "-q", str(src),
                           str(src.parent / "html")], capture_output=True, text=True, timeout=300, env=env, cwd=src)


@pytest.mark.parametrize("version, slot", [("9.9.9", "v9.9.9"), ("9.9.10", None)])
def test_a_rebuild_under_another_version_publishes_files_that_name_it(tmp_path, version, slot):
    """The chapter ran under 0.0.1 (its files say so); a first build publishes under kmtlib's version, and a
    rebuild of the same output under ``version`` (a release folder ``slot``, or dev) publishes files that
    name ``version`` and its address, with the credit line, while the run's own files stay as drawn."""
    from pypdf import PdfReader

    src, results = _project(tmp_path)
    first = _build(src, kmtlib.__version__, None)
    assert first.returncode == 0, first.stderr[-3000:]
    proc = _build(src, version, slot)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = src.parent / "html" / "figures"
    address = f"{SITE}/{slot or 'dev'}/01_kmeans_and_lloyd.html#{LABEL}"
    with Image.open(figures / f"{LABEL}.png") as png:
        chunks = dict(png.text)  # type: ignore[attr-defined]
        height = png.height
    assert chunks["Version"] == version and chunks["Source"] == address, chunks
    assert chunks["Credit"] == f"Fig. 1.1, kmt-book v{version}, CC BY 4.0, {address}"
    assert chunks["Figure"] == "Fig. 1.1" and chunks["Chapter"] == "Chapter 1, Lloyd"
    info = PdfReader(figures / f"{LABEL}.pdf").metadata
    assert f"version {version}" in info["/Keywords"] and address in info["/Keywords"]
    assert chunks["Credit"].replace(" ", "") in _pdf_text(figures / f"{LABEL}.pdf").replace(" ", "").replace("\n", "")
    # the run's files and the page's image: as the chapter drew them, no credit line, the old version
    with Image.open(results / f"{LABEL}.png") as drawn:
        assert drawn.text["Version"] == "0.0.1" and drawn.height < height  # type: ignore[attr-defined]
    shown = next((src.parent / "html" / "_images").glob("shown*.png"))
    with Image.open(shown) as page_image:
        assert page_image.height < height and "Credit" not in page_image.text  # type: ignore[attr-defined]
    # the chapter's set for slides, linked from nowhere here but published beside the figures
    with zipfile.ZipFile(figures / "slides" / "01_kmeans_and_lloyd-figures.zip") as archive:
        assert f"v{version}" in archive.read(figure_files.CITATIONS_NAME).decode()
        assert Image.open(io.BytesIO(archive.read(f"{LABEL}.png"))).height == height


def test_a_published_csv_carries_the_publishing_builds_citation_and_the_figures_alternative(tmp_path):
    """The numbers of a figure (kmtbook.figure_data) are published with the header of the build that publishes
    them: a run under 0.0.1 published by a build of 9.9.9 names 9.9.9, its number and its alternative; the
    numbers themselves pass unchanged."""
    from kmtbook.figure_data import write_figure_csv

    old = credit(read_citation(ROOT, "0.0.1", None, {}), "01_kmeans_and_lloyd", LABEL, "Lloyd's trajectory.")
    (tmp_path / "run").mkdir()
    drawn = write_figure_csv(tmp_path / "run" / f"{LABEL}.csv", {"step": [0, 1], "objective": [3.5, 1.25]},
                             old.text_lines("Someone"))
    citation = read_citation(ROOT, "9.9.9", SITE, {})
    figure = figure_files.published_figure(citation, label=LABEL, number="Fig. 1.2", chapter="Chapter 1",
                                           title="Ten iterations", page=f"book/01_kmeans_and_lloyd.html#{LABEL}",
                                           alt="Line chart of the objective against the step.")
    target = tmp_path / "figures" / f"{LABEL}.csv"
    figure_files.publish_figure_csv(drawn, target, figure, "kmt-book contributors")
    text = target.read_text(encoding="utf-8")
    header = [line for line in text.splitlines() if line.startswith("# ")]
    assert header[0] == "# Fig. 1.2 of Chapter 1"
    assert "# What it shows: Line chart of the objective against the step." in header
    assert any("Version 9.9.9" in line for line in header) and not any("0.0.1" in line for line in header)
    assert [line for line in text.splitlines() if not line.startswith("# ")] == \
        [line for line in drawn.read_text(encoding="utf-8").splitlines() if not line.startswith("# ")]
