"""The held-out evaluation of a layer trained for the estimator's use (chapter 13).

The sets, the random states, the metrics and the rule for shipping a new default layer are
written down in ``data/estimator_layer/heldout.json``, fixed before any such layer was trained;
:func:`heldout_sets` builds the sets from it (scikit-learn's generators with fixed seeds), and
:func:`heldout_evaluation` measures a layer on them with :func:`kmtbook.equal_compute.equal_compute_runs`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn import datasets as sk

from .equal_compute import arm_counts, equal_compute_runs, equal_compute_table, set_gmean_ratio
from .real_data import RealDataset
from .repo_root import find_repo_root

HELDOUT_FILE = Path("data") / "estimator_layer" / "heldout.json"
"""The held-out definition, relative to the repository root."""


def heldout_definition(path: str | Path | None = None) -> dict[str, Any]:
    """The held-out definition (``data/estimator_layer/heldout.json`` unless ``path`` is given)."""
    path = find_repo_root() / HELDOUT_FILE if path is None else Path(path)
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable held-out definition ({error})") from error


def _centres(spec: dict[str, Any]) -> np.ndarray | int:
    """Centres uniform in [-10, 10]^d from the set's seed where the sizes are given per cluster
    (``make_blobs`` then needs them), else the number k."""
    if isinstance(spec["n"], list):
        return np.random.default_rng(spec["seed"]).uniform(-10, 10, size=(spec["k"], spec["d"]))
    return int(spec["k"])


def build_set(spec: dict[str, Any]) -> RealDataset:
    """One held-out set from its entry in the definition (a ValueError names an unknown generator)."""
    kind, seed, d, k = spec["generator"], spec["seed"], spec["d"], spec["k"]
    if kind == "make_blobs":
        X, y = sk.make_blobs(spec["n"], n_features=d, centers=_centres(spec), cluster_std=spec["cluster_std"],
                             random_state=seed)  # fmt: skip
    elif kind == "make_blobs_linear_map":
        X, y = sk.make_blobs(spec["n"], n_features=d, centers=k, cluster_std=spec["cluster_std"], random_state=seed)
        X = X @ np.random.default_rng(seed).normal(size=(d, d))
    elif kind == "make_blobs_student_t":
        X, y = sk.make_blobs(spec["n"], n_features=d, centers=k, cluster_std=0.0, random_state=seed)
        X = X + spec["cluster_std"] * np.random.default_rng(seed).standard_t(spec["df"], size=X.shape)
    elif kind == "make_classification":
        X, y = sk.make_classification(spec["n"], n_features=d, n_informative=spec["n_informative"],
                                      n_redundant=spec["n_redundant"], n_classes=spec["n_classes"],
                                      n_clusters_per_class=spec["n_clusters_per_class"], random_state=seed)  # fmt: skip
    elif kind == "make_moons":
        X, y = sk.make_moons(spec["n"], noise=spec["noise"], random_state=seed)
    elif kind == "make_swiss_roll":
        X, _ = sk.make_swiss_roll(spec["n"], noise=spec["noise"], random_state=seed)
        y = None
    else:
        raise ValueError(f"held-out set {spec.get('name')!r}: unknown generator {kind!r}")
    return RealDataset(spec["name"], np.asarray(X, dtype=np.float64), y, f"scikit-learn {kind}", int(k))


def heldout_sets(definition: dict[str, Any] | None = None) -> list[RealDataset]:
    """The held-out sets of the definition, in its order."""
    definition = heldout_definition() if definition is None else definition
    return [build_set(spec) for spec in definition["sets"]]


def heldout_evaluation(model: object, definition: dict[str, Any] | None = None,
                       sets: Sequence[RealDataset] | None = None) -> pd.DataFrame:  # fmt: skip
    """:func:`~kmtbook.equal_compute.equal_compute_runs` of ``model`` (a layer's path, or
    ``"learned"``) on the held-out sets at the definition's random states."""
    definition = heldout_definition() if definition is None else definition
    sets = heldout_sets(definition) if sets is None else sets
    return equal_compute_runs(sets, definition["random_states"], model)


def heldout_summary(runs: pd.DataFrame, tolerance: float = 1e-4) -> dict[str, Any]:
    """The numbers the ship rule reads: the geometric means of the default against ``KMeans()``,
    ``KMeans(n_init=2)`` and the time-matched ``KMeans``, of the layer arm against the seeding
    arm, the layer arm's better and worse starts, and whether the rule holds
    (better > worse and the ratio to ``KMeans(n_init=2)`` at most 1.00)."""
    better, worse = arm_counts(runs.layer_arm, runs.seeding_arm, tolerance)
    n_init2 = set_gmean_ratio(runs, "default", "kmeans_2")
    return dict(default_vs_kmeans=set_gmean_ratio(runs, "default", "kmeans_1"), default_vs_kmeans_2=n_init2,
                default_vs_kmeans_m=set_gmean_ratio(runs, "default", "kmeans_m"),
                layer_vs_seeding_arm=set_gmean_ratio(runs, "layer_arm", "seeding_arm"),
                layer_better=better, layer_worse=worse, starts=len(runs),
                passes_ship_rule=bool(better > worse and n_init2 <= 1.0))  # fmt: skip


def heldout_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per held-out set: :func:`~kmtbook.equal_compute.equal_compute_table`."""
    return equal_compute_table(runs)


RESULTS_FILE = Path("data") / "estimator_layer" / "results.json"
"""The shipped results of the experiment (written by ``scripts/estimator_layer.py results``)."""

LAYER_LABELS = {"shipped": "shipped layer", "estimator_trained": "trained for the estimator"}
"""The two layers of the results file and their names in the chapter's table."""


def load_results(path: str | Path | None = None) -> dict[str, Any]:
    """The results file (``data/estimator_layer/results.json`` unless ``path``), checked to hold
    both layers' summaries and per-set tables (a ValueError names the file otherwise)."""
    path = find_repo_root() / RESULTS_FILE if path is None else Path(path)
    try:
        results = json.loads(Path(path).read_text())
        for name in LAYER_LABELS:
            results["layers"][name]["summary"]["passes_ship_rule"]
            results["layers"][name]["per_set"][0]["data"]
        results["training"]["cpu_seconds"]
    except (OSError, json.JSONDecodeError, KeyError, IndexError, TypeError) as error:
        raise ValueError(f"{path}: not a readable results file of the estimator-layer experiment ({error!r})") \
            from error
    return results


def results_table(results: dict[str, Any]) -> pd.DataFrame:
    """Per held-out set and layer: the default against ``KMeans()``, ``KMeans(n_init=2)`` and the
    time-matched ``KMeans``, the layer arm against the seeding arm (mean ratio) and the starts
    where the layer arm is better and worse."""
    columns = ["default_vs_kmeans", "default_vs_kmeans_2", "default_vs_kmeans_m", "layer_vs_seeding_arm",
               "layer_better", "layer_worse"]  # fmt: skip
    frames = []
    for name, label in LAYER_LABELS.items():
        part = pd.DataFrame(results["layers"][name]["per_set"]).set_index("data")[columns]
        part.columns = pd.MultiIndex.from_product([[label], columns])
        frames.append(part)
    return pd.concat(frames, axis=1)


def results_metrics(results: dict[str, Any]) -> dict[str, float | int | bool]:
    """The chapter's numbers of the experiment: per layer (prefix ``shipped_`` and ``trained_``)
    the better and worse starts of its arm and the default's geometric-mean ratio to
    ``KMeans(n_init=2)`` and ``KMeans()`` on the held-out sets; the training's CPU minutes, its
    budget and steps; the validation ratio of the trained layer's arm to the seeding arm on its
    training family at its first and last step; the first run's steps and last validation ratio;
    whether the trained layer passes the ship rule."""
    out: dict[str, float | int | bool] = {}
    for name, prefix in (("shipped", "shipped"), ("estimator_trained", "trained")):
        s = results["layers"][name]["summary"]
        out.update({f"{prefix}_heldout_better": int(s["layer_better"]),
                    f"{prefix}_heldout_worse": int(s["layer_worse"]),
                    f"{prefix}_heldout_n_init2_ratio": float(s["default_vs_kmeans_2"]),
                    f"{prefix}_heldout_kmeans_ratio": float(s["default_vs_kmeans"])})  # fmt: skip
    training = results["training"]
    trained = results["layers"]["estimator_trained"]["summary"]
    out.update(heldout_starts=int(results["layers"]["shipped"]["summary"]["starts"]),
               training_cpu_minutes=float(training["cpu_seconds"]) / 60,
               training_budget_minutes=float(training["cpu_budget_seconds"]) / 60,
               training_steps=int(training["steps"]),
               trained_first_val=float(training["first_val_rel_objective"]),
               trained_final_val=float(training["final_val_rel_objective"]),
               first_run_steps=int(results["first_run"]["steps"]),
               first_run_last_val=float(results["first_run"]["last_val_rel_objective"]),
               trained_layer_ships=bool(trained["passes_ship_rule"]))  # fmt: skip
    return out
