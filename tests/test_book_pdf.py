"""The book as one PDF (kmtbook.book_pdf): printed by Chromium with its maths typeset; without Chromium
the book command says in one line how to get it, and CI fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmtbook import book_pdf

ROOT = Path(__file__).resolve().parent.parent


def test_without_chromium_one_line_says_how_and_ci_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KMT_CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.delenv("CI", raising=False)
    assert book_pdf.main(["--out", str(tmp_path)]) == 0
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and "apt-get install chromium" in said[0] and "kmtbook.book_pdf" in said[0]
    monkeypatch.setenv("CI", "true")
    assert book_pdf.main(["--out", str(tmp_path)]) == 1


def test_chromium_prints_a_page(tmp_path):
    chromium = book_pdf.find_chromium()
    if chromium is None:
        pytest.skip("Chromium is not installed")
    page = tmp_path / "page.html"
    # a page whose script changes it after loading, as MathJax does
    page.write_text("<html><body><p id='x'>before</p><script>setTimeout(() => "
                    "{document.getElementById('x').textContent = 'typeset';}, 500)</script></body></html>")
    pdf = book_pdf.print_pdf(page, tmp_path / "out" / "book.pdf", chromium, budget_ms=5000)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and len(data) > 500


def test_the_index_links_the_pdf():
    assert book_pdf.PDF_NAME in (ROOT / "book" / "index.md").read_text()
