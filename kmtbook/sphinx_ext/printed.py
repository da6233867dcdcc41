"""The book on paper: the print style sheet of every page, the single page that :mod:`kmtbook.book_pdf`
prints as the whole book, and the whole book's PDF in every page's download menu.

* **Print style** (``_static/kmt-print.css``, for ``@media print``): code wraps inside the page (no clipped
  line, no scroll bar), captions and citation lines in full contrast, each chapter of the single page on
  a new page, figures kept whole with their citation line, the controls of interactive figures left out
  (their still is the figure above them), nothing that prints as an empty page.
* **The single page** (Sphinx's ``singlehtml`` builder, which inlines every page into one document and
  resolves that document once, as the root page): each figure gets its "Cite this figure" line and each
  page its "Cite this page" line, as on the page's own HTML and naming that page's address; an
  interactive figure gets a printed line that says where it moves (the chapter's versioned address).
* **The download menu** of the theme (sphinx-book-theme's download button) names "the whole book (PDF)",
  and its print button "this page (print)".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx

from .figures import _citation, _figure_citation, _page_citation
from .pages import page_info

PRINT_CSS = "kmt-print.css"
BOOK_PDF = "kmt-book.pdf"  # kmtbook.book_pdf.PDF_NAME: the whole book, at the root of the HTML
INTERACTIVE_MARKS = ('class="kmt-moving"',)
"""What the HTML of an interactive figure holds: the book's player (:func:`kmtbook.html_figures.slider_html`),
of an animation (with a play button) or of a figure under a slider."""
PLAYS = 'aria-label="Play"'
"""What the player of an animation holds and that of a slider does not."""

CSS = """/* kmtbook.sphinx_ext.printed: the book on paper */
.kmt-print-only { display: none; }
@media print {
  @page { size: A4; margin: 17mm 14mm 16mm 14mm; }
  html, body { background: #fff !important; color: #000 !important; }
  .kmt-print-only { display: block; }
  /* code wraps inside the page: every character printed, no scroll bar under it */
  pre, pre *, div.highlight pre, div.cell_output pre {
    white-space: pre-wrap !important; overflow-wrap: anywhere !important; word-break: normal !important; }
  pre, div.highlight, div.cell_input, div.cell_output, .output, .bd-article .pst-scrollable-table-container {
    overflow: visible !important; max-height: none !important; }
  pre { font-size: 8pt !important; line-height: 1.3 !important; }
  /* captions and citation lines in full contrast */
  figcaption, figcaption *, .caption, .caption-text, .caption-number,
  p.kmt-cite-figure, p.kmt-cite-figure *, p.kmt-cite-page, p.kmt-cite-page * { color: #000 !important; }
  figcaption { font-size: 9pt; }
  p.kmt-cite-figure, p.kmt-cite-page, p.kmt-print-note { font-size: 7.5pt !important; line-height: 1.3; }
  p.kmt-cite-figure { break-before: avoid; page-break-before: avoid; margin-top: 0.2rem; }
  /* a figure stays whole; a table may run on to the next page (kept whole, a long one left most of a page
     empty before it), a row may not */
  figure, .cell_output img { break-inside: avoid; page-break-inside: avoid; }
  .bd-main .bd-content .bd-article table { break-inside: auto !important; page-break-inside: auto !important; }
  .bd-main .bd-content .bd-article tr { break-inside: avoid; page-break-inside: avoid; }
  figure img, .cell_output img { max-height: 20cm; width: auto; max-width: 100% !important; object-fit: contain; }
  h1, h2, h3, h4 { break-after: avoid; page-break-after: avoid; }
  /* the controls of an interactive figure do not print: its still is the figure above it */
  .kmt-interactive-output { display: none !important; }
  /* the single page of the whole book: each page of the book (a chapter) starts a printed page with its
     title, which sphinx-book-theme hides in print (h1:first-of-type) because its print header of one page
     repeats it; that header and its list of the page's sections give way to the book's own contents */
  .kmt-book-part { break-before: page; page-break-before: always; }
  /* a chapter's last line ends its pages: its bottom margin, carried past a full page, printed a page with
     nothing on it before the next chapter (page 42 of the book profile's PDF) */
  .kmt-book-part > :last-child, .kmt-book-part > :last-child > :last-child {
    margin-bottom: 0 !important; padding-bottom: 0 !important; }
  .bd-main .bd-content .bd-article section.kmt-book-part > h1 { display: block !important; }
  body:has(.kmt-book-part) #jb-print-docs-body { display: none !important; }
  /* the figures page's thumbnails repeat the figures the book prints in full (and link the web's files) */
  body:has(.kmt-book-part) img.kmt-thumbnail { display: none !important; }
  /* what prints as empty space or an empty box: the theme's chrome, empty outputs, hidden toggles */
  .bd-header, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer, .bd-footer-article, .prev-next-area,
  .header-article, .bd-header-article, .bd-search, .search-button, .theme-switch-button, .bd-footer-content,
  .skip-link, .sidebar-toggle, .headerlink { display: none !important; }
  div.cell_output .output.stderr:empty, div.cell_output .output:empty, div.cell_output:empty,
  div.cell_output .output.stderr:not(:has(*:not(:empty))):not(:has(> pre)) { display: none !important; }
  .bd-container, .bd-container__inner, .bd-main, .bd-content, .bd-article-container, .bd-article {
    display: block !important; max-width: none !important; width: auto !important; margin: 0 !important;
    padding: 0 !important; min-height: 0 !important; height: auto !important; }
  a { color: #000 !important; text-decoration: none; }
}
"""


def printed_book(app: Sphinx) -> bool:
    """Whether this build is the single page printed as the whole book (Sphinx's ``singlehtml``)."""
    return getattr(app.builder, "name", "") == "singlehtml"


def write_print_css(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / PRINT_CSS).write_text(CSS)
    app.add_css_file(PRINT_CSS)


# --------------------------------------------------------------------------- the download menu


def offer_book_pdf(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """The whole book's PDF in the theme's download menu of every page (sphinx-book-theme's ``download-buttons``
    group, made at priority 501); the theme's ".pdf" entry, which prints the page in view, says so."""
    buttons = context.get("header_buttons")
    if not isinstance(buttons, list) or printed_book(app):
        return
    group = next((b for b in buttons if isinstance(b, dict) and b.get("label") == "download-buttons"), None)
    if group is None:
        group = {"type": "group", "icon": "fas fa-download", "buttons": [], "label": "download-buttons"}
        buttons.insert(0, group)
    group["tooltip"] = "Download this page or the whole book"
    for button in group["buttons"]:
        if button.get("label") == "download-pdf-button":
            button.update(text="this page (print)", tooltip="Print this page (or save it as PDF)")
    book: dict[str, Any] = {"type": "link", "url": context["pathto"](BOOK_PDF, 1), "text": "the whole book (PDF)",
                            "tooltip": "The whole book as one PDF, made for reading and printing",
                            "icon": "fas fa-book", "label": "download-book-pdf-button"}
    group["buttons"].insert(0, book)


# --------------------------------------------------------------------------- the single page


class _PageAddresses:
    """The single page's builder, naming a page as the HTML book does (``book/05_training.html``), not
    by its anchor on the single page: a citation names the page a reader finds on the web."""

    def __init__(self, builder) -> None:
        self._builder = builder

    def get_target_uri(self, docname: str, typ: str | None = None) -> str:
        return docname + self._builder.out_suffix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._builder, name)


class _CitingApp:
    """The application, with :class:`_PageAddresses` for its builder (see :func:`add_print_notes`)."""

    def __init__(self, app: Sphinx) -> None:
        self._app = app
        self.builder = _PageAddresses(app.builder)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._app, name)


def _page_of(node: nodes.Node, root: str) -> str:
    """The page of the book a node of the single page comes from (the root page outside every inlined one)."""
    part = next((up for up in _ancestors(node) if isinstance(up, addnodes.start_of_file)), None)
    return part["docname"] if part is not None else root


def add_print_notes(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """The single page (built for the PDF) as the HTML pages read: the lines "Cite this figure" and "Cite this
    page" of every page, each page on a new printed page, and where each interactive figure moves."""
    if not printed_book(app):
        return
    _citation(app)  # read once, on the application itself
    citing = _CitingApp(app)
    pages = page_info(app.env)
    _lift_parts(doctree)
    first = doctree.next_node(nodes.section)
    if first is not None:
        first["classes"].append("kmt-book-part")  # the root page, after the contents
    for part in list(doctree.findall(addnodes.start_of_file)):
        section = part.next_node(nodes.section)
        if section is not None:
            section["classes"].append("kmt-book-part")
            if part["docname"] in pages:
                section.append(_page_citation(citing, part["docname"]))  # type: ignore[arg-type]
    for fig in list(doctree.findall(nodes.figure)):
        page = _page_of(fig, docname)
        figure = next((f for f in pages.get(page, {}).get("figures", []) if f["label"] in fig["ids"]), None)
        if figure is not None and page != docname:  # the root page's own figures have their line already
            fig.parent.insert(fig.parent.index(fig) + 1, _figure_citation(citing, page, figure))  # type: ignore[arg-type]
    _mark_interactive(app, doctree, docname)


def _lift_parts(doctree: nodes.document) -> None:
    """Every page of the book a part of the document's top level, in reading order, as a book's chapters are.

    The single-page builder puts each page where the root page's table of contents was, inside the root
    page's section "Contents", so a chapter's title would be a third-level heading (and bookmark) and its
    sections fourth-level ones. Lifted, a chapter's title is a first-level heading; the root page's section
    left with its title only goes (the printed book has a contents list of its own)."""
    for part in doctree.findall(addnodes.start_of_file):
        for child in part.children:  # Sphinx hands a part the page's children without making it their parent
            child.parent = part
    parts = [part for part in doctree.findall(addnodes.start_of_file)
             if not any(isinstance(up, addnodes.start_of_file) for up in _ancestors(part))]
    for part in parts:
        part.parent.remove(part)
        doctree.append(part)
    for section in list(doctree.findall(nodes.section)):
        title = section.next_node(nodes.title)
        if title is not None and section.astext().strip() == title.astext().strip():
            section.parent.remove(section)


def _ancestors(node: nodes.Node) -> Iterator[nodes.Node]:
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def _mark_interactive(app: Sphinx, doctree: nodes.document, root: str) -> None:
    """Each interactive figure's output is marked (the print style leaves it out: its still is the figure
    above it) and followed by a printed line naming the address where it moves."""
    citation = _citation(app)
    last_label = None
    for node in list(doctree.findall(nodes.Element)):
        if isinstance(node, nodes.figure):
            last_label = next((i for i in node["ids"] if i.startswith("fig-")), last_label)
        if not isinstance(node, nodes.raw) or not any(mark in node.astext() for mark in INTERACTIVE_MARKS):
            continue
        output = node
        while output.parent is not None and "cell_output" not in output.parent.get("classes", []):
            output = output.parent
        holder = output.parent if output.parent is not None else node.parent
        holder["classes"].append("kmt-interactive-output")
        page = _page_of(node, root)
        suffix = getattr(app.builder, "out_suffix", ".html")
        where = citation.where(page + suffix + (f"#{last_label}" if last_label else ""))
        note = nodes.paragraph(classes=["kmt-print-only", "kmt-print-note"])
        note += nodes.emphasis(text="Interactive in the online book: ")
        kind = "step through the animation" if PLAYS in node.astext() else "move the slider"
        note += nodes.Text(f"the figure above is its still; {kind} at {where}.")
        cell = holder.parent if holder.parent is not None else holder
        cell.parent.insert(cell.parent.index(cell) + 1, note)
