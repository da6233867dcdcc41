"""The whole book as one PDF made for reading and printing, from a single-page build of the same execution.

The book command (``nox -s book``) first builds the HTML; this module then builds the book once more
with Sphinx's ``singlehtml`` builder into the same output folder, so Jupyter Book finds every chapter
in the execution cache the HTML build filled (no chapter runs again). Headless Chromium opens that one
page through chromedriver (selenium, as the browser tests do) and, once MathJax has typeset it and its
images have loaded, prints it over the DevTools protocol (``Page.printToPDF``), which gives what a
printed book needs and the command-line ``--print-to-pdf`` does not:

* **bookmarks** for every chapter and section (``generateDocumentOutline``, from the headings) and a
  **tagged** PDF (``generateTaggedPDF``: headings, lists, tables and figures with their images' text
  alternatives);
* **page numbers** and the book's title and version in the margins (header and footer templates);
* a **contents list with page numbers**: Chromium has no CSS ``target-counter``, so the page is printed
  twice: the first print says on which page each heading landed (the named destination of the contents'
  link to it, read with pypdf), the numbers are written into the contents, and the second print is the
  book (the numbers take the room their placeholders had, so nothing moves; a third print follows only
  if a page did);
* the print style sheet of :mod:`kmtbook.sphinx_ext.printed` (code that wraps, captions in full contrast,
  each chapter on a new page, interactive figures as their still with the address where they move).

pypdf then writes the document's title, authors, version, commit, licence, address and language into its
information dictionary and its XMP metadata. A TeX route would need a TeX installation and a second
rendering of the maths, the figures and the stills; Chromium is already what the browser tests use.

The PDF lands beside the HTML as ``kmt-book.pdf``, which every page's download menu and the cite page
link. Without Chromium or chromedriver the HTML is still built and one line says how to get the PDF;
under CI (``CI`` set) that is an error::

    python -m kmtbook.book_pdf --out _build/cpu          # after the HTML build into _build/cpu
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

PDF_NAME = "kmt-book.pdf"
ROOT_PAGE = "book/index.html"  # where the singlehtml builder writes the book's one page
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
CHROMEDRIVER_NAMES = ("chromedriver",)
LANGUAGE = "en"

MARGINS_MM = {"marginTop": 17, "marginBottom": 16, "marginLeft": 14, "marginRight": 14}
"""The page's margins (as ``@page`` in :mod:`kmtbook.sphinx_ext.printed`): room for the header and footer lines."""

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1280,1000")


def find_chromium() -> str | None:
    """``$KMT_CHROMIUM``, else the first Chromium on the PATH."""
    return _find("KMT_CHROMIUM", CHROMIUM_NAMES)


def find_chromedriver() -> str | None:
    """``$KMT_CHROMEDRIVER``, else chromedriver on the PATH."""
    return _find("KMT_CHROMEDRIVER", CHROMEDRIVER_NAMES)


def _find(variable: str, names: Sequence[str]) -> str | None:
    named = os.environ.get(variable)
    if named:
        return named if Path(named).is_file() else None
    return next((found for name in names if (found := shutil.which(name))), None)


def build_single_page(root: Path, out: Path, timeout: float = 600) -> Path:
    """The book as one HTML page (``singlehtml``) under ``out``, from the execution cache there.

    The builder writes the links of that page as seen from its output folder's root, so the page is
    copied there (``print.html``) before it is printed."""
    exe = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(root), "--builder", "singlehtml",
           "--path-output", str(out), "--keep-going"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    single = out / "_build" / "singlehtml"
    page = single / ROOT_PAGE
    if proc.returncode != 0 or not page.is_file():
        raise RuntimeError(f"the single-page build failed (rc={proc.returncode}, {page} "
                           f"{'written' if page.is_file() else 'missing'}):\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-2000:]}")
    printable = single / "print.html"
    shutil.copyfile(page, printable)
    return printable


# --------------------------------------------------------------------------- what the PDF says of itself


@dataclass(frozen=True)
class BookInfo:
    """The title, authors, version and address the PDF's margins and metadata name."""

    title: str
    short_title: str  # the book's title as its pages name it (``title`` of _config.yml)
    authors: str
    version: str
    build: str  # "version 0.1.0, commit 37fb2902c376"
    address: str | None  # this version's address, when published
    licence: str
    citation: str  # how to cite the book, one line

    @classmethod
    def of_build(cls, root: Path) -> BookInfo:
        """What :mod:`kmtbook.citation` says of the book built from ``root`` (version, commit, address)."""
        import kmtlib

        from .chapter import find_repo_root
        from .citation import LICENCE_STATEMENT, read_citation

        citation = read_citation(find_repo_root(root.resolve()), kmtlib.__version__,
                                 _configured(root, "html", "baseurl"), os.environ)
        return cls(title=citation.title, short_title=_configured(root, "title") or citation.title,
                   authors=citation.authors, version=citation.version,
                   build=citation.build_text(), address=citation.address(PDF_NAME), licence=LICENCE_STATEMENT,
                   citation=citation.reference("The whole book as one PDF", PDF_NAME))


def _configured(root: Path, *keys: str) -> str | None:
    """A setting of the book's ``_config.yml`` (``"html", "baseurl"``), None when unset."""
    import yaml

    config = root / "_config.yml"
    value: Any = yaml.safe_load(config.read_text()) if config.is_file() else None
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return str(value) if value else None


def margin_templates(info: BookInfo) -> tuple[str, str]:
    """Header (the book's title and version) and footer (page x of y) for ``Page.printToPDF``."""
    style = ("font-family: 'DejaVu Sans', Arial, sans-serif; font-size: 7.5pt; color: #222; width: 100%; "
             "margin: 0 14mm; display: flex; justify-content: space-between; gap: 2em;")
    header = (f'<div style="{style}"><span>{escape(info.short_title)}</span>'
              f'<span style="white-space: nowrap;">{escape(info.build)}</span></div>')
    footer = (f'<div style="{style} justify-content: center;">'
              '<span><span class="pageNumber"></span> / <span class="totalPages"></span></span></div>')
    return header, footer


def print_options(info: BookInfo) -> dict[str, Any]:
    header, footer = margin_templates(info)
    return {"printBackground": True, "preferCSSPageSize": True, "displayHeaderFooter": True,
            "headerTemplate": header, "footerTemplate": footer, "generateDocumentOutline": True,
            "generateTaggedPDF": True, **{k: v / 25.4 for k, v in MARGINS_MM.items()}}


# --------------------------------------------------------------------------- the browser


@contextmanager
def browser(chromium: str, chromedriver: str, timeout: int = 600) -> Iterator[Any]:
    """Headless Chromium driven by selenium through ``chromedriver`` (no download: Selenium Manager stays offline)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="kmt-pdf-")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    driver.set_page_load_timeout(timeout)
    driver.set_script_timeout(timeout)
    # one print of the whole book takes minutes: selenium waits 120 s for an answer by default
    connection = driver.command_executor
    if not isinstance(connection, str):
        connection.client_config.timeout = timeout
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


# Once the page has loaded: every folded block open, every image loaded (none left lazy), MathJax done, fonts ready.
SETTLE = r"""
const done = arguments[arguments.length - 1];
document.querySelectorAll('details').forEach(d => d.open = true);  // folded code (hide-input) and solutions print
document.querySelectorAll('img[loading]').forEach(img => img.loading = 'eager');
const images = [...document.images].map(img => img.complete ? null :
  new Promise(r => { img.addEventListener('load', r); img.addEventListener('error', r); }));
const maths = (window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve();
Promise.race([Promise.all([maths, document.fonts.ready, ...images.filter(Boolean)]),
              new Promise(r => setTimeout(r, 240000))]).then(() => done(true));
"""

# The contents: a list of every page's title (h1) and its sections (h2), each a link to its heading (given
# an id of its own; the root page after it starts a new printed page), with a fixed-width slot for its page
# number. Returns the headings' ids.
CONTENTS = r"""
const article = document.querySelector('.bd-article, article, main') || document.body;
const visible = el => !!el.getClientRects().length && !el.closest('.kmt-contents');
const heads = [...article.querySelectorAll('h1, h2')].filter(visible);
const text = h => { const c = h.cloneNode(true); c.querySelectorAll('.headerlink').forEach(a => a.remove());
                    return c.textContent.replace(/\s+/g, ' ').trim(); };
const nav = document.createElement('nav');
nav.className = 'kmt-contents';
nav.setAttribute('aria-labelledby', 'kmt-contents-title');
nav.innerHTML = '<h1 id="kmt-contents-title">Contents</h1><ol></ol>';
const list = nav.querySelector('ol');
const anchors = [];
heads.forEach((h, i) => {
  if (!h.id) h.id = 'kmt-contents-' + i;  // Sphinx puts the ids on sections, which repeat across pages
  const id = h.id;
  const li = document.createElement('li');
  li.className = 'kmt-contents-' + h.tagName.toLowerCase();
  li.innerHTML = '<a href="#' + id + '"><span class="kmt-contents-title"></span>' +
                 '<span class="kmt-contents-page" data-for="' + id + '">000</span></a>';
  li.querySelector('.kmt-contents-title').textContent = text(h);
  list.appendChild(li);
  anchors.push(id);
});
const style = document.createElement('style');
style.textContent = `
  nav.kmt-contents h1 { margin-top: 0; }
  nav.kmt-contents ol { list-style: none; padding: 0; margin: 0; font-size: 9.5pt; }
  nav.kmt-contents li { break-inside: avoid; }
  nav.kmt-contents li.kmt-contents-h1 { margin-top: 0.45em; font-weight: 600; }
  nav.kmt-contents li.kmt-contents-h2 { padding-left: 1.6em; }
  nav.kmt-contents a { display: flex; gap: 0.6em; color: #000; text-decoration: none; }
  nav.kmt-contents .kmt-contents-title { flex: 1; }
  nav.kmt-contents .kmt-contents-page { min-width: 2.6em; text-align: right; font-variant-numeric: tabular-nums; }
  nav.kmt-contents li.kmt-contents-h1 .kmt-contents-title::after { content: none; }`;
document.head.appendChild(style);
article.prepend(nav);
return anchors;
"""

# The text of every heading that prints, in order: what the bookmarks say (see :func:`named_bookmarks`).
HEADINGS = r"""
const text = h => { const c = h.cloneNode(true); c.querySelectorAll('.headerlink').forEach(a => a.remove());
                    return c.textContent.replace(/\s+/g, ' ').trim(); };
return [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].filter(h => h.getClientRects().length).map(text);
"""

FILL = r"""
const pages = arguments[0];
document.querySelectorAll('.kmt-contents-page').forEach(s => { s.textContent = String(pages[s.dataset.for]); });
"""


def _print(driver, options: dict[str, Any]) -> bytes:
    return base64.b64decode(driver.execute_cdp_cmd("Page.printToPDF", options)["data"])


def heading_pages(pdf: bytes, anchors: Sequence[str]) -> dict[str, int]:
    """The printed page (1 = first) of each of ``anchors``, from the PDF's named destinations."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(pdf))
    pages = {}
    for name, destination in reader.named_destinations.items():
        key = str(name).lstrip("/")
        number = reader.get_destination_page_number(destination) if key in anchors else None
        if number is not None:
            pages[key] = number + 1
    missing = [a for a in anchors if a not in pages]
    if missing:
        raise RuntimeError(f"the PDF has no destination for {len(missing)} heading(s) of the contents: {missing[:5]}")
    return pages


def print_book(page: Path, chromium: str, chromedriver: str, info: BookInfo, passes: int = 3) -> bytes:
    """The book's single ``page`` printed with its contents' page numbers (see the module's documentation)."""
    options = print_options(info)
    with browser(chromium, chromedriver) as driver:
        driver.get(page.resolve().as_uri())
        driver.execute_async_script(SETTLE)
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})  # what prints, as it prints
        anchors = driver.execute_script(CONTENTS)
        headings = driver.execute_script(HEADINGS)
        pages: dict[str, int] = {}
        for _ in range(passes):
            pdf = _print(driver, options)
            found = heading_pages(pdf, anchors)
            if found == pages:
                return named_bookmarks(pdf, headings)
            pages = found
            driver.execute_script(FILL, pages)
    raise RuntimeError(f"the contents' page numbers did not settle in {passes} prints")


def _bookmarks(outline) -> Iterator[Any]:
    """The outline's items in order, depth first (pypdf's dictionaries, ``/First`` and ``/Next``)."""
    item = outline.get("/First")
    while item is not None:
        item = item.get_object()
        yield item
        yield from _bookmarks(item)
        item = item.get("/Next")


def named_bookmarks(pdf: bytes, headings: Sequence[str]) -> bytes:
    """``pdf`` with each bookmark titled by its heading's text. Chromium builds a bookmark's title from the
    tagged text of its heading, which holds that text twice for a heading carried over to the next page
    ("1.7. 1.7. ExercisesExercises"); the bookmarks follow the headings in order, one each."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject, TextStringObject

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    outline = writer.root_object.get("/Outlines")
    items = list(_bookmarks(outline.get_object())) if outline is not None else []
    if len(items) != len(headings):
        raise RuntimeError(f"{len(items)} bookmarks for {len(headings)} headings: the outline does not follow "
                           "the headings one to one")
    for item, title in zip(items, headings, strict=True):
        item[NameObject("/Title")] = TextStringObject(title)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --------------------------------------------------------------------------- metadata


def with_metadata(pdf: bytes, info: BookInfo) -> bytes:
    """``pdf`` with the book's title, authors, version, licence, address and language in its information
    dictionary and XMP metadata (the outline, tags and pages kept as printed)."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject, TextStringObject
    from pypdf.xmp import XmpInformation

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    where = f"; {info.address}" if info.address else ""
    writer.add_metadata({"/Title": info.title, "/Author": info.authors,
                         "/Subject": f"{info.citation} Licence: {info.licence}",
                         "/Keywords": f"{info.build}{where}; {info.licence}"})
    xmp = XmpInformation.create()
    xmp.dc_title = {"x-default": info.title}
    xmp.dc_creator = [info.authors]
    xmp.dc_description = {"x-default": info.citation}
    xmp.dc_rights = {"x-default": info.licence}
    xmp.dc_language = [LANGUAGE]
    xmp.dc_identifier = info.address or info.build
    xmp.pdf_keywords = f"{info.build}{where}"
    writer.xmp_metadata = xmp
    writer.root_object[NameObject("/Lang")] = TextStringObject(LANGUAGE)
    writer.page_mode = "/UseOutlines"  # a reader opens the bookmarks beside the first page
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --------------------------------------------------------------------------- the command


def make_pdf(root: Path, out: Path, chromium: str, chromedriver: str) -> tuple[Path, dict[str, float]]:
    """Build the single page under ``out`` and print it to ``out/_build/html/kmt-book.pdf``; the seconds
    each step took."""
    started = time.perf_counter()
    page = build_single_page(root, out)
    built = time.perf_counter()
    info = BookInfo.of_build(root)
    pdf = with_metadata(print_book(page, chromium, chromedriver, info), info)
    target = out / "_build" / "html" / PDF_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(pdf)
    return target, {"single-page build": built - started, "print": time.perf_counter() - built}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kmtbook.book_pdf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the book build's --path-output (e.g. _build/cpu)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the book's folder (default: here)")
    args = parser.parse_args(argv)
    html = args.out / "_build" / "html"
    chromium, chromedriver = find_chromium(), find_chromedriver()
    if chromium is None or chromedriver is None:
        missing = "Chromium" if chromium is None else "chromedriver"
        print(f"kmt: no PDF of the book: {missing} is not installed (Debian: apt-get install chromium "
              f"chromium-driver); the HTML is in {html}; then run python -m kmtbook.book_pdf --out {args.out}")
        return 1 if os.environ.get("CI") else 0
    pdf, seconds = make_pdf(args.root, args.out, chromium, chromedriver)
    print(f"kmt: {pdf} ({pdf.stat().st_size / 1e6:.1f} MB): "
          + ", ".join(f"{step} {value:.0f} s" for step, value in seconds.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
