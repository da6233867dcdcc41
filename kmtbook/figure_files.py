"""The figure files a reader downloads carry their credit: a visible line at their foot and the
citation of the build that publishes them.

A figure pasted on a slide loses its file's metadata (slide tools drop PNG text chunks and PDF
document information), so each file the book publishes for download (``figures/<label>.png`` and
``.pdf``, and the chapter's set for slides) gets a small strip under the figure with one line such as
``Fig. 5.5, kmt-book v0.1.0, CC BY 4.0, <site>/v0.1.0/book/05_training.html#fig-main-result``. The
figure shown on the page stays as the chapter drew it: only the published copies are stamped.

The stamping happens when the book is built, not when the chapter runs: the metadata (PNG text chunks,
PDF information) is written again from the build's own citation (:mod:`kmtbook.citation`), so that a
build from a warm execution cache, or a release built after its chapters ran, never publishes the
version, commit or address of an older execution. The metadata also names the figure as a reader sees
it: its number and chapter beside its label.

- :func:`stamp_png`: the PNG with a white strip of the credit line below it (PIL), its text chunks
  replaced;
- :func:`stamp_pdf`: the PDF's page on a taller page, with the credit line drawn by matplotlib in the
  new space below it (pypdf merges the two), its document information replaced;
- :func:`slide_set`: a chapter's stamped files and a text file of their citations, in one zip.
"""

from __future__ import annotations

import functools
import io
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .citation import LICENCE_TEXT, BookCitation
from .figure_metadata import FigureCredit

CREDIT_POINTS = 7.0
"""Type size of the credit line, in points at the file's resolution: small, but legible on a slide."""

SMALLEST_POINTS = 5.0
"""The credit line shrinks to fit the figure's width down to this size, then wraps onto more lines."""

CREDIT_COLOUR = (51, 51, 51)
"""Dark grey on white: 12.6:1, readable in print and on a projector."""

CITATIONS_NAME = "CITATIONS.txt"
"""The text file of a set for slides that cites each of its figures."""


@dataclass(frozen=True)
class PublishedFigure:
    """How the published files of one figure cite it: the credit of the publishing build, the figure's
    number as readers see it (``Fig. 5.5``) and its chapter (``Chapter 5, Training ...``)."""

    credit: FigureCredit
    number: str
    chapter: str
    book: str  # the book's short name ("kmt-book")

    def line(self) -> str:
        """The visible credit: ``Fig. 5.5, kmt-book v0.1.0, CC BY 4.0, <address>``."""
        return f"{self.number}, {self.book} v{self.credit.version}, {LICENCE_TEXT}, {self.credit.source}"

    def png_metadata(self, authors: str) -> dict[str, str]:
        return {**self.credit.png_metadata(authors), "Figure": self.number, "Chapter": self.chapter,
                "Credit": self.line()}

    def pdf_metadata(self, authors: str) -> dict[str, str]:
        info = self.credit.pdf_metadata(authors)
        info["Keywords"] = f"{self.number}; {self.chapter}; {info['Keywords']}"
        return info


def published_figure(citation: BookCitation, *, label: str, number: str, chapter: str, title: str,
                     page: str, alt: str = "") -> PublishedFigure:
    """The credit of figure ``label`` (``number`` of ``chapter``, titled ``title``, described by its text
    alternative ``alt``) at ``page`` (its path in the HTML, ``book/05_training.html#fig-x``), as the build
    ``citation`` describes it."""
    from .citation import LICENCE_STATEMENT, LICENCE_TEXT_URL

    credit = FigureCredit(label=label, title=title,
                          citation=citation.reference(f"{chapter}, {number} ({label}): {title}", page),
                          source=citation.where(page),
                          licence=f"{LICENCE_TEXT} ({LICENCE_TEXT_URL}): reuse it with this citation. "
                                  f"{LICENCE_STATEMENT}.",
                          version=citation.version, commit=citation.commit, alt=alt)
    return PublishedFigure(credit=credit, number=number, chapter=chapter, book=citation.title.split(":")[0].strip())


# --------------------------------------------------------------------------- the credit line's lines


@functools.lru_cache(maxsize=1)
def _font_file() -> str:
    """matplotlib's own sans-serif (DejaVu Sans), so that the PNG and the PDF strips use one typeface."""
    from matplotlib import font_manager

    return font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans"))


@functools.lru_cache(maxsize=32)
def _font(size: float):
    from PIL import ImageFont

    return ImageFont.truetype(_font_file(), size=size)


def _width(text: str, size: float) -> float:
    """Width of ``text`` set at ``size`` (points or pixels: the same unit out as in)."""
    return float(_font(size).getlength(text))


def fit_lines(text: str, width: float, size: float, smallest: float) -> tuple[list[str], float]:
    """``text`` set in at most ``width`` (same unit as ``size``): one line at ``size`` or the largest size
    down to ``smallest`` that fits, else lines broken after its commas (a long address after its slashes)
    at ``smallest``."""
    step = max(size / 20, 0.05)
    current = size
    while current >= smallest:
        if _width(text, current) <= width:
            return [text], current
        current -= step
    return _wrapped(text, width, smallest), smallest


def _wrapped(text: str, width: float, size: float) -> list[str]:
    """Greedy lines of ``text`` at ``size``, broken after a comma's space or a slash (an address), a piece
    longer than a line cut where it must."""
    tokens = [t for t in re.split(r"(?<=, )|(?<=/)", text) if t]
    lines = [""]
    for token in tokens:
        while _width(token.rstrip(), size) > width and len(token) > 1:  # longer than a whole line
            cut = max(1, int(len(token) * width / _width(token, size)) - 1)
            lines += [token[:cut], ""]
            token = token[cut:]
        if lines[-1] and _width((lines[-1] + token).rstrip(), size) > width:
            lines.append("")
        lines[-1] += token
    return [line.rstrip() for line in lines if line.strip()]


# --------------------------------------------------------------------------- PNG


def stamp_png(source: Path, target: Path, figure: PublishedFigure, authors: str) -> None:
    """``target``: the PNG ``source`` with a strip of the credit line below it, its text chunks those of
    ``figure`` (the publishing build's citation)."""
    from PIL import Image, ImageDraw
    from PIL.PngImagePlugin import PngInfo

    with Image.open(source) as opened:
        opened.load()
        dpi = opened.info.get("dpi", (100, 100))
        image = opened.convert("RGBA" if "A" in opened.getbands() or "transparency" in opened.info else "RGB")
    px_per_point = float(dpi[0]) / 72
    margin = round(3 * px_per_point)
    lines, size = fit_lines(figure.line(), image.width - 2 * margin, CREDIT_POINTS * px_per_point,
                            SMALLEST_POINTS * px_per_point)
    font = _font(size)
    ascent, descent = font.getmetrics()
    leading = round((ascent + descent) * 1.15)
    strip = 2 * margin + leading * len(lines)
    stamped = Image.new(image.mode, (image.width, image.height + strip), "white")
    stamped.paste(image, (0, 0))
    draw = ImageDraw.Draw(stamped)
    for i, text in enumerate(lines):
        draw.text((margin, image.height + margin + i * leading), text, font=font, fill=CREDIT_COLOUR)
    info = PngInfo()
    for key, value in figure.png_metadata(authors).items():
        info.add_itxt(key, value)
    target.parent.mkdir(parents=True, exist_ok=True)
    stamped.save(target, pnginfo=info, dpi=dpi)


# --------------------------------------------------------------------------- PDF


def _strip_pdf(lines: Sequence[str], size: float, width: float, height: float, margin: float) -> bytes:
    """A one-page PDF, ``width`` x ``height`` points, with ``lines`` set at ``size`` points (matplotlib)."""
    from matplotlib.backends.backend_pdf import FigureCanvasPdf
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width / 72, height / 72))
    FigureCanvasPdf(fig)
    leading = size * 1.15
    colour = tuple(c / 255 for c in CREDIT_COLOUR)
    for i, text in enumerate(lines):
        fig.text(margin / width, 1 - (margin + (i + 0.8) * leading) / height, text, fontsize=size,
                 family="DejaVu Sans", color=colour, ha="left", va="baseline")
    out = io.BytesIO()
    fig.savefig(out, format="pdf", metadata={"Creator": None, "Producer": None, "CreationDate": None})
    return out.getvalue()


def stamp_pdf(source: Path, target: Path, figure: PublishedFigure, authors: str) -> None:
    """``target``: the first page of the PDF ``source`` on a page taller by a strip with the credit line, its
    document information that of ``figure`` (the publishing build's citation)."""
    from pypdf import PageObject, PdfReader, PdfWriter, Transformation

    page = PdfReader(source).pages[0]
    box = page.mediabox
    width, height = float(box.width), float(box.height)
    margin = 3.0
    lines, size = fit_lines(figure.line(), width - 2 * margin, CREDIT_POINTS, SMALLEST_POINTS)
    strip = 2 * margin + size * 1.15 * len(lines)
    writer = PdfWriter()
    stamped = PageObject.create_blank_page(width=width, height=height + strip)
    stamped.merge_transformed_page(page, Transformation().translate(-float(box.left), strip - float(box.bottom)))
    stamped.merge_page(PdfReader(io.BytesIO(_strip_pdf(lines, size, width, strip, margin))).pages[0])
    writer.add_page(stamped)
    writer.add_metadata({f"/{key}": value for key, value in figure.pdf_metadata(authors).items()})
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        writer.write(out)


def publish_figure_file(source: Path, target: Path, figure: PublishedFigure, authors: str) -> None:
    """Publish one figure file (PNG or PDF, by ``target``'s suffix) with its credit line and metadata."""
    if target.suffix.lower() == ".pdf":
        stamp_pdf(source, target, figure, authors)
    else:
        stamp_png(source, target, figure, authors)


# --------------------------------------------------------------------------- the set for slides


def publish_figure_csv(source: Path, target: Path, figure: PublishedFigure, authors: str) -> None:
    """Copy a figure's numbers (``<label>.csv``, :mod:`kmtbook.figure_data`) to ``target`` with the header
    lines of the publishing build (its citation, version and address), not those of the run that drew it."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    body = [line for line in lines if not line.startswith("# ")]
    lines = [f"{figure.number} of {figure.chapter}", *figure.credit.text_lines(authors)]
    header = "".join(f"# {line}\n" for line in lines)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(header + "".join(body), encoding="utf-8")


def citations_text(chapter: str, figures: Sequence[PublishedFigure]) -> str:
    """The text file of a set for slides: per figure its credit line, full citation and licence."""
    lines = [f"Figures of {chapter}: each file carries its credit line at its foot; cite as below.", ""]
    for figure in figures:
        lines += [f"{figure.number} ({figure.credit.label}): {figure.credit.title}",
                  f"  Credit line: {figure.line()}", f"  Citation: {figure.credit.citation}",
                  f"  Licence: {figure.credit.licence}", ""]
    return "\n".join(lines)


def slide_set(target: Path, chapter: str, files: Sequence[tuple[PublishedFigure, Sequence[Path]]]) -> None:
    """``target``: a zip of each figure's published ``files`` and :data:`CITATIONS_NAME`; its entries carry
    a fixed date, so that the same files give the same zip."""
    target.parent.mkdir(parents=True, exist_ok=True)
    stamp = (1980, 1, 1, 0, 0, 0)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for _, paths in files:
            for path in paths:
                archive.writestr(zipfile.ZipInfo(path.name, stamp), path.read_bytes())
        archive.writestr(zipfile.ZipInfo(CITATIONS_NAME, stamp), citations_text(chapter, [f for f, _ in files]))
