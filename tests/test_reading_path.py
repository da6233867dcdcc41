"""The reading path of one forward pass on the formula path (scripts/reading_path.py): it stays in
the top level of kmtlib, and CONTRIBUTING.md prints the figure the script measures."""

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


def test_the_formula_path_runs_the_top_level_only_and_contributing_prints_its_figure():
    script = _script()
    figure = []
    for name, build in script.MODELS.items():
        per_file = script.measure(build)
        below = sorted(str(p.relative_to(script.PACKAGE)) for p in per_file if p.parent != script.PACKAGE)
        # (the objective's label search is the one kernel the result's bookkeeping calls; a trained
        # layer also checks that the data lie near the range it was trained on)
        allowed = ["kernels/labels.py"] + (["analysis/training_domain.py"] if "trained" in name else [])
        assert below == sorted(allowed), f"{name}: the formula path leaves the top level: {below}"
        figure.append(f"{name}: {len(per_file)} files, {sum(map(len, per_file.values()))} lines of code")
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    assert "\n".join(figure) in contributing, "update the figure in CONTRIBUTING.md: python scripts/reading_path.py"
