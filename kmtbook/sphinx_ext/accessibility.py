"""What a screen reader needs from every page where the theme or the bibliography gives something else:
the book holds WCAG 2.1 AA, and tests/test_browser.py runs axe-core's WCAG 2.0/2.1 A and AA rules on
every page, in light and dark mode.

* **The theme's buttons.** Three of pydata-sphinx-theme's components had a name that left out the
  text they show (WCAG 2.5.3, label in name; axe's ``label-content-name-mismatch``): the version
  switcher (named "Version switcher list", showing the version), the search field (named "Search",
  showing "Search Ctrl+K") and the colour-mode button (whose icons carry titles, "Light", "Dark",
  that its name "Color mode" does not hold). The book's own copies of those components, in
  ``templates/`` beside this module, come first on the template path; each says what it changes.
* **The bibliography.** docutils writes the list of references as ``role="list"`` holding entries
  of ``role="doc-biblioentry"``, a role that WAI-ARIA's DPUB module has deprecated, so that the
  list holds no list items (axe's ``aria-deprecated-role`` and ``aria-required-children``). Each
  entry becomes a ``listitem`` (what the DPUB module names in its place).
* **Folded code cells.** myst-nb names the ``<summary>`` of a folded cell "Toggle hidden content" while
  it shows "Show code cell source" (axe's ``label-content-name-mismatch`` again, chapter 11): the name is
  dropped, so the summary is named by the words it shows, which also say what it opens.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx

TEMPLATES = Path(__file__).resolve().parent / "templates"
"""The book's copies of the theme's components (pydata-sphinx-theme's file names)."""

THEME_COMPONENTS = ("version-switcher.html", "search-button-field.html", "theme-switcher.html")

_SUMMARY_NAME = re.compile(r'(<summary\b[^>]*?)\s+aria-label="Toggle hidden content"')
_BIBLIOENTRY = re.compile(r'(<div\b[^>]*\bclass="citation"[^>]*\brole=")doc-biblioentry(")')


def use_book_templates(app: Sphinx, config) -> None:
    """Put :data:`TEMPLATES` first on the template path (once), so that its components replace the theme's."""
    paths = list(getattr(config, "templates_path", None) or [])
    if str(TEMPLATES) not in paths:
        config.templates_path = [str(TEMPLATES), *paths]


def list_items(body: str) -> str:
    """The rendered ``body`` with each bibliography entry a list item and each folded cell's summary named
    by the words it shows (see the module's docstring)."""
    return _SUMMARY_NAME.sub(r"\1", _BIBLIOENTRY.sub(r"\1listitem\2", body))


def fix_page_body(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """``html-page-context``: the page's rendered body, as :func:`list_items` gives it."""
    body = context.get("body")
    if isinstance(body, str):
        context["body"] = list_items(body)
