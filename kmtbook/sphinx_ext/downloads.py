"""The executed notebook of each chapter page, offered through the theme's download button and opened by the
Colab button (:mod:`.versions`): its first cell installs this build's version of the book when the notebook runs
outside the repository (:mod:`kmtbook.install_cell`), from the repository the build names (its citation's, else
``_config.yml``'s ``repository.url``), at the release's tag, or at the commit of a development build."""

from __future__ import annotations

import os
from pathlib import Path

from sphinx.application import Sphinx

from ..citation import version_slot
from ..install_cell import install_cell, torch_requirement, with_install_cell
from ..publish import DEV
from ..repo_root import find_repo_root
from .figures import _citation
from .pages import page_info


def _executed_notebook(app: Sphinx, pagename: str) -> Path | None:
    path = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    return path if path.is_file() else None


def offer_notebook(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if doctree is None or not page_info(app.env).get(pagename, {}).get("chapter"):
        return
    if _executed_notebook(app, pagename) is None:
        return
    # The file itself is written when the build finishes (write_downloads), after every other
    # handler: sphinx-book-theme's launch buttons, when configured, copy the notebook of
    # jupyter_execute/ to the same place, without the outputs of a cached run.
    context["ipynb_source"] = f"{pagename}.ipynb"


def write_downloads(app: Sphinx) -> None:
    cells: list = []
    for pagename, page in page_info(app.env).items():
        executed = _executed_notebook(app, pagename) if page.get("chapter") else None
        if executed is not None:
            cells = cells or [book_install_cell(app)]
            _write_download(app, pagename, executed, cells[0])


def book_install_cell(app: Sphinx):
    """The install cell of this build: its repository, its version (a release's tag, or the commit of a
    development build; the branch of ``_config.yml`` when the build has no commit) and the pinned CPU torch.
    None for a book that names no repository (no ``repository.url`` in ``_config.yml``, none set at build
    time): there is nothing to fetch, and no address is invented; its notebooks are offered as executed."""
    import kmtlib

    citation = _citation(app)
    repository = citation.repository or app.config.html_theme_options.get("repository_url", "").rstrip("/")
    if not repository:
        return None
    slot = version_slot(kmtlib.__version__, os.environ)
    branch = app.config.html_theme_options.get("repository_branch") or "main"
    ref = slot if slot != DEV else citation.commit or branch
    return install_cell(repository, ref, *torch_requirement(find_repo_root(Path(app.srcdir))))


def _write_download(app: Sphinx, pagename: str, executed: Path, cell) -> None:
    import nbformat

    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    notebook = _with_cached_outputs(app, executed)
    if notebook is None:
        notebook = nbformat.read(executed, as_version=4)
    nbformat.write(notebook if cell is None else with_install_cell(notebook, cell), target)


def _with_cached_outputs(app: Sphinx, path: Path):
    """The executed notebook from the execution cache, or None to use ``path`` as it is.

    When MyST-NB takes a chapter from its cache it writes the notebook *without* outputs to
    ``jupyter_execute/`` (only a fresh execution fills that file), so a download would offer an
    unexecuted notebook; the cache holds the outputs of the run the page shows."""
    config = getattr(app.env, "mystnb_config", None)
    if config is None or getattr(config, "execution_mode", None) != "cache" or not config.execution_cache_path:
        return None
    import nbformat
    from jupyter_cache import get_cache

    notebook = nbformat.read(path, as_version=4)
    try:
        _, merged = get_cache(config.execution_cache_path).merge_match_into_notebook(notebook)
    except KeyError:  # not in the cache: the file is what was executed
        return None
    return merged
