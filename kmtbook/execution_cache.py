"""Re-execute a chapter whose shipped data changed, not only one whose code changed.

The book is built with jupyter-cache (``execute_notebooks: cache``), which keys an executed
notebook on its code cells. A chapter that reads files under ``data/`` (trained weights, logs,
timings) would therefore keep showing the outputs of the old files after they are replaced. The
chapter contract asks every chapter to name the shipped folders it reads (``data/<name>``, as the
provenance table of the reproducibility page lists them); this module fingerprints those folders
per chapter and, when a fingerprint differs from the one recorded at the last build, drops the
chapter's cached execution so that the build runs it again. The fingerprints live next to the
cache (``kmt_data_fingerprints.json``). A cache made before this file existed counts as stale
once: its data cannot be vouched for.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

DATA_REFERENCE = re.compile(r"(?<![\w/.])data/([A-Za-z][\w-]*)")
"""A shipped folder named in a chapter's text, ``data/<name>`` (the name is the first group)."""

FINGERPRINTS_FILE = "kmt_data_fingerprints.json"


def data_references(text: str) -> list[str]:
    """The shipped folders (``data/<name>`` -> ``name``) a chapter's source names, sorted."""
    return sorted(set(DATA_REFERENCE.findall(text)))


def data_fingerprint(root: Path, names: Iterable[str]) -> str:
    """SHA-256 over the relative paths and bytes of every file under ``root/data/<name>`` for the
    given names (a missing folder counts as empty: creating it changes the fingerprint)."""
    digest = hashlib.sha256()
    for name in sorted(set(names)):
        folder = Path(root) / "data" / name
        files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
        if folder.is_file():
            files = [folder]
        for path in files:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def stale_chapters(
    sources: Mapping[str, str], root: Path, recorded: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """``(stale, current)``: the sources (name -> text) that name shipped data whose fingerprint
    differs from ``recorded``, and the current fingerprints of all sources that name data."""
    current = {}
    for doc, text in sources.items():
        names = data_references(text)
        if names:
            current[doc] = data_fingerprint(root, names)
    stale = sorted(doc for doc, fp in current.items() if recorded.get(doc) != fp)
    return stale, current


def read_fingerprints(cache_path: Path) -> dict[str, str]:
    path = Path(cache_path) / FINGERPRINTS_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_fingerprints(cache_path: Path, fingerprints: Mapping[str, str]) -> None:
    path = Path(cache_path) / FINGERPRINTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(fingerprints.items())), indent=1) + "\n")
    tmp.replace(path)


def drop_cached_executions(cache_path: Path, source_paths: Iterable[Path]) -> list[str]:
    """Remove the jupyter-cache records of these notebooks (by source path); returns the paths
    whose records were removed. No cache folder: nothing to do."""
    if not Path(cache_path).is_dir():
        return []
    from jupyter_cache import get_cache

    wanted = {str(Path(p).resolve()) for p in source_paths}
    cache = get_cache(str(cache_path))
    dropped = []
    for record in cache.list_cache_records():
        if str(Path(record.uri).resolve()) in wanted:
            cache.remove_cache(record.pk)
            dropped.append(record.uri)
    return sorted(set(dropped))


def refresh(cache_path: Path, root: Path, sources: Mapping[str, tuple[Path, str]]) -> list[str]:
    """Drop the cached executions of the chapters (docname -> (source path, text)) whose shipped
    data changed since the last build, record the current fingerprints, and return those chapters.

    Fingerprints are recorded before the chapters run again: a build that fails leaves them
    without a cache record, so the next build runs them anyway."""
    fresh = not Path(cache_path).is_dir()  # (a first build executes everything anyway)
    recorded = read_fingerprints(cache_path)
    stale, current = stale_chapters({doc: text for doc, (_, text) in sources.items()}, root, recorded)
    if not fresh:
        drop_cached_executions(cache_path, [sources[doc][0] for doc in stale])
    write_fingerprints(cache_path, {**recorded, **current})
    return [] if fresh else stale
