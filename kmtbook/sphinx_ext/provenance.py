"""Provenance tables: ``chapter-runs`` (the run each chapter page shows, and how the build executed
it) and ``build-environment`` (the package versions of the build)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

from .figures import figure_files
from .pages import cache_path, chapter_title, link, make_table, page_info, pages_in_order


def runs_table(app: Sphinx, fromdoc: str) -> nodes.Node:
    from ..execute_chapters import TIMES_FILE

    rows = []
    pages = page_info(app.env)
    nb_meta = getattr(app.env, "nb_metadata", {}) or {}
    schedule = {}  # how kmtbook.execute_chapters ran each chapter ahead of the build
    if getattr(getattr(app.env, "mystnb_config", None), "execution_mode", None) == "cache":
        try:
            schedule = json.loads((cache_path(app, app.env) / TIMES_FILE).read_text())
        except (OSError, ValueError):
            schedule = {}
    for docname in pages_in_order(app):
        page = pages[docname]
        if not page.get("chapter"):
            continue
        run = page.get("run") or {}
        exec_data = (nb_meta.get(docname) or {}).get("exec_data") or {}
        executed = _execution(exec_data, schedule.get(docname) if isinstance(schedule, dict) else None)
        n_figs = len(page["figures"])
        n_pdf = sum(1 for f in page["figures"] if figure_files(app, docname, f)[1] is not None)
        settings = f"{run['profile']}, {run['device']}, seed {run['seed']}" if run else "not printed by the chapter"
        rows.append([
            [link(chapter_title(app, docname), app.builder.get_relative_uri(fromdoc, docname))],
            settings, run.get("sizes", "?").replace(", ", " "), executed, f"{n_figs} ({n_pdf} with PDF)",
            [nodes.literal(text=p) if i == 0 else nodes.Text(", ") for p in page.get("shipped", []) for i in (1, 0)][1:]
            or ["none"],
        ])
    if not rows:
        return nodes.paragraph(text="No chapters in this build.")
    return make_table(["chapter", "profile, device, seed", "sizes", "execution", "figures", "shipped data"], rows,
                      [18, 14, 30, 14, 10, 14], classes=("kmt-runs",))


def _execution(exec_data: dict, how: Any) -> str:
    """How the build executed a chapter (myst-nb's record) and, when kmtbook.execute_chapters ran it ahead
    of the build (``how``, its record of the same run), with how many threads and chapters at a time."""
    if not exec_data:
        return "not executed by this build"
    runtime = exec_data.get("runtime")
    executed = f"{exec_data.get('method', '?')}, {runtime:.1f} s" if isinstance(runtime, (int, float)) \
        else str(exec_data.get("method", "?"))
    if exec_data.get("succeeded") is False:
        executed += ", FAILED"
    if isinstance(how, dict) and isinstance(runtime, (int, float)) and how.get("seconds") == round(runtime, 2):
        at_once = how.get("chapters_at_once")
        threads = how.get("threads")
        threads = "1 thread" if threads == "1" else f"{threads} threads" if threads != "default" \
            else "torch's default threads"
        executed += (f"; {threads}, up to {at_once} chapters at a time" if at_once != 1
                     else f"; alone, {threads}")
    return executed


BUILD_PACKAGES = ("torch", "kmtlib", "numpy", "scipy", "pandas", "scikit-learn", "matplotlib", "seaborn",
                  "jupyter-book", "sphinx", "myst-nb", "jupyter-cache", "papermill", "jupytext", "ipykernel",
                  "django-static-mathjax")


def environment_table(app: Sphinx, fromdoc: str) -> nodes.Node:
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
    return make_table(["what", "version"], rows, [30, 70], classes=("kmt-environment",))
