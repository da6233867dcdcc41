"""kmtbook.real_data: the data sets of chapter 13 and the comparison with scikit-learn's KMeans."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.cluster import KMeans

from kmtbook.real_data import (
    REAL_DATASETS,
    S_SET_CLUSTERS,
    SYNTHETIC_SETS,
    best_of,
    compare_on,
    defaults_summary,
    defaults_vs_defaults,
    geometric_mean_ratio,
    initial_centers,
    load_real_dataset,
    synthetic_dataset,
    with_outliers,
)

EXPECTED = {  # (n, d, k, labelled), as their sources describe them
    "iris": (150, 4, 3, True),
    "wine": (178, 13, 3, True),
    "breast_cancer": (569, 30, 2, True),
    "digits": (1797, 64, 10, True),
    "penguins": (342, 4, 3, True),
    "R15": (600, 2, 15, True),
    "D31": (3100, 2, 31, True),
    "s1": (5000, 2, S_SET_CLUSTERS, False),
    "s2": (5000, 2, S_SET_CLUSTERS, False),
}


@pytest.mark.parametrize("name", REAL_DATASETS)
def test_every_data_set_loads_offline_with_its_shape(name):
    data = load_real_dataset(name)
    n, d, k, labelled = EXPECTED[name]
    assert (data.n, data.d, data.k) == (n, d, k) and data.X.dtype == np.float64
    assert np.isfinite(data.X).all()
    assert (data.y is not None) == labelled
    if labelled:
        assert data.y.shape == (n,) and np.unique(data.y).size == k


def test_benchmark_files_are_checked(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"R15\.csv"):
        load_real_dataset("R15", tmp_path)
    (tmp_path / "R15.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"R15\.csv: not a benchmark set"):
        load_real_dataset("R15", tmp_path)
    (tmp_path / "R15.csv").write_text("x,y,label\n1,nan,0\n")
    with pytest.raises(ValueError, match=r"R15\.csv: the coordinates must be finite"):
        load_real_dataset("R15", tmp_path)
    with pytest.raises(ValueError, match="unknown data set 'moons'"):
        load_real_dataset("moons")


def test_the_theorem_model_is_lloyd_from_every_start():
    """The theorem row equals KMeans to a fixed point from the same centres wherever Lloyd has
    converged within the transformer's steps (iris converges in well under 100 iterations)."""
    data = load_real_dataset("iris")
    runs = compare_on(data, {"theorem": "theorem"}, starts=3, seed=4, steps=100)
    theorem = runs[runs.method == "theorem"]
    np.testing.assert_allclose(theorem.ratio, 1.0, rtol=1e-12)
    assert set(runs.seeding) == {"random", "k-means++"} and len(runs) == 2 * 3 * 2


def test_starts_are_shared_and_reproducible():
    data = load_real_dataset("wine")
    a = initial_centers(data.X, 3, "random", 4, 7)
    np.testing.assert_array_equal(a, initial_centers(data.X, 3, "random", 4, 7))
    assert not np.array_equal(a, initial_centers(data.X, 3, "random", 4, 8))
    # a random start is a k-subset of the points
    assert all((np.isclose(data.X[None], c[:, None]).all(-1)).any(-1).all() for c in a)
    km = KMeans(3, init=a[1], n_init=1, algorithm="lloyd", tol=0.0, max_iter=300).fit(data.X)
    runs = compare_on(data, {}, starts=4, seed=7, seedings=("random",))
    assert runs.inertia.iloc[1] == pytest.approx(km.inertia_, rel=1e-12)


def test_best_of_is_the_lowest_inertia_in_each_group():
    runs = pd.DataFrame(
        {
            "data": "toy",
            "seeding": "random",
            "method": ["KMeans", "m"] * 5,
            "start": np.repeat(np.arange(5), 2),
            "inertia": [4.0, 5.0, 2.0, 6.0, 3.0, 1.0, 9.0, 9.0, 8.0, 7.0],
            "ratio": np.nan,
            "ari": 0.0,
            "nmi": 0.0,
        }
    )
    best = best_of(runs, 2).set_index(["method", "group"])
    # groups (0, 1) and (2, 3); start 4 fills no group and is left out
    assert best.loc[("KMeans", 0), "inertia"] == 2.0 and best.loc[("m", 0), "inertia"] == 5.0
    assert best.loc[("KMeans", 1), "inertia"] == 3.0 and best.loc[("m", 1), "inertia"] == 1.0
    assert best.loc[("m", 0), "ratio"] == 2.5 and best.loc[("m", 1), "ratio"] == pytest.approx(1 / 3)
    assert len(best) == 4


def test_outliers_keep_the_data_and_are_marked():
    data = load_real_dataset("R15")
    noisy = with_outliers(data, 0.05, 0)
    assert noisy.n == 630 and (noisy.y == -1).sum() == 30 and noisy.k == 15
    np.testing.assert_array_equal(noisy.X[:600], data.X)
    with pytest.raises(ValueError, match="no true classes"):
        with_outliers(load_real_dataset("s1"), 0.05, 0)


def test_defaults_vs_defaults_on_a_tiny_case():
    """One row per set and random state: KMeans() and TransformerKMeans() with their defaults; the
    summary's ratio is the mean of the rows' ratios, the geometric mean that of the sets."""
    iris = load_real_dataset("iris")
    tiny = type(iris)("tiny", iris.X[::5], None, "iris, every fifth row", 3)
    runs = defaults_vs_defaults([iris, tiny], [0, 1], {"learned (default)": {"steps": 2}})
    assert list(runs.data) == ["iris", "iris", "tiny", "tiny"] and list(runs.random_state) == [0, 1, 0, 1]
    km = KMeans(3, random_state=1).fit(iris.X)
    assert runs.kmeans[1] == pytest.approx(km.inertia_, rel=1e-12)
    assert (
        np.allclose(runs.ratio, runs.ours / runs.kmeans) and (runs[["kmeans_seconds", "ours_seconds"]] > 0).all().all()
    )
    summary = defaults_summary(runs)
    assert summary.ratio["tiny", "learned (default)"] == pytest.approx(runs.ratio[2:].mean())
    assert geometric_mean_ratio(summary) == pytest.approx(np.sqrt(summary.ratio.prod()))


def test_synthetic_sets_are_fixed():
    for name in SYNTHETIC_SETS:
        a, b = synthetic_dataset(name), synthetic_dataset(name)
        assert a.name == name and np.array_equal(a.X, b.X) and a.n >= a.k > 1
    with pytest.raises(ValueError, match="unknown synthetic set"):
        synthetic_dataset("nope")


def test_the_goal_sentence_says_which_half_is_missed():
    # ("(goal: at most 1.00) ... The goal is not met" read as if the first half had failed)
    from kmtbook.real_data import defaults_goal

    assert defaults_goal(0.98, 1.03, "iris").endswith("is met.")
    worst = defaults_goal(0.98, 1.08, "wine")
    assert "not met on this run: wine's mean ratio, 1.080, is above 1.05; the other half is met." in worst
    both = defaults_goal(1.004, 1.08, "wine")
    assert "the geometric mean, 1.004, is above 1.00 and wine's" in both and "other half" not in both
