"""What a screen reader needs from the theme's buttons and the bibliography (kmtbook.sphinx_ext.accessibility);
tests/test_browser.py checks the built pages with axe-core."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pydata_sphinx_theme

from kmtbook.sphinx_ext import accessibility

THEME_COMPONENTS = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "components"

# What the theme's script finds each component by (pydata-sphinx-theme.js and its tooltips): a copy
# must keep it, or the button stops working.
HOOKS = {
    "version-switcher.html": ("version-switcher__button", "version-switcher__menu", 'data-bs-toggle="dropdown"',
                              "pst-js-only"),
    "search-button-field.html": ("search-button__button", "search-button-field", "pst-js-only"),
    "theme-switcher.html": ("theme-switch-button", 'data-mode="light"', 'data-mode="dark"', 'data-mode="auto"',
                            "pst-js-only"),
}


def test_the_book_replaces_only_components_the_theme_has_and_keeps_their_hooks():
    names = sorted(p.name for p in accessibility.TEMPLATES.glob("*.html"))
    assert names == sorted(accessibility.THEME_COMPONENTS) == sorted(HOOKS)
    for name in names:
        assert (THEME_COMPONENTS / name).is_file(), f"the theme has no component {name} any more"
        ours = (accessibility.TEMPLATES / name).read_text()
        for hook in HOOKS[name]:
            assert hook in ours, f"{name} lost {hook!r}"


def test_each_button_is_named_by_what_it_shows():
    """WCAG 2.5.3 (label in name): the version switcher's name is a hidden "Book version" and its own
    text; the search field's name is its text; the colour-mode icons' titles are hidden with them."""
    switcher = (accessibility.TEMPLATES / "version-switcher.html").read_text()
    label = re.search(r'<span id="\{\{ label_id \}\}" class="visually-hidden">([^<]+)</span>', switcher)
    assert label and label.group(1) == "Book version"
    assert 'aria-labelledby="{{ label_id }} {{ button_id }}"' in switcher and "aria-label=" not in switcher
    search = (accessibility.TEMPLATES / "search-button-field.html").read_text()
    assert "aria-label=" not in search and 'aria-keyshortcuts="Control+K"' in search
    modes = (accessibility.TEMPLATES / "theme-switcher.html").read_text()
    icons = re.findall(r"<i [^>]*>", modes)
    assert len(icons) == 3 and all('aria-hidden="true"' in i and "title=" not in i for i in icons)
    # the theme's own components fail: otherwise the copies would be needless
    assert 'aria-label="Version switcher list"' in (THEME_COMPONENTS / "version-switcher.html").read_text()


def test_the_templates_come_first_once():
    config = SimpleNamespace(templates_path=["_templates"])
    accessibility.use_book_templates(None, config)
    accessibility.use_book_templates(None, config)
    assert config.templates_path == [str(accessibility.TEMPLATES), "_templates"]
    config = SimpleNamespace(templates_path=None)
    accessibility.use_book_templates(None, config)
    assert config.templates_path == [str(accessibility.TEMPLATES)]


def test_the_bibliography_is_a_list_of_list_items():
    """docutils' citation list (sphinxcontrib-bibtex's bibliography) with its entries as list items."""
    from docutils.core import publish_parts

    source = "Text [Ref]_.\n\n.. [Ref] A. Author. A paper. 2020. https://example.invalid/x\n"
    body = publish_parts(source, writer_name="html5")["body"]
    assert 'role="doc-biblioentry"' in body, "docutils writes the deprecated role: nothing to fix?"
    context = {"body": body}
    accessibility.fix_page_body(None, "references", "page.html", context, None)
    assert 'role="doc-biblioentry"' not in context["body"]
    assert re.search(r'<div role="list" class="citation-list">\s*<div class="citation" id="[^"]+" role="listitem">',
                     context["body"])
    unchanged = {"body": '<p role="doc-biblioentry">quoted in prose</p>'}
    accessibility.fix_page_body(None, "x", "page.html", unchanged, None)
    assert unchanged["body"] == '<p role="doc-biblioentry">quoted in prose</p>'


def test_a_folded_cells_summary_is_named_by_the_words_it_shows():
    """myst-nb's folded cell (chapter 11's hide-input cells) names its summary "Toggle hidden content" while
    it shows "Show code cell source": axe's label-content-name-mismatch. The name is dropped, so the
    summary is named by what it shows; the words themselves and any other element keep their attributes."""
    from types import SimpleNamespace

    from myst_nb.sphinx_ import HideCodeCellNode, visit_HideCellInput

    writer = SimpleNamespace(body=[])
    visit_HideCellInput(writer, HideCodeCellNode(prompt_show="Show code cell source", prompt_hide="Hide code cell "
                                                 "source", classes=["above-input"]))
    body = "".join(writer.body) + '<button aria-label="Toggle hidden content">x</button>'
    assert '<summary aria-label="Toggle hidden content">' in body, "myst-nb names it so: nothing to fix?"
    context = {"body": body}
    accessibility.fix_page_body(None, "11_performance", "page.html", context, None)
    assert "<summary>" in context["body"] and 'summary aria-label' not in context["body"]
    assert "Show code cell source" in context["body"]
    assert '<button aria-label="Toggle hidden content">' in context["body"]
