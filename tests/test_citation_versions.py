"""Every citation names its versioned address and the repository (kmtbook.citation), and its BibTeX
keeps its capitals when a standard style (pybtex's ``plain``, which lower-cases titles) formats it."""

from __future__ import annotations

from pathlib import Path

import pytest

import kmtlib
from kmtbook.citation import read_citation

ROOT = Path(__file__).resolve().parent.parent
SITE = "https://readers.invalid/kmt-book"
REPOSITORY = "https://git.invalid/owner/kmt-book"


def _citation(slot: str | None):
    environ = {"KMT_BOOK_URL": SITE, "KMT_REPOSITORY_URL": REPOSITORY}
    if slot:
        environ["KMT_BOOK_VERSION"] = slot
    return read_citation(ROOT, kmtlib.__version__, None, environ)


def _formatted(bibtex: str) -> str:
    """The entry as pybtex's ``plain`` style prints it, in plain text."""
    from pybtex.database import parse_string
    from pybtex.plugin import find_plugin

    data = parse_string(bibtex, "bibtex")
    style = find_plugin("pybtex.style.formatting", "plain")()
    return "\n".join(entry.text.render_as("text") for entry in style.format_entries(data.entries.values()))


@pytest.mark.parametrize("slot", [f"v{kmtlib.__version__}", None])
def test_citations_name_the_versioned_address_and_the_repository(slot):
    citation = _citation(slot)
    folder = slot or "dev"
    assert citation.url == f"{SITE}/{folder}/"
    line = citation.reference("Chapter 2, Fig. 2.1 (fig-x)", "book/02_kmeans_transformer.html#fig-x")
    assert f"{SITE}/{folder}/book/02_kmeans_transformer.html#fig-x" in line and REPOSITORY in line
    if citation.commit:
        assert citation.commit[:12] in line and citation.commit in citation.bibtex()
        assert citation.commit_url == f"{REPOSITORY}/tree/{citation.commit}"
    for text in (citation.bibtex(), citation.figure_bibtex("fig-x", "Fig. 2.1", "Chapter 2", "A title", "f.pdf")):
        assert f"{SITE}/{folder}/" in text and REPOSITORY in text
    cff = citation.cff({"title": "t"})
    assert cff["url"] == f"{SITE}/{folder}/" and cff["repository-code"] == REPOSITORY


def test_bibtex_keeps_its_capitals_under_the_plain_style():
    citation = _citation(None)
    book = _formatted(citation.bibtex())
    assert "Transformer Circuits Can Realize Clustering Algorithms" in book, book
    figure = _formatted(citation.figure_bibtex("fig-paper-fig4a", "Fig. 5.2", "Chapter 5",
                                               "The paper's Fig. 4a recomputed", "figures/fig-paper-fig4a.pdf"))
    assert "The paper's Fig. 4a recomputed (Fig. 5.2, fig-paper-fig4a)" in figure, figure
