"""This version's environment and how to rebuild it: the lock the build was made with, published beside the
pages (``requirements/*.txt`` at the root of the HTML, so that the site and the release archive both carry it),
and the ``book-rebuild`` directive: for this version, the commands that fetch its source (at its tag, or at its
commit), rebuild the whole book and rerun one chapter (:mod:`kmtbook.rebuild`)."""

from __future__ import annotations

import importlib.metadata
import shutil
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

from ..publish import LOCK_FILES, LOCK_FOLDER
from ..rebuild import LOCK, Source, rebuild_script, release_tag, source_lines
from ..repo_root import find_repo_root
from .figures import _citation
from .pages import chapter_title, link, page_info, pages_in_order, relative_uri
from .rerun import chapter_rerun_command

logger = logging.getLogger(__name__)

REBUILD_CLASS = "kmt-rebuild"


def copy_lock(app: Sphinx) -> None:
    """``requirements/*.txt`` of the repository into the HTML output's ``requirements/``; a lock file the book
    publishes that the repository lacks is a warning (an error under ``-W``)."""
    source = find_repo_root(Path(app.srcdir)) / LOCK_FOLDER
    target = Path(app.outdir) / LOCK_FOLDER
    missing = [name for name in LOCK_FILES if not (source / name).is_file()]
    if missing:
        logger.warning(f"kmt: {LOCK_FOLDER}/{', '.join(missing)} missing: this build cannot publish the lock it was "
                       "built with (run python scripts/lock_requirements.py)", type="kmt", subtype="lock")
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.txt")):
        shutil.copyfile(path, target / path.name)


def build_source(app: Sphinx) -> Source:
    """Where this build's source is, from its citation (:mod:`kmtbook.citation`) and its release tag."""
    import kmtlib

    citation = _citation(app)
    tag = release_tag(find_repo_root(Path(app.srcdir)), kmtlib.__version__, citation.slot) if citation.commit \
        else None
    return Source(citation.repository, tag, citation.commit, citation.modified)


def _first_chapter(app: Sphinx) -> str | None:
    pages = page_info(app.env)
    return next((doc for doc in pages_in_order(app) if pages[doc].get("chapter")), None)


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - torch is a dependency
        return "2.13.0"


def rebuild_directive(app: Sphinx, fromdoc: str, node: nodes.Element) -> list[nodes.Node]:
    """``book-rebuild``: this version's source, the book command and one chapter's rerun, as commands, with the
    published lock linked."""
    source = build_source(app)
    _, where = source_lines(source)
    chapter = _first_chapter(app)
    command = chapter_rerun_command(app, chapter) if chapter is not None else None
    intro = nodes.paragraph()
    intro += nodes.Text(where + " The book command installs this version's lock (every package at one version, "
                        "with its hashes, for CPU, Linux x86_64 and Python 3.11; torch, which it leaves out, is "
                        "installed first) and builds the whole book")
    if chapter is not None and command is not None:
        intro += nodes.Text("; the last lines rerun one chapter, ")
        intro += link(chapter_title(app, chapter), app.builder.get_relative_uri(fromdoc, chapter))
        intro += nodes.Text(", in an environment made from the same lock, with the values that built its page (its "
                            "box Rerun this chapter has the same command)")
    else:
        intro += nodes.Text("; this build has no chapter whose rerun could be shown")
    intro += nodes.Text(".")
    script = rebuild_script(source, _torch_version(), command)
    block = nodes.literal_block(script, script, language="bash", classes=["kmt-command"])
    files = nodes.paragraph()
    files += nodes.Text("The lock this version was built with is published with it (and in its release archive): ")
    names = list(LOCK_FILES)
    for i, name in enumerate(names):
        if i:
            files += nodes.Text(", " if i < len(names) - 1 else " and ")
        files += link(f"{LOCK_FOLDER}/{name}", relative_uri(app, fromdoc, f"{LOCK_FOLDER}/{name}"))
    files += nodes.Text(f" ({LOCK} the book's, tests.txt the tests', lint.txt the linters', launch.txt what the "
                        "launch button installs, constraints.txt all their versions without hashes).")
    box = nodes.container(classes=[REBUILD_CLASS])
    box += [intro, block, files]
    return [box]
