"""What each version of the book points at: the theme's version switcher (every page lists the
versions of the site: pydata-sphinx-theme's ``switcher``, which sphinx-book-theme shows in the
article's header) and the launch buttons (Binder opens the chapter from the repository at this
version's tag, or at ``main`` for ``dev``; Colab opens this version's notebook from the repository's
``notebooks`` branch, where the publishing workflow puts it).

The list is the file ``switcher.json`` that :mod:`kmtbook.publish` writes at the root of the site
(and beside each version's pages) when it assembles the site. A published build reads it from the
site's address (``<site>/switcher.json``, the same host as the page); a build without an address
reads the copy beside its own pages, which the build writes listing itself. Either way the page asks
the book's own server, never another one, and the build reads nothing from the network (the theme's
check of the list at build time is off: the list describes the site, which the build cannot see).

A page opened from disk (``file://``, as the README's path to the built book is) cannot fetch the list:
the browser refuses every fetch of a ``file://`` page and logs the refusal as an error. So each page
also loads ``_static/kmt-versions.js``, which holds this build's own entry: on a page opened from disk
it hands the theme that list (a ``data:`` address, which the browser does fetch), with the entry's
address set to the folder the page lies in, so that the menu names this build's version and links
to its own pages; served over HTTP(S) it does nothing, and the theme reads the site's list as above.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sphinx.application import Sphinx

from ..citation import REPOSITORY_URL_VARIABLE, version_slot
from ..publish import DEV
from .figures import _citation
from .pages import page_info

SWITCHER = "switcher.json"
FROM_DISK_SCRIPT = "kmt-versions.js"  # under _static
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


def _this_build(app: Sphinx) -> list[dict]:
    """The version list of this build alone."""
    site = getattr(app.config, "kmt_site_url", "") or ""
    slot = _slot()
    return [{"name": slot, "version": slot, "url": f"{site}{slot}/" if site else "/"}]


def write_switcher(app: Sphinx) -> None:
    """``switcher.json`` beside the pages, listing this build alone (the site's assembly replaces it)."""
    (Path(app.outdir) / SWITCHER).write_text(json.dumps(_this_build(app), indent=2) + "\n")


# This build's version list for a page opened from disk; ``@ENTRIES@`` is replaced by the JSON list.
# It runs deferred, after the theme's inline settings and before the theme's own deferred script,
# which fetches the list when the page is ready.
FROM_DISK_JS = """// kmtbook.sphinx_ext.versions: the version list of a page opened from disk (file://), where the
// browser refuses to fetch switcher.json; over HTTP(S) the theme reads the site's list instead.
(function () {
  if (window.location.protocol !== "file:" || typeof DOCUMENTATION_OPTIONS === "undefined") return;
  var root = new URL(document.documentElement.getAttribute("data-content_root") || "./", window.location.href);
  var entries = @ENTRIES@.map(function (entry) {
    return Object.assign({}, entry, {url: root.href});
  });
  DOCUMENTATION_OPTIONS.theme_switcher_json_url =
    "data:application/json;charset=utf-8," + encodeURIComponent(JSON.stringify(entries));
})();
"""


def from_disk_script(entries: list[dict]) -> str:
    """The script that gives a page opened from disk the version list ``entries`` (this build's)."""
    return FROM_DISK_JS.replace("@ENTRIES@", json.dumps(entries))


def add_from_disk_script(app: Sphinx) -> None:
    """Write :data:`FROM_DISK_SCRIPT` (this build's list) and load it, deferred, on every page of a
    theme with the switcher."""
    if app.builder.format != "html" or getattr(app.config, "html_theme", "") not in THEMES_WITH_SWITCHER:
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / FROM_DISK_SCRIPT).write_text(from_disk_script(_this_build(app)))
    app.add_js_file(FROM_DISK_SCRIPT, defer="defer")


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


# --------------------------------------------------------------------------- the Colab button

NOTEBOOKS_BRANCH = "notebooks"
"""The repository's branch that holds each build's notebooks, ``<version>/<page>.ipynb`` (the publishing workflow
commits them there: Colab opens a notebook only from GitHub)."""
COLAB = "https://colab.research.google.com/github"
_GITHUB = re.compile(r"https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?")


def colab_address(repository: str | None, slot: str, pagename: str) -> str | None:
    """Where Colab opens the notebook of ``pagename`` of version ``slot``: the copy on the repository's
    :data:`NOTEBOOKS_BRANCH` (the one the page offers for download). None unless the repository is on GitHub."""
    match = _GITHUB.fullmatch(repository or "")
    if match is None:
        return None
    owner, name = match.groups()
    return f"{COLAB}/{owner}/{name}/blob/{NOTEBOOKS_BRANCH}/{slot}/{pagename}.ipynb"


def add_colab_button(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """An "Open in Colab" entry beside Binder's in the theme's launch menu (sphinx-book-theme's ``launch-buttons``
    group, made at priority 501) of every chapter page, when the build knows its repository and it is on GitHub
    (the citation's repository: ``KMT_REPOSITORY_URL`` or GitHub Actions' own variables); otherwise none."""
    buttons = context.get("header_buttons")
    if doctree is None or not isinstance(buttons, list) or not page_info(app.env).get(pagename, {}).get("chapter"):
        return
    url = colab_address(_citation(app).repository, _slot(), pagename)
    if url is None:
        return
    group = next((b for b in buttons if isinstance(b, dict) and b.get("label") == "launch-buttons"), None)
    if group is None:
        group = {"type": "group", "tooltip": "Launch interactive content", "icon": "fas fa-rocket", "buttons": [],
                 "label": "launch-buttons"}
        buttons.append(group)
    binder = next((i for i, b in enumerate(group["buttons"]) if b.get("text") == "Binder"), None)
    colab = {"type": "link", "text": "Colab", "tooltip": "Open this chapter's notebook in Colab (its first cell "
             "installs this version of the book)", "icon": "_static/images/logo_colab.png", "url": url}
    group["buttons"].insert(len(group["buttons"]) if binder is None else binder + 1, colab)
