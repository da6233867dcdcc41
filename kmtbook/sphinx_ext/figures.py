"""The figure register and the citations: every labelled figure published under a stable name
(``figures/<label>.png`` and ``.pdf``, and ``.csv`` with the numbers it plots where its chapter wrote
them), the ``figure-list`` table, the lines "Cite this figure" and
"Cite this page", the ``book-citation`` and ``figure-citation`` directives and the build's
``CITATION.cff``."""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

from ..citation import BookCitation, read_cff, read_citation, site_address, version_slot
from ..figure_files import (
    PublishedFigure,
    publish_figure_csv,
    publish_figure_file,
    published_figure,
)
from ..figure_metadata import caption_title
from ..repo_root import find_repo_root
from .pages import (
    link,
    output_folder,
    page_info,
    pages_in_order,
    relative_uri,
    same_run,
)

logger = logging.getLogger(__name__)


def figure_files(app: Sphinx, docname: str, figure: dict) -> tuple[Path | None, Path | None]:
    """PNG and PDF of one figure: the files the chapter saved, if they come from the run shown on
    the page; otherwise the displayed image and no PDF."""
    page = page_info(app.env)[docname]
    run = page.get("run")
    label = figure["label"]
    if run and run.get("output_dir"):
        folder = output_folder(app, docname, run)
        metrics_file = folder / "metrics.json"
        try:
            metrics = json.loads(metrics_file.read_text())
        except (OSError, ValueError):
            metrics = None
        if metrics and same_run(run, metrics):
            png, pdf = folder / f"{label}.png", folder / f"{label}.pdf"
            if png.is_file():
                return png, (pdf if pdf.is_file() else None)
    shown = Path(figure["image"]) if figure.get("image") else None
    return (shown if shown is not None and shown.is_file() else None), None


def interactive_file(app: Sphinx, docname: str, figure: dict) -> Path | None:
    """The figure's page of its own (``<label>.html``: an animation or a figure under a slider, with
    caption, source and licence), if the chapter's run shown on the page wrote one beside its PNG."""
    png, _ = figure_files(app, docname, figure)
    page = png.with_suffix(".html") if png is not None else None
    return page if page is not None and page.is_file() else None


def data_file(app: Sphinx, docname: str, figure: dict) -> Path | None:
    """The numbers the figure plots (``<label>.csv``, :mod:`kmtbook.figure_data`), if the chapter's run
    shown on the page wrote them beside its PNG."""
    png, _ = figure_files(app, docname, figure)
    table = png.with_suffix(".csv") if png is not None else None
    return table if table is not None and table.is_file() else None


def figure_target(app: Sphinx, label: str, suffix: str) -> str:
    return f"{app.config.kmt_figures_dir}/{label}{suffix}"


THUMBNAIL_WIDTH = 400
"""Width in pixels of a figure's thumbnail on the figures page: a card is shown 200 to 260 px wide (the
gallery's grid in the content column), so this is at most twice the width shown, sharp on a screen of
twice the density and no larger."""

THUMBNAIL_QUALITY = 75
"""WebP quality of a thumbnail: a chart's lines and text stay sharp at the size shown, at about a
sixth of the bytes of the same thumbnail as PNG (the figures page holds one per figure of the book)."""


def thumbnail_target(app: Sphinx, label: str) -> str:
    return f"{app.config.kmt_figures_dir}/thumbnails/{label}.webp"


def thumbnail_size(source: Path, width: int = THUMBNAIL_WIDTH) -> tuple[int, int]:
    """The pixel size of the thumbnail of the PNG ``source`` (read from its header), for the image's
    ``width`` and ``height`` attributes: the page keeps its place before the thumbnail loads."""
    head = source.read_bytes()[:24]
    w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if not head.startswith(b"\x89PNG") or not w or not h:
        raise ValueError(f"{source} is not a readable PNG")
    return (w, h) if w <= width else (width, max(1, round(h * width / w)))


def write_thumbnail(source: Path, target: Path, width: int = THUMBNAIL_WIDTH) -> None:
    """A small WebP of the figure ``source`` for the figures page: ``width`` pixels wide (its aspect
    kept; :func:`thumbnail_size`), quality :data:`THUMBNAIL_QUALITY`."""
    from PIL import Image

    size = thumbnail_size(source, width)
    with Image.open(source) as opened:
        image = opened.convert("RGBA") if opened.mode not in ("RGB", "RGBA") else opened
        small = image.resize(size, Image.Resampling.LANCZOS) if image.size != size else image.copy()
    target.parent.mkdir(parents=True, exist_ok=True)
    small.save(target, "WEBP", quality=THUMBNAIL_QUALITY, method=6)


def copy_figures(app: Sphinx) -> None:
    out = Path(app.outdir)
    for docname, page in sorted(page_info(app.env).items()):
        for figure in page["figures"]:
            png, pdf = figure_files(app, docname, figure)
            for source, suffix in ((png, ".png"), (pdf, ".pdf")):
                if source is None:
                    continue
                target = out / figure_target(app, figure["label"], suffix)
                # the published copy carries its credit line and this build's citation (kmtbook.figure_files)
                publish_figure_file(source, target, figure_file_credit(app, docname, figure), _citation(app).authors)
            if png is not None:
                write_thumbnail(png, out / thumbnail_target(app, figure["label"]))
            moving = interactive_file(app, docname, figure)
            if moving is not None:  # published beside the PNG and PDF: figures/<label>.html
                shutil.copyfile(moving, out / figure_target(app, figure["label"], ".html"))
            table = data_file(app, docname, figure)
            if table is not None:  # the numbers it plots: figures/<label>.csv
                publish_figure_csv(table, out / figure_target(app, figure["label"], ".csv"),
                                   figure_file_credit(app, docname, figure), _citation(app).authors)


def figure_file_credit(app: Sphinx, docname: str, figure: dict) -> PublishedFigure:
    """How the published files of a figure cite it: this build's citation, the figure's number and chapter."""
    label = figure["label"]
    return published_figure(_citation(app), label=label, number=figure_number(app, docname, label),
                             chapter=_locator(app, docname), title=caption_title(figure["caption"]) or label,
                             page=app.builder.get_target_uri(docname) + f"#{label}", alt=figure.get("alt") or "")


def figure_number(app: Sphinx, docname: str, label: str) -> str:
    numbers = app.env.toc_fignumbers.get(docname, {}).get("figure", {}).get(label)
    return "Fig. " + ".".join(map(str, numbers)) if numbers else "(unnumbered)"


def set_book_url(app: Sphinx, config) -> None:
    """The site's address is ``html_baseurl``; at publish time ``$KMT_BOOK_URL`` takes its place. It is
    kept as ``kmt_site_url``, and ``html_baseurl`` becomes this version's address (``<site>/vX.Y.Z/``)."""
    site = site_address(config.html_baseurl, os.environ)
    config.kmt_site_url = site or ""
    if site:
        import kmtlib

        config.html_baseurl = f"{site}{version_slot(kmtlib.__version__, os.environ)}/"


def _citation(app: Sphinx) -> BookCitation:
    """How this build is cited (read once per build; see :mod:`kmtbook.citation`)."""
    citation = getattr(app, "kmt_citation", None)
    if citation is None:
        import kmtlib

        site = getattr(app.config, "kmt_site_url", None)  # set by set_book_url
        citation = read_citation(find_repo_root(Path(app.srcdir)), kmtlib.__version__,
                                 app.config.html_baseurl if site is None else site, os.environ)
        setattr(app, "kmt_citation", citation)  # noqa: B010 - Sphinx declares no such attribute
    return citation


def _doc_named(app: Sphinx, stem: str) -> str | None:
    return next((doc for doc in sorted(app.env.found_docs) if posixpath.basename(doc) == stem), None)


def _locator(app: Sphinx, docname: str) -> str:
    """How a citation names a page: "Chapter 5, Training ..." or the title of an unnumbered page."""
    title = page_info(app.env).get(docname, {}).get("title") or docname
    number = app.env.toc_secnumbers.get(docname, {}).get("")
    return f"Chapter {'.'.join(map(str, number))}, {title}" if number else title


def _file_link(app: Sphinx, fromdoc: str, target: str, citation: BookCitation) -> nodes.reference:
    """A link to a file of the book (``figures/<label>.png``): its address when the book has one."""
    address = citation.address(target)
    if address:
        return link(address, address, internal=False)
    return link(target, relative_uri(app, fromdoc, target))


def _add_source(para: nodes.paragraph, citation: BookCitation) -> None:
    """``; source code <repository>`` (a link) when the build knows its repository; nothing otherwise."""
    if citation.repository:
        para += nodes.Text("; source code ")
        para += link(citation.repository, citation.repository, internal=False)


def _figure_citation(app: Sphinx, docname: str, figure: dict) -> nodes.paragraph:
    """The line under a figure: chapter-qualified number, label, files and the BibTeX key."""
    citation = _citation(app)
    label = figure["label"]
    number = figure_number(app, docname, label)
    chapter = _locator(app, docname).split(",")[0]
    png, pdf = figure_files(app, docname, figure)
    para = nodes.paragraph(classes=["kmt-cite-figure"])
    para += nodes.strong(text="Cite this figure: ")
    para += nodes.Text(f"{citation.authors} ({citation.year}), {citation.title}, {citation.build_text()}")
    _add_source(para, citation)
    para += nodes.Text(f", {chapter}, {number} ({label}), ")
    page = app.builder.get_target_uri(docname) + f"#{label}"
    address = citation.address(page)
    para += link(address, address, internal=False) if address else nodes.Text(f"{page} in the book's HTML")
    para += nodes.Text(". File: ")
    para += _file_link(app, docname, figure_target(app, label, ".png"), citation) if png is not None \
        else nodes.Text("(no file in this build)")
    if pdf is not None:
        para += nodes.Text(" (vector: ")
        para += _file_link(app, docname, figure_target(app, label, ".pdf"), citation)
        para += nodes.Text(")")
    if data_file(app, docname, figure) is not None:
        para += nodes.Text("; the numbers it plots: ")
        para += _file_link(app, docname, figure_target(app, label, ".csv"), citation)
    if interactive_file(app, docname, figure) is not None:
        para += nodes.Text("; interactive, on a page of its own: ")
        para += _file_link(app, docname, figure_target(app, label, ".html"), citation)
    para += nodes.Text(". BibTeX: ")
    para += nodes.literal(text=f"\\cite[{number}]{{{citation.key}}}")
    cite_doc = _doc_named(app, "cite")
    if cite_doc is not None:
        para += nodes.Text(" with the book's entry (")
        para += link("How to cite", app.builder.get_relative_uri(docname, cite_doc))
        para += nodes.Text(")")
    para += nodes.Text(".")
    return para


def _page_citation(app: Sphinx, docname: str) -> nodes.paragraph:
    """The line at the end of every page: how to cite the page, with version, commit and address."""
    citation = _citation(app)
    path = app.builder.get_target_uri(docname)
    para = nodes.paragraph(classes=["kmt-cite-page"])
    para += nodes.strong(text="Cite this page: ")
    para += nodes.Text(f"{citation.authors} ({citation.year}). {citation.title}, {citation.build_text()}")
    _add_source(para, citation)
    para += nodes.Text(f". {_locator(app, docname)}. ")
    address = citation.address(path)
    para += link(address, address, internal=False) if address else nodes.Text(f"{path} in the book's HTML")
    para += nodes.Text(f". BibTeX key {citation.key}")
    cite_doc = _doc_named(app, "cite")
    if cite_doc is not None and cite_doc != docname:
        para += nodes.Text(" (")
        para += link("How to cite", app.builder.get_relative_uri(docname, cite_doc))
        para += nodes.Text(")")
    para += nodes.Text(".")
    return para


def add_citations(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    page = page_info(app.env).get(docname)
    if page is None or app.builder.format != "html":
        return
    by_label = {f["label"]: f for f in page["figures"]}
    for fig in list(doctree.findall(nodes.figure)):
        label = next((i for i in fig["ids"] if i in by_label), None)
        if label is not None:
            fig.parent.insert(fig.parent.index(fig) + 1, _figure_citation(app, docname, by_label[label]))
    section = doctree.next_node(nodes.section)
    (section if section is not None else doctree).append(_page_citation(app, docname))


def book_citation(app: Sphinx, fromdoc: str, node: nodes.Element) -> list[nodes.Node]:
    """The BibTeX entry of this build, with what it was read from."""
    citation = _citation(app)
    para = nodes.paragraph()
    para += nodes.Text(f"This build of the book: {citation.build_text(full=True)}; ")
    if citation.url:
        para += nodes.Text("published at ")
        para += link(citation.url, citation.url, internal=False)
    else:
        para += nodes.Text("a copy built on its own, not published: it has no web address, so its citations "
                           "name pages and files by their path in the book")
    if citation.repository:
        para += nodes.Text("; built from the repository ")
        para += link(citation.repository, citation.repository, internal=False)
    else:
        para += nodes.Text("; it does not know the repository it was built from, so the commit is named "
                           "without a link to it")
    if not (citation.url and citation.repository):
        para += nodes.Text(" (a published copy adds both: the address where it is read and the repository "
                           "where the commit can be looked up)")
    para += nodes.Text(". The same in machine-readable form: ")
    para += link("CITATION.cff of this build", relative_uri(app, fromdoc, "CITATION.cff"))
    para += nodes.Text(".")
    bibtex = citation.bibtex()
    return [para, nodes.literal_block(bibtex, bibtex, language="bibtex")]


_caption_title = caption_title  # the first clause of a caption, as the title of a figure's entry


def figure_citation_example(app: Sphinx, fromdoc: str, node: nodes.Element) -> list[nodes.Node]:
    """How to cite one figure of this build: the line and a BibTeX entry of its own."""
    label = node["argument"]
    citation = _citation(app)
    for docname in pages_in_order(app):
        figure = next((f for f in page_info(app.env)[docname]["figures"] if f["label"] == label), None)
        if figure is None:
            continue
        number = figure_number(app, docname, label)
        page = app.builder.get_target_uri(docname) + f"#{label}"
        quote = nodes.block_quote()
        line = nodes.paragraph()
        line += nodes.Text(citation.reference(f"{_locator(app, docname)}, {number} ({label})", page)[:-1])
        line += nodes.Text("; file ")
        line += _file_link(app, fromdoc, figure_target(app, label, ".pdf"), citation)
        line += nodes.Text(".")
        quote += line
        bibtex = citation.figure_bibtex(label, number, _locator(app, docname).split(",")[0],
                                        _caption_title(figure["caption"]), figure_target(app, label, ".pdf"))
        return [quote, nodes.paragraph(text="or in BibTeX:"), nodes.literal_block(bibtex, bibtex, language="bibtex")]
    logger.warning(f"kmt: figure-citation names {label}, which is no figure of this build", type="kmt",
                   subtype="figure", location=node)
    return [nodes.paragraph(text=f"(The figure {label} is not in this build.)")]


def write_cff(app: Sphinx) -> None:
    """CITATION.cff at the root of the HTML: the repository's, with this build's version, commit and address."""
    import yaml

    citation = _citation(app)
    data = citation.cff(read_cff(find_repo_root(Path(app.srcdir))))
    header = (f"# CITATION.cff of this build of the book ({citation.build_text(full=True)}), written by "
              "kmtbook.sphinx_ext from the repository's CITATION.cff.\n")
    (Path(app.outdir) / "CITATION.cff").write_text(header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
