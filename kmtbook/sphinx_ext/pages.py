"""The page register of the book's Sphinx extension: what every page holds (title, figures, the run
it shows, whether it is a chapter), kept in the build environment; the placeholders of the tables
that need every page; and the small table and link helpers the other parts share."""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx
from sphinx.util import logging

from ..chapter import parse_describe
from ..paper_figures import reproduces
from ..repo_root import find_repo_root

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- placeholders


class kmt_placeholder(nodes.General, nodes.Element):
    """Stands for a table that can only be filled once every page has been read."""


def skip_node(self, node):  # pragma: no cover - placeholders are replaced before writing
    raise nodes.SkipNode


def placeholder_directive(kind: str, argument: bool = False) -> type[Directive]:
    class _Directive(Directive):
        has_content = False
        required_arguments = 1 if argument else 0

        def run(self):
            env = self.state.document.settings.env
            env.kmt_aggregate_docs = getattr(env, "kmt_aggregate_docs", set()) | {env.docname}
            node = kmt_placeholder(kind=kind, argument=self.arguments[0] if argument else "")
            node.source, node.line = self.state_machine.get_source_and_line(self.lineno)
            return [node]

    _Directive.__name__ = f"{kind.title().replace('-', '')}Directive"
    return _Directive


# --------------------------------------------------------------------------- reading pages


def page_info(env) -> dict[str, dict[str, Any]]:
    """The register: docname -> what :func:`read_page` recorded (kept in the pickled environment)."""
    if not hasattr(env, "kmt_pages"):
        env.kmt_pages = {}
    return env.kmt_pages


def read_page(app: Sphinx, doctree: nodes.document) -> dict[str, Any]:
    """Record what the page being read holds in the register, and return its entry."""
    env = app.env
    docname = env.docname
    title = env.titles.get(docname)
    has_parameters = any("tag_parameters" in node.get("classes", []) for node in doctree.findall(nodes.container))
    # Shipped artefacts the page names (the chapter contract asks a chapter to name the files under
    # data/ it did not compute itself), e.g. "data/weights".
    shipped = sorted(set(re.findall(r"(?<![\w/.])data/([A-Za-z][\w-]*)", doctree.astext())))
    page = {
        "title": title.astext() if title is not None else docname,
        "shipped": [f"data/{name}" for name in shipped],
        "figures": _labelled_figures(app, docname, doctree),
        "run": _shown_run(doctree),
        "chapter": has_parameters,
    }
    page_info(env)[docname] = page
    return page


def _labelled_figures(app: Sphinx, docname: str, doctree: nodes.document) -> list[dict[str, Any]]:
    """The page's figures labelled ``fig-...``: label, caption, the image file it displays and its text
    alternative (the image's ``alt``, which myst-nb sets from the cell's ``mystnb.image.alt``)."""
    figures = []
    for fig in doctree.findall(nodes.figure):
        label = next((i for i in fig["ids"] if i.startswith("fig-")), None)
        if label is None:
            continue
        caption = fig.next_node(nodes.caption)
        image = fig.next_node(nodes.image)
        alt = " ".join(str(image.get("alt") or "").split()) if image is not None else ""
        figures.append({"label": label, "caption": caption.astext() if caption is not None else "",
                        "image": _shown_image(app, fig), "alt": alt})
        if image is not None and not alt:
            logger.warning(f"kmt: figure {label} has no text alternative (write one in its cell's metadata, "
                           "mystnb: image: alt: ...; see kmtbook.figure_metadata)", type="kmt", subtype="figure",
                           location=fig)
        if reproduces(posixpath.basename(docname), label) is None:
            logger.warning(f"kmt: figure {label} has no entry in kmtbook.paper_figures.REPRODUCES (the paper figure "
                           "it reproduces, or BEYOND)", type="kmt", subtype="figure", location=fig)
    return figures


def _shown_image(app: Sphinx, fig: nodes.figure) -> str | None:
    """The file of the figure's image under the source folder (None for a remote or inline image)."""
    image = fig.next_node(nodes.image)
    if image is None:
        return None
    rel = image.get("candidates", {}).get("*") or image.get("uri", "")
    if rel and "://" not in rel and not rel.startswith("data:"):
        return os.path.normpath(os.path.join(app.srcdir, rel))
    return None


def _shown_run(doctree: nodes.document) -> dict[str, str] | None:
    """The run the page shows: the first line ``Chapter.describe`` printed, read back."""
    for block in doctree.findall(nodes.literal_block):
        run = parse_describe(block.astext())
        if run:
            return run
    return None


def forget_page(app: Sphinx, env, docname: str) -> None:
    page_info(env).pop(docname, None)
    getattr(env, "kmt_aggregate_docs", set()).discard(docname)


def merge_pages(app: Sphinx, env, docnames, other) -> None:
    pages = page_info(env)
    for docname in docnames:
        if docname in getattr(other, "kmt_pages", {}):
            pages[docname] = other.kmt_pages[docname]
    env.kmt_aggregate_docs = getattr(env, "kmt_aggregate_docs", set()) | (
        getattr(other, "kmt_aggregate_docs", set()) & set(docnames))


def outdated_pages(app: Sphinx, env, added, changed, removed) -> list[str]:
    """Pages whose shipped data changed are read (and executed) again; pages that tabulate other
    pages are rebuilt whenever any page changed."""
    stale = _data_stale(app, env)
    if added or changed or removed or stale:
        return sorted((set(stale) | getattr(env, "kmt_aggregate_docs", set())) - set(removed))
    return []


def cache_path(app: Sphinx, env) -> Path:
    """Where myst-nb keeps the executed notebooks (its own default when the config names none)."""
    config = env.mystnb_config
    return Path(config.execution_cache_path or Path(app.outdir).parent / ".jupyter_cache").resolve()


def _data_stale(app: Sphinx, env) -> list[str]:
    """Chapters whose ``data/<name>`` folders changed since the last build, with their cached
    executions dropped (see :mod:`kmtbook.execution_cache`)."""
    from ..execution_cache import refresh

    config = getattr(env, "mystnb_config", None)
    if config is None or getattr(config, "execution_mode", None) != "cache":
        return []
    cache = cache_path(app, env)
    sources = {}
    for docname in sorted(env.found_docs):
        path = Path(env.doc2path(docname))
        if path.suffix in (".md", ".ipynb") and path.is_file():
            sources[docname] = (path, path.read_text(encoding="utf-8"))
    stale = refresh(Path(cache).resolve(), Path(app.srcdir), sources)
    for docname in stale:
        logger.info(f"kmt: the shipped data of {docname} changed since the last build: it runs again")
    return stale


def output_folder(app: Sphinx, docname: str, run: dict) -> Path:
    """The folder a chapter's run wrote to, as its page printed it: relative paths are relative to
    the repository root (:meth:`kmtbook.chapter.Chapter.describe` prints them so)."""
    folder = Path(run["output_dir"])
    if folder.is_absolute():
        return folder
    return find_repo_root(Path(app.srcdir)) / folder


def same_run(run: dict, metrics: dict) -> bool:
    if run.get("run"):
        return metrics.get("run_id") == run["run"]
    # Pages executed before runs had an id: the same chapter settings are the best evidence left.
    if str(metrics.get("profile")) != run["profile"] or str(metrics.get("seed")) != run["seed"] \
            or str(metrics.get("device")) != run["device"]:
        return False
    for item in filter(None, (s.strip() for s in run["sizes"].split(","))):
        name, _, value = item.partition("=")
        if str(metrics.get(f"param_{name}")) != value:
            return False
    return True


def pages_in_order(app: Sphinx) -> list[str]:
    """Documents in reading order (the toctree's), those the register knows about."""
    pages = page_info(app.env)
    order: dict[str, int] = {}
    root = app.config.root_doc
    queue = [root]
    seen = set()
    while queue:
        doc = queue.pop(0)
        if doc in seen:
            continue
        seen.add(doc)
        order[doc] = len(order)
        queue[0:0] = app.env.toctree_includes.get(doc, [])
    return sorted(pages, key=lambda d: (order.get(d, len(order)), d))


# --------------------------------------------------------------------------- tables


def table_frame(headers: list[str], widths: list[int] | None = None,
                classes: tuple[str, ...] = ()) -> tuple[nodes.table, nodes.tbody]:
    """A book table (class ``kmt-table`` and ``classes``) with its columns of relative ``widths`` and
    its header row, and its empty body, to which the caller adds the rows."""
    table = nodes.table(classes=["kmt-table", *classes])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for w in widths or [1] * len(headers):
        group += nodes.colspec(colwidth=w)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for h in headers:
        row += nodes.entry("", nodes.paragraph(text=h))
    head += row
    body = nodes.tbody()
    group += body
    return table, body


def make_table(headers: list[str], rows: list[list[Any]], widths: list[int] | None = None,
               classes: tuple[str, ...] = ()) -> nodes.table:
    """A book table (:func:`table_frame`) of these rows: a cell is a value, a node, or a list of
    them (a paragraph node in the list starts a new line of the cell)."""
    table, body = table_frame(headers, widths, classes)
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            para = nodes.paragraph()
            for part in cell if isinstance(cell, list) else [cell]:
                if isinstance(part, nodes.paragraph):  # a new line inside the cell
                    if len(para):
                        entry += para
                    entry += part
                    para = nodes.paragraph()
                else:
                    para += part if isinstance(part, nodes.Node) else nodes.Text(str(part))
            if len(para) or not len(entry):
                entry += para
            row += entry
        body += row
    return table


def link(text: str, uri: str, internal: bool = True) -> nodes.reference:
    ref = nodes.reference("", "", internal=internal, refuri=uri)
    ref += nodes.Text(text)
    return ref


def relative_uri(app: Sphinx, fromdoc: str, target: str) -> str:
    here = posixpath.dirname(app.builder.get_target_uri(fromdoc))
    return posixpath.relpath(target, here or ".")


def chapter_title(app: Sphinx, docname: str) -> str:
    """The page title with its number in the book ("5. Training ..."), as the sidebar shows it."""
    title = page_info(app.env)[docname]["title"]
    number = app.env.toc_secnumbers.get(docname, {}).get("")
    return f"{'.'.join(map(str, number))}. {title}" if number else title
