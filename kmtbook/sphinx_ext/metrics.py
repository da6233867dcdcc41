"""The ``{metric}`` role: numbers of a chapter's ``metrics.json`` in the pages' text, filled in
once every chapter has run, from the run each chapter's page shows."""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

from .pages import output_folder, page_info, same_run

logger = logging.getLogger(__name__)


class kmt_metric(nodes.Inline, nodes.TextElement):
    """A number of a chapter's metrics.json, filled in when every chapter has run."""


_METRIC = re.compile(
    r"^(?:(?P<chapter>\d[\w-]*|chapters):)?(?P<name>[A-Za-z_]\w*)(?:\[(?P<index>-?\d+)\])?(?::(?P<spec>[^:]*))?$")


def metric_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{metric}`<chapter stem>:<metric>[<index>]:<format>```: e.g. ``01_kmeans_and_lloyd:lloyd_t20:.2f``
    or ``05_training:main_model_median[-1]:.2f``; on a chapter's own page the stem may be left out
    (``{metric}`exact_tasks```). ``chapters:min_<name>`` and ``chapters:max_<name>`` are the least and the
    greatest value of a number every chapter records (``{metric}`chapters:max_wall_seconds:.0f```). The format
    is Python's (``.2f``, ``.0%``, ``.1e``, the last written as a power of ten)."""
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
    power of ten (``8.9 × 10⁻¹⁶``), and a mantissa of 1 is dropped (``10⁻¹⁵``); a ``,`` groups digits
    by three with a no-break space (``10 000``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if spec.endswith("e") and value == 0:
        return "0"
    if spec.endswith("e"):
        mantissa, _, exponent = format(value, spec).partition("e")
        power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
        return power if float(mantissa) == 1 else f"{mantissa} \u00d7 {power}"
    # digits in groups of three are separated as the prose writes them ("10 000"), by a no-break space
    return format(value, spec).replace(",", "\u00a0") if "," in spec else format(value, spec)


def _chapter_docname(app: Sphinx, stem: str) -> str | None:
    return next((doc for doc in page_info(app.env) if posixpath.basename(doc) == stem), None)


def _run_metrics(app: Sphinx, docname: str) -> tuple[dict | None, str]:
    """The metrics.json of the run a chapter's page shows, or ``(None, why not)``."""
    run = page_info(app.env).get(docname, {}).get("run")
    if not run or not run.get("output_dir"):
        return None, "its page printed no run line (Chapter.describe)"
    path = output_folder(app, docname, run) / "metrics.json"
    try:
        metrics = json.loads(path.read_text())
    except OSError:
        return None, f"{path} is missing"
    except ValueError as err:
        return None, f"{path} is not valid JSON ({err})"
    if not same_run(run, metrics):
        return None, (f"{path} was written by another run than the one its page shows (run {run.get('run') or '?'}); "
                      "rebuild the chapter")
    return metrics, ""


_AGGREGATES = {"min": min, "max": max}


def _over_chapters(app: Sphinx, name: str, index: str) -> tuple[Any, str]:
    """``min_<metric>`` or ``max_<metric>`` over every chapter of the build, or ``(None, why not)``."""
    how, _, metric = name.partition("_")
    if how not in _AGGREGATES or not metric:
        return None, f"{name!r} is no min_<metric> or max_<metric>"
    chapters = [posixpath.basename(doc) for doc, page in page_info(app.env).items() if page.get("chapter")]
    if not chapters:
        return None, "no chapters in this build"
    values = []
    for stem in chapters:
        value, problem = metric_value(app, stem, metric, index)
        if value is None:
            return None, problem
        values.append(value)
    return _AGGREGATES[how](values), ""


def metric_value(app: Sphinx, stem: str, name: str, index: str) -> tuple[Any, str]:
    """The number a reference ``stem:name[index]`` stands for, or ``(None, why not)``."""
    if stem == "chapters":
        return _over_chapters(app, name, index)
    chapter = _chapter_docname(app, stem)
    if chapter is None:
        return None, f"no chapter {stem} in this build"
    metrics, problem = _run_metrics(app, chapter)
    if metrics is None:
        return None, problem
    if name not in metrics:
        return None, f"{chapter} recorded no metric {name!r}"
    try:
        value = metrics[name][int(index)] if index else metrics[name]
    except (TypeError, IndexError):
        return None, f"metric {name!r} of {chapter} has no element [{index}]"
    if value is None:
        return None, f"metric {name!r} of {chapter} is null (not measured by this run)"
    return value, ""


def fill_metrics(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in list(doctree.findall(kmt_metric)):
        stem, name, index, spec = node["chapter"], node["name"], node["index"], node["spec"]
        value, problem = metric_value(app, stem, name, index)
        if value is None:
            reference = f"{stem}:{name}" + (f"[{index}]" if index else "")
            logger.warning(f"kmt: the number {reference} is not available: {problem}", type="kmt",
                           subtype="metric", location=node)
            text = "(not available in this build)"
        else:
            text = format_metric(value, spec)
        node.replace_self(nodes.inline(text, text, classes=["kmt-metric"]))
