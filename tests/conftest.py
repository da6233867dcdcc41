import os
import sys
from pathlib import Path

import pytest

# tests/ holds helper modules (chapter_cases.py) imported by the test files.
sys.path.insert(0, str(Path(__file__).resolve().parent))

BUILT_BOOK_TESTS = ("test_browser.py", "test_printed_book.py")
"""The test files that read the book built from the quick-profile chapters (the ``quick_book`` fixture)."""


def pytest_collection_modifyitems(config, items):
    """Run the browser checks last: they build the book from the notebooks test_notebooks.py executed."""
    items.sort(key=lambda item: any(f"{name}::" in item.nodeid for name in BUILT_BOOK_TESTS))


@pytest.fixture(scope="session")
def quick_book() -> Path:
    """The book's HTML (and its PDF) built from the quick-profile chapters, once per session: the notebooks
    test_notebooks.py executed, or run here when it did not run them."""
    import _book_site as site
    from chapter_cases import CASES

    reason = site.browser_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the browser check must run in CI: {reason}")
        pytest.skip(reason)
    notebooks = {}
    for stem in site.chapter_stems():
        notebook = site.executed_notebook(stem)
        source = site.BOOK / f"{stem}.md"
        if not notebook.is_file() or notebook.stat().st_mtime < source.stat().st_mtime:
            # Not run by test_notebooks.py in this session (e.g. this file alone): run it now.
            parameters, _ = CASES[source.name]
            out = notebook.parent
            site.run_chapter(source, out, {"device": os.environ.get("KMT_DEVICE", "cpu"), "profile": "quick",
                                           "seed": 11, "output_dir": str(out / "results"), **parameters})
        notebooks[stem] = notebook
    return site.build_site(notebooks, site.QUICK / "site")
