"""The executed notebook of each chapter page, offered through the theme's download button."""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx

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
    for pagename, page in page_info(app.env).items():
        executed = _executed_notebook(app, pagename) if page.get("chapter") else None
        if executed is not None:
            _write_download(app, pagename, executed)


def _write_download(app: Sphinx, pagename: str, executed: Path) -> None:
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    notebook = _with_cached_outputs(app, executed)
    if notebook is None:
        shutil.copy2(executed, target)
    else:
        import nbformat

        nbformat.write(notebook, target)


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
