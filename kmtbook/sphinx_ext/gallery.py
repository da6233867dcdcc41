"""The figures page: per chapter a gallery of cards (a lazy thumbnail of the figure, its number, caption
and files, a link to its page of its own when it moves) and a set for slides (a zip of its published
figure files with their citations, :func:`kmtbook.figure_files.slide_set`)."""

from __future__ import annotations

import posixpath
from html import escape as html_escape
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

from ..figure_files import slide_set
from ..paper_figures import reproduces
from .figures import (
    _locator,
    data_file,
    figure_file_credit,
    figure_files,
    figure_number,
    figure_target,
    interactive_file,
    thumbnail_size,
    thumbnail_target,
)
from .pages import chapter_title, link, page_info, pages_in_order, relative_uri


def slides_target(app: Sphinx, docname: str) -> str:
    """A chapter's set for slides: ``figures/slides/<stem>-figures.zip``."""
    return f"{app.config.kmt_figures_dir}/slides/{posixpath.basename(docname)}-figures.zip"


def write_slide_sets(app: Sphinx) -> None:
    """Per chapter, its published figure files (with their credit lines) and their citations in one zip."""
    out = Path(app.outdir)
    for docname, page in sorted(page_info(app.env).items()):
        files = []
        for figure in page["figures"]:
            paths = [out / figure_target(app, figure["label"], suffix) for suffix in (".png", ".pdf")]
            paths = [path for path in paths if path.is_file()]
            if paths:
                files.append((figure_file_credit(app, docname, figure), paths))
        if files:
            slide_set(out / slides_target(app, docname), _locator(app, docname), files)


def _slides_link(app: Sphinx, fromdoc: str, docname: str) -> list[nodes.Node]:
    """`` · for slides: its figures with their credit lines (zip)``, when the chapter publishes a figure file."""
    if not any(figure_files(app, docname, figure)[0] for figure in page_info(app.env)[docname]["figures"]):
        return []
    return [nodes.Text(" · for slides: "),
            link("its figures with their credit lines and citations (zip)",
                 relative_uri(app, fromdoc, slides_target(app, docname)))]


def _thumbnail(app: Sphinx, fromdoc: str, label: str, number: str, figure: dict, page_uri: str,
               png: Path | None = None) -> nodes.raw:
    """The figure's thumbnail, a link to the figure on its page; its text is the figure's text
    alternative, the same as on its page (its caption where the page gave it none)."""
    src = html_escape(relative_uri(app, fromdoc, thumbnail_target(app, label)), quote=True)
    href = html_escape(f"{page_uri}#{label}", quote=True)
    alt = html_escape(figure.get("alt") or f"{number}: {figure['caption']}", quote=True)
    title = html_escape(f"{number}: {figure['caption']}", quote=True)
    return nodes.raw("", f'<a href="{href}"><img src="{src}" alt="{alt}" title="{title}" '
                         f'class="kmt-thumbnail"{_lazy_attributes(png)}></a>', format="html")


def _lazy_attributes(png: Path | None) -> str:
    """The thumbnail's size (its place kept before it loads) and ``loading="lazy"``: a reader who opens
    the figures page loads the thumbnails near the window, not all of them."""
    size = f' width="{thumbnail_size(png)[0]}" height="{thumbnail_size(png)[1]}"' if png is not None else ""
    return f'{size} loading="lazy" decoding="async"'


def _interactive_link(app: Sphinx, fromdoc: str, docname: str, figure: dict) -> list[nodes.Node]:
    """For an animation or a figure under a slider, `` · moves on its own page`` (``figures/<label>.html``,
    published beside the PNG; the thumbnail is one frame), in the line of its files; nothing for a still
    figure."""
    if interactive_file(app, docname, figure) is None:
        return []
    page = relative_uri(app, fromdoc, figure_target(app, figure["label"], ".html"))
    return [nodes.Text(" · "), link("interactive, on its own page (the thumbnail is one frame)", page)]


def _files(app: Sphinx, fromdoc: str, label: str, png: Path | None, pdf: Path | None,
           table: Path | None = None) -> list[Any]:
    files: list[Any] = []
    if png is not None:
        files.append(link("PNG", relative_uri(app, fromdoc, figure_target(app, label, ".png"))))
    if pdf is not None:
        files += [" · " if files else "", link("PDF", relative_uri(app, fromdoc, figure_target(app, label, ".pdf")))]
    elif png is not None:
        files.append(" (no PDF in this build)")
    if table is not None:
        files += [" · " if files else "", link("data (CSV)", relative_uri(app, fromdoc,
                                                                        figure_target(app, label, ".csv")))]
    return files or [nodes.Text("(no file)")]


def _card(app: Sphinx, fromdoc: str, docname: str, figure: dict) -> nodes.container:
    """One figure of the gallery: its thumbnail, its number (a link to it on its page) and label, what it
    reproduces and its files."""
    label = figure["label"]
    png, pdf = figure_files(app, docname, figure)
    page_uri = app.builder.get_relative_uri(fromdoc, docname)
    number = figure_number(app, docname, label)
    card = nodes.container(classes=["kmt-gallery-card"])
    if png is not None:
        card += _thumbnail(app, fromdoc, label, number, figure, page_uri, png)
    title = nodes.paragraph(classes=["kmt-gallery-number"])
    title += nodes.strong("", "", link(number, f"{page_uri}#{label}"))
    title += nodes.Text(" ")
    title += nodes.literal(text=label)
    card += title
    what = nodes.paragraph(classes=["kmt-gallery-files"])
    what += nodes.Text((reproduces(posixpath.basename(docname), label) or "(not stated)") + " · ")
    for part in _files(app, fromdoc, label, png, pdf, data_file(app, docname, figure)):
        what += part if isinstance(part, nodes.Node) else nodes.Text(part)
    for part in _interactive_link(app, fromdoc, docname, figure):  # (a line of its own made the gallery taller)
        what += part
    card += what
    return card


def figures_table(app: Sphinx, fromdoc: str) -> nodes.Node:
    """The gallery of the figures page: per chapter, in reading order, a heading (the chapter, the
    profile and seed of its run) and a grid of its figures' cards."""
    pages = page_info(app.env)
    gallery = nodes.container(classes=["kmt-gallery"])
    for docname in pages_in_order(app):
        page = pages[docname]
        if not page["figures"]:
            continue
        heading = nodes.paragraph(classes=["kmt-gallery-chapter"])
        chapter_uri = app.builder.get_relative_uri(fromdoc, docname)
        heading += nodes.strong("", "", link(chapter_title(app, docname), chapter_uri))
        if page.get("run"):
            heading += nodes.Text(f" ({page['run']['profile']} profile, seed {page['run']['seed']})")
        heading += _slides_link(app, fromdoc, docname)
        gallery += heading
        grid = nodes.container(classes=["kmt-gallery-grid"])
        for figure in page["figures"]:
            grid += _card(app, fromdoc, docname, figure)
        gallery += grid
    if not len(gallery):
        return nodes.paragraph(text="No labelled figures in this build.")
    return gallery


# --------------------------------------------------------------------------- citations
