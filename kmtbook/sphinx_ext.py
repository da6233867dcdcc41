"""Sphinx extension of the book: what readers, students and course staff need from every page.

Loaded by ``_config.yml`` (``sphinx: extra_extensions``). It works from what the build already
has, so a new chapter needs no registration anywhere:

* **Offline maths.** MathJax 3 is served from the book's own ``_static/mathjax/`` (copied from the
  ``django-static-mathjax`` wheel), so pages render formulas without a network.
* **Rerun box.** Every page with a cell tagged ``parameters`` gets a "Rerun this chapter" box
  right after its opening admonition: the exact papermill command with the values that built the
  page, and the parameter table exactly as ``papermill --help-notebook`` prints it (generated
  from the notebook at build time, never written by hand).
* **Executed notebook download.** Each chapter page offers the executed ``.ipynb`` (the one the
  build ran, ``parameters`` tag kept) through the theme's download button.
* **Figure register.** Every labelled figure is collected with its chapter-qualified number and
  caption; its PNG and PDF are published under stable names, ``figures/<label>.png`` and
  ``figures/<label>.pdf`` at the root of the HTML output. The directive ``figure-list`` renders
  the register as a table.
* **Data-aware execution cache.** A chapter whose shipped ``data/<name>`` folders changed since
  the last build runs again, although its code did not change (:mod:`kmtbook.execution_cache`).
* **Numbers from the build.** The role ``{metric}`05_training:main_model_t20:.2f``` stands for a
  number of a chapter's ``metrics.json``, the one written by the run its page shows; it is filled
  in once every chapter has run, and a missing metric (or files from another run) is a build
  warning, an error under ``-W``. The index's results table is written with it, so that no page
  states a number of "this build" typed by hand.
* **Provenance.** ``chapter-runs`` tabulates, for every chapter, the profile, device, seed and
  sizes of the run shown on its page (read back from the line ``Chapter.describe`` printed) and
  the execution time; ``build-environment`` lists the package versions of the build.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import importlib.util
import io
import json
import os
import platform
import posixpath
import re
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx
from sphinx.util import logging

from .chapter import find_repo_root, parse_describe

logger = logging.getLogger(__name__)

MATHJAX_DEFAULT_PREFIX = "https://cdn.jsdelivr.net/npm/mathjax@3"
MATHJAX_STATIC = "mathjax"  # folder under _static
RERUN_CLASS = "kmt-rerun"


# --------------------------------------------------------------------------- placeholders


class kmt_placeholder(nodes.General, nodes.Element):
    """Stands for a table that can only be filled once every page has been read."""


def _skip(self, node):  # pragma: no cover - placeholders are replaced before writing
    raise nodes.SkipNode


def _placeholder_directive(kind: str) -> type[Directive]:
    class _Directive(Directive):
        has_content = False

        def run(self):
            env = self.state.document.settings.env
            env.kmt_aggregate_docs = getattr(env, "kmt_aggregate_docs", set()) | {env.docname}
            return [kmt_placeholder(kind=kind)]

    _Directive.__name__ = f"{kind.title().replace('-', '')}Directive"
    return _Directive


# --------------------------------------------------------------------------- numbers from the build


class kmt_metric(nodes.Inline, nodes.TextElement):
    """A number of a chapter's metrics.json, filled in when every chapter has run."""


_METRIC = re.compile(
    r"^(?:(?P<chapter>\d[\w-]*):)?(?P<name>[A-Za-z_]\w*)(?:\[(?P<index>-?\d+)\])?(?::(?P<spec>[^:]*))?$")


def _metric_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{metric}`<chapter stem>:<metric>[<index>]:<format>```: e.g. ``01_kmeans_and_lloyd:lloyd_t20:.2f``
    or ``05_training:main_model_median[-1]:.2f``; on a chapter's own page the stem may be left out
    (``{metric}`exact_tasks```). The format is Python's (``.2f``, ``.0%``, ``.1e``, the last written
    as a power of ten)."""
    env = inliner.document.settings.env
    match = _METRIC.match(text.strip())
    if match is None:
        msg = inliner.reporter.error(f"kmt: bad metric reference {text!r}; write chapter:name[index]:format",
                                     line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    env.kmt_aggregate_docs = getattr(env, "kmt_aggregate_docs", set()) | {env.docname}
    fields = {k: v or "" for k, v in match.groupdict().items()}
    fields["chapter"] = fields["chapter"] or posixpath.basename(env.docname)
    node = kmt_metric(rawtext, f"[{text}]", **fields)
    node.source, node.line = inliner.document.current_source, lineno
    return [node], []


_SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def format_metric(value: Any, spec: str) -> str:
    """A metric as the page prints it: Python's format ``spec``; an ``e`` format is written as a
    power of ten (``8.9 × 10⁻¹⁶``), and a mantissa of 1 is dropped (``10⁻¹⁵``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if spec.endswith("e") and value == 0:
        return "0"
    if spec.endswith("e"):
        mantissa, _, exponent = format(value, spec).partition("e")
        power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
        return power if float(mantissa) == 1 else f"{mantissa} \u00d7 {power}"
    return format(value, spec)


def _chapter_docname(app: Sphinx, stem: str) -> str | None:
    return next((doc for doc in _page_info(app.env) if posixpath.basename(doc) == stem), None)


def _output_folder(app: Sphinx, docname: str, run: dict) -> Path:
    """The folder a chapter's run wrote to, as its page printed it: relative paths are relative to
    the repository root (:meth:`kmtbook.chapter.Chapter.describe` prints them so)."""
    folder = Path(run["output_dir"])
    if folder.is_absolute():
        return folder
    return find_repo_root(Path(app.srcdir)) / folder


def _run_metrics(app: Sphinx, docname: str) -> tuple[dict | None, str]:
    """The metrics.json of the run a chapter's page shows, or ``(None, why not)``."""
    run = _page_info(app.env).get(docname, {}).get("run")
    if not run or not run.get("output_dir"):
        return None, "its page printed no run line (Chapter.describe)"
    path = _output_folder(app, docname, run) / "metrics.json"
    try:
        metrics = json.loads(path.read_text())
    except OSError:
        return None, f"{path} is missing"
    except ValueError as err:
        return None, f"{path} is not valid JSON ({err})"
    if not _same_run(run, metrics):
        return None, (f"{path} was written by another run than the one its page shows (run {run.get('run') or '?'}); "
                      "rebuild the chapter")
    return metrics, ""


def _fill_metrics(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in list(doctree.findall(kmt_metric)):
        stem, name, index, spec = node["chapter"], node["name"], node["index"], node["spec"]
        reference = f"{stem}:{name}" + (f"[{index}]" if index else "")
        chapter = _chapter_docname(app, stem)
        text, problem = None, ""
        if chapter is None:
            problem = f"no chapter {stem} in this build"
        else:
            metrics, problem = _run_metrics(app, chapter)
            if metrics is not None:
                if name not in metrics:
                    problem = f"{chapter} recorded no metric {name!r}"
                else:
                    value = metrics[name]
                    try:
                        value = value[int(index)] if index else value
                    except (TypeError, IndexError):
                        problem = f"metric {name!r} of {chapter} has no element [{index}]"
                    else:
                        if value is None:
                            problem = f"metric {name!r} of {chapter} is null (not measured by this run)"
                        else:
                            text = format_metric(value, spec)
        if text is None:
            logger.warning(f"kmt: the number {reference} is not available: {problem}", type="kmt",
                           subtype="metric", location=node)
            text = "(not available in this build)"
        node.replace_self(nodes.inline(text, text, classes=["kmt-metric"]))


# --------------------------------------------------------------------------- offline MathJax


def _mathjax_source() -> Path | None:
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        return None
    es5 = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5"
    return es5 if (es5 / "tex-mml-chtml.js").is_file() else None


def _use_local_mathjax(app: Sphinx, config) -> None:
    if not config.kmt_offline_mathjax:
        return
    path = config.mathjax_path or ""
    if path and not path.startswith(MATHJAX_DEFAULT_PREFIX):
        return  # the book chose its own MathJax: leave it
    if _mathjax_source() is None:
        logger.warning("kmt: the Python package django-static-mathjax is missing, so MathJax would load "
                       "from the network; install the project's 'book' extra", type="kmt", subtype="mathjax")
        return
    config.mathjax_path = f"{MATHJAX_STATIC}/tex-mml-chtml.js"


def _copy_mathjax(app: Sphinx) -> None:
    source = _mathjax_source()
    if source is None or not app.config.mathjax_path.startswith(f"{MATHJAX_STATIC}/"):
        return
    target = Path(app.outdir) / "_static" / MATHJAX_STATIC
    if (target / "tex-mml-chtml.js").is_file() and (target / ".source").is_file() \
            and (target / ".source").read_text() == str(source):
        return
    shutil.copytree(source, target, dirs_exist_ok=True)
    (target / ".source").write_text(str(source))


# --------------------------------------------------------------------------- reading pages


def _page_info(env) -> dict[str, dict[str, Any]]:
    if not hasattr(env, "kmt_pages"):
        env.kmt_pages = {}
    return env.kmt_pages


def _doctree_read(app: Sphinx, doctree: nodes.document) -> None:
    env = app.env
    docname = env.docname
    figures = []
    for fig in doctree.findall(nodes.figure):
        label = next((i for i in fig["ids"] if i.startswith("fig-")), None)
        if label is None:
            continue
        caption = fig.next_node(nodes.caption)
        image = fig.next_node(nodes.image)
        shown = None
        if image is not None:
            rel = image.get("candidates", {}).get("*") or image.get("uri", "")
            if rel and "://" not in rel and not rel.startswith("data:"):
                shown = os.path.normpath(os.path.join(app.srcdir, rel))
        figures.append({"label": label, "caption": caption.astext() if caption is not None else "", "image": shown})
    run = None
    for block in doctree.findall(nodes.literal_block):
        run = parse_describe(block.astext())
        if run:
            break
    title = env.titles.get(docname)
    has_parameters = any("tag_parameters" in node.get("classes", []) for node in doctree.findall(nodes.container))
    # Shipped artefacts the page names (the chapter contract asks a chapter to name the files under
    # data/ it did not compute itself), e.g. "data/weights".
    shipped = sorted(set(re.findall(r"(?<![\w/.])data/([A-Za-z][\w-]*)", doctree.astext())))
    _page_info(env)[docname] = {
        "title": title.astext() if title is not None else docname,
        "shipped": [f"data/{name}" for name in shipped],
        "figures": figures,
        "run": run,
        "chapter": has_parameters,
    }
    if has_parameters:
        try:
            box = _rerun_box(app, docname, run)
        except Exception as err:  # a broken box must not hide the chapter; say why
            logger.warning(f"kmt: no rerun box for {docname}: {err}", type="kmt", subtype="rerun", location=docname)
        else:
            _insert_after_overview(doctree, box)


def _purge(app: Sphinx, env, docname: str) -> None:
    _page_info(env).pop(docname, None)
    getattr(env, "kmt_aggregate_docs", set()).discard(docname)


def _merge(app: Sphinx, env, docnames, other) -> None:
    pages = _page_info(env)
    for docname in docnames:
        if docname in getattr(other, "kmt_pages", {}):
            pages[docname] = other.kmt_pages[docname]
    env.kmt_aggregate_docs = getattr(env, "kmt_aggregate_docs", set()) | (
        getattr(other, "kmt_aggregate_docs", set()) & set(docnames))


def _outdated(app: Sphinx, env, added, changed, removed) -> list[str]:
    """Pages whose shipped data changed are read (and executed) again; pages that tabulate other
    pages are rebuilt whenever any page changed."""
    stale = _data_stale(app, env)
    if added or changed or removed or stale:
        return sorted((set(stale) | getattr(env, "kmt_aggregate_docs", set())) - set(removed))
    return []


def _cache_path(app: Sphinx, env) -> Path:
    """Where myst-nb keeps the executed notebooks (its own default when the config names none)."""
    config = env.mystnb_config
    return Path(config.execution_cache_path or Path(app.outdir).parent / ".jupyter_cache").resolve()


def _data_stale(app: Sphinx, env) -> list[str]:
    """Chapters whose ``data/<name>`` folders changed since the last build, with their cached
    executions dropped (see :mod:`kmtbook.execution_cache`)."""
    from .execution_cache import refresh

    config = getattr(env, "mystnb_config", None)
    if config is None or getattr(config, "execution_mode", None) != "cache":
        return []
    cache_path = _cache_path(app, env)
    sources = {}
    for docname in sorted(env.found_docs):
        path = Path(env.doc2path(docname))
        if path.suffix in (".md", ".ipynb") and path.is_file():
            sources[docname] = (path, path.read_text(encoding="utf-8"))
    stale = refresh(Path(cache_path).resolve(), Path(app.srcdir), sources)
    for docname in stale:
        logger.info(f"kmt: the shipped data of {docname} changed since the last build: it runs again")
    return stale


# --------------------------------------------------------------------------- rerun box


def _source_notebook(app: Sphinx, docname: str):
    import jupytext
    import nbformat

    path = Path(app.env.doc2path(docname))
    nb = nbformat.read(path, as_version=4) if path.suffix == ".ipynb" else jupytext.read(path)
    return path, nb


def _help_notebook_text(nb, filename: str) -> str:
    """What ``papermill --help-notebook <filename>`` prints for ``nb`` (papermill's own function)."""
    import click
    import nbformat
    from papermill.cli import papermill as papermill_cli
    from papermill.inspection import display_notebook_help

    with tempfile.TemporaryDirectory() as tmp:
        nbformat.write(nb, Path(tmp) / filename)
        out = io.StringIO()
        old = os.getcwd()
        try:
            os.chdir(tmp)
            ctx = click.Context(papermill_cli, info_name="papermill")
            with contextlib.redirect_stdout(out):
                display_notebook_help(ctx, filename, {})
        finally:
            os.chdir(old)
    text = out.getvalue()
    # The usage line depends on how click was invoked; the parameter list starts after it.
    start = text.find("Parameters inferred for notebook")
    return (text[start:] if start >= 0 else text).rstrip()


def _literal(value: Any) -> Any:
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def _papermill_value(value: Any) -> str:
    if isinstance(value, str):
        return shlex.quote(value)
    return shlex.quote(str(value))


def rerun_values(nb) -> dict[str, Any]:
    """The parameter values that built a chapter notebook: the defaults of its ``parameters`` cell,
    updated by the values papermill injected, if any."""
    import papermill as pm

    declared = pm.inspect_notebook(nb)
    values = {name: _literal(info["default"]) for name, info in declared.items()}
    injected = nb.metadata.get("papermill", {}).get("parameters", {}) or {}
    values.update({k: v for k, v in injected.items() if k in values})
    return values


def rerun_command(shown_source: str, values: dict[str, Any]) -> str:
    """The command of a chapter's rerun box: run from the repository root, it executes the chapter
    ``shown_source`` (``book/<stem>.md`` through jupytext, or an ``.ipynb``) with these values."""
    stem = posixpath.splitext(posixpath.basename(shown_source))[0]
    pairs = [f"-p {name} {_papermill_value(value)}" for name, value in values.items()]
    options = " \\\n  ".join(" ".join(pairs[i:i + 4]) for i in range(0, len(pairs), 4))
    cwd = posixpath.dirname(shown_source) or "."
    if shown_source.endswith(".ipynb"):
        return f"papermill {shown_source} {stem}-out.ipynb --cwd {cwd} \\\n  {options}"
    return (f"jupytext --to ipynb -o - {shown_source} \\\n  | papermill - {stem}-out.ipynb --cwd {cwd} \\\n"
            f"  {options}")


def downloaded_notebook_command(stem: str) -> str:
    """The box's example for the executed notebook a reader downloads from the page."""
    return f"papermill {stem}.ipynb {stem}-out.ipynb -p profile quick -p seed 1"


def _rerun_box(app: Sphinx, docname: str, run: dict | None) -> nodes.Node:
    _path, nb = _source_notebook(app, docname)
    stem = Path(docname).name
    shown_source = posixpath.relpath(app.env.doc2path(docname), app.srcdir).replace(os.sep, "/")
    if app.config.kmt_chapter_suffix:
        shown_source = posixpath.splitext(shown_source)[0] + app.config.kmt_chapter_suffix
    command = rerun_command(shown_source, rerun_values(nb))
    help_text = _help_notebook_text(nb, f"{stem}.ipynb")

    box = nodes.admonition(classes=[RERUN_CLASS, "dropdown", "note"])
    box += nodes.title(text="Rerun this chapter")
    built = ""
    if run:
        built = f" It was computed with profile {run['profile']} on device {run['device']} with seed {run['seed']}."
    box += nodes.paragraph(text=(
        "This page is a notebook run at build time." + built + " To run it again, from a clone of the "
        "repository with the project installed (pip install -e \".[book,test]\"), use papermill; "
        "the command below repeats the values that built this page, change any of them with -p NAME VALUE. "
        "A size left at 0 takes the value of the profile."))
    box += nodes.literal_block(command, command, language="bash", classes=["kmt-command"])
    box += nodes.paragraph(text=(
        f"The executed notebook of this page ({stem}.ipynb, from the download button at the top) "
        "runs under papermill as it is, for example:"))
    example = downloaded_notebook_command(stem)
    box += nodes.literal_block(example, example, language="bash", classes=["kmt-command"])
    box += nodes.paragraph(text=f"Its parameters, as papermill --help-notebook {stem}.ipynb prints them:")
    box += nodes.literal_block(help_text, help_text, language="text")
    return box


def _insert_after_overview(doctree: nodes.document, box: nodes.Node) -> None:
    admonitions = list(doctree.findall(nodes.admonition))
    anchor = next((a for a in admonitions if a.next_node(nodes.title) is not None
                   and a.next_node(nodes.title).astext().lower().startswith("in this chapter")), None)
    if anchor is None and admonitions:
        anchor = admonitions[0]
    if anchor is not None:
        anchor.parent.insert(anchor.parent.index(anchor) + 1, box)
        return
    section = doctree.next_node(nodes.section)
    parent = section if section is not None else doctree
    parent.insert(1 if section is not None else 0, box)


# --------------------------------------------------------------------------- executed notebook download


def _executed_notebook(app: Sphinx, pagename: str) -> Path | None:
    path = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    return path if path.is_file() else None


def _offer_notebook(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if doctree is None or not _page_info(app.env).get(pagename, {}).get("chapter"):
        return
    if _executed_notebook(app, pagename) is None:
        return
    # The file itself is written when the build finishes (_write_downloads), after every other
    # handler: sphinx-book-theme's launch buttons, when configured, copy the notebook of
    # jupyter_execute/ to the same place, without the outputs of a cached run.
    context["ipynb_source"] = f"{pagename}.ipynb"


def _write_downloads(app: Sphinx) -> None:
    for pagename, page in _page_info(app.env).items():
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


def _tidy_page(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Two theme glitches that put errors on the browser console of every page.

    Some inline scripts (sphinx-thebe's ``const THEBE_JS_URL = ...``) reach the page twice with
    different priorities, and a second ``const`` is a SyntaxError; and pydata-sphinx-theme reads
    ``default_mode`` from the page context, where an empty value is reported as an invalid mode."""
    scripts = context.get("script_files")
    if isinstance(scripts, list):
        seen, unique = set(), []
        for js in scripts:
            # the same inline script arrives once with filename None and once with ''
            key = (getattr(js, "filename", str(js)) or "", tuple(sorted(getattr(js, "attributes", {}).items())))
            if key not in seen:
                seen.add(key)
                unique.append(js)
        context["script_files"] = unique
    if not context.get("default_mode"):
        context["default_mode"] = app.config.kmt_default_mode


# --------------------------------------------------------------------------- figures


def _figure_files(app: Sphinx, docname: str, figure: dict) -> tuple[Path | None, Path | None]:
    """PNG and PDF of one figure: the files the chapter saved, if they come from the run shown on
    the page; otherwise the displayed image and no PDF."""
    page = _page_info(app.env)[docname]
    run = page.get("run")
    label = figure["label"]
    if run and run.get("output_dir"):
        folder = _output_folder(app, docname, run)
        metrics_file = folder / "metrics.json"
        try:
            metrics = json.loads(metrics_file.read_text())
        except (OSError, ValueError):
            metrics = None
        if metrics and _same_run(run, metrics):
            png, pdf = folder / f"{label}.png", folder / f"{label}.pdf"
            if png.is_file():
                return png, (pdf if pdf.is_file() else None)
    shown = Path(figure["image"]) if figure.get("image") else None
    return (shown if shown is not None and shown.is_file() else None), None


def _same_run(run: dict, metrics: dict) -> bool:
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


def _figure_target(app: Sphinx, label: str, suffix: str) -> str:
    return f"{app.config.kmt_figures_dir}/{label}{suffix}"


def _copy_figures(app: Sphinx) -> None:
    out = Path(app.outdir)
    for docname, page in sorted(_page_info(app.env).items()):
        for figure in page["figures"]:
            png, pdf = _figure_files(app, docname, figure)
            for source, suffix in ((png, ".png"), (pdf, ".pdf")):
                if source is None:
                    continue
                target = out / _figure_target(app, figure["label"], suffix)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)


def _chapters(app: Sphinx) -> list[str]:
    """Documents in reading order (the toctree's), those the register knows about."""
    pages = _page_info(app.env)
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


def _table(headers: list[str], rows: list[list[Any]], widths: list[int] | None = None,
           classes: tuple[str, ...] = ()) -> nodes.table:
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


def _link(text: str, uri: str, internal: bool = True) -> nodes.reference:
    ref = nodes.reference("", "", internal=internal, refuri=uri)
    ref += nodes.Text(text)
    return ref


def _relative(app: Sphinx, fromdoc: str, target: str) -> str:
    here = posixpath.dirname(app.builder.get_target_uri(fromdoc))
    return posixpath.relpath(target, here or ".")


def _chapter_title(app: Sphinx, docname: str) -> str:
    """The page title with its number in the book ("5. Training ..."), as the sidebar shows it."""
    title = _page_info(app.env)[docname]["title"]
    number = app.env.toc_secnumbers.get(docname, {}).get("")
    return f"{'.'.join(map(str, number))}. {title}" if number else title


def _figure_number(app: Sphinx, docname: str, label: str) -> str:
    numbers = app.env.toc_fignumbers.get(docname, {}).get("figure", {}).get(label)
    return "Fig. " + ".".join(map(str, numbers)) if numbers else "(unnumbered)"


def _figures_table(app: Sphinx, fromdoc: str) -> nodes.Node:
    rows = []
    pages = _page_info(app.env)
    for docname in _chapters(app):
        page = pages[docname]
        for figure in page["figures"]:
            png, pdf = _figure_files(app, docname, figure)
            page_uri = app.builder.get_relative_uri(fromdoc, docname)
            files: list[Any] = []
            if png is not None:
                files.append(_link("PNG", _relative(app, fromdoc, _figure_target(app, figure["label"], ".png"))))
            if pdf is not None:
                files += [" · " if files else "",
                          _link("PDF", _relative(app, fromdoc, _figure_target(app, figure["label"], ".pdf")))]
            elif png is not None:
                files.append(" (PDF not in this build)")
            number = nodes.paragraph()
            number += nodes.strong("", "", _link(_figure_number(app, docname, figure["label"]),
                                                f"{page_uri}#{figure['label']}"))
            label = nodes.paragraph()
            label += nodes.literal(text=figure["label"])
            chapter = nodes.paragraph()
            chapter += _link(_chapter_title(app, docname), page_uri)
            cell = [number, label, chapter]
            if page.get("run"):
                cell.append(nodes.paragraph(text=f"{page['run']['profile']} profile, seed {page['run']['seed']}"))
            rows.append([cell, figure["caption"], files or ["(no file)"]])
    if not rows:
        return nodes.paragraph(text="No labelled figures in this build.")
    return _table(["figure", "caption", "files"], rows, [25, 63, 12], classes=("kmt-figures",))


def _runs_table(app: Sphinx, fromdoc: str) -> nodes.Node:
    from .execute_chapters import TIMES_FILE

    rows = []
    pages = _page_info(app.env)
    nb_meta = getattr(app.env, "nb_metadata", {}) or {}
    schedule = {}  # how kmtbook.execute_chapters ran each chapter ahead of the build
    if getattr(getattr(app.env, "mystnb_config", None), "execution_mode", None) == "cache":
        try:
            schedule = json.loads((_cache_path(app, app.env) / TIMES_FILE).read_text())
        except (OSError, ValueError):
            schedule = {}
    for docname in _chapters(app):
        page = pages[docname]
        if not page.get("chapter"):
            continue
        run = page.get("run") or {}
        exec_data = (nb_meta.get(docname) or {}).get("exec_data") or {}
        runtime = exec_data.get("runtime")
        executed = "not executed by this build"
        if exec_data:
            executed = f"{exec_data.get('method', '?')}, {runtime:.1f} s" if isinstance(runtime, (int, float)) \
                else str(exec_data.get("method", "?"))
            if exec_data.get("succeeded") is False:
                executed += ", FAILED"
            how = schedule.get(docname) if isinstance(schedule, dict) else None
            if isinstance(how, dict) and isinstance(runtime, (int, float)) and how.get("seconds") == round(runtime, 2):
                at_once = how.get("chapters_at_once")
                threads = how.get("threads")
                threads = "1 thread" if threads == "1" else f"{threads} threads" if threads != "default" \
                    else "torch's default threads"
                executed += (f"; {threads}, up to {at_once} chapters at a time" if at_once != 1
                             else f"; alone, {threads}")
        n_figs = len(page["figures"])
        n_pdf = sum(1 for f in page["figures"] if _figure_files(app, docname, f)[1] is not None)
        settings = f"{run['profile']}, {run['device']}, seed {run['seed']}" if run else "not printed by the chapter"
        rows.append([
            [_link(_chapter_title(app, docname), app.builder.get_relative_uri(fromdoc, docname))],
            settings, run.get("sizes", "?").replace(", ", " "), executed, f"{n_figs} ({n_pdf} with PDF)",
            [nodes.literal(text=p) if i == 0 else nodes.Text(", ") for p in page.get("shipped", []) for i in (1, 0)][1:]
            or ["none"],
        ])
    if not rows:
        return nodes.paragraph(text="No chapters in this build.")
    return _table(["chapter", "profile, device, seed", "sizes", "execution", "figures", "shipped data"], rows,
                  [18, 14, 30, 14, 10, 14], classes=("kmt-runs",))


BUILD_PACKAGES = ("torch", "kmtlib", "numpy", "scipy", "pandas", "scikit-learn", "matplotlib", "seaborn",
                  "jupyter-book", "sphinx", "myst-nb", "jupyter-cache", "papermill", "jupytext", "ipykernel",
                  "django-static-mathjax")


def _environment_table(app: Sphinx, fromdoc: str) -> nodes.Node:
    rows = [["Python", platform.python_version()], ["platform", platform.platform()],
            ["CPU cores", str(os.cpu_count())],
            ["KMT_DEVICE", os.environ.get("KMT_DEVICE", "(unset: auto)")]]
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
        rows.append(["CUDA", f"{torch.version.cuda or 'CPU build'}; device: {gpu}"])
    except Exception as err:  # pragma: no cover - torch is a dependency
        rows.append(["CUDA", f"unknown ({err})"])
    for name in BUILD_PACKAGES:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        rows.append([name, version])
    return _table(["what", "version"], rows, [30, 70], classes=("kmt-environment",))


def _fill_placeholders(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    makers = {"figures": _figures_table, "runs": _runs_table, "environment": _environment_table}
    for node in list(doctree.findall(kmt_placeholder)):
        node.replace_self(makers[node["kind"]](app, docname))
    _fill_metrics(app, doctree, docname)


CSS = """/* kmtbook.sphinx_ext: keep the generated boxes and tables readable */
.kmt-rerun div.kmt-command pre { white-space: pre-wrap; overflow-wrap: anywhere; }
table.kmt-runs, table.kmt-environment { font-size: 0.85em; }
table.kmt-runs td, table.kmt-figures td { vertical-align: top; }
table.kmt-figures td:nth-child(2) { min-width: 20em; }
"""


def _write_css(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / "kmt-book.css").write_text(CSS)
    app.add_css_file("kmt-book.css")


def _build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    _copy_mathjax(app)
    _copy_figures(app)
    _write_downloads(app)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("kmt_offline_mathjax", True, "html")
    app.add_config_value("kmt_figures_dir", "figures", "html")
    app.add_config_value("kmt_default_mode", "auto", "html")  # light, dark or auto (follows the reader's system)
    # How the rerun box names a chapter's source; e.g. ".md" when the build reads executed .ipynb copies.
    app.add_config_value("kmt_chapter_suffix", "", "env")
    app.add_node(kmt_placeholder, html=(_skip, None), latex=(_skip, None), text=(_skip, None))
    app.add_node(kmt_metric, html=(_skip, None), latex=(_skip, None), text=(_skip, None))
    app.add_role("metric", _metric_role)
    app.add_directive("figure-list", _placeholder_directive("figures"))
    app.add_directive("chapter-runs", _placeholder_directive("runs"))
    app.add_directive("build-environment", _placeholder_directive("environment"))
    app.connect("config-inited", _use_local_mathjax)
    app.connect("builder-inited", _write_css)
    app.connect("doctree-read", _doctree_read, priority=600)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-get-outdated", _outdated)
    app.connect("doctree-resolved", _fill_placeholders)
    app.connect("html-page-context", _offer_notebook, priority=450)
    app.connect("html-page-context", _tidy_page, priority=900)
    app.connect("build-finished", _build_finished)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
