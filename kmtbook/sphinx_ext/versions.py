"""What each version of the book points at: the theme's version switcher (every page lists the
versions of the site: pydata-sphinx-theme's ``switcher``, which sphinx-book-theme shows in the
article's header) and the launch button (Binder opens the chapter from the repository at this
version's tag, or at ``main`` for ``dev``).

The list is the file ``switcher.json`` that :mod:`kmtbook.publish` writes at the root of the site
(and beside each version's pages) when it assembles the site. A published build reads it from the
site's address (``<site>/switcher.json``, the same host as the page); a build without an address
reads the copy beside its own pages, which the build writes listing itself. Either way the page asks
the book's own server, never another one, and the build reads nothing from the network (the theme's
check of the list at build time is off: the list describes the site, which the build cannot see).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sphinx.application import Sphinx

from ..citation import REPOSITORY_URL_VARIABLE, version_slot
from ..publish import DEV

SWITCHER = "switcher.json"
THEMES_WITH_SWITCHER = ("sphinx_book_theme", "pydata_sphinx_theme")


def _slot() -> str:
    import kmtlib

    return version_slot(kmtlib.__version__, os.environ)


def configure_switcher(app: Sphinx, config) -> None:
    """Give the theme the version list's address and this build's version; show the switcher.

    Only the book's theme (sphinx-book-theme, built on pydata-sphinx-theme) has a switcher; under any
    other theme (a test's small project) the options would be unknown to it."""
    if getattr(config, "html_theme", "") not in THEMES_WITH_SWITCHER:
        return
    site = getattr(config, "kmt_site_url", "") or ""
    options = config.html_theme_options
    options["switcher"] = {"json_url": f"{site}{SWITCHER}" if site else SWITCHER, "version_match": _slot()}
    options["check_switcher"] = False
    options["show_version_warning_banner"] = False  # kmtbook.publish writes the banner of an older release
    # In the primary sidebar under the book's title (sphinx-book-theme's sidebar, one item added).
    sidebars = getattr(config, "html_sidebars", None) or {}
    if not sidebars:
        config.html_sidebars = {"**": ["navbar-logo.html", "version-switcher", "search-button-field.html",
                                       "sbt-sidebar-nav.html"]}


def write_switcher(app: Sphinx) -> None:
    """``switcher.json`` beside the pages, listing this build alone (the site's assembly replaces it)."""
    site = getattr(app.config, "kmt_site_url", "") or ""
    slot = _slot()
    entry = {"name": slot, "version": slot, "url": f"{site}{slot}/" if site else "/"}
    (Path(app.outdir) / SWITCHER).write_text(json.dumps([entry], indent=2) + "\n")


def configure_launch(app: Sphinx, config) -> None:
    """The launch buttons open the repository the book was built from (``KMT_REPOSITORY_URL`` where set,
    else ``_config.yml``'s ``repository.url``), at the release's tag for a release and at the branch
    of ``_config.yml`` otherwise: a reader of vX.Y.Z runs the code of vX.Y.Z."""
    options = config.html_theme_options
    repository = os.environ.get(REPOSITORY_URL_VARIABLE, "").strip().rstrip("/")
    if repository:
        options["repository_url"] = repository
    slot = _slot()
    if slot != DEV:
        options["repository_branch"] = slot
