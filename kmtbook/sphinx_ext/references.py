"""The ``reference-check`` table: every published number of this build beside the reference build's
(:mod:`kmtbook.reference_metrics`), with its tolerance and whether it stayed within it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

from ..reference_metrics import compare_value, parse_key, read_references, reference_path
from .metrics import format_metric, metric_value
from .pages import page_info

logger = logging.getLogger(__name__)


def _repository(app: Sphinx) -> Path:
    """The repository whose references this build is held against: the folder above the book's
    source that holds ``kmtlib/`` and ``pyproject.toml``, else the one that holds this package."""
    here = Path(app.srcdir).resolve()
    for folder in (here, *here.parents):
        if (folder / "kmtlib").is_dir() and (folder / "pyproject.toml").is_file():
            return folder
    return Path(__file__).resolve().parents[2]


def build_profile(app: Sphinx) -> str | None:
    """The profile the chapters of this build ran with (as their pages printed it in their run
    line), or None when they differ or none printed one."""
    profiles = {(page.get("run") or {}).get("profile") for page in page_info(app.env).values()}
    profiles.discard(None)
    return profiles.pop() if len(profiles) == 1 else None


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return format_metric(value, ".3e" if value != 0 and abs(value) < 1e-3 else ".4g")
    return str(value)


def reference_table(app: Sphinx, fromdoc: str) -> nodes.Node:
    from .pages import make_table

    profile = build_profile(app)
    if profile not in ("book", "quick"):
        return nodes.paragraph(text=f"No reference numbers for this build (profile {profile or 'mixed'}).")
    path = reference_path(_repository(app), profile)
    entries = read_references(path)
    rows, moved = [], 0
    for key in sorted(entries):
        entry = entries[key]
        chapter, name, index = parse_key(key)
        value, problem = metric_value(app, chapter, name, "" if index is None else str(index))
        status = "missing" if value is None else compare_value(entry["value"], value, entry["tolerance"], entry["kind"])
        if status in ("moved", "missing") and entry["kind"] != "not guarded":
            moved += 1
            logger.warning(f"kmt: {key} moved from its reference {entry['value']!r} to {value!r} "
                           f"(tolerance {entry['tolerance']!r}; {problem or path.name})", type="kmt", subtype="drift")
        tolerance = "not compared" if entry["tolerance"] is None else f"± {_shown(entry['tolerance'])}"
        rows.append([nodes.literal(text=key), _shown(entry["value"]), "-" if value is None else _shown(value),
                     f"{tolerance} ({entry['kind']})", status, entry["reason"]])
    summary = nodes.paragraph(text=f"{len(rows)} numbers, reference profile {profile} "
                                   f"({path.parent.name}/{path.name}); {moved} moved beyond their tolerance.")
    table = make_table(["number", "reference", "this build", "tolerance", "status", "why this tolerance"], rows,
                       [22, 10, 10, 12, 8, 38], classes=("kmt-references",))
    return nodes.container("", summary, table)
