import sys
from pathlib import Path

# tests/ holds helper modules (chapter_cases.py) imported by the test files.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(config, items):
    """Run the browser check last: it builds the book from the notebooks test_notebooks.py executed."""
    items.sort(key=lambda item: item.nodeid.startswith("tests/test_browser.py") or "test_browser.py::" in item.nodeid)
