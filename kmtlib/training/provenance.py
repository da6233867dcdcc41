"""Provenance of a run: the fingerprint of the code that trained it (recorded in its manifest)
and of the files it started from."""

from __future__ import annotations

import hashlib
from pathlib import Path


def _sha256(path: str) -> str | None:
    """The SHA-256 of a file (None when it is gone), for the manifest's record of a warm start."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def source_fingerprint() -> dict[str, str | None]:
    """Provenance of the code that trains: a SHA-256 over kmtlib's source files and, when the
    package sits in a git checkout, the commit it is on (read from .git, no git command run)."""
    import hashlib

    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    commit = None
    try:
        git = package.parent / ".git"
        head = (git / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = head[5:]
            ref_file = git / ref
            if ref_file.exists():
                commit = ref_file.read_text().strip()
            elif (git / "packed-refs").exists():
                for line in (git / "packed-refs").read_text().splitlines():
                    if line.endswith(" " + ref):
                        commit = line.split()[0]
        else:
            commit = head
    except OSError:
        pass
    return {"kmtlib_source_sha256": digest.hexdigest(), "git_commit": commit}
