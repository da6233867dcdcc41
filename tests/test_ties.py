"""Exact ties in the theorem estimator (issue 26, item 7): the limit transformer shares a tied
point equally among its tied centres; ``KMeans`` gives it to the lowest index. The estimator's
docstring states this; these tests hold it to exactly that statement on integer grids."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans

from kmtlib.estimator import TransformerKMeans

STEPS = 5


def _averaging_lloyd(X: np.ndarray, C: np.ndarray, steps: int) -> tuple[np.ndarray, bool, bool]:
    """Lloyd's algorithm with the limit transformer's tie rule (a point tied between m centres adds
    1/m of itself to each; an empty cluster's centre goes to the mean of all points), distances
    from the differences (exact on small integers); whether any step met a tie; whether any
    cluster emptied."""
    tied = emptied = False
    for _ in range(steps):
        D = ((X[:, None, :] - C[None]) ** 2).sum(-1)
        W = (D.min(1, keepdims=True) == D).astype(float)
        tied |= bool((W.sum(1) > 1).any())
        W /= W.sum(1, keepdims=True)
        total = W.sum(0)
        emptied |= bool((total == 0).any())
        C = np.where(total[:, None] > 0, (W.T @ X) / np.where(total > 0, total, 1.0)[:, None], X.mean(0))
    return C, tied, emptied


def test_the_documented_three_point_tie():
    X = np.array([[0.0], [1.0], [2.0]])
    est = TransformerKMeans(2, model="theorem", init=np.array([[0.0], [2.0]]), steps=1).fit(X)
    np.testing.assert_allclose(est.cluster_centers_.ravel(), [1 / 3, 5 / 3], rtol=0, atol=1e-15)
    km = KMeans(2, init=np.array([[0.0], [2.0]]), n_init=1, algorithm="lloyd", max_iter=1, tol=0).fit(X)
    np.testing.assert_allclose(km.cluster_centers_.ravel(), [0.5, 2.0])
    assert "shared equally" in (TransformerKMeans.__doc__ or "")


@pytest.mark.parametrize("seed", range(16))
def test_integer_grids_match_kmeans_unless_tied(seed):
    """16 fits on small integer grids: every fit is the averaging-tie Lloyd exactly; a fit whose
    steps meet no tie (and, as KMeans relocates empty clusters differently, empties none) is
    KMeans' fit from the same start; some fits of the 16 do meet ties."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, size=(12, 2)).astype(float)
    k = 3
    C0 = X[rng.choice(12, k, replace=False)]
    while len(np.unique(C0, axis=0)) < k:
        C0 = X[rng.choice(12, k, replace=False)]
    est = TransformerKMeans(k, model="theorem", init=C0, steps=STEPS).fit(X)
    expected, tied, emptied = _averaging_lloyd(X, C0, STEPS)
    np.testing.assert_allclose(est.cluster_centers_, expected, rtol=0, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (KMeans warns about duplicate points)
        km = KMeans(k, init=C0, n_init=1, algorithm="lloyd", max_iter=STEPS, tol=0).fit(X)
    if not tied and not emptied:
        np.testing.assert_allclose(est.cluster_centers_, km.cluster_centers_, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(est.labels_, km.labels_)


def test_some_grid_fits_meet_ties():
    """(So that the test above checks both cases.)"""
    met = 0
    for seed in range(16):
        rng = np.random.default_rng(seed)
        X = rng.integers(0, 4, size=(12, 2)).astype(float)
        C0 = X[rng.choice(12, 3, replace=False)]
        while len(np.unique(C0, axis=0)) < 3:
            C0 = X[rng.choice(12, 3, replace=False)]
        met += _averaging_lloyd(X, C0, STEPS)[1]
    assert 0 < met < 16
