"""Figure files identify themselves (kmtbook.figure_metadata, Chapter.save_figure): each PNG's text
chunks and each PDF's document information carry the figure's title, the citation with version,
commit and versioned address, the source page and the licence."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from PIL import Image

import kmtlib
from kmtbook.chapter import Chapter
from kmtbook.figure_metadata import chapter_captions, figure_credit

ROOT = Path(__file__).resolve().parent.parent
STEM, LABEL = "02_kmeans_transformer", "fig-layer-circuit"
SITE, REPOSITORY = "https://readers.invalid/kmt-book", "https://git.invalid/owner/kmt-book"


def pdf_info(data: bytes) -> dict[str, str]:
    """The document information of a PDF that matplotlib wrote (its /Info dictionary is not compressed)."""
    info = {}
    for key, literal, hexa in re.findall(rb"/(Title|Author|Subject|Keywords) (?:\((.*?)(?<!\\)\)|<([0-9A-Fa-f]+)>)",
                                         data, re.S):
        if hexa:
            text = bytes.fromhex(hexa.decode()).decode("utf-16")
        else:
            text = re.sub(rb"\\([()\\])", rb"\1", literal).decode("latin-1")
        info[key.decode()] = text
    return info


@pytest.fixture
def published(monkeypatch):
    monkeypatch.setenv("KMT_BOOK_URL", SITE)
    monkeypatch.setenv("KMT_REPOSITORY_URL", REPOSITORY)
    monkeypatch.setenv("KMT_BOOK_VERSION", f"v{kmtlib.__version__}")


def test_saved_figures_name_their_title_citation_source_and_licence(tmp_path, published):
    chapter = Chapter(STEM, device="cpu", seed=0, profile="quick", output_dir=str(tmp_path), sizes={})
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0])
    chapter.save_figure(fig, LABEL)
    plt.close(fig)
    page = f"{SITE}/v{kmtlib.__version__}/book/{STEM}.html#{LABEL}"
    title = "One layer of the k-means transformer (Theorem 2.1)"  # the caption's first clause
    with Image.open(tmp_path / f"{LABEL}.png") as png:
        text = dict(png.text)
    assert text["Title"] == title and text["Source"] == page
    assert page in text["Description"] and REPOSITORY in text["Description"]
    assert f"version {kmtlib.__version__}" in text["Description"] and "CC BY 4.0" in text["Copyright"]
    assert "MIT" in text["Copyright"] and text["Label"] == LABEL
    if chapter.figure_credit(LABEL)[0].commit:
        assert text["Commit"] in text["Description"] or text["Commit"][:12] in text["Description"]
    info = pdf_info((tmp_path / f"{LABEL}.pdf").read_bytes())
    assert info["Title"] == title and info["Author"] == "kmt-book contributors"
    assert page in info["Subject"] and REPOSITORY in info["Subject"] and "CC BY 4.0" in info["Subject"]
    assert LABEL in info["Keywords"] and f"version {kmtlib.__version__}" in info["Keywords"]


def test_every_figure_of_the_book_has_a_caption_to_title_it():
    for source in sorted((ROOT / "book").glob("[0-9]*.md")):
        labels = re.findall(r"name:\s*(fig-[\w-]+)", source.read_text())
        captions = chapter_captions(source)
        assert set(labels) <= set(captions), f"{source.name}: no caption read for {sorted(set(labels) - set(captions))}"
        assert all(len(captions[label]) > 20 for label in labels), source.name


def test_the_credit_of_a_figure_for_other_files(published):
    """What an animation's or interactive figure's HTML shows: citation line, source page, licence."""
    credit = figure_credit(LABEL)
    assert credit.source == f"{SITE}/v{kmtlib.__version__}/book/{STEM}.html#{LABEL}"
    assert credit.source in credit.citation and "Chapter 2" in credit.citation
    assert "CC BY 4.0" in credit.licence
    with pytest.raises(ValueError, match="fig-nowhere"):
        figure_credit("fig-nowhere")
