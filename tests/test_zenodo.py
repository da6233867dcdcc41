"""DOI-ready releases: `.zenodo.json` (the metadata of Zenodo's record of each GitHub release) in step with
`CITATION.cff` field by field, and a release's DOI (the build setting KMT_BOOK_DOI) in every citation the
build writes: the BibTeX, the line under each figure and page, the figure files and the build's CITATION.cff."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import kmtlib
from kmtbook import citation as citations
from kmtbook import publish
from kmtbook.figure_metadata import credit

ROOT = Path(__file__).resolve().parent.parent
DOI = "10.5281/zenodo.1234567"  # an example in Zenodo's form; no real record is named
SITE = "https://readers.invalid/kmt-book"

# The deposit metadata fields of Zenodo's legacy API that .zenodo.json may use (developers.zenodo.org,
# "Deposit metadata"), and those it must hold for an open record.
ZENODO_FIELDS = {"upload_type", "publication_type", "image_type", "publication_date", "title", "creators",
                 "description", "access_right", "license", "embargo_date", "access_conditions", "doi",
                 "prereserve_doi", "keywords", "notes", "related_identifiers", "contributors", "references",
                 "communities", "grants", "subjects", "version", "language", "locations", "dates", "method"}
ZENODO_REQUIRED = {"upload_type", "title", "creators", "description", "access_right", "license"}
CFF_TO_ZENODO_UPLOAD = {"software": "software", "dataset": "dataset"}


def _zenodo() -> dict:
    return json.loads((ROOT / ".zenodo.json").read_text(encoding="utf-8"))


def _cff() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))


def _person(person: dict) -> str:
    """A CFF author as Zenodo names a creator: the name of a group, or "Family, Given"."""
    if "name" in person:
        return str(person["name"])
    return ", ".join(str(person[k]) for k in ("family-names", "given-names") if person.get(k))


def test_zenodo_metadata_is_complete_and_uses_zenodos_fields():
    zenodo = _zenodo()
    assert set(zenodo) <= ZENODO_FIELDS, set(zenodo) - ZENODO_FIELDS
    assert set(zenodo) >= ZENODO_REQUIRED, ZENODO_REQUIRED - set(zenodo)
    assert zenodo["access_right"] == "open" and zenodo["description"].strip()
    assert "doi" not in zenodo  # Zenodo mints it: a version DOI per release, one concept DOI for all


def test_zenodo_metadata_follows_citation_cff_field_by_field():
    zenodo, cff = _zenodo(), _cff()
    assert zenodo["title"] == cff["title"]
    assert [c["name"] for c in zenodo["creators"]] == [_person(p) for p in cff["authors"]]
    assert zenodo["version"] == cff["version"] == kmtlib.__version__
    assert zenodo["keywords"] == cff["keywords"]
    assert zenodo["upload_type"] == CFF_TO_ZENODO_UPLOAD[cff["type"]]
    # licences: Zenodo's record holds one (the first of CITATION.cff's); the notes name both and their files
    licences = cff["license"] if isinstance(cff["license"], list) else [cff["license"]]
    assert licences == ["CC-BY-4.0", "MIT"] and zenodo["license"] == licences[0]
    for words in (citations.LICENCE_TEXT, citations.LICENCE_CODE, "LICENSE-CC-BY-4.0", "(file LICENSE)"):
        assert words in zenodo["notes"], words
    assert (ROOT / "LICENSE").is_file() and (ROOT / "LICENSE-CC-BY-4.0").is_file()
    # the paper, as the work this one supplements: its arXiv identifier and its address
    paper = cff["preferred-citation"]
    related = {(r["identifier"], r["scheme"]): r for r in zenodo["related_identifiers"]}
    arxiv = next(i["value"] for i in paper["identifiers"] if str(i["value"]).startswith("arXiv:"))
    for key in ((arxiv, "arxiv"), (paper["url"], "url")):
        assert key in related, key
        assert related[key]["relation"] == "isSupplementTo"
        assert related[key]["resource_type"] == f"publication-{paper['type'].replace('-', '')}"


def _cited(environ: dict[str, str]):
    return citations.read_citation(ROOT, kmtlib.__version__, None, {"KMT_BOOK_URL": SITE, **environ})


@pytest.mark.parametrize("given", [DOI, f"https://doi.org/{DOI}", f"doi:{DOI}", f"  {DOI} "])
def test_the_release_doi_is_in_every_citation(given):
    citation = _cited({"KMT_BOOK_DOI": given})
    assert citation.doi == DOI and citation.doi_url == f"https://doi.org/{DOI}"
    # the lines under each figure and page (build_text), the reference of a figure file
    assert citation.doi_url in citation.build_text() and citation.doi_url in citation.build_text(full=True)
    line = citation.reference("Chapter 5, Fig. 5.5 (fig-main-result)", "book/05_training.html#fig-main-result")
    assert citation.doi_url in line
    # BibTeX: a doi field in the book's entry and in a figure's, read back by a BibTeX parser
    from pybtex.database import parse_string

    for entry in (citation.bibtex(), citation.figure_bibtex("fig-x", "Fig. 2.1", "Chapter 2", "A title", "f.pdf")):
        fields = next(iter(parse_string(entry, "bibtex").entries.values())).fields
        assert fields["doi"] == DOI and DOI not in fields["note"]
    # the build's CITATION.cff
    assert citation.cff(_cff())["doi"] == DOI
    # the figure files: PNG text fields and PDF document properties
    figure = credit(citation, "05_training", "fig-main-result", "Main result. More words.")
    assert citation.doi_url in figure.png_metadata("a")["Description"]
    assert citation.doi_url in figure.pdf_metadata("a")["Subject"]


def test_no_doi_unless_given_and_a_wrong_one_is_refused():
    citation = _cited({})
    assert citation.doi is None and "doi" not in citation.cff(_cff())
    assert "doi.org" not in citation.build_text() and "doi " not in citation.bibtex()
    with pytest.raises(ValueError, match=r"KMT_BOOK_DOI='zenodo\.1234567' is not a DOI"):
        _cited({"KMT_BOOK_DOI": "zenodo.1234567"})


def test_the_builds_citation_cff_carries_the_doi(tmp_path, monkeypatch):
    """As the book's extension writes it; the publisher reads the same file for the build's version."""
    from kmtbook.sphinx_ext import figures

    release = f"v{kmtlib.__version__}"
    for name, value in {"KMT_BOOK_URL": SITE, "KMT_BOOK_VERSION": release, "KMT_BOOK_DOI": DOI}.items():
        monkeypatch.setenv(name, value)
    config = SimpleNamespace(html_baseurl="", html_theme="other")
    figures.set_book_url(None, config)
    figures.write_cff(SimpleNamespace(config=config, srcdir=str(ROOT / "book"), outdir=str(tmp_path)))
    written = yaml.safe_load((tmp_path / "CITATION.cff").read_text())
    assert written["doi"] == DOI and written["version"] == kmtlib.__version__
    assert publish.read_build(tmp_path).version == kmtlib.__version__


def test_the_cite_page_says_how_the_doi_is_minted():
    page = (ROOT / "book" / "cite.md").read_text(encoding="utf-8")
    for words in ("DOI build setting", "kmtbook.citation", "Zenodo", "concept DOI", ".zenodo.json"):
        assert words in page, words
    # (the page names the setting by what it is, not by its variable: a published page names no build
    # variable, tests/test_browser.py test_citation_metadata_agrees)
    assert citations.DOI_VARIABLE not in page
