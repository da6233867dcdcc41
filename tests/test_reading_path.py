"""The reading path of one forward pass on the formula path (scripts/reading_path.py): it stays in
the top level of kmtlib, within 6 files and 300 lines of code, and CONTRIBUTING.md prints the
figure the script measures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("reading_path", ROOT / "scripts" / "reading_path.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_formula_path_runs_the_top_level_only_within_its_aim_and_contributing_prints_its_figure():
    script = _script()
    figure = []
    for name, build in script.MODELS.items():
        per_file = script.measure(build)
        below = sorted(str(p.relative_to(script.PACKAGE)) for p in per_file if p.parent != script.PACKAGE)
        assert below == [], f"{name}: the formula path leaves the top level: {below}"
        files, lines = len(per_file), sum(map(len, per_file.values()))
        # the aim of CONTRIBUTING.md: one forward pass read in at most 6 files and 300 lines of code
        assert files <= 6 and lines <= 300, f"{name}: {files} files, {lines} lines of code"
        figure.append(f"{name}: {files} files, {lines} lines of code")
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    assert "\n".join(figure) in contributing, "update the figure in CONTRIBUTING.md: python scripts/reading_path.py"
