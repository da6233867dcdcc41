import os
import sys
from pathlib import Path

import pytest

# tests/ holds helper modules (chapter_cases.py) imported by the test files.
sys.path.insert(0, str(Path(__file__).resolve().parent))

BUILT_BOOK_TESTS = ("test_browser.py", "test_printed_book.py")
"""The test files that read the book built from the quick-profile chapters (the ``quick_book`` fixture)."""

CHAPTER_TEST = "test_notebooks.py::test_chapter_runs_and_writes_metrics["
"""The tests that run each chapter in the quick profile (tests/test_notebooks.py), one per chapter."""


def pytest_configure(config):
    """One identifier for this test run, which pytest-xdist's workers inherit: a chapter's quick run and the
    book built from those runs are made once per run, by whichever worker asks first (tests/_book_site.py)."""
    import uuid

    from _book_site import RUN_VARIABLE

    if not hasattr(config, "workerinput"):  # the controlling process (or a run without workers)
        os.environ[RUN_VARIABLE] = uuid.uuid4().hex
        if getattr(config.option, "numprocesses", None):
            # one thread per worker and per chapter kernel (which inherit it), as the book command runs its
            # chapters: two threads each would stall whenever the other worker takes a core
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ.setdefault(name, "1")


def _order(item) -> int:
    if any(f"{name}::" in item.nodeid for name in BUILT_BOOK_TESTS):
        return 2  # last: they read the book built from every chapter's quick run
    if item.get_closest_marker("notebook") is not None:
        return 0  # first: the longest tests (chapters, launch environments), and the chapters the book needs
    return 1


def pytest_collection_modifyitems(config, items):
    """The chapters' runs and the other long tests first (the longest should start first), the tests of the
    built book last; the selected chapter runs are noted for ``quick_book``. On several workers
    (``--dist loadgroup``) the tests of the built book form one ``xdist_group``, sent first as the
    largest unit: its worker runs the chapters from the last (tests/_book_site.py quick_site) while the
    others run them from the first, builds the book and reads it while the others go on. Tests that
    write the same file or use the same service share a group too, run by one worker one after another."""
    items.sort(key=_order)
    config.kmt_fresh_chapters = {item.nodeid.split(CHAPTER_TEST, 1)[1].split(".md]")[0]
                                 for item in items if CHAPTER_TEST in item.nodeid}


@pytest.fixture(scope="session")
def quick_book(request) -> Path:
    """The book's HTML (and its PDF) built from the quick-profile chapters, once per test run (whichever
    worker asks first builds it; tests/_book_site.py): the chapters this run's tests/test_notebooks.py
    runs, and, for those it does not run (this file alone), a run of an earlier test run that is newer than
    the chapter, or a run made now."""
    import _book_site as site

    reason = site.browser_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the browser check must run in CI: {reason}")
        pytest.skip(reason)
    return site.quick_site(getattr(request.config, "kmt_fresh_chapters", set()))
