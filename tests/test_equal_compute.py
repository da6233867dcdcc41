"""kmtbook.equal_compute: chapter 13's comparison at equal compute, on hand-made numbers and on iris."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kmtbook.equal_compute import (
    arm_counts,
    equal_compute_metrics,
    equal_compute_runs,
    equal_compute_table,
    set_gmean_ratio,
    time_matched_n_init,
)
from kmtbook.real_data import load_real_dataset


def test_time_matched_n_init_is_the_ratio_of_the_medians_within_bounds():
    assert time_matched_n_init([0.07, 0.08, 0.5], [0.002, 0.004, 0.003]) == 27  # 0.08 / 0.003 = 26.7
    assert time_matched_n_init([0.001], [0.01]) == 1
    assert time_matched_n_init([10.0], [0.001], most=50) == 50
    assert time_matched_n_init([0.01], [0.0]) == 200  # (KMeans below the clock's resolution)


def test_arm_counts_leave_out_differences_within_the_tolerance():
    layer = [1.0, 0.99995, 0.9998, 1.0002, 1.00005, 3.0]
    seeding = [1.0] * 6
    assert arm_counts(layer, seeding) == (1, 2)  # 0.9998 better; 1.0002 and 3.0 worse
    assert arm_counts(layer, seeding, tolerance=0.0) == (2, 3)


def test_set_gmean_ratio_is_the_geometric_mean_of_the_per_set_means():
    runs = pd.DataFrame(dict(data=["a", "a", "b"], x=[1.0, 3.0, 4.0], y=[1.0, 1.0, 1.0]))
    # per set: a: mean(1, 3) = 2, b: 4; geometric mean sqrt(8)
    assert math.isclose(set_gmean_ratio(runs, "x", "y"), math.sqrt(8.0))


def test_metrics_from_hand_made_runs():
    runs = pd.DataFrame(dict(data=["a", "a", "b", "b"], default=[1.0, 1.0, 2.0, 2.0],
                             kmeans_m=[1.0] * 4, kmeans_1=[1.0] * 4, kmeans_2=[2.0] * 4,
                             two_seedings=[1.0, 1.0, 1.0, 1.0], layer_arm=[1.0, 0.5, 2.0, 3.0],
                             seeding_arm=[1.0, 1.0, 2.0, 2.0], m=[3, 3, 7, 7]))  # fmt: skip
    m = equal_compute_metrics(runs)
    assert math.isclose(m["equal_compute_gmean_ratio"], math.sqrt(2.0))
    assert math.isclose(m["n_init2_gmean_ratio"], math.sqrt(0.5 * 1.0))
    assert math.isclose(m["two_seedings_gmean_ratio"], math.sqrt(1.0 * 0.5))
    assert (m["layer_arm_better_starts"], m["layer_arm_worse_starts"], m["arm_starts"]) == (1, 1, 4)
    assert (m["time_matched_n_init_min"], m["time_matched_n_init_max"]) == (3, 7)
    table = equal_compute_table(runs)
    assert table.loc["b", "layer_vs_seeding_arm"] == pytest.approx(1.25) and table.loc["a", "layer_better"] == 1


def test_equal_compute_runs_on_iris_the_default_is_the_better_arm():
    """The default keeps the better of its two arms: its inertia is the smaller of the layer arm's
    and the seeding arm's (so the runs measure the default's own candidates)."""
    runs = equal_compute_runs([load_real_dataset("iris")], [0, 1], most=5)
    assert len(runs) == 2 and set(runs.data) == {"iris"} and 1 <= runs.m.iloc[0] <= 5
    np.testing.assert_allclose(runs.default, np.minimum(runs.layer_arm, runs.seeding_arm), rtol=1e-12)
    assert (runs.kmeans_m <= runs.kmeans_1 * (1 + 1e-12)).all() or runs.m.iloc[0] == 1
    assert (runs.default_cpu > 0).all() and (runs.kmeans_cpu >= 0).all()
