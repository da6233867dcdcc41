"""Where the repository is: the one folder the book's tooling reads its data, weights and
citation from. A leaf: it imports nothing of ``kmtbook`` or ``kmtlib``, so every module of the
tooling may use it without a cycle."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The folder above the installed package (the fallback of :func:`find_repo_root`)."""


def find_repo_root(start: Path | None = None) -> Path:
    """The folder holding ``_config.yml`` (the book root) and the project (``pyproject.toml`` and
    ``kmtlib/``), searched upwards from ``start`` or the cwd; falls back to the folder above the
    installed package. (A copy of the book's pages with the library's source beside them, as the
    browser test builds, is not a root: it has no ``pyproject.toml``.)"""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        project = (folder / "kmtlib").is_dir() and (folder / "pyproject.toml").is_file()
        if (folder / "_config.yml").is_file() and project:
            return folder
    return REPO_ROOT
