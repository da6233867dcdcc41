"""kmtlib.lloyd and kmtlib.kmeans_objective against independent oracles.

* scikit-learn's KMeans (algorithm="lloyd") on >= 1000 random clean tasks (no empty cluster at any
  step, assignment margin >= 1e-9 at every step), float64, centres to 1e-10, identical labels;
* a per-cluster NumPy Lloyd loop for the "mean" and "keep" empty-cluster rules;
* crafted tasks where a cluster provably goes empty, for each rule;
* a brute-force NumPy k-means objective.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _helpers import chisquare_pvalue, min_assignment_margin, numpy_lloyd, requires_cuda, row_indices
from threadpoolctl import threadpool_limits

import kmtlib
from kmtlib import EMPTY_RULES, init_centers, kmeans_objective, lloyd, sample_tasks
from kmtlib.lloyd import lloyd_step

F64 = torch.float64
MARGIN = 1e-9  # minimum assignment margin (squared-distance units) for exact-match comparisons


def _random_task_batch(rng: np.random.Generator, config: int, B: int):
    """B tasks of one random shape (n 5..300, d 1..8, k 1..8, T 1..15) with one of three seedings."""
    k = int(rng.integers(1, 9))
    n = int(rng.integers(max(k, 5), 301))
    d = int(rng.integers(1, 9))
    T = int(rng.integers(1, 16))
    seed = int(rng.integers(2**31))
    X = sample_tasks(B, n, d, k, family=kmtlib.FAMILIES[config % 5], generator=seed, dtype=F64)
    init = ("random", "kmeans++", "box")[config % 3]
    if init == "box":  # centres that are not data points: uniform in the unit box
        g = torch.Generator().manual_seed(seed + 1)
        C0 = torch.rand(B, k, d, generator=g, dtype=F64)
    else:
        C0 = init_centers(X, k, method=init, generator=seed + 1)
    return X, C0, T


# --------------------------------------------------------------------------------------------
# 1. scikit-learn equivalence on clean tasks
# --------------------------------------------------------------------------------------------


def test_lloyd_matches_sklearn_on_1000_clean_tasks():
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(20250619)
    B = 4
    compared = rejected_empty = rejected_margin = 0
    worst_center = worst_inertia = 0.0
    with threadpool_limits(1):
        for config in range(330):
            X, C0, T = _random_task_batch(rng, config, B)
            res = lloyd(X, C0, T, empty="mean")
            has_empty = res.n_empty.sum(dim=1) > 0
            margin = min_assignment_margin(X, res.centers)
            for b in range(B):
                if has_empty[b]:
                    rejected_empty += 1
                    continue
                if margin[b] < MARGIN:
                    rejected_margin += 1
                    continue
                k = C0.shape[1]
                km = KMeans(n_clusters=k, init=C0[b].numpy(), n_init=1, max_iter=T, tol=0, algorithm="lloyd")
                km.fit(X[b].numpy())
                ours = res.final_centers[b].numpy()
                assert km.n_iter_ <= T
                # sklearn stops early only at a fixed point, so its centres equal ours after T steps.
                np.testing.assert_allclose(km.cluster_centers_, ours, rtol=0, atol=1e-10)
                np.testing.assert_array_equal(km.labels_, res.labels[b].numpy())
                # sklearn's inertia_ is evaluated with the final centres and final labels, as ours.
                ref = km.inertia_
                got = res.objective[b, -1].item()
                assert abs(got - ref) <= 1e-10 * abs(ref) + 1e-300, (got, ref)
                worst_center = max(worst_center, float(np.abs(km.cluster_centers_ - ours).max()))
                worst_inertia = max(worst_inertia, abs(got - ref) / max(abs(ref), 1e-300))
                compared += 1
    print(
        f"compared {compared} tasks (rejected: {rejected_empty} with an empty cluster, "
        f"{rejected_margin} with margin < {MARGIN}); worst centre error {worst_center:.2e}, "
        f"worst relative inertia error {worst_inertia:.2e}"
    )
    assert compared >= 1000


# --------------------------------------------------------------------------------------------
# Result structure and internal consistency
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_result_shapes_and_dtypes(steps):
    X = sample_tasks(3, 20, 2, 4, generator=0, dtype=F64)
    C0 = init_centers(X, 4, generator=1)
    res = lloyd(X, C0, steps)
    assert isinstance(res, kmtlib.ClusteringResult)
    assert res.centers.shape == (3, steps + 1, 4, 2) and res.centers.dtype == F64
    assert res.labels.shape == (3, 20) and res.labels.dtype == torch.int64
    assert res.objective.shape == (3, steps + 1) and res.objective.dtype == F64
    assert res.n_empty.shape == (3, steps) and res.n_empty.dtype == torch.int64
    assert res.steps == steps
    assert torch.equal(res.centers[:, 0], C0)
    assert torch.equal(res.final_centers, res.centers[:, -1])


@pytest.mark.parametrize("empty", EMPTY_RULES)
def test_objective_labels_consistent_and_monotone(empty):
    # k=6 centres drawn uniformly in the box on 3-component data: empty clusters are frequent.
    X = sample_tasks(64, 30, 2, 3, generator=5, dtype=F64)
    C0 = torch.rand(64, 6, 2, generator=torch.Generator().manual_seed(6), dtype=F64)
    res = lloyd(X, C0, 8, empty=empty, generator=7)
    assert res.n_empty.sum() > 0  # the case the test is about does occur
    for t in range(res.steps + 1):
        C = res.centers[:, t]
        torch.testing.assert_close(res.objective[:, t], kmeans_objective(X, C), rtol=1e-14, atol=0)
        # against distances from explicit differences (the minimum does not depend on tie-breaks)
        D = ((X.unsqueeze(2) - C.unsqueeze(1)) ** 2).sum(-1)
        torch.testing.assert_close(res.objective[:, t], D.amin(-1).sum(-1), rtol=1e-12, atol=1e-14)
    # the same labels as nearest_center (which reads the points in another layout, so its scores
    # may round differently) on the tasks with no point near a tie; centres that empty clusters
    # share are exact ties in both (equal centres get equal scores), won by the lowest index
    ok = min_assignment_margin(X, res.centers[:, -1:], merge_duplicates=True) >= MARGIN
    assert ok.sum() >= 32
    assert torch.equal(res.labels[ok], kmtlib.nearest_center(X, res.final_centers)[ok])
    # Lloyd never increases the objective, whatever happens to an empty centre (it holds no point).
    increase = res.objective[:, 1:] - res.objective[:, :-1]
    assert (increase <= 1e-12 * res.objective[:, :-1]).all()


def test_a_fixed_point_repeats():
    X = sample_tasks(8, 40, 3, 3, generator=11, dtype=F64)
    C0 = init_centers(X, 3, method="kmeans++", generator=12)
    res = lloyd(X, C0, 60)
    # 60 steps are plenty for 40 points: the last steps are an exact fixed point.
    assert torch.equal(res.centers[:, -1], res.centers[:, -2])
    again = lloyd(X, res.final_centers, 3)
    assert torch.equal(again.centers[:, -1], res.final_centers)
    assert torch.equal(again.labels, res.labels)


def test_exact_ties_go_to_the_lowest_index():
    # Two identical initial centres: every point is tied between them and goes to the lower index,
    # so the higher one is empty at the first step.
    X = sample_tasks(2, 10, 2, 2, generator=3, dtype=F64)
    C0 = X[:, :1].repeat(1, 2, 1)
    res = lloyd(X, C0, 1, empty="keep")
    assert res.n_empty[:, 0].tolist() == [1, 1]
    torch.testing.assert_close(res.centers[:, 1, 0], X.mean(1), rtol=1e-15, atol=0)
    assert torch.equal(res.centers[:, 1, 1], C0[:, 1])
    assert torch.equal(kmtlib.nearest_center(X, C0), torch.zeros(2, 10, dtype=torch.int64))


# --------------------------------------------------------------------------------------------
# 2. Empty-cluster rules
# --------------------------------------------------------------------------------------------

# Two tight groups and a third centre far from every point: cluster 2 is empty at step 1, and
# (for "mean" and "keep") at every later step, since the global mean (16/3, 16/3) and (100, 100)
# are both farther from every point than its group's mean.
_POINTS = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [10.0, 10.0], [11.0, 10.0], [10.0, 11.0]], dtype=F64)
_C0 = torch.tensor([[0.5, 0.5], [10.5, 10.5], [100.0, 100.0]], dtype=F64)
_GROUP_MEANS = torch.tensor([[1 / 3, 1 / 3], [31 / 3, 31 / 3]], dtype=F64)


def _crafted(batch: int = 1):
    return _POINTS.expand(batch, 6, 2).clone(), _C0.expand(batch, 3, 2).clone()


def test_empty_rule_mean_moves_to_the_mean_of_all_points():
    X, C0 = _crafted()
    res = lloyd(X, C0, 4, empty="mean")
    assert res.n_empty.tolist() == [[1, 1, 1, 1]]
    overall = torch.from_numpy(_POINTS.numpy().mean(0))
    for t in range(1, 5):
        torch.testing.assert_close(res.centers[0, t, 2], overall, rtol=1e-15, atol=0)
        torch.testing.assert_close(res.centers[0, t, :2], _GROUP_MEANS, rtol=1e-15, atol=0)
    assert res.labels.tolist() == [[0, 0, 0, 1, 1, 1]]


def test_empty_rule_keep_leaves_the_center_in_place():
    X, C0 = _crafted()
    res = lloyd(X, C0, 4, empty="keep")
    assert res.n_empty.tolist() == [[1, 1, 1, 1]]
    for t in range(1, 5):
        assert torch.equal(res.centers[0, t, 2], C0[0, 2])
        torch.testing.assert_close(res.centers[0, t, :2], _GROUP_MEANS, rtol=1e-15, atol=0)


def test_empty_rule_random_takes_a_data_point_of_its_own_task():
    X, C0 = _crafted(batch=64)
    # Make the tasks differ, so "a point of that task" is a real constraint.
    X = X + torch.arange(64, dtype=F64).view(64, 1, 1) * 1000.0
    C0 = C0 + torch.arange(64, dtype=F64).view(64, 1, 1) * 1000.0
    C0[:, 2] = -1e6
    res = lloyd(X, C0, 1, empty="random", generator=123)
    assert (res.n_empty[:, 0] == 1).all()
    idx = row_indices(X, res.centers[:, 1, 2:3])[:, 0]
    assert (idx >= 0).all(), "the replacement must be a point of the same task"
    torch.testing.assert_close(res.centers[:, 1, :2], _GROUP_MEANS + res.centers[:, 0, :2] - _C0[:2], rtol=0, atol=1e-9)
    assert len(set(idx.tolist())) > 1, "64 tasks all drew the same point: not random"

    # determinism: same seed, same draws; a Generator with that seed, same draws; another seed differs
    again = lloyd(X, C0, 1, empty="random", generator=123)
    assert torch.equal(again.centers, res.centers)
    via_generator = lloyd(X, C0, 1, empty="random", generator=torch.Generator().manual_seed(123))
    assert torch.equal(via_generator.centers, res.centers)
    other = lloyd(X, C0, 1, empty="random", generator=124)
    assert not torch.equal(other.centers, res.centers)


def test_empty_rule_random_is_uniform_over_the_points():
    X, C0 = _crafted(batch=6000)
    res = lloyd(X, C0, 1, empty="random", generator=2024)
    idx = row_indices(X, res.centers[:, 1, 2:3])[:, 0]
    assert (idx >= 0).all()
    counts = np.bincount(idx.numpy(), minlength=6)
    assert chisquare_pvalue(counts, np.full(6, 1 / 6)) > 1e-3, counts


@pytest.mark.parametrize("empty", EMPTY_RULES)
def test_n_empty_counts_every_empty_cluster(empty):
    X = _POINTS.unsqueeze(0)
    C0 = torch.cat([_C0, torch.tensor([[-50.0, 80.0]], dtype=F64)]).unsqueeze(0)  # two far centres
    res = lloyd(X, C0, 1, empty=empty, generator=0)
    assert res.n_empty.tolist() == [[2]]


@pytest.mark.parametrize("empty", EMPTY_RULES)
def test_one_lloyd_step_is_the_first_step_of_lloyd(empty):
    """lloyd_step (the read-out and the layer inspection use it) is lloyd's own step, bitwise:
    centres, the assignment to the old centres, and the cluster sizes."""
    X, C0 = _crafted()
    C0 = torch.cat([C0, torch.tensor([[[-50.0, 80.0]]], dtype=F64)], dim=1)  # one more empty cluster
    run = lloyd(X, C0, 1, empty=empty, generator=3)
    new, labels, counts = lloyd_step(X, C0, empty=empty, generator=3)
    assert torch.equal(new, run.centers[:, 1])
    assert torch.equal(labels, kmtlib.nearest_center(X, C0))
    assert torch.equal(counts == 0, torch.ones_like(counts, dtype=torch.bool).scatter(1, labels, False))
    assert torch.equal((counts == 0).sum(1), run.n_empty[:, 0])


@pytest.mark.parametrize("empty", ["mean", "keep"])
def test_batched_tasks_are_independent(empty):
    X_empty, C0_empty = _crafted()
    g = torch.Generator().manual_seed(42)
    X_clean = torch.rand(1, 6, 2, generator=g, dtype=F64)
    C0_clean = X_clean[:, [0, 2, 4]].clone()
    X = torch.cat([X_empty, X_clean])
    C0 = torch.cat([C0_empty, C0_clean])
    batch = lloyd(X, C0, 5, empty=empty)
    assert (batch.n_empty[0] == 1).all() and (batch.n_empty[1] == 0).all()
    for b in range(2):
        alone = lloyd(X[b : b + 1], C0[b : b + 1], 5, empty=empty)
        torch.testing.assert_close(batch.centers[b : b + 1], alone.centers, rtol=0, atol=1e-13)
        torch.testing.assert_close(batch.objective[b : b + 1], alone.objective, rtol=1e-13, atol=0)
        assert torch.equal(batch.labels[b : b + 1], alone.labels)
        assert torch.equal(batch.n_empty[b : b + 1], alone.n_empty)
        ref_traj, ref_labels, ref_empty = numpy_lloyd(X[b].numpy(), C0[b].numpy(), 5, empty)
        np.testing.assert_allclose(batch.centers[b].numpy(), ref_traj, rtol=0, atol=1e-13)
        np.testing.assert_array_equal(batch.labels[b].numpy(), ref_labels)
        np.testing.assert_array_equal(batch.n_empty[b].numpy(), ref_empty)


@pytest.mark.parametrize("empty", ["mean", "keep"])
def test_matches_numpy_reference_with_empty_clusters(empty):
    # sklearn relocates empty clusters differently, so the oracle here is a textbook loop.
    rng = np.random.default_rng(7)
    compared = with_empty = 0
    for config in range(12):
        k = int(rng.integers(3, 9))
        n = int(rng.integers(k, 40))
        d = int(rng.integers(1, 4))
        X = sample_tasks(8, n, d, 2, generator=config, dtype=F64)
        C0 = torch.rand(8, k, d, generator=torch.Generator().manual_seed(100 + config), dtype=F64)
        res = lloyd(X, C0, 6, empty=empty)
        margin = min_assignment_margin(X, res.centers, merge_duplicates=True)
        for b in range(8):
            if margin[b] < MARGIN:
                continue
            traj, labels, n_empty = numpy_lloyd(X[b].numpy(), C0[b].numpy(), 6, empty)
            np.testing.assert_allclose(res.centers[b].numpy(), traj, rtol=0, atol=1e-12)
            np.testing.assert_array_equal(res.labels[b].numpy(), labels)
            np.testing.assert_array_equal(res.n_empty[b].numpy(), n_empty)
            compared += 1
            with_empty += int(n_empty.sum() > 0)
    print(f"compared {compared} of 96 tasks, {with_empty} with an empty cluster")
    assert compared >= 80 and with_empty >= 20, (compared, with_empty)


# --------------------------------------------------------------------------------------------
# 6. kmeans_objective against brute force
# --------------------------------------------------------------------------------------------


def test_kmeans_objective_matches_brute_force():
    rng = np.random.default_rng(3)
    for B, n, k, d in [(1, 1, 1, 1), (5, 17, 3, 2), (4, 50, 7, 5), (2, 9, 9, 3)]:
        X = rng.normal(size=(B, n, d)) * 3.0 + 1.0
        C = rng.normal(size=(B, k, d))
        expected = np.array([min(((x - c) ** 2).sum() for c in C[b]) for b in range(B) for x in X[b]])
        expected = expected.reshape(B, n).sum(1)
        got = kmeans_objective(torch.from_numpy(X), torch.from_numpy(C))
        assert got.shape == (B,) and got.dtype == F64
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-13, atol=0)


def test_kmeans_objective_is_a_sum_not_a_mean():
    X = torch.tensor([[[0.0], [2.0], [4.0]]], dtype=F64)
    C = torch.tensor([[[2.0]]], dtype=F64)
    assert kmeans_objective(X, C).tolist() == [8.0]


# --------------------------------------------------------------------------------------------
# 7. Precision and devices
# --------------------------------------------------------------------------------------------


def test_float32_agrees_with_float64_on_well_separated_data():
    X64 = sample_tasks(32, 100, 2, 3, scale=0.02, generator=8, dtype=F64)
    C0 = init_centers(X64, 3, method="kmeans++", generator=9)
    r64 = lloyd(X64, C0, 10)
    r32 = lloyd(X64.float(), C0.float(), 10)
    assert r32.centers.dtype == torch.float32 and r32.objective.dtype == torch.float32
    # compare the tasks whose float64 run has no near-tie (float32 rounds distances at ~1e-7)
    ok = min_assignment_margin(X64, r64.centers) >= 1e-4
    assert ok.sum() >= 16
    np.testing.assert_array_equal(r32.labels[ok].numpy(), r64.labels[ok].numpy())
    np.testing.assert_allclose(r32.centers[ok].double().numpy(), r64.centers[ok].numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(r32.objective[ok].double().numpy(), r64.objective[ok].numpy(), rtol=1e-4, atol=1e-6)


@requires_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("empty", ["mean", "keep"])
def test_cuda_agrees_with_cpu(empty):
    X = sample_tasks(64, 200, 3, 5, generator=10, dtype=F64)
    C0 = init_centers(X, 5, method="kmeans++", generator=11)
    cpu = lloyd(X, C0, 12, empty=empty)
    gpu = lloyd(X.cuda(), C0.cuda(), 12, empty=empty)
    assert gpu.centers.device.type == "cuda" and gpu.labels.device.type == "cuda"
    gpu = gpu.to("cpu")
    ok = min_assignment_margin(X, cpu.centers) >= MARGIN
    assert ok.sum() >= 48
    torch.testing.assert_close(gpu.centers[ok], cpu.centers[ok], rtol=0, atol=1e-10)
    assert torch.equal(gpu.labels[ok], cpu.labels[ok])
    assert torch.equal(gpu.n_empty[ok], cpu.n_empty[ok])
    torch.testing.assert_close(gpu.objective[ok], cpu.objective[ok], rtol=1e-10, atol=0)
    torch.testing.assert_close(
        kmeans_objective(X.cuda(), C0.cuda()).cpu()[ok], kmeans_objective(X, C0)[ok], rtol=1e-12, atol=0
    )
