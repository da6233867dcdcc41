"""The commands that rebuild this version of the book and rerun one of its chapters, as its pages state them.

A build knows what it was made from (:mod:`kmtbook.citation`: the package version, the commit and whether
tracked files differed from it, the repository's address when the publishing workflow gives it) and whether
it is a release (its site folder ``vX.Y.Z``, or a tag ``vX.Y.Z`` at its commit). From that,
:func:`rebuild_text` writes, for this version:

* how to get its source: ``git clone --branch vX.Y.Z <repository>`` for a release, ``git clone <repository>``
  then ``git checkout <commit>`` otherwise; a build that knows no repository says so and names the commit to
  check out in a clone of it, never an invented address; a build outside a git checkout says it records no
  commit;
* the README's book command (:data:`BOOK_COMMAND`), which installs the version's own lock
  (``requirements/book.txt``, beside ``torch``) through nox;
* one chapter rerun: a virtual environment installed from that lock (torch first, the CPU wheel of the
  build's torch version, then ``pip install --require-hashes -r requirements/book.txt``, then the project
  without its dependencies, as noxfile.py does) and the papermill command of that chapter's rerun box.

The published lock itself (``requirements/*.txt`` at the root of the HTML) is copied there by
:mod:`kmtbook.sphinx_ext.rebuild`, so the site and the release archive carry it.
"""

from __future__ import annotations

import posixpath
import subprocess
from dataclasses import dataclass
from pathlib import Path

BOOK_COMMAND = "python3 -m pip install nox && python3 -m nox -s \"book(device='cpu')\""
"""The README's first command (tests/test_rebuild.py holds the two to each other)."""

TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""Where the CPU wheel of torch comes from (the locks hold no torch: CPU machines install this wheel first)."""

LOCK = "requirements/book.txt"
"""The book's lock, in the repository and in the published HTML."""


@dataclass(frozen=True)
class Source:
    """Where a build's source is: its repository, its release tag, its commit."""

    repository: str | None  # the repository's address, when the build knows it
    tag: str | None  # "vX.Y.Z" when the build is that release
    commit: str | None  # the full hash, None outside a git checkout
    modified: bool = False  # tracked files differed from the commit


def release_tag(root: Path, version: str, slot: str | None) -> str | None:
    """``vX.Y.Z`` when this build is that release: its site folder says so (the publishing workflow sets it from
    the tag), or the tag ``v<version>`` points at the commit it was built from; None otherwise."""
    tag = f"v{version}"
    if slot == tag:
        return tag
    try:
        proc = subprocess.run(["git", "-C", str(root), "tag", "--points-at", "HEAD"], capture_output=True,
                              text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return tag if proc.returncode == 0 and tag in proc.stdout.split() else None


def folder_of(repository: str) -> str:
    """The folder ``git clone <repository>`` makes (the address's last part, without ``.git``)."""
    name = posixpath.basename(repository.rstrip("/")).removesuffix(".git")
    return name or "kmt-book"


def source_lines(source: Source) -> tuple[list[str], str]:
    """The shell lines that fetch this version's source, and a sentence saying what they fetch."""
    if source.commit is None:
        return [], ("This copy was built outside a git checkout: it records no commit, so no command can fetch "
                    "its exact source; the commands below run in the folder it was built from.")
    modified = (" It was built with uncommitted changes to tracked files, so that commit is the nearest source, "
                "not the exact one.") if source.modified else ""
    if source.repository is None:
        where = (f"This copy does not know the address of the repository it was built from, so none is given "
                 f"here: in a clone of the book's repository, check out its commit {source.commit}.")
        return [f"git checkout {source.commit}"], where + modified
    folder = folder_of(source.repository)
    if source.tag is not None:
        return ([f"git clone --branch {source.tag} {source.repository} {folder} && cd {folder}"],
                f"This is release {source.tag} (commit {source.commit}): clone the repository at its tag." + modified)
    return ([f"git clone {source.repository} {folder} && cd {folder}", f"git checkout {source.commit}"],
            f"This is a development version, commit {source.commit}: clone the repository and check out that "
            "commit." + modified)


def lock_install_lines(torch_version: str) -> list[str]:
    """A virtual environment from the lock: the CPU wheel of torch, the lock with its hashes, the project."""
    public = torch_version.split("+", 1)[0]
    return ["python3 -m venv .venv && . .venv/bin/activate",
            f"python3 -m pip install torch=={public} --index-url {TORCH_CPU_INDEX}",
            f"python3 -m pip install --require-hashes -r {LOCK} && python3 -m pip install --no-deps -e ."]


def rebuild_script(source: Source, torch_version: str, chapter_command: str | None) -> str:
    """The commands, as one shell block with a comment before each step."""
    fetch, _ = source_lines(source)
    lines: list[str] = []
    if fetch:
        lines += ["# this version's source", *fetch]
    lines += [f"# the whole book (nox installs torch, then this version's lock, {LOCK})", BOOK_COMMAND]
    if chapter_command is not None:
        lines += ["# or one chapter: an environment from the same lock (CPU), then the chapter's rerun command",
                  *lock_install_lines(torch_version), chapter_command]
    return "\n".join(lines)
