"""Quick-profile parameters and metric checks for every chapter run by tests/test_notebooks.py.

Each entry maps a chapter file to (extra papermill parameters, a check of its metrics.json). The
checks assert properties the chapter's numbers must have whatever the seed, not recorded values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Metrics = dict[str, Any]


def _non_increasing(curve, tol=1e-6) -> bool:
    return bool(np.all(np.diff(np.asarray(curve, dtype=float)) <= tol))


def check_01(m: Metrics) -> None:
    assert m["param_n_tasks"] == 24, "explicit n_tasks must override the quick profile"
    assert set(m["figures"]) == {"fig-task-families", "fig-lloyd-trajectory", "fig-seeding"}
    assert _non_increasing(m["example_log_objective"])
    for key in ("lloyd_n512_random_init", "lloyd_n512_kmeanspp_init", "lloyd_n128", "lloyd_cauchy"):
        assert len(m[key]) == 4 and _non_increasing(m[key]), key
    # k-means++ starts far lower than a random k-subset at the main setting.
    assert m["lloyd_n512_kmeanspp_init"][0] < m["lloyd_n512_random_init"][0] - 0.2
    # The objective is a sum over points: more points, larger objective.
    final = [m[f"lloyd_n{n}"][-1] for n in (128, 256)] + [m["lloyd_n512_random_init"][-1]]
    final += [m[f"lloyd_n{n}"][-1] for n in (1024, 2048)]
    assert final == sorted(final)
    # Heavy Cauchy tails squeeze the bulk of each task after the min-max rescaling.
    assert m["lloyd_cauchy"][-1] < m["lloyd_n512_random_init"][-1] - 1.0
    assert {"lloyd_rule_mean_t20", "lloyd_rule_keep_t20", "lloyd_rule_random_t20"} <= set(m)


CASES: dict[str, tuple[dict[str, Any], Callable[[Metrics], None]]] = {
    "01_kmeans_and_lloyd.md": ({"n_tasks": 24}, check_01),
}
