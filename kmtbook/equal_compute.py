"""Chapter 13 at equal compute: what the transformer earns against ``KMeans`` given the same CPU time.

``TransformerKMeans()`` with its defaults keeps the better of two candidates per start: the
layer's (its steps, the read-out, Lloyd to a fixed point) and Lloyd's from the same seeding. So it
is fair to ask what else those two candidates' time buys:

* :func:`equal_compute_runs` -- per data set and ``random_state``: the default, ``KMeans(n_init=2)``
  (two candidates, as the default has), ``KMeans(n_init=m)`` with m matched to the default's CPU
  time on that data set (:func:`time_matched_n_init`), two seedings in place of the layer
  (``model="theorem", polish=True, n_init=2``: two k-means++ seedings, each polished by Lloyd),
  and the two arms of the default apart: the layer's candidate alone (``never_worse=False``) and
  the seeding's (``model="theorem", steps=0, polish=True``: Lloyd from the same seeding);
* :func:`arm_counts` -- on how many starts the layer's arm is better, or worse, than the seeding's
  by more than a relative ``tolerance``;
* :func:`set_gmean_ratio` -- the geometric mean over data sets of the per-set mean ratio of two
  columns; :func:`equal_compute_metrics` -- the chapter's numbers from the runs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans

from kmtlib import TransformerKMeans

from .real_data import RealDataset

ARM_TOLERANCE = 1e-4
"""Two arms' inertias closer than this fraction count as the same result (:func:`arm_counts`)."""

MAX_N_INIT = 200
"""The largest ``n_init`` a time-matched ``KMeans`` gets."""


def _cpu_fit(estimator: TransformerKMeans | KMeans, X: np.ndarray) -> tuple[float, float]:
    """The inertia of ``estimator.fit(X)`` and the CPU time of this process it took (all threads)."""
    start = time.process_time()
    inertia = float(estimator.fit(X).inertia_)
    return inertia, time.process_time() - start


def time_matched_n_init(default_seconds: Sequence[float], kmeans_seconds: Sequence[float],
                        most: int = MAX_N_INIT) -> int:  # fmt: skip
    """The number of ``KMeans`` seedings that take the default's CPU time: the ratio of the medians
    of the default's and of ``KMeans(n_init=1)``'s CPU seconds per fit, rounded, within 1..``most``."""
    ratio = float(np.median(default_seconds)) / max(float(np.median(kmeans_seconds)), 1e-9)
    return int(min(max(round(ratio), 1), most))


def _one_state(data: RealDataset, state: int, model: object) -> dict[str, object]:
    """The row of :func:`equal_compute_runs` for one data set and random state (m not yet known)."""
    k, X = data.k, data.X
    default, default_cpu = _cpu_fit(TransformerKMeans(k, model=model, random_state=state), X)  # type: ignore[arg-type]
    kmeans_1, kmeans_cpu = _cpu_fit(KMeans(k, n_init=1, random_state=state), X)
    arms = {
        "layer_arm": TransformerKMeans(k, model=model, never_worse=False, random_state=state),  # type: ignore[arg-type]
        "seeding_arm": TransformerKMeans(k, model="theorem", steps=0, polish=True, random_state=state),
        "two_seedings": TransformerKMeans(k, model="theorem", polish=True, n_init=2, random_state=state),
        "kmeans_2": KMeans(k, n_init=2, random_state=state),
    }
    row: dict[str, object] = dict(data=data.name, random_state=state, default=default, kmeans_1=kmeans_1)
    row.update({name: float(estimator.fit(X).inertia_) for name, estimator in arms.items()})
    row.update(default_cpu=default_cpu, kmeans_cpu=kmeans_cpu)
    return row


def equal_compute_runs(
    data_sets: Sequence[RealDataset], random_states: Sequence[int], model: object = "learned", most: int = MAX_N_INIT
) -> pd.DataFrame:
    """One row per (data set, random_state): the inertias of the default (``model``), of its layer
    arm and seeding arm, of two seedings, of ``KMeans(n_init=1)``, ``KMeans(n_init=2)`` and the
    time-matched ``KMeans(n_init=m)`` (column ``m``), and the CPU seconds of the default and of
    ``KMeans(n_init=1)``. m is chosen per data set from the medians over its random states."""
    frames = []
    for data in data_sets:
        part = pd.DataFrame([_one_state(data, state, model) for state in random_states])
        m = time_matched_n_init(part.default_cpu.tolist(), part.kmeans_cpu.tolist(), most)
        part["m"] = m
        part["kmeans_m"] = [float(KMeans(data.k, n_init=m, random_state=s).fit(data.X).inertia_) for s in random_states]
        frames.append(part)
    return pd.concat(frames, ignore_index=True)


def set_gmean_ratio(runs: pd.DataFrame, numerator: str, denominator: str) -> float:
    """The geometric mean over data sets of the mean over random states of ``numerator /
    denominator`` (the chapter's summary of a comparison; below 1 the numerator wins)."""
    per_set = (runs[numerator] / runs[denominator]).groupby(runs.data, sort=False).mean()
    return float(np.exp(np.log(per_set.to_numpy()).mean()))


def arm_counts(layer: Sequence[float], seeding: Sequence[float], tolerance: float = ARM_TOLERANCE) -> tuple[int, int]:
    """(better, worse): the starts where the layer arm's inertia is below the seeding arm's by more
    than the relative ``tolerance``, and above it by more; the rest are the same result."""
    a, b = np.asarray(layer, dtype=float), np.asarray(seeding, dtype=float)
    return int((a < b * (1 - tolerance)).sum()), int((a > b * (1 + tolerance)).sum())


def equal_compute_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per data set: the mean ratio of the default to ``KMeans()`` (n_init=1), to ``KMeans(n_init=2)``
    and to the time-matched ``KMeans(n_init=m)``, of two seedings to the default, of the layer arm to
    the seeding arm, m, and the starts where the layer arm is better and worse."""
    rows = []
    for name, part in runs.groupby("data", sort=False):
        better, worse = arm_counts(part.layer_arm, part.seeding_arm)
        rows.append(dict(data=name, default_vs_kmeans=(part.default / part.kmeans_1).mean(),
                         default_vs_kmeans_2=(part.default / part.kmeans_2).mean(),
                         default_vs_kmeans_m=(part.default / part.kmeans_m).mean(), m=int(part.m.iloc[0]),
                         two_seedings_vs_default=(part.two_seedings / part.default).mean(),
                         layer_vs_seeding_arm=(part.layer_arm / part.seeding_arm).mean(),
                         layer_better=better, layer_worse=worse, starts=len(part)))  # fmt: skip
    return pd.DataFrame(rows).set_index("data")


def equal_compute_metrics(runs: pd.DataFrame) -> dict[str, float | int]:
    """The chapter's numbers: ``equal_compute_gmean_ratio`` (the default over the time-matched
    ``KMeans``), ``n_init2_gmean_ratio`` (over ``KMeans(n_init=2)``), ``two_seedings_gmean_ratio``
    (two seedings over the default), ``layer_arm_better_starts`` and ``layer_arm_worse_starts``
    (:func:`arm_counts` over every start), ``arm_starts`` and the range of m."""
    better, worse = arm_counts(runs.layer_arm, runs.seeding_arm)
    return dict(equal_compute_gmean_ratio=set_gmean_ratio(runs, "default", "kmeans_m"),
                n_init2_gmean_ratio=set_gmean_ratio(runs, "default", "kmeans_2"),
                two_seedings_gmean_ratio=set_gmean_ratio(runs, "two_seedings", "default"),
                layer_arm_gmean_ratio=set_gmean_ratio(runs, "layer_arm", "seeding_arm"),
                layer_arm_better_starts=better, layer_arm_worse_starts=worse, arm_starts=len(runs),
                time_matched_n_init_min=int(runs.m.min()), time_matched_n_init_max=int(runs.m.max()))  # fmt: skip
