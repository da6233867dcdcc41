"""The notation page: in the table of contents, linked from every chapter's opening, and naming the
symbols, shapes and blocks a chapter uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = sorted(BOOK.glob("[0-9]*.md"))


def opening(text: str) -> str:
    """A chapter's opening: from its title to its first section (the parameters)."""
    title = re.search(r"^# .*$", text, re.M)
    assert title, "a chapter has a title"
    rest = text[title.end():]
    section = re.search(r"^## ", rest, re.M)
    return rest[: section.start()] if section else rest


def test_the_notation_page_is_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert "book/notation" in files


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_every_chapter_links_the_notation_in_its_opening(chapter):
    assert "{doc}`notation`" in opening(chapter.read_text(encoding="utf-8"))


def test_the_notation_names_symbols_shapes_blocks_and_both_temperatures():
    text = (BOOK / "notation.md").read_text(encoding="utf-8")
    for symbol in (r"\bar X^{(t)}", r"\bar C^{(t)}", "Q_\\mu", "K_\\mu", "V_\\mu", "d + k", "(B, n, d + k)",
                   "(B, k, d + k)", "(B, n, d)", "\\gamma", "\\lambda^{-1}", "columns", "rows"):
        assert symbol in text, symbol
    for block in ("CAX", "SAX", "CAC", "SAC"):
        assert f"| {block} |" in text, block
