"""The book as one PDF (kmtbook.book_pdf): printed by Chromium over the DevTools protocol with bookmarks,
tags, page numbers and a contents list that gives each heading's page, the book's metadata written
after; without Chromium the book command says in one line how to get it, and CI fails.
tests/test_printed_book.py reads the PDF of a whole (quick) book."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kmtbook import book_pdf
from kmtbook.sphinx_ext.printed import CSS

ROOT = Path(__file__).resolve().parent.parent
INFO = book_pdf.BookInfo(title="kmt-book: a test", short_title="kmt-book", authors="Someone", version="9.9.9",
                         build="version 9.9.9, commit 0123456789ab", address="https://readers.invalid/v9.9.9/x.pdf",
                         licence="CC BY 4.0", citation="Someone (2026). kmt-book: a test.")


def test_without_chromium_one_line_says_how_and_ci_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KMT_CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.delenv("CI", raising=False)
    assert book_pdf.main(["--out", str(tmp_path)]) == 0
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and "apt-get install chromium" in said[0] and "kmtbook.book_pdf" in said[0]
    monkeypatch.setenv("CI", "true")
    assert book_pdf.main(["--out", str(tmp_path)]) == 1


def test_the_margins_name_the_book_and_number_the_pages():
    header, footer = book_pdf.margin_templates(INFO)
    assert "kmt-book" in header and "version 9.9.9, commit 0123456789ab" in header
    assert 'class="pageNumber"' in footer and 'class="totalPages"' in footer
    options = book_pdf.print_options(INFO)
    assert options["generateDocumentOutline"] and options["generateTaggedPDF"] and options["displayHeaderFooter"]


def _page(tmp_path: Path) -> tuple[Path, str]:
    """Three chapters of two sections, a long code line, a figure with its alternative, and maths typeset
    after loading (a stand-in for MathJax's promise)."""
    import base64

    from PIL import Image

    drawn = io.BytesIO()
    Image.new("RGB", (200, 100), "steelblue").save(drawn, format="PNG")
    image = "data:image/png;base64," + base64.b64encode(drawn.getvalue()).decode()
    long_line = "x = " + " + ".join(f"term_{i}" for i in range(60))
    chapters = "".join(
        f'<section class="kmt-book-part"><h1>{c}. Chapter {c}</h1><p>{"Text. " * 200}</p>'
        f'<section><h2>{c}.1. First</h2><div class="highlight"><pre>{long_line}  # chapter {c}</pre></div>'
        f"<p>{'More. ' * 300}</p></section>"
        f'<section><h2>{c}.2. Second</h2><figure><img alt="Line chart of chapter {c}: it rises" '
        f'src="{image}" width="200" height="100"></figure></section></section>'
        for c in (1, 2, 3))
    page = tmp_path / "book.html"
    page.write_text(f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>t</title>'
                    f"<style>{CSS}</style></head><body><main><article class='bd-article'>{chapters}"
                    "<p id='late'>before</p></article></main><script>window.MathJax = {startup: {promise: "
                    "new Promise(r => setTimeout(() => {document.getElementById('late').textContent = 'typeset'; "
                    "r();}, 1500))}};</script></body></html>")
    return page, long_line


def test_the_printed_book_has_bookmarks_tags_a_contents_list_with_pages_and_metadata(tmp_path):
    chromium, chromedriver = book_pdf.find_chromium(), book_pdf.find_chromedriver()
    if chromium is None or chromedriver is None:
        pytest.skip("Chromium or chromedriver is not installed")
    from pypdf import PdfReader

    page, long_line = _page(tmp_path)
    pdf = book_pdf.with_metadata(book_pdf.print_book(page, chromium, chromedriver, INFO), INFO)
    reader = PdfReader(io.BytesIO(pdf))
    flat = []

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                flat.append((depth, str(item.title), reader.get_destination_page_number(item) + 1))

    walk(reader.outline, 0)
    chapters = [(title, page) for depth, title, page in flat if depth == 0 and title.startswith(("1.", "2.", "3."))]
    assert [t for t, _ in chapters] == ["1. Chapter 1", "2. Chapter 2", "3. Chapter 3"], flat
    assert sum(1 for depth, title, _ in flat if depth == 1) >= 6, flat
    # the contents (page 1) give each chapter's page, and each chapter starts its page
    contents = reader.pages[0].extract_text()
    texts = [p.extract_text() for p in reader.pages]
    for title, number in chapters:
        line = next(ln for ln in contents.splitlines() if ln.startswith(title))
        assert line.split()[-1] == str(number), (line, number)
        assert f"{number} / {len(reader.pages)}" in texts[number - 1]  # the footer's page number
        assert "version 9.9.9" in texts[number - 1]  # the header's version
    # the code line wraps: all of it is printed
    squeezed = "".join("".join(texts).split())
    assert "".join(f"{long_line}  # chapter 3".split()) in squeezed and "typeset" in squeezed
    # tagged, with the figures' alternatives; the metadata of the book
    root = reader.trailer["/Root"]
    assert root["/MarkInfo"]["/Marked"] and str(root["/Lang"]) == "en"
    assert reader.metadata["/Author"] == "Someone" and "version 9.9.9" in reader.metadata["/Keywords"]
    assert reader.xmp_metadata.dc_rights["x-default"] == "CC BY 4.0"
    assert "Line chart of chapter 2: it rises" in _alts(root)


def _alts(root) -> list[str]:
    alts = []

    def walk(element):
        element = element.get_object() if hasattr(element, "get_object") else element
        if isinstance(element, list):
            for kid in element:
                walk(kid)
        elif hasattr(element, "get"):
            if element.get("/S") == "/Figure" and "/Alt" in element:
                alts.append(str(element["/Alt"]))
            if "/K" in element:
                walk(element["/K"])

    walk(root["/StructTreeRoot"])
    return alts


def test_the_index_and_the_cite_page_link_the_pdf():
    assert book_pdf.PDF_NAME in (ROOT / "book" / "index.md").read_text()
    assert book_pdf.PDF_NAME in (ROOT / "book" / "cite.md").read_text()
