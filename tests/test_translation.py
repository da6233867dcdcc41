"""Data far from the origin: distances are taken about a centre of the data (issue 26, item 1).

Each case is a user's data that the expansion ``||x||^2 - 2 x.c + ||c||^2`` about the origin gets
wrong: millisecond timestamps (1.7e12, four bursts 5 s apart) and unit clusters at an offset of
1e9. From the same start, ``kmtlib.lloyd``, ``nearest_center``/``kmeans_objective`` and the theorem
estimator must give ``KMeans``' labels.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans

import kmtlib
from kmtlib.estimator import TransformerKMeans
from kmtlib.objective import data_shift, kmeans_objective, nearest_center, squared_distances

STEPS = 10


def _timestamps(seed: int) -> tuple[np.ndarray, int]:
    """Millisecond timestamps near 1.7e12: four bursts of 1 s, 5 s apart (n = 160, d = 1)."""
    rng = np.random.default_rng(seed)
    X = np.concatenate([1.7e12 + 5000.0 * j + rng.uniform(0.0, 1000.0, size=(40, 1)) for j in range(4)])
    return X, 4


def _offset(seed: int) -> tuple[np.ndarray, int]:
    """Three unit normal clusters 3 apart, at an offset of 1e9 (n = 150, d = 2)."""
    rng = np.random.default_rng(seed)
    means = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    return np.concatenate([m + rng.normal(size=(50, 2)) for m in means]) + 1e9, 3


CASES = [pytest.param(_timestamps, id="timestamps"), pytest.param(_offset, id="offset-1e9")]


def _start_and_kmeans(make, seed: int) -> tuple[np.ndarray, np.ndarray, KMeans]:
    X, k = make(seed)
    C0 = X[np.random.default_rng(seed + 100).choice(len(X), k, replace=False)]
    km = KMeans(k, init=C0, n_init=1, algorithm="lloyd", max_iter=STEPS, tol=0).fit(X)
    return X, C0, km


@pytest.mark.parametrize("make", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lloyd_far_from_origin_gives_kmeans_labels(make, seed):
    X, C0, km = _start_and_kmeans(make, seed)
    result = kmtlib.lloyd(torch.tensor(X)[None], torch.tensor(C0)[None], STEPS)
    np.testing.assert_array_equal(result.labels[0].numpy(), km.labels_)
    spread = float(X.max(0).min() - X.min(0).max()) if X.shape[1] == 1 else 3.0
    np.testing.assert_allclose(result.centers[0, -1].numpy(), km.cluster_centers_, rtol=0, atol=1e-6 * spread)
    np.testing.assert_allclose(float(result.objective[0, -1]), km.inertia_, rtol=1e-6)


@pytest.mark.parametrize("make", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nearest_center_and_objective_far_from_origin(make, seed):
    X, _, km = _start_and_kmeans(make, seed)
    Xt, Ct = torch.tensor(X)[None], torch.tensor(km.cluster_centers_)[None]
    # (KMeans.predict itself computes about the origin: labels_ are from its centred fit)
    np.testing.assert_array_equal(nearest_center(Xt, Ct)[0].numpy(), km.labels_)
    np.testing.assert_allclose(float(kmeans_objective(Xt, Ct)[0]), km.inertia_, rtol=1e-6)
    # the squared distances themselves, against the differences
    exact = ((Xt.unsqueeze(2) - Ct.unsqueeze(1)) ** 2).sum(-1)
    np.testing.assert_allclose(squared_distances(Xt, Ct).numpy(), exact.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("make", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_theorem_estimator_far_from_origin_gives_kmeans_labels(make, seed):
    X, C0, km = _start_and_kmeans(make, seed)
    est = TransformerKMeans(len(C0), model="theorem", init=C0, steps=STEPS).fit(X)
    np.testing.assert_array_equal(est.labels_, km.labels_)
    np.testing.assert_allclose(est.inertia_, km.inertia_, rtol=1e-6)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_translating_data_keeps_lloyd_labels(seed, dtype):
    """Property: on well-separated data, translating points and start by a large vector leaves
    Lloyd's labels unchanged (float32: offsets its spacing can still resolve)."""
    g = torch.Generator().manual_seed(seed)
    k, d = 4, 3
    locations = 10.0 * torch.randn(k, d, generator=g, dtype=torch.float64)
    components = torch.arange(200) % k
    X = locations[components] + 0.5 * torch.randn(200, d, generator=g, dtype=torch.float64)
    C0 = X[torch.randperm(200, generator=g)[:k]]
    reference = kmtlib.lloyd(X[None].to(dtype), C0[None].to(dtype), STEPS)
    scale = 1e4 if dtype == torch.float32 else 1e12
    for _ in range(3):
        v = scale * torch.randn(d, generator=g, dtype=torch.float64)
        moved = kmtlib.lloyd((X + v)[None].to(dtype), (C0 + v)[None].to(dtype), STEPS)
        torch.testing.assert_close(moved.labels, reference.labels, rtol=0, atol=0)


def test_book_tasks_are_not_shifted():
    """Tasks rescaled to [0, 1]^d (the book's) keep the distances about the origin, so every book
    number stays bitwise; far ones are shifted per task."""
    X = kmtlib.sample_tasks(64, 100, 3, 4, family="lognormal", generator=0, dtype=torch.float64)
    assert data_shift(X) is None
    far = X.clone()
    far[1] += 1e9
    shift = data_shift(far)
    assert shift is not None
    assert bool((shift[0] == 0).all()) and bool((shift[1] > 1e9 - 1).all())


def test_frame_is_per_task():
    """One batch of a book task, a task at an offset of 1e9 and one at 1e200 (whose squares need
    the power of two too): every task gets the labels and the objective it gets alone, and the
    book task's are bitwise those of the expansion about the origin."""
    g = torch.Generator().manual_seed(0)
    base = torch.rand(3, 60, 2, generator=g, dtype=torch.float64)
    X = torch.stack([base[0], base[1] + 1e9, base[2] * 1e191 + 1e200])
    C = X[:, :4].clone()
    labels, objective = nearest_center(X, C), kmeans_objective(X, C)
    for b in range(3):
        torch.testing.assert_close(labels[b : b + 1], nearest_center(X[b : b + 1], C[b : b + 1]), rtol=0, atol=0)
        torch.testing.assert_close(objective[b : b + 1], kmeans_objective(X[b : b + 1], C[b : b + 1]), rtol=0, atol=0)
    exact = ((X.unsqueeze(2) - C.unsqueeze(1)) ** 2).sum(-1)  # (these differences are exact here)
    torch.testing.assert_close(labels[:2], exact[:2].argmin(-1), rtol=0, atol=0)
    far = (X[2:] - 1e200) / 1e191  # (x - 1e200 is exact: Sterbenz)
    centred = ((far.unsqueeze(2) - ((C[2:] - 1e200) / 1e191).unsqueeze(1)) ** 2).sum(-1)
    torch.testing.assert_close(labels[2:], centred.argmin(-1), rtol=0, atol=0)
    about_origin = torch.baddbmm(
        (X[:1] ** 2).sum(-1, keepdim=True) + (C[:1] ** 2).sum(-1).unsqueeze(1), X[:1], C[:1].transpose(1, 2), alpha=-2.0
    )
    torch.testing.assert_close(labels[:1], about_origin.argmin(-1), rtol=0, atol=0)
    assert bool(torch.isfinite(objective[:2]).all())
