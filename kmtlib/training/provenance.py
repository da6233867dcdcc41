"""Provenance of a run: the fingerprint of the code that trained it (recorded in its manifest)
and of the files it started from."""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
"""The installed kmtlib package, whose files the fingerprint covers."""

SOURCE_SCHEME = "every file under kmtlib/, recursive"
"""How ``kmtlib_source_sha256`` is computed (:func:`source_sha256`), as manifests record it."""


def file_sha256(path: str) -> str | None:
    """The SHA-256 of a file (None when it is gone), for the manifest's record of a warm start."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def package_files(package: Path = PACKAGE) -> list[str]:
    """Every file under ``package``, as sorted paths relative to it (``/``-separated): sources,
    kernels, the pretrained layer and its README; not ``__pycache__`` folders nor ``*.pyc`` files."""
    package = Path(package)
    names = [
        path.relative_to(package).as_posix()
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.relative_to(package).parts and path.suffix != ".pyc"
    ]
    return sorted(names)


def source_sha256(package: Path = PACKAGE) -> str:
    """The SHA-256 over every file of :func:`package_files`: each relative path, then its contents."""
    digest = hashlib.sha256()
    for name in package_files(package):
        digest.update(name.encode() + b"\0" + (Path(package) / name).read_bytes() + b"\0")
    return digest.hexdigest()


def py_only_sha256(package: Path = PACKAGE) -> str:
    """The fingerprint manifests recorded before :func:`source_sha256`: the files ``kmtlib/*.py``
    only (no subfolder, so not the kernels), each name then its contents."""
    digest = hashlib.sha256()
    for path in sorted(Path(package).glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def git_commit(checkout: Path) -> str | None:
    """The commit a git checkout (or worktree) is on, read from its ``.git`` (no git command run);
    None when ``checkout`` is not one or the commit cannot be read."""
    try:
        git = checkout / ".git"
        if git.is_file():  # a worktree: ".git" names its folder, which names the shared one
            git = (checkout / git.read_text().strip().removeprefix("gitdir: ")).resolve()
        common = (git / (git / "commondir").read_text().strip()).resolve() if (git / "commondir").exists() else git
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        for folder in (git, common):
            if (folder / ref).exists():
                return (folder / ref).read_text().strip()
        if (common / "packed-refs").exists():
            for line in (common / "packed-refs").read_text().splitlines():
                if line.endswith(" " + ref):
                    return line.split()[0]
    except OSError:
        pass
    return None


def source_fingerprint(package: Path = PACKAGE) -> dict[str, str | None]:
    """Provenance of the code that trains: a SHA-256 over every file of the package ``package``
    (:func:`source_sha256`), how it was computed, and, when the package sits in a git checkout,
    the commit it is on."""
    package = Path(package)
    return {
        "kmtlib_source_sha256": source_sha256(package),
        "kmtlib_source_sha256_scheme": SOURCE_SCHEME,
        "git_commit": git_commit(package.parent),
    }
