"""Recompute the source fingerprint of the shipped runs' manifests under the scheme that sees every file.

Manifests written before kmtlib.training.provenance hashed every file of the package recorded in
``kmtlib_source_sha256`` a hash over ``kmtlib/*.py`` only: an edit of a kernel
(``kmtlib/kernels/...``) or of the pretrained layer left it unchanged. This script gives every
record that carries one (the run manifests under ``data/`` and the records of
``data/training_dynamics/index.json``) the fingerprint of the new scheme, computed from the kmtlib
tree **of the commit the record names in** ``git_commit`` (``git archive``), not of today's code:

* ``kmtlib_source_sha256``: :func:`kmtlib.training.provenance.source_sha256` of that tree;
* ``kmtlib_source_sha256_scheme``: how, when and by which script it was computed;
* ``kmtlib_source_sha256_py_only``: the value the record held (the ``kmtlib/*.py`` hash).

It also checks the old value against that tree's ``kmtlib/*.py``: where they differ, the files
that trained were not exactly the commit's (changes not committed, or the sources of another
commit), the recomputed value describes the commit's tree only, and the scheme field says so. A record whose
commit is not in this clone is left unchanged (and listed); so is one already recomputed. Weight
files are never opened. Every other field and the files' layout (key order, indentation) stay.

    python scripts/recompute_source_fingerprints.py [--data data] [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kmtlib.training.provenance import SOURCE_SCHEME, py_only_sha256, source_sha256  # noqa: E402

FIELD, SCHEME, PY_ONLY = "kmtlib_source_sha256", "kmtlib_source_sha256_scheme", "kmtlib_source_sha256_py_only"


def _commit_exists(commit: str) -> bool:
    found = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
    return found.returncode == 0


def _tree(commit: str, scratch: Path, cache: dict[str, Path]) -> Path:
    """The kmtlib folder of ``commit``, extracted once into ``scratch``."""
    if commit not in cache:
        target = scratch / commit
        target.mkdir()
        archive = subprocess.run(["git", "archive", commit, "kmtlib"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
        cache[commit] = target / "kmtlib"
    return cache[commit]


def _records(node, where: str = ""):
    """Every dict in a manifest that carries a source fingerprint, with where it sits."""
    if isinstance(node, dict):
        if FIELD in node:
            yield where or "/", node
        for key, value in node.items():
            yield from _records(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _records(value, f"{where}[{i}]")


def _recomputed(record: dict, tree: Path, today: str) -> dict:
    """``record`` with the new fingerprint, its scheme and the old value, in place of the old field."""
    old = record[FIELD]
    scheme = f"{SOURCE_SCHEME}; recomputed from git_commit's tree on {today} by {Path(__file__).relative_to(ROOT)}"
    if py_only_sha256(tree) != old:
        scheme += (
            f"; {PY_ONLY}, recorded at training, is not the hash of that tree's kmtlib/*.py: the files that "
            "trained were not exactly the commit's, and this value describes the commit's tree only"
        )
    out = {}
    for key, value in record.items():
        if key == FIELD:
            out[FIELD], out[SCHEME], out[PY_ONLY] = source_sha256(tree), scheme, old
        else:
            out[key] = value
    return out


def _replace(node, new: dict[int, dict]):
    """``node`` with the records of ``new`` (by id) replaced, the rest as it was."""
    if isinstance(node, dict):
        if id(node) in new:
            return new[id(node)]
        return {k: _replace(v, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace(v, new) for v in node]
    return node


def _recompute_file(
    path: Path, scratch: Path, cache: dict, today: str, skipped: list[str], mismatched: list[str], dry_run: bool
) -> int:
    """Recompute the records of one JSON file (written back unless ``dry_run``); return how many."""
    text = path.read_text()
    manifest = json.loads(text)
    sort_keys = json.dumps(manifest, indent=2, sort_keys=True) + "\n" == text
    new: dict[int, dict] = {}
    for where, record in _records(manifest):
        commit = record.get("git_commit")
        if PY_ONLY in record:
            continue  # (recomputed already)
        if not isinstance(commit, str) or not _commit_exists(commit):
            skipped.append(f"{path.relative_to(ROOT)} {where}: commit {commit} is not in this clone")
            continue
        new[id(record)] = _recomputed(record, _tree(commit, scratch, cache), today)
        if "is not the hash" in new[id(record)][SCHEME]:
            mismatched.append(f"{path.relative_to(ROOT)} {where}")
    if new and not dry_run:
        path.write_text(json.dumps(_replace(manifest, new), indent=2, sort_keys=sort_keys) + "\n")
    return len(new)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--data", type=Path, default=ROOT / "data", help="the folder of shipped runs (default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    args = p.parse_args(argv)
    today = datetime.date.today().isoformat()
    files = sorted(f for f in args.data.rglob("*.json") if FIELD in f.read_text())
    changed, skipped, mismatched, cache = [], [], [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for path in files:
            count = _recompute_file(path, Path(scratch), cache, today, skipped, mismatched, args.dry_run)
            if count:
                changed.append((path, count))
    for path, count in changed:
        print(f"{'would recompute' if args.dry_run else 'recomputed'} {count} record(s) in {path.relative_to(ROOT)}")
    print(f"{len(changed)} file(s), {sum(c for _, c in changed)} record(s); commits: {len(cache)}")
    for line in skipped:
        print(f"left unchanged: {line}")
    for line in mismatched:
        print(f"py-only value differs from its commit's tree: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
