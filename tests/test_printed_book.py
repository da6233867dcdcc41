"""The whole book as one PDF (kmtbook.book_pdf), read as a lecturer reads it: bookmarks for every chapter
and section, a contents list with page numbers, no code line clipped at the margin, no blank page, each
figure's citation line, tags with the figures' text alternatives, the book's metadata; and the whole
book named in every page's download menu. The book is the one tests/conftest.py builds from the
quick-profile chapters (``quick_book``), as the book command builds it."""

from __future__ import annotations

import html as html_lib
import re
import unicodedata
from functools import cache
from html.parser import HTMLParser
from pathlib import Path

import pytest

import kmtlib
from kmtbook.book_pdf import PDF_NAME

# the tests of the book built from the quick runs, on one worker: it builds the book once and reads it
# while the other workers run the other tests (tests/conftest.py, quick_book)
pytestmark = pytest.mark.xdist_group("built-book")

FOOTER = re.compile(r"^\s*\d+ / \d+\s*$")


@cache
def _reader(pdf: Path):
    from pypdf import PdfReader

    return PdfReader(pdf)


@cache
def _pages_text(pdf: Path) -> tuple[str, ...]:
    """Each page's text without its header (the book's title and version) and footer (page x / y)."""
    pages = []
    for page in _reader(pdf).pages:
        lines = (page.extract_text() or "").splitlines()
        if lines and FOOTER.match(lines[-1]):  # the margins' text comes last: the header, then the footer
            lines = lines[:-1]
        if lines and f"version {kmtlib.__version__}" in lines[-1] and lines[-1].startswith("kmt-book"):
            lines = lines[:-1]
        pages.append(unicodedata.normalize("NFKC", "\n".join(lines)))  # the font's ligatures (ﬁ) as letters
    return tuple(pages)


def _squeezed(text: str) -> str:
    """``text`` without spaces, ligatures as letters, and inline maths without its delimiters \\( \\) (the HTML
    holds MathJax's source, the PDF its typeset letters)."""
    return re.sub(r"\s+|\\[()]", "", unicodedata.normalize("NFKC", text))


def _outline(pdf: Path) -> list[tuple[int, str, int]]:
    """(depth, title, page) of every bookmark, in order."""
    reader = _reader(pdf)
    out: list[tuple[int, str, int]] = []

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                out.append((depth, str(item.title), reader.get_destination_page_number(item) + 1))

    walk(reader.outline, 0)
    return out


class _Page(HTMLParser):
    """A page's first-level and second-level headings, the lines of its code blocks and its figures' images."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.headings: list[tuple[str, str]] = []
        self.code: list[str] = []
        self.alts: list[str] = []
        self._heading: str | None = None
        self._skip = 0
        self._pre = 0
        self._text: list[str] = []
        self._figure = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("h1", "h2") and self._heading is None:
            self._heading, self._text = tag, []
        elif tag == "a" and "headerlink" in (attrs.get("class") or ""):
            self._skip += 1
        elif tag == "pre":
            self._pre += 1
            self._text = []
        elif tag == "figure":
            self._figure += 1
        elif tag == "img" and self._figure:
            self.alts.append(attrs.get("alt") or "")

    def handle_endtag(self, tag):
        if tag == self._heading:
            self.headings.append((tag, " ".join("".join(self._text).split())))
            self._heading = None
        elif tag == "a" and self._skip:
            self._skip -= 1
        elif tag == "pre" and self._pre:
            self._pre -= 1
            self.code += [ln for ln in "".join(self._text).splitlines() if ln.strip()]
        elif tag == "figure":
            self._figure -= 1

    def handle_data(self, data):
        if (self._heading or self._pre) and not self._skip:
            self._text.append(data)


def _chapter_pages(html: Path) -> dict[str, _Page]:
    pages = {}
    for path in sorted((html / "book").glob("[0-9]*.html")):
        parser = _Page()
        text = path.read_text(encoding="utf-8")
        article = text[text.find('<article class="bd-article"'):text.find("</article>")]
        parser.feed(article)
        pages[path.stem] = parser
    return pages


@pytest.fixture(scope="module")
def pdf(quick_book: Path) -> Path:
    path = quick_book / PDF_NAME
    assert path.is_file(), f"{path} is missing"
    return path


def test_every_chapter_and_section_has_a_bookmark(pdf, quick_book):
    outline = _outline(pdf)
    top = [title for depth, title, _ in outline if depth == 0]
    for stem, page in _chapter_pages(quick_book).items():
        title = next(text for tag, text in page.headings if tag == "h1")
        assert _squeezed(title) in map(_squeezed, top), f"no bookmark for chapter {stem} ({title}) among {top}"
        at = [_squeezed(t) for _, t, _ in outline].index(_squeezed(title))
        below = [_squeezed(t) for depth, t, _ in outline[at + 1:] if depth > 0][:60]
        for tag, section in page.headings:
            if tag == "h2":
                assert _squeezed(section) in below, f"{stem}: no bookmark for its section {section}"
    print("outline, first 20 entries:", outline[:20])


def test_the_contents_list_gives_the_page_of_every_chapter(pdf):
    first = next(page for depth, title, page in _outline(pdf) if depth == 0 and title != "Contents")
    contents = [ln for text in _pages_text(pdf)[:first - 1] for ln in text.splitlines() if ln.strip()]
    assert contents[0].strip() == "Contents"
    at = 0
    for depth, title, page in _outline(pdf):
        if depth == 0 and title != "Contents":  # each page of the book, in order, with its first page
            at = next((i for i in range(at, len(contents))
                       if _squeezed(contents[i]).startswith(_squeezed(title)[:30])), None)
            assert at is not None, f"{title} is not in the contents (in order)"
            assert contents[at].split()[-1] == str(page), \
                f"the contents give {contents[at]!r}; the chapter starts on page {page}"


def test_every_chapter_starts_on_a_new_page(pdf):
    texts = _pages_text(pdf)
    for depth, title, page in _outline(pdf):
        if depth == 0 and title != "Contents":  # its title opens the page (after a reference list's labels)
            assert _squeezed(title) in _squeezed(texts[page - 1])[:200], f"{title} does not open page {page}"
    starts = [page for depth, _, page in _outline(pdf) if depth == 0]
    assert len(set(starts)) == len(starts), f"two pages of the book begin on one printed page: {starts}"


def test_no_code_line_is_clipped(pdf, quick_book):
    """Every line of every code block and printout of the chapters is in the PDF's text, whole (a line
    wraps at the margin: the text is compared without its spaces and line breaks)."""
    printed = _squeezed("".join(_pages_text(pdf)))
    missing = []
    for stem, page in _chapter_pages(quick_book).items():
        for line in page.code:
            squeezed = _squeezed(line)
            if squeezed and squeezed not in printed:
                missing.append(f"{stem}: {line.strip()[:100]}")
    counted = sum(len(p.code) for p in _chapter_pages(quick_book).values())
    assert counted > 100, "the chapters' pages hold fewer code lines than expected: the parser lost them"
    assert not missing, f"{len(missing)} of {counted} code lines are not whole in the PDF, e.g. {missing[:5]}"


def _margin_line(line: str) -> bool:
    """A line of the running header (the book's title; its version and commit) or footer (page x / y)."""
    return bool(re.fullmatch(r"\s*\d+\s*/\s*\d+\s*", line) or re.match(r"\s*version \S+, commit", line)
                or "transformer circuits that run k-means" in line)


def test_no_page_is_blank(pdf):
    """No page holds only its margins: the running title and version above and "x / y" below print on
    every page, so a page whose other text is empty and that draws no image is blank."""
    blank = []
    for number, (page, text) in enumerate(zip(_reader(pdf).pages, _pages_text(pdf), strict=True), start=1):
        drawn = "/XObject" in (page.get("/Resources") or {})
        body = [line for line in text.splitlines() if line.strip() and not _margin_line(line)]
        if not body and not drawn:
            blank.append(number)
    assert not blank, f"blank pages: {blank}"


def test_every_figure_prints_its_citation_line(pdf, quick_book):
    printed = _squeezed("".join(_pages_text(pdf)))
    labels = [label for stem in _chapter_pages(quick_book)
              for label in re.findall(r'<figure[^>]* id="(fig-[a-z0-9-]+)"',
                                      (quick_book / "book" / f"{stem}.html").read_text())]
    assert labels
    missing = [label for label in labels if _squeezed(f"({label})") not in printed]
    lines = printed.count(_squeezed("Cite this figure:"))
    assert not missing and lines >= len(labels), f"{lines} citation lines for {len(labels)} figures; none for {missing}"


def test_interactive_figures_print_where_they_move(pdf, quick_book):
    pages = [(quick_book / "book" / f"{stem}.html").read_text() for stem in _chapter_pages(quick_book)]
    moving = sum(text.count('class="kmt-moving"') for text in pages)  # (the book's player, kmtbook.html_figures)
    assert moving >= 4, "the book's two animations and two sliders"
    printed = _squeezed("".join(_pages_text(pdf)))
    assert printed.count(_squeezed("Interactive in the online book:")) == moving
    assert printed.count(_squeezed("step through the animation")) >= 2
    assert printed.count(_squeezed("move the slider")) >= 2
    assert _squeezed("Keys: ← → step") not in printed, "the player's controls do not print"


def test_the_pdf_is_tagged_with_headings_and_the_figures_alternatives(pdf, quick_book):
    reader = _reader(pdf)
    root = reader.trailer["/Root"]
    assert root["/MarkInfo"]["/Marked"] and str(root["/Lang"]) == "en"
    kinds: dict[str, int] = {}
    alts: list[str] = []

    def walk(element, depth=0):
        element = element.get_object() if hasattr(element, "get_object") else element
        if isinstance(element, list):
            for kid in element:
                walk(kid, depth)
            return
        if not hasattr(element, "get") or depth > 200:
            return
        kind = str(element.get("/S", ""))
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == "/Figure" and "/Alt" in element:
            alts.append(" ".join(str(element["/Alt"]).split()))
        if "/K" in element:
            walk(element["/K"], depth + 1)

    walk(root["/StructTreeRoot"])
    assert kinds.get("/H1", 0) >= len(_chapter_pages(quick_book)) and kinds.get("/Figure", 0) > 0, kinds
    # a written alternative reaches its figure's tag (an image's path, the default where none is written, is
    # no alternative, and its relative form differs between the chapter's page and the single page)
    written = [" ".join(html_lib.unescape(alt).split()) for page in _chapter_pages(quick_book).values()
               for alt in page.alts if alt.strip() and not re.search(r"\.(png|jpe?g|gif|svg|webp)$", alt.strip())]
    missing = [alt for alt in written if alt not in alts]
    assert not missing, f"{len(missing)} of {len(written)} written alternatives are not in the tags: {missing[:3]}"
    print(f"{kinds.get('/Figure')} figure tags, {len(alts)} with an alternative, {len(written)} written on the pages")


def test_the_pdf_names_the_book_its_version_licence_and_language(pdf):
    reader = _reader(pdf)
    info = reader.metadata
    assert info["/Title"].startswith("kmt-book") and info["/Author"]
    assert f"version {kmtlib.__version__}" in info["/Keywords"] and "CC BY 4.0" in info["/Keywords"]
    xmp = reader.xmp_metadata
    assert xmp is not None and xmp.dc_language == ["en"] and "CC BY 4.0" in xmp.dc_rights["x-default"]
    assert f"version {kmtlib.__version__}" in (xmp.pdf_keywords or "")


def test_every_page_offers_the_whole_book_in_its_download_menu(quick_book):
    pages = sorted((quick_book / "book").glob("*.html"))
    assert pages
    for page in pages:
        text = page.read_text(encoding="utf-8")
        match = re.search(r'href="([^"]*kmt-book\.pdf)"[^>]*>\s*(?:<[^>]+>\s*)*the whole book \(PDF\)', text)
        assert match, f"{page.relative_to(quick_book)}: no 'the whole book (PDF)' in the download menu"
        assert (page.parent / match[1]).resolve() == (quick_book / PDF_NAME).resolve()


def test_the_cite_page_links_the_whole_book(quick_book):
    assert f'href="../{PDF_NAME}"' in (quick_book / "book" / "cite.html").read_text(encoding="utf-8")


def test_the_downloadable_figure_has_its_credit_line_and_the_page_figure_has_none(quick_book):
    from PIL import Image

    chapter = quick_book / "book" / "01_kmeans_and_lloyd.html"
    text = chapter.read_text(encoding="utf-8")
    label = re.search(r'<figure[^>]* id="(fig-[a-z0-9-]+)"', text)[1]
    shown = re.search(rf'<figure[^>]* id="{label}"[^>]*>.*?<img[^>]*src="([^"]+)"', text, re.S)[1]
    with Image.open(quick_book / "figures" / f"{label}.png") as published, \
            Image.open(chapter.parent / shown) as on_page:
        credit_line = published.text["Credit"]  # type: ignore[attr-defined]
        assert published.width == on_page.width and published.height > on_page.height
        assert "Credit" not in on_page.text  # type: ignore[attr-defined]
    assert credit_line.startswith("Fig. 1.1, kmt-book v" + kmtlib.__version__ + ", CC BY 4.0, ")
    from pypdf import PdfReader

    vector = " ".join(p.extract_text() or "" for p in PdfReader(quick_book / "figures" / f"{label}.pdf").pages)
    assert _squeezed(credit_line) in _squeezed(vector)
    figures_page = (quick_book / "book" / "figures.html").read_text(encoding="utf-8")
    assert "../figures/slides/01_kmeans_and_lloyd-figures.zip" in figures_page
    assert (quick_book / "figures" / "slides" / "01_kmeans_and_lloyd-figures.zip").is_file()
