"""Every figure says what it shows (issue 51, item 1): each labelled figure of each chapter has a text
alternative written in its cell's metadata (``mystnb.image.alt``), its own, of one or two sentences
that name the kind of figure; the page's ``<img alt>``, the figures page, the PNG and PDF carry the same
words (kmtbook.figure_metadata.chapter_alternatives reads them); a figure's numbers go beside it as
``<label>.csv`` with the same citation and licence (kmtbook.figure_data)."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from PIL import Image
from test_figure_metadata import pdf_info

from kmtbook.chapter import Chapter
from kmtbook.figure_data import figure_csv, plotted_data
from kmtbook.figure_metadata import chapter_alternatives, chapter_captions

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "book").glob("[0-9]*.md"))
# What kind of figure: every alternative names one (the reader learns what to expect before what it shows).
KINDS = re.compile(r"\b(chart|plot|diagram|heat map|histogram|matri(?:x|ces)|scatter|still|panels?|grid)s?\b", re.I)

PATH_OR_PLACEHOLDER = re.compile(r"\.(?:png|pdf|svg|jpe?g)\b|_images|\.\./|\w/[\w/]+\.\w+|\bfig-[\w-]+|"
                                 r"\b(?:TODO|TBD|placeholder)\b", re.I)


def _all_alternatives() -> dict[str, tuple[str, str, str]]:
    """label -> (chapter, caption, alternative) over the whole book."""
    found = {}
    for source in CHAPTERS:
        captions, alternatives = chapter_captions(source), chapter_alternatives(source)
        for label, caption in captions.items():
            found[label] = (source.stem, caption, alternatives.get(label, ""))
    return found


def test_every_figure_of_every_chapter_has_a_text_alternative_of_its_own():
    figures = _all_alternatives()
    labels = {label for source in CHAPTERS for label in re.findall(r"name:\s*(fig-[\w-]+)", source.read_text())}
    assert labels and labels == set(figures)
    missing = sorted(label for label, (_, _, alt) in figures.items() if not alt)
    assert not missing, f"figures without a text alternative (mystnb: image: alt: in the cell): {missing}"
    seen: dict[str, str] = {}
    for label, (stem, caption, alt) in figures.items():
        where = f"{stem} {label}"
        assert alt not in seen, f"{where}: the same alternative as {seen[alt]}"
        seen[alt] = label
        assert 60 <= len(alt) <= 400, f"{where}: {len(alt)} characters; one or two sentences, please"
        assert len(re.findall(r"[.!?](?:\s|$)", alt)) <= 2, f"{where}: more than two sentences"
        assert alt != caption and not alt.startswith(caption[:60]), f"{where}: the caption again, not a description"
        assert not PATH_OR_PLACEHOLDER.search(alt), f"{where}: a file name or placeholder: {alt!r}"
        assert KINDS.search(alt), f"{where}: say what kind of figure it is (chart, plot, diagram, ...): {alt!r}"


def test_the_alternative_reaches_the_png_and_the_pdf(tmp_path):
    stem, label = "01_kmeans_and_lloyd", "fig-seeding"
    alt = chapter_alternatives(ROOT / "book" / f"{stem}.md")[label]
    chapter = Chapter(stem, device="cpu", seed=0, profile="quick", output_dir=str(tmp_path), sizes={})
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [3.5, 2.25, 2.0], label="random")
    chapter.save_figure(fig, label)
    plt.close(fig)
    with Image.open(tmp_path / f"{label}.png") as png:
        assert png.text["Alt"] == alt
    assert pdf_info((tmp_path / f"{label}.pdf").read_bytes())["Subject"].startswith(alt)
    assert not (tmp_path / f"{label}.csv").exists()  # no data given, no CSV


def test_a_figures_numbers_are_written_beside_it_with_its_citation(tmp_path):
    stem, label = "01_kmeans_and_lloyd", "fig-seeding"
    chapter = Chapter(stem, device="cpu", seed=0, profile="quick", output_dir=str(tmp_path), sizes={})
    fig, (left, right) = plt.subplots(1, 2, figsize=(5, 2))
    left.plot([0, 1, 2], [3.5, 2.25, 2.0], label="random")
    left.plot([0, 1, 2], [3.0, 2.125, 1.875], label="k-means++")
    left.axhline(1.5, label="floor")
    left.set_title("objective")
    right.bar(["a", "b"], [0.25, 0.75])
    chapter.save_figure(fig, label, data=plotted_data(fig))
    plt.close(fig)
    text = (tmp_path / f"{label}.csv").read_text(encoding="utf-8")
    header = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    credit, authors = chapter.figure_credit(label)
    assert header == credit.text_lines(authors)
    assert any(line.startswith("What it shows: ") and credit.alt in line for line in header)
    assert any("CC BY 4.0" in line for line in header) and any(credit.source in line for line in header)
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    assert [(r["panel"], r["series"], r["x"], r["y"]) for r in rows] == [
        ("objective", "random", "0.0", "3.5"), ("objective", "random", "1.0", "2.25"),
        ("objective", "random", "2.0", "2.0"), ("objective", "k-means++", "0.0", "3.0"),
        ("objective", "k-means++", "1.0", "2.125"), ("objective", "k-means++", "2.0", "1.875"),
        ("objective", "floor", "", "1.5"), ("panel 2", "bars 1", "a", "0.25"), ("panel 2", "bars 1", "b", "0.75")]
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_csv(tmp_path / f"{label}.csv", comment="#")
    assert list(frame.columns) == ["panel", "series", "x", "y"] and frame.y.sum() == pytest.approx(17.25)
    # a run without data removes the CSV of an earlier run: it would be published as this run's numbers
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0])
    chapter.save_figure(fig, label)
    plt.close(fig)
    assert not (tmp_path / f"{label}.csv").exists()


def test_plotted_data_reads_bars_of_every_kind():
    pandas = pytest.importorskip("pandas")
    fig, (grouped, lying, counts) = plt.subplots(1, 3)
    pandas.DataFrame({"as trained": [5.0, 5.5], "renumbered": [5.25, 5.75]}, index=[11, 12]).plot.bar(ax=grouped)
    lying.barh(["Lloyd", "top-k"], [0.5, 0.25])
    counts.hist([0.1, 0.2, 0.6], bins=[0.0, 0.25, 0.5, 0.75], label="one-hot")
    counts.errorbar([0.5], [1.5], yerr=[0.25], capsize=2, label="mean")
    data = plotted_data(fig)
    plt.close(fig)
    rows = list(zip(data["series"], data["x"], data["y"], strict=True))
    assert rows == [("as trained", "11", 5.0), ("as trained", "12", 5.5), ("renumbered", "11", 5.25),
                    ("renumbered", "12", 5.75), ("bars 1", "Lloyd", 0.5), ("bars 1", "top-k", 0.25),
                    ("mean", 0.5, 1.5), ("mean (error bar end)", 0.5, 1.25), ("mean (error bar end)", 0.5, 1.75),
                    ("one-hot", 0.125, 2.0), ("one-hot", 0.375, 0.0), ("one-hot", 0.625, 1.0)]


def test_figure_data_columns_of_one_length():
    assert figure_csv({"k": [2, 3], "gap": [0.5, float("nan")], "seed": 7}, ["head"]) == (
        "# head\nk,gap,seed\n2,0.5,7\n3,,7\n")
    with pytest.raises(ValueError, match=r"column 'b' has 2 values, another 3"):
        figure_csv({"a": [1, 2, 3], "b": [1, 2]}, [])
    with pytest.raises(ValueError, match="comment mark"):
        figure_csv({"# steps": [1]}, [])


class _Images(HTMLParser):
    """Every <img> of a page with the id of the figure it sits in."""

    def __init__(self) -> None:
        super().__init__()
        self.figure: list[str | None] = []
        self.images: list[tuple[str | None, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "figure":
            self.figure.append(attributes.get("id"))
        elif tag == "img":
            self.images.append((self.figure[-1] if self.figure else None, attributes))

    def handle_endtag(self, tag):
        if tag == "figure" and self.figure:
            self.figure.pop()


def _png() -> str:
    out = io.BytesIO()
    Image.new("RGB", (40, 20), "white").save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


@pytest.mark.parametrize("stem", ["01_kmeans_and_lloyd", "12_any_k"])
def test_the_page_shows_each_figure_with_its_alternative(tmp_path, stem):
    """myst-nb renders the chapter's own figure cells (their metadata as written, an image as output)
    with the alternative as the ``<img alt>``, and the figures page's thumbnails carry the same."""
    import jupytext

    notebook = jupytext.read(ROOT / "book" / f"{stem}.md")
    cells = [c for c in notebook.cells if c.cell_type == "code" and c.metadata.get("mystnb", {}).get("figure")]
    page = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# A chapter\n"}], "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}
    for i, cell in enumerate(cells):
        page["cells"].append({"cell_type": "code", "execution_count": i + 1, "metadata": dict(cell.metadata),
                              "source": "pass", "outputs": [{"output_type": "display_data", "metadata": {},
                                                             "data": {"image/png": _png()}}]})
    src = tmp_path / "src"
    src.mkdir()
    (src / f"{stem}.ipynb").write_text(json.dumps(page))
    (src / "figures.md").write_text("# Figures\n\n```{figure-list}\n```\n")
    (src / "index.md").write_text(f"# Index\n\n```{{toctree}}\n:numbered:\n{stem}\nfigures\n```\n")
    (src / "conf.py").write_text('extensions = ["myst_nb", "kmtbook.sphinx_ext"]\nkmt_offline_mathjax = False\n'
                                 'root_doc = "index"\nnb_execution_mode = "off"\nnumfig = True\n')
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q", str(src), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = chapter_alternatives(ROOT / "book" / f"{stem}.md")
    parser = _Images()
    parser.feed((out / f"{stem}.html").read_text(encoding="utf-8"))
    shown = {figure: attrs.get("alt") for figure, attrs in parser.images if figure in expected}
    assert shown == expected
    gallery = _Images()
    gallery.feed((out / "figures.html").read_text(encoding="utf-8"))
    thumbnails = [attrs for _, attrs in gallery.images if "kmt-thumbnail" in (attrs.get("class") or "")]
    assert sorted(a["alt"] for a in thumbnails) == sorted(expected.values())
