"""Sphinx extension of the book: what readers, students and course staff need from every page.

Loaded by ``_config.yml`` (``sphinx: extra_extensions``). It works from what the build already
has, so a new chapter needs no registration anywhere:

* **Offline maths.** MathJax 3 is served from the book's own ``_static/mathjax/`` (copied from the
  ``django-static-mathjax`` wheel), so pages render formulas without a network.
* **Rerun box.** Every page with a cell tagged ``parameters`` gets a "Rerun this chapter" box
  right after its opening admonition: the chapter's parameters as a table (name, type and bounds,
  meaning, the value under each profile), read from the parameters cell (papermill's inspection)
  and the chapter's spec (:mod:`kmtbook.chapter_specs`), and the exact papermill command with the
  values that built the page (generated at build time, never written by hand).
* **Citations.** The directive ``book-citation`` prints the book's BibTeX (version, commit and
  address of this build, :mod:`kmtbook.citation`), ``figure-citation <label>`` the citation of
  one figure; a line "Cite this figure" goes under every labelled figure and "Cite this page" at
  the end of every page; ``CITATION.cff`` of the build is written beside the HTML. The address is
  ``html_baseurl``, replaced by ``$KMT_BOOK_URL`` when that is set (at publish time).
* **Executed notebook download.** Each chapter page offers the executed ``.ipynb`` (the one the
  build ran, ``parameters`` tag kept) through the theme's download button.
* **Figure register.** Every labelled figure is collected with its chapter-qualified number and
  caption; its PNG and PDF are published under stable names, ``figures/<label>.png`` and
  ``figures/<label>.pdf`` at the root of the HTML output. The directive ``figure-list`` renders
  the register as a table, with the paper figure each one reproduces (:mod:`kmtbook.paper_figures`).
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
import importlib.metadata
import importlib.util
import json
import os
import platform
import posixpath
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx
from sphinx.util import logging

from .chapter import find_repo_root, parse_describe
from .citation import BOOK_URL_VARIABLE, BookCitation, read_cff, read_citation
from .paper_figures import reproduces

logger = logging.getLogger(__name__)

MATHJAX_DEFAULT_PREFIX = "https://cdn.jsdelivr.net/npm/mathjax@3"
MATHJAX_STATIC = "mathjax"  # folder under _static
RERUN_CLASS = "kmt-rerun"


# --------------------------------------------------------------------------- placeholders


class kmt_placeholder(nodes.General, nodes.Element):
    """Stands for a table that can only be filled once every page has been read."""


def _skip(self, node):  # pragma: no cover - placeholders are replaced before writing
    raise nodes.SkipNode


def _placeholder_directive(kind: str, argument: bool = False) -> type[Directive]:
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
        if reproduces(posixpath.basename(docname), label) is None:
            logger.warning(f"kmt: figure {label} has no entry in kmtbook.paper_figures.REPRODUCES (the paper figure "
                           "it reproduces, or BEYOND)", type="kmt", subtype="figure", location=fig)
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


_FROM_PROFILE = re.compile(r"[;,]?\s*0(?:\.0)? means:? take it from the (?:chosen )?profile\.?\s*$")


def _meaning(help_text: str) -> str:
    """A parameter's comment without the clause every size repeats (the table says it once)."""
    return _FROM_PROFILE.sub("", help_text or "").strip()


def _bounds_text(parameter) -> str:
    """The bounds of a chapter parameter as a reader writes them (``≥ 1``, ``≤ example_n``)."""
    parts = []
    for sign, bound in (("\u2265", parameter.minimum), ("\u2264", parameter.maximum)):
        if isinstance(bound, (int, float, str)) and not isinstance(bound, bool):
            # a no-break space keeps a bound on one line: the cell breaks after the commas
            parts.append(f"{sign}\u00a0{bound:g}" if isinstance(bound, float) else f"{sign}\u00a0{bound}")
        elif bound is not None:
            parts.append("bounded by other parameters")
    if parameter.multiple_of:
        parts.append(f"a multiple of {parameter.multiple_of}")
    if parameter.choices:
        parts.append("one of " + ", ".join(map(str, parameter.choices)))
    return ", ".join(parts)


def _value_text(value: Any) -> str:
    """A value as ``-p NAME VALUE`` takes it (an empty string shown as ``""``)."""
    if isinstance(value, float):
        return f"{value:g}"
    if value == "":
        return '""'
    return str(value)


def parameter_rows(nb, stem: str) -> tuple[list[dict[str, Any]], bool | None]:
    """Each parameter of a chapter: name, type (with its bounds), meaning and its value under each
    profile, read from the notebook's ``parameters`` cell (papermill's inspection: names, types,
    comments) and the chapter's spec in :mod:`kmtbook.chapter_specs` (values per profile, bounds).
    Also whether the ``paper`` profile sets every size as ``book`` does (None: the chapter has no
    size)."""
    import papermill as pm

    from .chapter_specs import SPECS
    from .parameters import COMMON, PROFILES

    spec = SPECS.get(stem)
    declared = pm.inspect_notebook(nb)
    rows = []
    for name, info in declared.items():
        parameter = (spec.parameters.get(name) if spec else None) or COMMON.get(name)
        default = _literal(info["default"])
        if name == "profile":
            values = list(PROFILES)
        elif parameter is not None and parameter.profiles is not None:
            values = [parameter.profiles[p] for p in PROFILES]
        else:
            values = [default] * len(PROFILES)
        kind = info.get("inferred_type_name") or type(default).__name__
        bounds = _bounds_text(parameter) if parameter is not None and name != "profile" else ""
        rows.append({"name": name, "type": kind + (f", {bounds}" if bounds else ""),
                     "meaning": _meaning(info.get("help", "")), "values": values,
                     "size": parameter is not None and parameter.profiles is not None})
    sizes = [row for row in rows if row["size"]]
    paper_is_book = all(row["values"][1] == row["values"][2] for row in sizes) if sizes else None
    return rows, paper_is_book


def _parameter_table(rows: list[dict[str, Any]], built_with: str | None) -> nodes.table:
    """The parameters as a table; neighbouring profiles that share a value share one cell."""
    from .parameters import PROFILES

    headers = ["parameter", "type", "meaning", *(f"{p} (this page)" if p == built_with else p for p in PROFILES)]
    table = nodes.table(classes=["kmt-table", "kmt-parameters", "colwidths-given"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in (20, 12, 29, 13, 13, 13):
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for header in headers:
        row += nodes.entry("", nodes.paragraph(text=header))
    head += row
    body = nodes.tbody()
    group += body
    for item in rows:
        row = nodes.row()
        row += nodes.entry("", nodes.paragraph("", "", nodes.literal(text=item["name"])))
        row += nodes.entry("", nodes.paragraph(text=item["type"]))
        row += nodes.entry("", nodes.paragraph(text=item["meaning"]))
        values = item["values"]
        i = 0
        while i < len(values):
            j = i
            while j + 1 < len(values) and values[j + 1] == values[i] and item["name"] != "profile":
                j += 1
            para = nodes.paragraph("", "", nodes.literal(text=_value_text(values[i])))
            if j > i:
                para += nodes.Text(" (every profile)" if j - i + 1 == len(values)
                                   else f" ({' = '.join(PROFILES[i:j + 1])})")
            row += nodes.entry("", para, morecols=j - i) if j > i else nodes.entry("", para)
            i = j + 1
        body += row
    return table


def _rerun_box(app: Sphinx, docname: str, run: dict | None) -> nodes.Node:
    _path, nb = _source_notebook(app, docname)
    stem = Path(docname).name
    shown_source = posixpath.relpath(app.env.doc2path(docname), app.srcdir).replace(os.sep, "/")
    if app.config.kmt_chapter_suffix:
        shown_source = posixpath.splitext(shown_source)[0] + app.config.kmt_chapter_suffix
    command = rerun_command(shown_source, rerun_values(nb))
    rows, paper_is_book = parameter_rows(nb, stem)

    box = nodes.admonition(classes=[RERUN_CLASS, "note"])
    box += nodes.title(text="Rerun this chapter")
    built = ""
    if run:
        built = (f" This page was computed with profile {run['profile']} on device {run['device']} "
                 f"with seed {run['seed']}.")
    box += nodes.paragraph(text=(
        "The parameters of this chapter, from its parameters cell and its profiles. A size left at 0 in the "
        "parameters cell takes the value of the chosen profile (the last three columns); a cell that spans "
        "profiles holds the value they share." + built))
    box += _parameter_table(rows, run["profile"] if run else None)
    if paper_is_book:
        box += nodes.paragraph(text=(
            "In this chapter the paper profile sets every size to the same value as the book profile: "
            "the two profiles differ only in name."))
    box += nodes.paragraph(text=(
        "To run it again, from a clone of the repository with the project installed "
        "(pip install -e \".[book,test]\"), use papermill; the command repeats the values that built this page, "
        "change any of them with -p NAME VALUE."))
    box += nodes.literal_block(command, command, language="bash", classes=["kmt-command"])
    box += nodes.paragraph(text=(
        f"The executed notebook of this page ({stem}.ipynb, from the download button at the top) "
        "runs under papermill as it is (papermill --help-notebook lists the same parameters), for example:"))
    example = downloaded_notebook_command(stem)
    box += nodes.literal_block(example, example, language="bash", classes=["kmt-command"])
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


# --------------------------------------------------------------------------- citations


def _set_book_url(app: Sphinx, config) -> None:
    """The book's address is ``html_baseurl``; at publish time ``$KMT_BOOK_URL`` takes its place."""
    url = os.environ.get(BOOK_URL_VARIABLE, "").strip()
    if url:
        config.html_baseurl = url


def _citation(app: Sphinx) -> BookCitation:
    """How this build is cited (read once per build; see :mod:`kmtbook.citation`)."""
    citation = getattr(app, "kmt_citation", None)
    if citation is None:
        import kmtlib

        citation = read_citation(find_repo_root(Path(app.srcdir)), kmtlib.__version__, app.config.html_baseurl,
                                 os.environ)
        setattr(app, "kmt_citation", citation)  # noqa: B010 - Sphinx declares no such attribute
    return citation


def _doc_named(app: Sphinx, stem: str) -> str | None:
    return next((doc for doc in sorted(app.env.found_docs) if posixpath.basename(doc) == stem), None)


def _locator(app: Sphinx, docname: str) -> str:
    """How a citation names a page: "Chapter 5, Training ..." or the title of an unnumbered page."""
    title = _page_info(app.env).get(docname, {}).get("title") or docname
    number = app.env.toc_secnumbers.get(docname, {}).get("")
    return f"Chapter {'.'.join(map(str, number))}, {title}" if number else title


def _file_link(app: Sphinx, fromdoc: str, target: str, citation: BookCitation) -> nodes.reference:
    """A link to a file of the book (``figures/<label>.png``): its address when the book has one."""
    address = citation.address(target)
    if address:
        return _link(address, address, internal=False)
    return _link(target, _relative(app, fromdoc, target))


def _figure_citation(app: Sphinx, docname: str, figure: dict) -> nodes.paragraph:
    """The line under a figure: chapter-qualified number, label, files and the BibTeX key."""
    citation = _citation(app)
    label = figure["label"]
    number = _figure_number(app, docname, label)
    chapter = _locator(app, docname).split(",")[0]
    png, pdf = _figure_files(app, docname, figure)
    para = nodes.paragraph(classes=["kmt-cite-figure"])
    para += nodes.strong(text="Cite this figure: ")
    para += nodes.Text(f"{citation.authors} ({citation.year}), {citation.title}, {citation.build_text()}, "
                       f"{chapter}, {number} ({label}). File: ")
    para += _file_link(app, docname, _figure_target(app, label, ".png"), citation) if png is not None \
        else nodes.Text("(no file in this build)")
    if pdf is not None:
        para += nodes.Text(" (vector: ")
        para += _file_link(app, docname, _figure_target(app, label, ".pdf"), citation)
        para += nodes.Text(")")
    para += nodes.Text(". BibTeX: ")
    para += nodes.literal(text=f"\\cite[{number}]{{{citation.key}}}")
    cite_doc = _doc_named(app, "cite")
    if cite_doc is not None:
        para += nodes.Text(" with the book's entry (")
        para += _link("How to cite", app.builder.get_relative_uri(docname, cite_doc))
        para += nodes.Text(")")
    para += nodes.Text(".")
    return para


def _page_citation(app: Sphinx, docname: str) -> nodes.paragraph:
    """The line at the end of every page: how to cite the page, with version, commit and address."""
    citation = _citation(app)
    path = app.builder.get_target_uri(docname)
    para = nodes.paragraph(classes=["kmt-cite-page"])
    para += nodes.strong(text="Cite this page: ")
    para += nodes.Text(f"{citation.authors} ({citation.year}). {citation.title}, {citation.build_text()}. "
                       f"{_locator(app, docname)}. ")
    address = citation.address(path)
    para += _link(address, address, internal=False) if address else nodes.Text(f"{path} in the book's HTML")
    para += nodes.Text(f". BibTeX key {citation.key}")
    cite_doc = _doc_named(app, "cite")
    if cite_doc is not None and cite_doc != docname:
        para += nodes.Text(" (")
        para += _link("How to cite", app.builder.get_relative_uri(docname, cite_doc))
        para += nodes.Text(")")
    para += nodes.Text(".")
    return para


def _add_citations(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    page = _page_info(app.env).get(docname)
    if page is None or app.builder.format != "html":
        return
    by_label = {f["label"]: f for f in page["figures"]}
    for fig in list(doctree.findall(nodes.figure)):
        label = next((i for i in fig["ids"] if i in by_label), None)
        if label is not None:
            fig.parent.insert(fig.parent.index(fig) + 1, _figure_citation(app, docname, by_label[label]))
    section = doctree.next_node(nodes.section)
    (section if section is not None else doctree).append(_page_citation(app, docname))


def _book_citation(app: Sphinx, fromdoc: str, node: nodes.Element) -> list[nodes.Node]:
    """The BibTeX entry of this build, with what it was read from."""
    citation = _citation(app)
    para = nodes.paragraph()
    para += nodes.Text(f"This build of the book: {citation.build_text(full=True)}; ")
    if citation.url:
        para += nodes.Text("published at ")
        para += _link(citation.url, citation.url, internal=False)
    else:
        para += nodes.Text("no published address (html_baseurl is not set), so the citations name pages and "
                           "files by their path in the book's HTML")
    para += nodes.Text(". The same in machine-readable form: ")
    para += _link("CITATION.cff of this build", _relative(app, fromdoc, "CITATION.cff"))
    para += nodes.Text(".")
    bibtex = citation.bibtex()
    return [para, nodes.literal_block(bibtex, bibtex, language="bibtex")]


def _caption_title(caption: str) -> str:
    """The first clause of a caption, as the title of a figure's BibTeX entry."""
    caption = " ".join(caption.split())
    first = caption
    for match in re.finditer(r"[.:;] ", caption):
        word = caption[:match.start()].rsplit(" ", 1)[-1]
        if match.group(0) != ". " or not re.fullmatch(r"(?:Figs?|Eqs?|Thm|Tab|No|cf|vs|e\.g|i\.e|[A-Z])", word):
            first = caption[:match.start()]
            break
    first = first.rstrip(".")
    return first if len(first) <= 120 else first[:117].rsplit(" ", 1)[0] + " ..."


def _figure_citation_example(app: Sphinx, fromdoc: str, node: nodes.Element) -> list[nodes.Node]:
    """How to cite one figure of this build: the line and a BibTeX entry of its own."""
    label = node["argument"]
    citation = _citation(app)
    for docname in _chapters(app):
        figure = next((f for f in _page_info(app.env)[docname]["figures"] if f["label"] == label), None)
        if figure is None:
            continue
        number = _figure_number(app, docname, label)
        page = app.builder.get_target_uri(docname) + f"#{label}"
        quote = nodes.block_quote()
        line = nodes.paragraph()
        line += nodes.Text(citation.reference(f"{_locator(app, docname)}, {number} ({label})", page)[:-1])
        line += nodes.Text("; file ")
        line += _file_link(app, fromdoc, _figure_target(app, label, ".pdf"), citation)
        line += nodes.Text(".")
        quote += line
        bibtex = citation.figure_bibtex(label, number, _locator(app, docname).split(",")[0],
                                        _caption_title(figure["caption"]), _figure_target(app, label, ".pdf"))
        return [quote, nodes.paragraph(text="or in BibTeX:"), nodes.literal_block(bibtex, bibtex, language="bibtex")]
    logger.warning(f"kmt: figure-citation names {label}, which is no figure of this build", type="kmt",
                   subtype="figure", location=node)
    return [nodes.paragraph(text=f"(The figure {label} is not in this build.)")]


def _write_cff(app: Sphinx) -> None:
    """CITATION.cff at the root of the HTML: the repository's, with this build's version, commit and address."""
    import yaml

    citation = _citation(app)
    data = citation.cff(read_cff(find_repo_root(Path(app.srcdir))))
    header = (f"# CITATION.cff of this build of the book ({citation.build_text(full=True)}), written by "
              "kmtbook.sphinx_ext from the repository's CITATION.cff.\n")
    (Path(app.outdir) / "CITATION.cff").write_text(header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


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
            what = reproduces(posixpath.basename(docname), figure["label"]) or "(not stated)"
            rows.append([cell, what, figure["caption"], files or ["(no file)"]])
    if not rows:
        return nodes.paragraph(text="No labelled figures in this build.")
    return _table(["figure", "reproduces", "caption", "files"], rows, [22, 12, 54, 12], classes=("kmt-figures",))


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
    many = {"citation": _book_citation, "figure-citation": _figure_citation_example}
    for node in list(doctree.findall(kmt_placeholder)):
        kind = node["kind"]
        node.replace_self(many[kind](app, docname, node) if kind in many else makers[kind](app, docname))
    _fill_metrics(app, doctree, docname)
    _add_citations(app, doctree, docname)


CSS = """/* kmtbook.sphinx_ext: keep the generated boxes and tables readable */
.kmt-rerun div.kmt-command pre { white-space: pre-wrap; overflow-wrap: anywhere; }
table.kmt-runs, table.kmt-environment { font-size: 0.85em; }
table.kmt-runs td, table.kmt-figures td { vertical-align: top; }
table.kmt-figures td:nth-child(3) { min-width: 20em; }
/* the parameters of a chapter: every cell wraps, so that the table fits the content column */
.kmt-rerun table.kmt-parameters { width: 100%; table-layout: fixed; font-size: 0.85em; }
.kmt-rerun table.kmt-parameters th, .kmt-rerun table.kmt-parameters td {
  vertical-align: top; white-space: normal; overflow-wrap: anywhere; word-break: normal; }
.kmt-rerun table.kmt-parameters code, .kmt-rerun table.kmt-parameters code span {
  white-space: normal; overflow-wrap: anywhere; }
p.kmt-cite-figure, p.kmt-cite-page { font-size: 0.85em; overflow-wrap: anywhere; }
p.kmt-cite-figure code, p.kmt-cite-page code { white-space: normal; }
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
    _write_cff(app)


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
    app.add_directive("book-citation", _placeholder_directive("citation"))
    app.add_directive("figure-citation", _placeholder_directive("figure-citation", argument=True))
    app.connect("config-inited", _set_book_url)
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
