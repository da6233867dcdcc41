"""kmtlib.init_centers: uniform random k-subsets and k-means++ D^2 seeding.

The distribution tests use a fixed seed, so they are deterministic; each one is also shown to have
power (a wrong distribution is rejected on the same samples).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from _helpers import chisquare_pvalue, requires_cuda, row_indices

from kmtlib import INIT_METHODS, init_centers, sample_tasks

F64 = torch.float64

# Six distinct points on a line, spaced so that D and D^2 weights are very different.
LINE = torch.tensor([0.0, 1.0, 2.0, 4.0, 7.0, 12.0], dtype=F64).view(6, 1)
# Five distinct points in the plane for the three-centre test (all 60 ordered triples likely).
PLANE = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.2], [1.3, 1.1], [2.1, 0.4]], dtype=F64)


def _indices(points: torch.Tensor, k: int, batch: int, method: str, seed: int) -> np.ndarray:
    X = points.expand(batch, *points.shape).clone()
    C = init_centers(X, k, method=method, generator=seed)
    idx = row_indices(X, C)
    assert (idx >= 0).all(), "every centre must be one of the points"
    return idx.numpy()


def test_kmeanspp_first_center_uniform_second_follows_d2():
    n = LINE.shape[0]
    idx = _indices(LINE, 2, 30000, "kmeans++", seed=1)
    first, second = idx[:, 0], idx[:, 1]
    assert chisquare_pvalue(np.bincount(first, minlength=n), np.full(n, 1 / n)) > 1e-3

    D2 = ((LINE - LINE.T) ** 2).numpy()  # (n, n) squared distances
    for i in range(n):
        counts = np.bincount(second[first == i], minlength=n)
        assert counts[i] == 0, "the second centre repeated the first although the points are distinct"
        assert chisquare_pvalue(counts, D2[i] / D2[i].sum()) > 1e-3, (i, counts)
        # power: the same counts reject D-weighting (instead of D^2) and uniform weighting
        D = np.sqrt(D2[i])
        assert chisquare_pvalue(counts, D / D.sum()) < 1e-3, (i, counts)
        assert chisquare_pvalue(counts, (D > 0) / (n - 1)) < 1e-3, (i, counts)


def test_kmeanspp_third_center_uses_distance_to_the_nearest_chosen():
    n = PLANE.shape[0]
    idx = _indices(PLANE, 3, 40000, "kmeans++", seed=2)
    D2 = ((PLANE[:, None] - PLANE[None]) ** 2).sum(-1).numpy()
    joint = np.zeros((n, n, n))
    wrong = np.zeros((n, n, n))  # alternative: third drawn by D^2 to the *first* centre only
    for i, j in itertools.permutations(range(n), 2):
        nearest = np.minimum(D2[i], D2[j])
        joint[i, j] = D2[i, j] / D2[i].sum() * nearest / nearest.sum() / n
        wrong[i, j] = (
            D2[i, j] / D2[i].sum() * np.where(nearest > 0, D2[i], 0) / np.where(nearest > 0, D2[i], 0).sum() / n
        )
    counts = np.zeros((n, n, n))
    np.add.at(counts, (idx[:, 0], idx[:, 1], idx[:, 2]), 1)
    assert counts[joint == 0].sum() == 0, "a centre was drawn twice"
    assert joint[joint > 0].min() * len(idx) >= 5  # the chi-square approximation is valid
    assert chisquare_pvalue(counts.ravel(), joint.ravel()) > 1e-3
    assert chisquare_pvalue(counts.ravel(), wrong.ravel()) < 1e-3


def test_random_init_is_uniform_over_ordered_k_subsets():
    n, k = 5, 2
    idx = _indices(PLANE, k, 20000, "random", seed=3)
    assert (idx[:, 0] != idx[:, 1]).all()
    cells = list(itertools.permutations(range(n), k))
    counts = np.array([np.sum((idx[:, 0] == a) & (idx[:, 1] == b)) for a, b in cells])
    assert counts.sum() == len(idx)
    assert chisquare_pvalue(counts, np.full(len(cells), 1 / len(cells))) > 1e-3
    # inclusion frequencies: every point is a centre with probability k/n
    inclusion = np.bincount(idx.ravel(), minlength=n)
    assert chisquare_pvalue(inclusion, np.full(n, 1 / n)) > 1e-3
    # power: a sampler biased towards low indices would be rejected
    biased = np.array([2.0 if a == 0 else 1.0 for a, _ in cells])
    assert chisquare_pvalue(counts, biased / biased.sum()) < 1e-3


@pytest.mark.parametrize("method", INIT_METHODS)
@pytest.mark.parametrize("k", [1, 5, 12])
def test_centers_are_distinct_data_points_of_their_task(method, k):
    X = sample_tasks(200, 12, 3, 4, generator=4, dtype=F64)
    assert all(len(set(map(tuple, x.tolist()))) == 12 for x in X)  # the points are distinct
    C = init_centers(X, k, method=method, generator=5)
    assert C.shape == (200, k, 3) and C.dtype == F64
    idx = row_indices(X, C)
    assert (idx >= 0).all()
    for row in idx.tolist():
        assert len(set(row)) == k
    if k == 12:  # all points chosen: a permutation
        assert (idx.sort(dim=1).values == torch.arange(12)).all()


@pytest.mark.parametrize("method", INIT_METHODS)
def test_determinism_under_a_seed(method):
    X = sample_tasks(16, 30, 2, 4, generator=6)
    a = init_centers(X, 4, method=method, generator=7)
    b = init_centers(X, 4, method=method, generator=7)
    assert torch.equal(a, b)
    g = torch.Generator().manual_seed(7)
    assert torch.equal(init_centers(X, 4, method=method, generator=g), a)
    # a Generator advances: a second call with it draws anew
    assert not torch.equal(init_centers(X, 4, method=method, generator=g), a)
    assert not torch.equal(init_centers(X, 4, method=method, generator=8), a)
    assert a.dtype == X.dtype == torch.float32


def test_kmeanspp_with_coincident_points():
    # All points equal: no D^2 mass is left after the first centre; the rest are drawn uniformly.
    X = torch.full((3, 4, 2), 0.25, dtype=F64)
    C = init_centers(X, 3, method="kmeans++", generator=0)
    assert torch.equal(C, torch.full((3, 3, 2), 0.25, dtype=F64))
    # Points {a, a, a, b}: the second centre always differs from the first (D^2 puts no mass on it).
    X = torch.tensor([[[0.0], [0.0], [0.0], [1.0]]], dtype=F64).repeat(500, 1, 1)
    C = init_centers(X, 2, method="kmeans++", generator=1)
    assert (C[:, 0] != C[:, 1]).all()
    # ... and the first centre is b with probability 1/4
    n_b = int((C[:, 0, 0] == 1.0).sum())
    assert 70 <= n_b <= 180, n_b  # Binomial(500, 1/4): mean 125, sd 9.7


def test_kmeanspp_spreads_centers_more_than_random():
    # On well-separated data D^2 seeding hits more distinct components than uniform seeding.
    X, mix = sample_tasks(400, 60, 2, 5, scale=0.01, generator=9, dtype=F64, return_mixture=True)

    def components_hit(method):
        idx = row_indices(X, init_centers(X, 5, method=method, generator=10))
        comp = torch.gather(mix.components, 1, idx)
        return torch.tensor([len(set(c)) for c in comp.tolist()], dtype=F64).mean().item()

    assert components_hit("kmeans++") > components_hit("random") + 0.5


@requires_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("method", INIT_METHODS)
def test_init_on_cuda(method):
    X = sample_tasks(32, 40, 2, 4, generator=11, dtype=F64, device="cuda")
    C = init_centers(X, 4, method=method, generator=12)
    assert C.device.type == "cuda"
    idx = row_indices(X, C)
    assert (idx >= 0).all()
    assert all(len(set(r)) == 4 for r in idx.tolist())
    assert torch.equal(C, init_centers(X, 4, method=method, generator=12))


# ---------------------------------------------------------------------- greedy k-means++
def _potential(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """The k-means potential of every seeding C (R, k, d) on the points X (n, d)."""
    return ((X[None, :, None, :] - C[:, None, :, :]) ** 2).sum(-1).min(-1).sum(-1)


def test_greedy_kmeanspp_matches_sklearn_statistics_and_beats_d2():
    from sklearn.cluster import kmeans_plusplus
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(600, centers=20, n_features=4, cluster_std=1.0, random_state=0)
    k, R = 20, 150
    ours = init_centers(torch.tensor(X).expand(R, *X.shape), k, "kmeans++", 0, n_local_trials=None).numpy()
    d2 = init_centers(torch.tensor(X).expand(R, *X.shape), k, "kmeans++", 0).numpy()
    theirs = np.stack([kmeans_plusplus(X, k, random_state=s)[0] for s in range(R)])
    mean_ours, mean_theirs, mean_d2 = (_potential(X, C).mean() for C in (ours, theirs, d2))
    assert abs(mean_ours / mean_theirs - 1) < 0.05
    assert mean_ours < 0.9 * mean_d2


def test_greedy_kmeanspp_deterministic_and_translation_safe():
    X = sample_tasks(4, 200, 3, 6, generator=0, dtype=F64)
    a = init_centers(X, 6, "kmeans++", 7, n_local_trials=None)
    assert torch.equal(a, init_centers(X, 6, "kmeans++", 7, n_local_trials=None))
    assert (row_indices(X, a) >= 0).all()
    # the same draws on the data moved by 1e9 (distances about the data's mean lose no digits)
    moved = init_centers(X + 1e9, 6, "kmeans++", 7, n_local_trials=None)
    assert torch.equal(row_indices(X + 1e9, moved), row_indices(X, a))


def test_one_local_trial_is_plain_d2_and_bad_trials_are_refused():
    X = sample_tasks(3, 100, 2, 4, generator=1, dtype=F64)
    assert torch.equal(init_centers(X, 4, "kmeans++", 3), init_centers(X, 4, "kmeans++", 3, n_local_trials=1))
    with pytest.raises(ValueError, match="n_local_trials"):
        init_centers(X, 4, "kmeans++", 3, n_local_trials=0)
