"""kmtbook.execution_cache: a chapter runs again when the shipped data it names changes."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from kmtbook.execution_cache import (
    data_fingerprint,
    data_references,
    drop_cached_executions,
    read_fingerprints,
    refresh,
    stale_chapters,
)


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "data" / "weights" / "run1").mkdir(parents=True)
    (tmp_path / "data" / "weights" / "run1" / "log.csv").write_text("step,loss\n0,1.0\n")
    (tmp_path / "data" / "timings").mkdir()
    (tmp_path / "data" / "timings" / "manifest.json").write_text('{"wall_s": 800}')
    return tmp_path


def test_references_are_the_shipped_folders_a_text_names():
    text = "reads `data/weights/onehot_seed1` and data/timings/*.json; not mydata/x, not ./data/y, not data/."
    assert data_references(text) == ["timings", "weights"]
    assert data_references("no data here") == []


def test_fingerprint_follows_the_bytes_and_names_of_the_files(tmp_path):
    root = _tree(tmp_path)
    first = data_fingerprint(root, ["weights"])
    assert data_fingerprint(root, ["weights"]) == first
    assert data_fingerprint(root, ["timings"]) != first
    log = root / "data" / "weights" / "run1" / "log.csv"
    log.write_text("step,loss\n0,1.5\n")
    changed = data_fingerprint(root, ["weights"])
    assert changed != first
    (root / "data" / "weights" / "run1" / "extra.txt").write_text("")
    assert data_fingerprint(root, ["weights"]) != changed  # a new (even empty) file counts
    assert data_fingerprint(root, ["missing"]) == data_fingerprint(root, [])


def test_only_chapters_whose_named_data_changed_are_stale(tmp_path):
    root = _tree(tmp_path)
    sources = {"ch05": "uses data/weights", "ch11": "uses data/timings", "ch01": "no shipped data"}
    stale, current = stale_chapters(sources, root, {})
    assert stale == ["ch05", "ch11"] and set(current) == {"ch05", "ch11"}
    assert stale_chapters(sources, root, current)[0] == []
    (root / "data" / "timings" / "manifest.json").write_text('{"wall_s": 790}')
    assert stale_chapters(sources, root, current)[0] == ["ch11"]


def _cached(cache_path: Path, source: Path) -> None:
    from jupyter_cache import get_cache

    code = f"print({source.stem!r})"  # (the cache is keyed on the code: one notebook per source)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code, execution_count=1, outputs=[])])
    nbformat.write(nb, source)
    get_cache(str(cache_path)).cache_notebook_file(str(source), check_validity=False)


def test_refresh_drops_the_cached_execution_of_a_stale_chapter_only(tmp_path):
    pytest.importorskip("jupyter_cache")
    root = _tree(tmp_path)
    cache = tmp_path / "_build" / ".jupyter_cache"
    a, b = root / "a.ipynb", root / "b.ipynb"
    sources = {"a": (a, "reads data/weights"), "b": (b, "reads data/timings")}
    # a first build (no cache yet) records the fingerprints and drops nothing
    assert refresh(cache, root, sources) == []
    assert set(read_fingerprints(cache)) == {"a", "b"}
    _cached(cache, a)
    _cached(cache, b)
    assert refresh(cache, root, sources) == []  # nothing changed
    (root / "data" / "weights" / "run1" / "log.csv").write_text("step,loss\n0,2.0\n")
    assert refresh(cache, root, sources) == ["a"]
    from jupyter_cache import get_cache

    left = [Path(r.uri).name for r in get_cache(str(cache)).list_cache_records()]
    assert left == ["b.ipynb"]
    assert refresh(cache, root, sources) == []  # recorded: not stale again
    assert drop_cached_executions(tmp_path / "nowhere", [a]) == []
