"""The reading path of one forward pass (scripts/reading_path.py): on the formula path it stays in
the top level of kmtlib (but for a trained layer's domain check, ``domain/trained.py``, one file
more), within 6 files and 290 lines of code; on the default path (``model.fast``) within 8 files
and 400; both run the layer's own step, :meth:`kmtlib.layer.KMeansLayer.forward`
(what a breakpoint there sees); CONTRIBUTING.md prints the figures the script measures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from kmtlib.layer import KMeansLayer

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("reading_path", ROOT / "scripts" / "reading_path.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


AIMS = {"formula path": (6, 290), "default path": (8, 400)}
"""The aim of CONTRIBUTING.md per path: one forward pass read in at most this many files and lines of code."""

DOMAIN_CHECK = "domain/trained.py"
"""The one file below the top level that the formula path may enter: a trained layer's warning on data
outside its training domain (issue 54 puts it in ``domain/``). It counts, lines and file; a formula path
that enters it may have one file more."""


def test_both_paths_stay_within_their_aim_and_contributing_prints_their_figures():
    script = _script()
    figure = []
    for name, build in script.MODELS.items():
        for path, fast in script.PATHS.items():
            per_file = script.measure(build, fast)
            files, lines = len(per_file), sum(map(len, per_file.values()))
            most_files, most_lines = AIMS[path]
            if not fast:
                below = sorted(str(p.relative_to(script.PACKAGE)) for p in per_file if p.parent != script.PACKAGE)
                assert below in ([], [DOMAIN_CHECK]), f"{name}: the formula path leaves the top level: {below}"
                most_files += len(below)
            assert files <= most_files and lines <= most_lines, f"{name}, {path}: {files} files, {lines} lines of code"
            figure.append(f"{name}, {path}: {files} files, {lines} lines of code")
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    assert "\n".join(figure) in contributing, "update the figure in CONTRIBUTING.md: python scripts/reading_path.py"


def test_a_breakpoint_in_the_layer_step_stops_the_default_forward_of_both_models():
    """A profile hook on KMeansLayer.forward (what a debugger's breakpoint there would do) sees it
    run once per step in the default forward, ``model(X, C0, steps)``, of the theorem model and of
    the trained layer."""
    script = _script()
    code = KMeansLayer.forward.__code__
    for name, build in script.MODELS.items():
        model, d, k = build()
        assert model.fast, f"{name}: not the default path"
        X, C0 = script.inputs(d, k)
        stops: list[int] = []

        def breakpoint_stand_in(frame, event, arg, stops=stops):
            if event == "call" and frame.f_code is code:
                stops.append(frame.f_lineno)

        sys.setprofile(breakpoint_stand_in)
        try:
            with torch.no_grad():
                model(X, C0, 3)
        finally:
            sys.setprofile(None)
        assert len(stops) == 3, f"{name}: KMeansLayer.forward ran {len(stops)} times in 3 steps"
