"""What a figure file says about itself: its title, how to cite it, where it comes from, its licence.

A figure downloaded from the book and placed in slides or a paper travels without its page. So
:meth:`kmtbook.Chapter.save_figure` writes into each file the facts a reader needs to cite and reuse
it: in the PNG as text chunks (``Title``, ``Author``, ``Description``, ``Source``, ``Copyright``, and
``Version``, ``Commit``, ``Label``), in the PDF as its document information (``Title``, ``Author``,
``Subject``, ``Keywords``). The citation is the book's (:mod:`kmtbook.citation`: version, commit,
the versioned address and the repository), the title the first clause of the figure's caption, read
from the chapter's source (the ``mystnb.figure`` metadata of its cell).

Every figure also has a text alternative: one or two sentences saying what kind of figure it is and
what it shows, for a reader who cannot see it. It is written once, where the figure is made, in the
same cell's metadata (``mystnb.image.alt``, which myst-nb sets as the ``alt`` of the image on the
page); :func:`chapter_alternatives` reads it back, and the PNG (text chunk ``Alt``), the PDF (the
start of its ``Subject``), the figure's CSV and the figures page carry the same words.

:func:`figure_credit` gives the same facts as three lines (citation, source page, licence) for any
other file a figure is published as (an animation's or interactive figure's HTML).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from .citation import LICENCE_STATEMENT, LICENCE_TEXT, LICENCE_TEXT_URL, BookCitation, read_citation
from .repo_root import find_repo_root

_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n---\n(.*?)\n---\n", re.S | re.M)


def caption_title(caption: str) -> str:
    """The first clause of a caption (up to its first full stop, colon or semicolon that ends a
    sentence, not an abbreviation such as "Fig."), at most 120 characters: a figure's title."""
    caption = " ".join(caption.split())
    first = caption
    for match in re.finditer(r"[.:;] ", caption):
        word = caption[:match.start()].rsplit(" ", 1)[-1]
        if match.group(0) != ". " or not re.fullmatch(r"(?:Figs?|Eqs?|Thm|Tab|No|cf|vs|e\.g|i\.e|[A-Z])", word):
            first = caption[:match.start()]
            break
    first = first.rstrip(".")
    return first if len(first) <= 120 else first[:117].rsplit(" ", 1)[0] + " ..."


@functools.lru_cache(maxsize=32)
def _figure_cells(path: Path, mtime: float) -> dict[str, tuple[str, str]]:
    """label -> (caption, text alternative) of every labelled figure cell of a chapter's source."""
    found = {}
    for header in _CELL.findall(path.read_text(encoding="utf-8")):
        try:
            meta = yaml.safe_load(header) or {}
        except yaml.YAMLError:
            continue
        mystnb = (meta.get("mystnb") or {}) if isinstance(meta, dict) else {}
        figure = mystnb.get("figure") if isinstance(mystnb, dict) else None
        if isinstance(figure, dict) and figure.get("name"):
            image = mystnb.get("image")
            alt = image.get("alt") if isinstance(image, dict) else None
            found[str(figure["name"])] = (" ".join(str(figure.get("caption") or "").split()),
                                          " ".join(str(alt or "").split()))
    return found


def _cells(source: Path) -> dict[str, tuple[str, str]]:
    source = Path(source)
    if not source.is_file():
        return {}
    return _figure_cells(source, source.stat().st_mtime)


def chapter_captions(source: Path) -> dict[str, str]:
    """Every labelled figure of a chapter's MyST source: label -> caption (empty where none is given)."""
    return {label: caption for label, (caption, _) in _cells(source).items()}


def chapter_alternatives(source: Path) -> dict[str, str]:
    """Every labelled figure of a chapter's MyST source: label -> its text alternative, the
    ``mystnb.image.alt`` of its cell (empty where none is given). The one source of the words the
    page's ``<img alt>``, the figures page and the figure's files carry."""
    return {label: alt for label, (_, alt) in _cells(source).items()}


def chapter_locator(stem: str) -> str:
    """``Chapter 5`` for ``05_training``; the stem itself for a page without a number."""
    match = re.match(r"(\d+)_", stem)
    return f"Chapter {int(match[1])}" if match else stem


@dataclass(frozen=True)
class FigureCredit:
    """How one figure is cited and reused."""

    label: str
    title: str  # the caption's first clause (the label where the caption is unknown)
    citation: str  # the citation line: authors, year, title, version, commit, repository, chapter, label, address
    source: str  # the figure on its page: <site>/vX.Y.Z/book/<stem>.html#<label>, or its path in the book
    licence: str  # which licence applies to the figure (and to the code that drew it)
    version: str
    commit: str | None
    alt: str = ""  # the text alternative: what kind of figure it is and what it shows

    def text_lines(self, authors: str) -> list[str]:
        """The same facts as lines of text (the header of the figure's CSV)."""
        lines = [f"Figure {self.label}: {self.title}"]
        if self.alt:
            lines.append(f"What it shows: {self.alt}")
        return [*lines, f"Cite: {self.citation}", f"Source: {self.source}", f"Authors: {authors}",
                f"Licence: {self.licence}", f"Version {self.version}, commit {self.commit or '(none recorded)'}"]

    def png_metadata(self, authors: str) -> dict[str, str]:
        """PNG text chunks (matplotlib's ``savefig(metadata=...)`` for PNG)."""
        chunks = {"Title": self.title, "Author": authors, "Description": self.citation, "Source": self.source,
                  "Copyright": self.licence, "Label": self.label, "Version": self.version,
                  "Commit": self.commit or "(none recorded)"}
        return {**chunks, "Alt": self.alt} if self.alt else chunks

    def pdf_metadata(self, authors: str) -> dict[str, str]:
        """PDF document information (matplotlib's ``savefig(metadata=...)`` for PDF)."""
        return {"Title": self.title, "Author": authors,
                "Subject": (f"{self.alt} " if self.alt else "") + f"Cite: {self.citation} Licence: {self.licence}",
                "Keywords": f"{self.label}; version {self.version}; commit {self.commit or '(none recorded)'}; "
                            f"{LICENCE_TEXT} {LICENCE_TEXT_URL}; source {self.source}"}


def credit(citation: BookCitation, stem: str, label: str, caption: str | None = None,
           alt: str | None = None) -> FigureCredit:
    """The credit of figure ``label`` of chapter ``stem`` in the build ``citation`` describes (with its
    text alternative ``alt``, where the chapter gives one)."""
    page = f"book/{stem}.html#{label}"
    title = caption_title(caption) if caption else label
    line = citation.reference(f"{chapter_locator(stem)}, figure {label}: {title}", page)
    return FigureCredit(label=label, title=title, citation=line, source=citation.where(page),
                        licence=f"{LICENCE_TEXT} ({LICENCE_TEXT_URL}): reuse it with this citation. "
                                f"{LICENCE_STATEMENT}.",
                        version=citation.version, commit=citation.commit, alt=alt or "")


def figure_credit(label: str, stem: str | None = None, root: Path | None = None) -> FigureCredit:
    """The citation line, source page and licence of figure ``label``, for any file it is published as.

    ``stem`` names its chapter (found from the chapters' sources under ``root/book`` when omitted);
    the build's version, commit and addresses are read as every citation of the book reads them
    (:func:`kmtbook.citation.read_citation`)."""
    from kmtlib import __version__

    root = Path(root) if root is not None else find_repo_root()
    cells: dict[str, tuple[str, str]] = {}
    if stem is None:
        for source in sorted((root / "book").glob("[0-9]*.md")):
            cells = _cells(source)
            if label in cells:
                stem = source.stem
                break
        else:
            raise ValueError(f"figure label {label!r}: no chapter under {root / 'book'} has a figure of that name")
    else:
        cells = _cells(root / "book" / f"{stem}.md")
    caption, alt = cells.get(label, (None, None))
    return credit(read_citation(root, __version__, None, os.environ), stem, label, caption, alt)
