"""The theme's version switcher: every page lists the versions of the site (pydata-sphinx-theme's
``switcher``, which sphinx-book-theme shows in the article's header).

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

from ..citation import version_slot

SWITCHER = "switcher.json"


def _slot() -> str:
    import kmtlib

    return version_slot(kmtlib.__version__, os.environ)


def configure_switcher(app: Sphinx, config) -> None:
    """Give the theme the version list's address and this build's version; show the switcher."""
    site = getattr(config, "kmt_site_url", "") or ""
    options = config.html_theme_options
    options["switcher"] = {"json_url": f"{site}{SWITCHER}" if site else SWITCHER, "version_match": _slot()}
    options["check_switcher"] = False
    options["show_version_warning_banner"] = False  # kmtbook.publish writes the banner of an older release
    header = options.get("article_header_end") or ["article-header-buttons.html"]
    if isinstance(header, str):
        header = [item.strip() for item in header.split(",") if item.strip()]
    if "version-switcher" not in header:
        options["article_header_end"] = ["version-switcher", *header]


def write_switcher(app: Sphinx) -> None:
    """``switcher.json`` beside the pages, listing this build alone (the site's assembly replaces it)."""
    site = getattr(app.config, "kmt_site_url", "") or ""
    slot = _slot()
    entry = {"name": slot, "version": slot, "url": f"{site}{slot}/" if site else "/"}
    (Path(app.outdir) / SWITCHER).write_text(json.dumps([entry], indent=2) + "\n")
