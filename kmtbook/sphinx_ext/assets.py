"""The files every page loads: MathJax 3 served from the book's own ``_static/`` (no network), with
its assistive MathML for screen readers, the book's style sheet, and two fixes of the theme's page
context."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

from .pages import _shown_image

logger = logging.getLogger(__name__)

MATHJAX_DEFAULT_PREFIX = "https://cdn.jsdelivr.net/npm/mathjax@3"
MATHJAX_STATIC = "mathjax"  # folder under _static


def _mathjax_source() -> Path | None:
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        return None
    es5 = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5"
    return es5 if (es5 / "tex-mml-chtml.js").is_file() else None


def use_local_mathjax(app: Sphinx, config) -> None:
    if not config.kmt_offline_mathjax:
        return
    path = config.mathjax_path or ""
    if path and not path.startswith(MATHJAX_DEFAULT_PREFIX):
        return  # the book chose its own MathJax: leave it
    if _mathjax_source() is None:
        logger.warning("kmt: the Python package django-static-mathjax is missing, so MathJax would load "
                       "from the network; install the project's 'book' extra", type="kmt", subtype="mathjax")
        return
    config.mathjax_path = f"{MATHJAX_STATIC}/tex-mml-chtml.js"


ASSISTIVE_MML = "a11y/assistive-mml"
"""MathJax's component that puts each formula's MathML, hidden from sight, beside its rendering: what a
screen reader reads (MathJax's own menu would load it later, and only if a reader's saved menu
settings keep it on)."""


def use_assistive_mathml(app: Sphinx, config) -> None:
    """``mathjax3_config``: load :data:`ASSISTIVE_MML` with MathJax and keep it on in MathJax's menu;
    the rest of the book's (and MyST's) MathJax configuration is kept."""
    mathjax = dict(getattr(config, "mathjax3_config", None) or {})
    loader = dict(mathjax.get("loader") or {})
    loader["load"] = [*[c for c in loader.get("load") or [] if c != ASSISTIVE_MML], ASSISTIVE_MML]
    options = dict(mathjax.get("options") or {})
    menu = dict(options.get("menuOptions") or {})
    menu["settings"] = {**(menu.get("settings") or {}), "assistiveMml": True}
    options["menuOptions"] = menu
    config.mathjax3_config = {**mathjax, "loader": loader, "options": options}


def copy_mathjax(app: Sphinx) -> None:
    source = _mathjax_source()
    if source is None or not app.config.mathjax_path.startswith(f"{MATHJAX_STATIC}/"):
        return
    target = Path(app.outdir) / "_static" / MATHJAX_STATIC
    if (target / "tex-mml-chtml.js").is_file() and (target / ".source").is_file() \
            and (target / ".source").read_text() == str(source):
        return
    shutil.copytree(source, target, dirs_exist_ok=True)
    (target / ".source").write_text(str(source))


CSS = """/* kmtbook.sphinx_ext: keep the generated boxes and tables readable */
/* a command wraps at its spaces; a word longer than the box (a path) scrolls in the box, unbroken */
.kmt-rerun div.kmt-command pre, .kmt-rerun div.kmt-command pre * {
  white-space: pre-wrap; overflow-wrap: normal !important; word-break: normal !important; }
.kmt-rerun div.kmt-command pre { overflow-x: auto; }
/* a word longer than its line (a function's dotted path, an address) breaks rather than widen the
   page; a word that fits is never broken (break-word, unlike anywhere, leaves table widths alone) */
.bd-article :is(p, li, dd, blockquote) { overflow-wrap: break-word; }
.bd-article :is(p, li, dd) code.literal span.pre { white-space: normal; }
table.kmt-runs, table.kmt-environment { font-size: 0.85em; }
table.kmt-runs td, table.kmt-figures td { vertical-align: top; }
/* the gallery of the figures page: per chapter a grid of cards at least 200 px wide (three in the
   content column of a 1280 px window, one on a phone); a thumbnail keeps its aspect inside a box of
   at most 130 px height, and a figure's label may break after a hyphen */
.kmt-gallery-chapter { margin: 1.2rem 0 0.4rem; }
.kmt-gallery-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(200px, 1fr));
  gap: 0.6rem 1rem; }
.kmt-gallery-card { min-width: 200px; font-size: 0.8em; line-height: 1.35; }
.kmt-gallery-card p { margin: 0.15rem 0; }
.kmt-gallery-card code span.pre, .kmt-gallery-card code { white-space: normal; }
.kmt-gallery-card img.kmt-thumbnail { display: block; width: 100%; min-width: 200px; height: 130px;
  object-fit: contain; border: 1px solid var(--pst-color-border, #ccc); background: #fff; }
/* tables in the text (the index's results table): a smaller type and padding, so that four columns
   with formulas fit the content column of a 1280 px window; wider ones scroll in their container */
.bd-article .pst-scrollable-table-container > table { font-size: 0.85em; }
.bd-article .pst-scrollable-table-container > table :is(th, td) { padding: 0.3rem 0.45rem; }
.bd-article .pst-scrollable-table-container > table code span.pre { white-space: normal; }
/* the parameters of a chapter: the columns take the width their whole words need (a name such as
   example_n is never cut) and the meanings wrap at their spaces, so that the table fits the column */
.kmt-rerun table.kmt-parameters { width: 100%; table-layout: auto; font-size: 0.85em; }
.kmt-rerun table.kmt-parameters th, .kmt-rerun table.kmt-parameters td {
  vertical-align: top; white-space: normal; overflow-wrap: break-word; word-break: normal; }
.kmt-rerun table.kmt-parameters code, .kmt-rerun table.kmt-parameters code span {
  white-space: normal; overflow-wrap: normal; }
/* on a phone the parameter table keeps its words whole: it takes the width its words need and
   scrolls sideways in its container (pydata's .pst-scrollable-table-container) when that is more */
@media (max-width: 640px) {
  .kmt-rerun table.kmt-parameters { table-layout: auto; width: auto; }
  .kmt-rerun table.kmt-parameters th, .kmt-rerun table.kmt-parameters td,
  .kmt-rerun table.kmt-parameters code, .kmt-rerun table.kmt-parameters code span {
    overflow-wrap: normal; word-break: normal; }
  .kmt-rerun table.kmt-parameters td:last-child { min-width: 12em; }
}
/* the index's results table (claim, the paper, this build, chapter): compact on a desktop; on a
   phone each claim is a card of four labelled lines, so that nothing waits off to the right */
table.kmt-results { width: 100%; font-size: 0.8em; }
table.kmt-results :is(th, td) { padding: 0.25rem 0.4rem; vertical-align: top; }
table.kmt-results td:first-child { width: 34%; }
table.kmt-results td:nth-child(2) { width: 20%; }
table.kmt-results td:last-child { width: 14%; }
@media (max-width: 640px) {
  table.kmt-results thead { display: none; }
  table.kmt-results, table.kmt-results tbody, table.kmt-results tr, table.kmt-results td {
    display: block; width: 100% !important; }
  table.kmt-results tr { border-bottom: 2px solid var(--pst-color-border, #ccc); padding: 0.3rem 0; }
  table.kmt-results td { border: none; padding: 0.1rem 0.2rem; }
  table.kmt-results td::before { display: block; font-weight: 600; font-size: 0.9em; }
  table.kmt-results td:nth-child(1)::before { content: "Claim"; }
  table.kmt-results td:nth-child(2)::before { content: "The paper"; }
  table.kmt-results td:nth-child(3)::before { content: "This build"; }
  table.kmt-results td:nth-child(4)::before { content: "Chapter"; }
}
/* a wide figure on a phone: shown at the readable width of 640 px (over the width the notebook gave
   the image inline), it scrolls sideways in its own box, which a keyboard can focus; a line above it
   says so, and its right edge fades while there is more to see (kmtbook.sphinx_ext.assets.wide_figure_box) */
.kmt-scroll-cue { display: none; }
@media (max-width: 640px) {
  .bd-article figure.kmt-wide-figure .kmt-scroll { overflow-x: auto; position: relative;
    background: linear-gradient(to left, rgba(127, 127, 127, 0.35), transparent 1.2rem) right / 1.2rem 100% no-repeat; }
  .bd-article figure.kmt-wide-figure img { max-width: none; width: 640px !important; height: auto !important; }
  .bd-article figure.kmt-wide-figure .kmt-scroll-cue { display: block; font-size: 0.85em; margin: 0 0 0.25rem; }
}
.bd-article .kmt-scroll:focus-visible { outline: 2px solid var(--pst-color-primary, #0a58ca); outline-offset: 2px; }
/* the step-through animations (matplotlib's HTML): the frame scales to the column, the buttons wrap */
.bd-article .animation { max-width: 100%; }
.bd-article .animation img { max-width: 100%; height: auto; }
.bd-article .animation .anim-slider { width: 100%; max-width: 100%; }
.bd-article .animation .anim-buttons { display: flex; flex-wrap: wrap; gap: 2px; }
.bd-article .animation .anim-buttons button { min-width: 2.2em; }
/* a chapter's printouts are folded to the column (kmtbook.summaries.wrap_lines); on a desktop a line
   that is still longer than the column (a printout not folded, a code listing) wraps at its spaces,
   on a phone it keeps its layout and scrolls in its own box, never widening the page */
.bd-article div.cell_output pre { overflow-x: auto; max-width: 100%; }
@media (min-width: 641px) {
  .bd-article div.cell_output pre { white-space: pre-wrap; overflow-wrap: break-word; }
}
p.kmt-cite-figure, p.kmt-cite-page { font-size: 0.85em; overflow-wrap: anywhere; }
p.kmt-cite-figure code, p.kmt-cite-page code { white-space: normal; }
"""


def write_css(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / "kmt-book.css").write_text(CSS)
    app.add_css_file("kmt-book.css")


def tidy_page(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Two theme glitches that put errors on the browser console of every page.

    Some inline scripts (sphinx-thebe's ``const THEBE_JS_URL = ...``) reach the page twice with
    different priorities, and a second ``const`` is a SyntaxError; and pydata-sphinx-theme reads
    ``default_mode`` from the page context, where an empty value is reported as an invalid mode."""
    scripts = context.get("script_files")
    if isinstance(scripts, list):
        seen, unique = set(), []
        for js in scripts:
            # the same inline script arrives once with filename None and once with ''
            key = (getattr(js, "filename", str(js)) or "", tuple(sorted(getattr(js, "attributes", {}).items())))
            if key not in seen:
                seen.add(key)
                unique.append(js)
        context["script_files"] = unique
    if not context.get("default_mode"):
        context["default_mode"] = app.config.kmt_default_mode


RESULTS_HEADER = ["claim", "the paper", "this build", "chapter"]
"""The columns of the index's results table, which :func:`mark_tables` styles as ``kmt-results``."""

WIDE_FIGURE = 1.9
"""Width over height from which a figure is wide (a row of panels): on a phone it scrolls in its box."""


def _png_aspect(path: str) -> float | None:
    """Width over height of a PNG, read from its header; None if it is not a readable PNG."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError:
        return None
    if len(head) < 24 or not head.startswith(b"\x89PNG"):
        return None
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    return width / height if height else None


def mark_tables(app: Sphinx, doctree, docname: str) -> None:
    """Classes for the style sheet: ``kmt-results`` on a table whose header is :data:`RESULTS_HEADER`,
    ``kmt-wide-figure`` on a figure whose image is at least :data:`WIDE_FIGURE` times as wide as tall."""
    from docutils import nodes

    for table in doctree.findall(nodes.table):
        head = next(table.findall(nodes.thead), None)
        if head is not None and [e.astext().strip().lower() for e in head.findall(nodes.entry)] == RESULTS_HEADER:
            table["classes"].append("kmt-results")
    for figure in doctree.findall(nodes.figure):
        shown = _shown_image(app, figure)
        aspect = _png_aspect(shown) if shown else None
        if aspect is not None and aspect >= WIDE_FIGURE:
            figure["classes"].append("kmt-wide-figure")
            wide_figure_box(app, figure, docname)


SCROLL_CUE = "Scroll sideways to see the whole figure."
"""The line above a wide figure where its box scrolls (on a phone; the style sheet hides it elsewhere)."""


def wide_figure_box(app: Sphinx, figure, docname: str) -> None:
    """Put a wide figure's image in a box of its own that scrolls sideways on a phone: a region a
    keyboard can focus and scroll (``tabindex="0"``, named after the figure, so axe's
    ``scrollable-region-focusable`` holds), with :data:`SCROLL_CUE` above it. (HTML only: another
    builder drops the raw nodes and shows the figure as before.)"""
    from html import escape

    from docutils import nodes

    image = figure.next_node(nodes.image)
    if image is None or image.parent is None:
        return
    number = app.env.toc_fignumbers.get(docname, {}).get("figure", {}).get(figure["ids"][0] if figure["ids"] else "")
    name = f"Fig. {'.'.join(map(str, number))}" if number else "The figure"
    parent, at = image.parent, image.parent.index(image)
    parent.insert(at + 1, nodes.raw("", "</div>", format="html"))
    parent.insert(at, nodes.raw("", f'<p class="kmt-scroll-cue" aria-hidden="true">{escape(SCROLL_CUE)}</p>'
                                    f'<div class="kmt-scroll" tabindex="0" role="region" '
                                    f'aria-label="{escape(name)}, in a box that scrolls sideways">', format="html"))
