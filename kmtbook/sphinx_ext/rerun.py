"""The "Rerun this chapter" box: a chapter's parameters as a table (from its parameters cell and its
spec in :mod:`kmtbook.chapter_specs`) and the papermill command with the values that built the page."""

from __future__ import annotations

import ast
import os
import posixpath
import re
import shlex
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

from .pages import table_frame

logger = logging.getLogger(__name__)

RERUN_CLASS = "kmt-rerun"


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


RERUN_INSTALL = 'pip install -e ".[book]"'
"""What a reader installs to rerun a chapter (the chapters' imports, papermill and jupytext: the ``book``
extra); the README's section "Rerun one chapter" says the same."""


RERUN_HOW = (f"To run it again, from a clone of the repository with the project installed ({RERUN_INSTALL}), "
             "use papermill; the command repeats the values that built this page, change any of them with "
             "-p NAME VALUE.")
"""The rerun box's sentence before its command."""


def rerun_command(shown_source: str, values: dict[str, Any]) -> str:
    """The command of a chapter's rerun box: run from the repository root, it executes the chapter
    ``shown_source`` (``book/<stem>.md`` through jupytext, or an ``.ipynb``) with these values."""
    stem = posixpath.splitext(posixpath.basename(shown_source))[0]
    pairs = [f"-p {name} {_papermill_value(value)}" for name, value in values.items()]
    options = " \\\n  ".join(" ".join(pairs[i:i + 4]) for i in range(0, len(pairs), 4))
    cwd = posixpath.dirname(shown_source) or "."
    if shown_source.endswith(".ipynb"):
        return f"papermill {shown_source} {stem}-out.ipynb --cwd {cwd} \\\n  {options}"
    # jupytext writes the notebook beside its source (book/*.ipynb, ignored by git); papermill reads a named
    # .ipynb file (from standard input it warns that the file has no extension)
    notebook = posixpath.splitext(shown_source)[0] + ".ipynb"
    return (f"jupytext --to ipynb {shown_source} \\\n  && papermill {notebook} {stem}-out.ipynb --cwd {cwd} \\\n"
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

    from ..chapter_specs import SPECS
    from ..parameters import COMMON, PROFILES

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
    from ..parameters import PROFILES

    headers = ["parameter", "type", "meaning", *(f"{p} (this page)" if p == built_with else p for p in PROFILES)]
    table, body = table_frame(headers, [20, 12, 29, 13, 13, 13], ("kmt-parameters", "colwidths-given"))
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


def add_rerun_box(app: Sphinx, doctree: nodes.document, docname: str, run: dict | None) -> None:
    """Put the chapter's rerun box after its overview; a box that cannot be made is a warning that says
    why (it must not hide the chapter)."""
    try:
        box = _rerun_box(app, docname, run)
    except Exception as err:
        logger.warning(f"kmt: no rerun box for {docname}: {err}", type="kmt", subtype="rerun", location=docname)
    else:
        _insert_after_overview(doctree, box)


def chapter_rerun_command(app: Sphinx, docname: str) -> str:
    """The papermill command of a chapter's rerun box: its source as the repository names it, the values that
    built its page."""
    _path, nb = _source_notebook(app, docname)
    shown_source = posixpath.relpath(app.env.doc2path(docname), app.srcdir).replace(os.sep, "/")
    if app.config.kmt_chapter_suffix:
        shown_source = posixpath.splitext(shown_source)[0] + app.config.kmt_chapter_suffix
    return rerun_command(shown_source, rerun_values(nb))


def _rerun_box(app: Sphinx, docname: str, run: dict | None) -> nodes.Node:
    _path, nb = _source_notebook(app, docname)
    stem = Path(docname).name
    command = chapter_rerun_command(app, docname)
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
    box += nodes.paragraph(text=RERUN_HOW)
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
