"""Sphinx extension of the book: what readers, students and course staff need from every page.

Loaded by ``_config.yml`` (``sphinx: extra_extensions``). It works from what the build already
has, so a new chapter needs no registration anywhere:

* **Offline maths.** MathJax 3 is served from the book's own ``_static/mathjax/`` (copied from the
  ``django-static-mathjax`` wheel), so pages render formulas without a network; every formula carries
  its MathML for screen readers (MathJax's assistive MathML).
* **Every reader.** The theme's buttons are named by what they show and the bibliography is a list
  of list items (:mod:`.accessibility`), so that every page passes axe-core's WCAG 2.1 AA rules.
* **Rerun box.** Every page with a cell tagged ``parameters`` gets a "Rerun this chapter" box
  right after its opening admonition: the chapter's parameters as a table (name, type and bounds,
  meaning, the value under each profile), read from the parameters cell (papermill's inspection)
  and the chapter's spec (:mod:`kmtbook.chapter_specs`), and the exact papermill command with the
  values that built the page (generated at build time, never written by hand).
* **Citations.** The directive ``book-citation`` prints the book's BibTeX (version, commit and
  address of this build, :mod:`kmtbook.citation`), ``figure-citation <label>`` the citation of
  one figure; a line "Cite this figure" goes under every labelled figure and "Cite this page" at
  the end of every page; ``CITATION.cff`` of the build is written beside the HTML. The address is
  ``html_baseurl``, replaced by ``$KMT_BOOK_URL`` when that is set (at publish time); each version
  is cited at its own folder of the site (``<site>/vX.Y.Z/`` or ``<site>/dev/``).
* **This version's environment.** The lock the build was made with (``requirements/*.txt``) is published at
  the root of the HTML (so a release archive holds it too), and ``book-rebuild`` writes, for this version, the
  commands that fetch its source (at its tag, or its commit), rebuild the book and rerun one chapter
  (:mod:`.rebuild`, :mod:`kmtbook.rebuild`).
* **Versions.** The theme's version switcher reads the site's list of versions (:mod:`.versions`;
  the list, the root redirect and the banner of an older release are written by
  :mod:`kmtbook.publish` when the site is assembled); a page opened from disk reads this build's
  list from a script beside it, as the browser fetches nothing for a ``file://`` page.
* **Executed notebook download.** Each chapter page offers the executed ``.ipynb`` (the one the
  build ran, ``parameters`` tag kept) through the theme's download button; its first cell installs this
  version of the book when the notebook runs outside the repository (:mod:`kmtbook.install_cell`), and the
  launch menu opens it in Colab beside Binder when the build's repository is on GitHub (:mod:`.versions`).
* **Figure register.** Every labelled figure is collected with its chapter-qualified number and
  caption; its PNG and PDF are published under stable names, ``figures/<label>.png`` and
  ``figures/<label>.pdf`` at the root of the HTML output. The directive ``figure-list`` renders
  the register as a table, with the paper figure each one reproduces (:mod:`kmtbook.paper_figures`).
* **Data-aware execution cache.** A chapter whose shipped ``data/<name>`` folders changed since
  the last build runs again, although its code did not change (:mod:`kmtbook.execution_cache`).
* **Numbers from the build.** The role ``{metric}`05_training:main_model_t20:.2f``` stands for a
  number of a chapter's ``metrics.json``, the one written by the run its page shows; it is filled
  in once every chapter has run, and a missing metric (or files from another run) is a build
  warning, an error under ``-W``. The index's results table is written with it, so that no page
  states a number of "this build" typed by hand.
* **Provenance.** ``chapter-runs`` tabulates, for every chapter, the profile, device, seed and
  sizes of the run shown on its page (read back from the line ``Chapter.describe`` printed) and
  the execution time; ``build-environment`` lists the package versions of the build.
* **Numbers held to a reference.** ``reference-check`` sets every published number of the build
  beside the reference build's (:mod:`kmtbook.reference_metrics`), with its tolerance and status;
  a number that moved beyond its tolerance is a build warning (an error under ``-W``).

One module per part, which :func:`setup` connects to Sphinx's events: :mod:`.pages` (the page
register every part reads, the table placeholders, the data-aware cache), :mod:`.metrics`,
:mod:`.rerun` (the rerun box and its parameter table), :mod:`.figures` (the figure register and the
citations), :mod:`.downloads`, :mod:`.provenance`, :mod:`.rebuild` (the published lock and the commands of
this version), :mod:`.references`, :mod:`.assets` (MathJax, the style sheet, the
theme's page context) and :mod:`.accessibility` (the theme's buttons and the bibliography, named and
marked up for a screen reader). A part imports :mod:`.pages` (and :mod:`.provenance` and :mod:`.rebuild` also
:mod:`.figures`), never this package.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

from .accessibility import fix_page_body, use_book_templates
from .assets import copy_mathjax, mark_tables, tidy_page, use_assistive_mathml, use_local_mathjax, write_css
from .downloads import offer_notebook, write_downloads
from .figures import (
    add_citations,
    book_citation,
    copy_figures,
    figure_citation_example,
    set_book_url,
    write_cff,
)
from .gallery import figures_table, write_slide_sets
from .metrics import fill_metrics, format_metric, kmt_metric, metric_role
from .pages import (
    forget_page,
    kmt_placeholder,
    merge_pages,
    outdated_pages,
    placeholder_directive,
    read_page,
    skip_node,
)
from .printed import add_print_notes, offer_book_pdf, printed_book, write_print_css
from .provenance import environment_table, runs_table
from .rebuild import copy_lock, rebuild_directive
from .references import reference_table
from .rerun import add_rerun_box, downloaded_notebook_command, parameter_rows, rerun_command, rerun_values
from .versions import add_colab_button, add_from_disk_script, configure_launch, configure_switcher, write_switcher

# The public helpers of the parts (the tests and the READMEs' command checks use them), and the two
# node classes under their old names, which pickled doctrees of earlier builds refer to.
__all__ = [
    "downloaded_notebook_command",
    "format_metric",
    "kmt_metric",
    "kmt_placeholder",
    "parameter_rows",
    "rerun_command",
    "rerun_values",
    "setup",
]


def _doctree_read(app: Sphinx, doctree: nodes.document) -> None:
    """Record the page in the register; a chapter page gets its rerun box after its overview."""
    page = read_page(app, doctree)
    if page["chapter"]:
        add_rerun_box(app, doctree, app.env.docname, page["run"])


def _fill_placeholders(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    makers = {"figures": figures_table, "runs": runs_table, "environment": environment_table,
              "references": reference_table}
    many = {"citation": book_citation, "figure-citation": figure_citation_example, "rebuild": rebuild_directive}
    for node in list(doctree.findall(kmt_placeholder)):
        kind = node["kind"]
        node.replace_self(many[kind](app, docname, node) if kind in many else makers[kind](app, docname))
    fill_metrics(app, doctree, docname)
    add_citations(app, doctree, docname)
    mark_tables(app, doctree, docname)


def _build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    copy_mathjax(app)
    if printed_book(app):  # the single page printed as the PDF links the HTML book's files
        return
    copy_figures(app)
    write_slide_sets(app)
    write_downloads(app)
    write_cff(app)
    copy_lock(app)
    write_switcher(app)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("kmt_offline_mathjax", True, "html")
    app.add_config_value("kmt_figures_dir", "figures", "html")
    app.add_config_value("kmt_site_url", "", "html")  # the site of every version (set from html_baseurl)
    app.add_config_value("kmt_default_mode", "auto", "html")  # light, dark or auto (follows the reader's system)
    # How the rerun box names a chapter's source; e.g. ".md" when the build reads executed .ipynb copies.
    app.add_config_value("kmt_chapter_suffix", "", "env")
    app.add_node(kmt_placeholder, html=(skip_node, None), latex=(skip_node, None), text=(skip_node, None))
    app.add_node(kmt_metric, html=(skip_node, None), latex=(skip_node, None), text=(skip_node, None))
    app.add_role("metric", metric_role)
    app.add_directive("figure-list", placeholder_directive("figures"))
    app.add_directive("chapter-runs", placeholder_directive("runs"))
    app.add_directive("build-environment", placeholder_directive("environment"))
    app.add_directive("reference-check", placeholder_directive("references"))
    app.add_directive("book-citation", placeholder_directive("citation"))
    app.add_directive("book-rebuild", placeholder_directive("rebuild"))
    app.add_directive("figure-citation", placeholder_directive("figure-citation", argument=True))
    app.connect("config-inited", set_book_url)
    app.connect("config-inited", configure_switcher, priority=600)  # after set_book_url
    app.connect("config-inited", configure_launch)
    app.connect("config-inited", use_local_mathjax)
    app.connect("config-inited", use_assistive_mathml)
    app.connect("config-inited", use_book_templates)
    app.connect("builder-inited", write_css)
    app.connect("builder-inited", write_print_css)
    app.connect("builder-inited", add_from_disk_script)
    app.connect("doctree-read", _doctree_read, priority=600)
    app.connect("env-purge-doc", forget_page)
    app.connect("env-merge-info", merge_pages)
    app.connect("env-get-outdated", outdated_pages)
    app.connect("doctree-resolved", _fill_placeholders)
    app.connect("doctree-resolved", add_print_notes, priority=600)  # the single page of the PDF
    app.connect("html-page-context", offer_notebook, priority=450)
    app.connect("html-page-context", offer_book_pdf, priority=520)  # after the theme's download menu (501)
    app.connect("html-page-context", add_colab_button, priority=520)  # after the theme's launch menu (501)
    app.connect("html-page-context", tidy_page, priority=900)
    app.connect("html-page-context", fix_page_body)
    app.connect("build-finished", _build_finished)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
