"""The robust (sparse attention) and randomised k-medoids (Gumbel attention) circuit variants.

* The sparse maps against the ``entmax`` package and against the reference's own sort and
  bisection algorithms; the Gumbel map's selection law by a chi-square test.
* ``robust``: the model against :func:`robust_kmeans` (float64, tie-free tasks, 1e-11), its two
  limits (beta -> 0 is Lloyd, beta -> infinity freezes the centres on data points) and the
  property that makes it robust (a point outside the support can move away without effect).
* ``kmedoids``: the model against :func:`randomised_kmedoids` draw for draw (bitwise), centres that
  are data points bitwise after every step, ``tau = 0`` against ``kmedoids.alternating``, the
  objective against ``kmedoids.pam``, and the Gibbs law of one step by a chi-square test.

Bitwise claims between the model and a reference rest on the same arithmetic (the k-medoids
costs, the tie-breaks) or on a stated margin: the model's assignment and its Gumbel scores come
from matrix products in another layout than the reference's, so the tests first check that the
reference's decisions are at least MARGIN away from a tie (:func:`_medoid_margins`), far above
any CPU's rounding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _helpers import chisquare_pvalue, min_assignment_margin

import kmtlib
from kmtlib import KMeansTransformer, lloyd
from kmtlib.attention import ATTENTION_MAPS
from kmtlib.reference import randomised_kmedoids, robust_kmeans
from kmtlib.reference.kmedoids import medoid_costs, medoid_indices, pairwise_sq_distances
from kmtlib.reference.robust import masked_entmax, masked_sparsemax, robust_support
from kmtlib.variants.attention_maps import (
    entmax15_attention,
    entmax_attention,
    gumbel_max_attention,
    sparsemax_attention,
)

entmax = pytest.importorskip("entmax")  # (extra "variants": installed in CI, so these run)
kmedoids = pytest.importorskip("kmedoids")

F64 = torch.float64
MARGIN = 1e-9


def _medoid_margins(X, C0, steps, tau, seed, best_two=False):
    """Per task (B,): how far the decisions of ``randomised_kmedoids(X, C0, steps, tau, seed)`` are
    from a tie, replayed step by step with the same draws: the assignment (second smallest minus
    smallest distance), and the selection -- at tau > 0 the best minus the second best value
    ``-cost / tau + g`` of each cluster (the model ranks rounded, shifted scores), at tau = 0 the
    gap between the least cost and the cost of rank EXACT_CANDIDATES + 1 (the model re-scores
    exactly only its best few candidates by rounded scores; exact ties are the reference's own,
    bitwise the model's). ``best_two``: at tau = 0 the gap between the two least costs instead
    (for codes that sum the costs in another order), bitwise-equal costs excepted (a two-point
    cluster's tie, one term in every order, decided by the tie-break rule)."""
    from kmtlib.attention import standard_gumbel
    from kmtlib.variants.kmedoids import EXACT_CANDIDATES

    ref = randomised_kmedoids(X, C0, steps, tau=tau, generator=seed)
    g = torch.Generator().manual_seed(seed)
    B, n, _ = X.shape
    k = C0.shape[1]
    out = min_assignment_margin(X, ref.centers)
    for t in range(steps):
        labels = kmtlib.nearest_center(X, ref.centers[:, t])
        cost, member = medoid_costs(X, labels, k)
        if tau > 0:
            value = -cost / tau + standard_gumbel((B, k, n), dtype=X.dtype, device=X.device, generator=g)
            two = value.masked_fill(~member, -math.inf).topk(2, dim=-1).values
            gap = torch.where(member.sum(-1) > 1, two[..., 0] - two[..., 1], math.inf)
        elif best_two:
            two = cost.masked_fill(~member, math.inf).topk(2, dim=-1, largest=False).values
            gap = torch.where((member.sum(-1) > 1) & (two[..., 1] != two[..., 0]), two[..., 1] - two[..., 0], math.inf)
        else:
            r = min(EXACT_CANDIDATES + 1, n)
            ordered = cost.masked_fill(~member, math.inf).topk(r, dim=-1, largest=False).values
            gap = torch.where(member.sum(-1) >= r, ordered[..., -1] - ordered[..., 0], math.inf)
        out = torch.minimum(out, gap.amin(-1))
    return out, ref


def _tasks(seed: int, B: int = 12, n: int = 90, d: int = 2, k: int = 4, family: str = "normal"):
    g = torch.Generator().manual_seed(seed)
    X = kmtlib.sample_tasks(B, n, d, k, family=family, generator=g, dtype=F64)
    C0 = kmtlib.init_centers(X, k, generator=g)
    return X, C0


# ------------------------------------------------------------------------------ the maps
def test_maps_are_registered():
    for name in ("sparsemax", "entmax15", "entmax", "gumbel"):
        assert name in ATTENTION_MAPS


@pytest.mark.parametrize("gamma", [0.3, 1.0, 7.0])
def test_sparse_maps_equal_entmax_package(gamma):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(5, 7, 30, generator=g, dtype=F64)
    # shift invariance: the maps subtract the row maximum first
    assert torch.allclose(sparsemax_attention(s, gamma), entmax.sparsemax(gamma * s, dim=-1), atol=1e-14)
    assert torch.allclose(entmax15_attention(s, gamma), entmax.entmax15(gamma * s, dim=-1), atol=1e-14)
    bis = entmax.entmax_bisect(gamma * s, alpha=1.3, dim=-1, n_iter=60)
    assert torch.allclose(entmax_attention(s, gamma, alpha=1.3, n_iter=60), bis, atol=1e-12)


@pytest.mark.parametrize("alpha", [1.2, 1.5, 1.8, 2.0])
def test_reference_maps_equal_entmax_package(alpha):
    """The reference's own sort (alpha = 2) and bisection algorithms against the package, with masks."""
    g = torch.Generator().manual_seed(1)
    z = 3 * torch.randn(6, 5, 40, generator=g, dtype=F64)
    member = torch.rand(6, 5, 40, generator=g) < 0.6
    member[..., 0] = True
    ours = masked_entmax(z, member, alpha)
    package = entmax_attention(z.masked_fill(~member, -math.inf), 1.0, alpha=alpha, n_iter=80)
    assert (ours - package).abs().max() <= 1e-12
    assert (ours[~member] == 0).all() and (package[~member] == 0).all()
    assert torch.allclose(ours.sum(-1), torch.ones(6, 5, dtype=F64), atol=1e-13)
    assert (ours == 0).any(), "these scores are spread enough to leave keys out of the support"


def test_sparsemax_closed_form_and_masking():
    s = torch.tensor([[[3.0, 2.5, 0.0, -1.0], [0.0, 0.0, 0.0, -math.inf], [-math.inf] * 4]], dtype=F64)
    w = sparsemax_attention(s)
    assert torch.equal(w[0, 0], torch.tensor([0.75, 0.25, 0.0, 0.0], dtype=F64))
    assert torch.allclose(w[0, 1], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0], dtype=F64))
    assert torch.equal(w[0, 2], torch.full((4,), 0.25, dtype=F64))  # every key masked: uniform
    assert masked_sparsemax(s[:, :1], torch.ones(1, 1, 4, dtype=torch.bool)).allclose(w[:, :1])


def test_sparse_map_bad_options():
    s = torch.zeros(1, 2, 3, dtype=F64)
    with pytest.raises(ValueError, match="alpha"):
        entmax_attention(s, 1.0, alpha=1.0)
    with pytest.raises(ValueError, match="alpha"):
        entmax_attention(s, 1.0, alpha=2.5)
    with pytest.raises(ValueError, match="gamma"):
        sparsemax_attention(s, -1.0)
    with pytest.raises(ValueError, match="gamma"):
        sparsemax_attention(s, math.inf)


def test_gumbel_map_selection_law():
    """One-hot rows whose selected key follows softmax(gamma s); masked keys never chosen."""
    g = torch.Generator().manual_seed(3)
    s = torch.tensor([0.0, -0.5, -1.0, -2.0, -math.inf, 0.3], dtype=F64)
    R = 20000
    w = gumbel_max_attention(s.expand(1, R, 6).clone(), 1.7, generator=g)
    assert torch.equal(w.sum(-1), torch.ones(1, R, dtype=F64)) and set(w.unique().tolist()) == {0.0, 1.0}
    counts = w.sum(dim=(0, 1)).numpy()
    assert counts[4] == 0
    probs = torch.softmax(1.7 * s, dim=0).numpy()
    assert chisquare_pvalue(counts, probs) > 1e-3


def test_gumbel_map_limits_and_errors():
    s = torch.tensor([[[1.0, 3.0, 3.0, -math.inf]]], dtype=F64)
    assert torch.equal(gumbel_max_attention(s, math.inf), torch.tensor([[[0.0, 1.0, 0.0, 0.0]]], dtype=F64))
    noise = torch.zeros(1, 1, 4, dtype=F64)
    assert torch.equal(gumbel_max_attention(s, 2.0, noise=noise), gumbel_max_attention(s, math.inf))
    with pytest.raises(ValueError, match="shape"):
        gumbel_max_attention(s, 1.0, noise=torch.zeros(1, 4, dtype=F64))
    with pytest.raises(ValueError, match="gamma"):
        gumbel_max_attention(s, 0.0)


# ------------------------------------------------------------------------------ robust
ROBUST_CASES = [
    dict(map="sparsemax"),  # the authors' scale 0.01/sqrt(d)
    dict(map="sparsemax", inv_temperature=20.0),
    dict(map="sparsemax", inv_temperature=400.0),
    dict(map="entmax15", inv_temperature=20.0),
    dict(map="entmax", alpha=1.25, inv_temperature=60.0),
    dict(map="entmax", alpha=2.0, inv_temperature=60.0),
]


@pytest.mark.parametrize("options", ROBUST_CASES)
@pytest.mark.parametrize("family", ["normal", "cauchy"])
def test_robust_equals_reference(options, family):
    X, C0 = _tasks(11, family=family, d=3)
    model = KMeansTransformer.from_variant("robust", 3, 4, **options).to(F64)
    out = model(X, C0, steps=6)
    ref = robust_kmeans(X, C0, 6, **options)
    ok = min_assignment_margin(X, ref.centers) > 1e-9  # tie-free tasks only
    assert ok.sum() >= 8
    assert (out.centers - ref.centers)[ok].abs().max() <= 1e-11
    assert torch.equal(out.labels[ok], ref.labels[ok])
    assert torch.allclose(out.objective[ok], ref.objective[ok], rtol=1e-10)


def test_robust_small_beta_is_lloyd_and_empty_cluster_goes_to_mean():
    X, C0 = _tasks(12)
    C0 = C0.clone()
    C0[:, 0] = 50.0  # far away: cluster 0 is empty at the first step
    out = KMeansTransformer.from_variant("robust", 2, 4, inv_temperature=1e-13).to(F64)(X, C0, steps=5)
    ref = lloyd(X, C0, 5, empty="mean")
    assert (min_assignment_margin(X, ref.centers) >= MARGIN).all()  # (two codes' assignments)
    assert (ref.n_empty[:, 0] >= 1).all()
    assert (out.centers - ref.centers).abs().max() <= 1e-11
    assert torch.allclose(out.centers[:, 1, 0], X.mean(dim=1), atol=1e-15)


def test_robust_large_beta_freezes_centers_on_data_points():
    X, C0 = _tasks(13)
    C = C0 + 0.01  # not data points
    out = KMeansTransformer.from_variant("robust", 2, 4, inv_temperature=1e9).to(F64)(X, C, steps=3)
    assert (min_assignment_margin(X, out.centers) >= MARGIN).all()  # (two codes' assignments)
    labels = kmtlib.nearest_center(X, C)
    for b in range(X.shape[0]):
        for j in range(4):
            members = X[b, labels[b] == j]
            sq = ((members - C[b, j]) ** 2).sum(-1)
            if len(sq) > 1:  # the support is the nearest member alone: the next is 1e3 / beta farther
                assert sq.sort().values[1] - sq.min() >= 1e-6
            nearest = members[sq.argmin()]
            assert torch.allclose(out.centers[b, 1, j], nearest, atol=1e-15)
    assert (out.centers[:, 3] - out.centers[:, 1]).abs().max() <= 1e-15  # frozen


def test_robust_far_points_have_no_pull():
    """A member outside the sparsemax support can move farther away without changing the update."""
    X, C0 = _tasks(14, family="cauchy", B=6)
    beta = 50.0
    w, member = robust_support(X, C0, inv_temperature=beta)
    dropped = (member & (w == 0)).any(dim=1)  # (B, n): members with weight exactly 0
    assert dropped.any()
    labels = kmtlib.nearest_center(X, C0)
    # push dropped points away from their centre along the ray centre -> point, where they stay
    # members of the same cluster (a Voronoi cell need not contain the whole ray)
    own = torch.gather(C0, 1, labels.unsqueeze(-1).expand_as(X))
    pushed = own + 3.0 * (X - own)
    moved = dropped & (kmtlib.nearest_center(pushed, C0) == labels)
    assert moved.sum() >= 5
    Xf = torch.where(moved.unsqueeze(-1), pushed, X)
    assert torch.equal(kmtlib.nearest_center(Xf, C0), labels)
    model = KMeansTransformer.from_variant("robust", 2, 4, inv_temperature=beta).to(F64)
    # (the model assigns by products, nearest_center in another layout: the same labels here)
    assert (min_assignment_margin(X, C0.unsqueeze(1)) >= MARGIN).all()
    assert (min_assignment_margin(Xf, C0.unsqueeze(1)) >= MARGIN).all()
    a, b = model(X, C0, steps=1).centers[:, 1], model(Xf, C0, steps=1).centers[:, 1]
    assert (a - b).abs().max() <= 1e-14
    la, lb = lloyd(X, C0, 1).centers[:, 1], lloyd(Xf, C0, 1).centers[:, 1]
    assert (la - lb).abs().max() > 1e-3  # Lloyd's means do move


def test_robust_bad_options():
    with pytest.raises(ValueError, match="robust map"):
        KMeansTransformer.from_variant("robust", 2, 3, map="softmax")
    with pytest.raises(ValueError, match="alpha"):
        KMeansTransformer.from_variant("robust", 2, 3, map="sparsemax", alpha=1.5)
    with pytest.raises(ValueError, match="alpha"):
        KMeansTransformer.from_variant("robust", 2, 3, map="entmax", alpha=1.0)
    with pytest.raises(ValueError, match="inv_temperature"):
        KMeansTransformer.from_variant("robust", 2, 3, inv_temperature=0.0)
    with pytest.raises(TypeError, match="gamma"):
        KMeansTransformer.from_variant("robust", 2, 3, gamma=1.0)
    X, C0 = _tasks(15, B=2)
    with pytest.raises(ValueError, match="robust map"):
        robust_kmeans(X, C0, 2, map="hardmax")


def test_robust_save_and_load(tmp_path):
    model = KMeansTransformer.from_variant("robust", 2, 4, map="entmax", alpha=1.4, inv_temperature=30.0)
    path = model.save(tmp_path / "robust.pt")
    again = kmtlib.load_model(path).to(F64)
    X, C0 = _tasks(16, B=3)
    assert torch.equal(again(X, C0, steps=3).centers, model.to(F64)(X, C0, steps=3).centers)


# ------------------------------------------------------------------------------ k-medoids
@pytest.mark.parametrize("tau", [0.0, 0.003, 0.05, 2.0])
def test_kmedoids_equals_reference_draw_for_draw(tau):
    X, C0 = _tasks(21, n=70)
    model = KMeansTransformer.from_variant("kmedoids", 2, 4, tau=tau, seed=5).to(F64)
    out = model(X, C0, steps=7)
    margins, ref = _medoid_margins(X, C0, 7, tau, 5)
    assert (margins >= MARGIN).all(), margins.min()
    assert torch.equal(out.centers, ref.centers)
    assert torch.equal(out.objective, ref.objective)
    if tau > 0:  # the layer's generator continues: a second call draws new noise
        again = model(X, C0, steps=7)
        assert not torch.equal(again.centers, out.centers)
        model.layer.manual_seed(5)
        assert torch.equal(model(X, C0, steps=7).centers, out.centers)


@pytest.mark.parametrize("tau", [0.0, 0.01, 1.0])
def test_kmedoids_centers_are_always_data_points(tau):
    g = torch.Generator().manual_seed(22)
    X = kmtlib.sample_tasks(10, 50, 3, 5, family="cauchy", generator=g, dtype=F64)
    C0 = torch.rand(10, 5, 3, generator=g, dtype=F64) * 3 - 1  # not data points; some clusters empty
    C0[:, 0] = 40.0
    out = KMeansTransformer.from_variant("kmedoids", 3, 5, tau=tau, seed=1).to(F64)(X, C0, steps=6)
    for t in range(1, 7):
        assert (medoid_indices(X, out.centers[:, t]) >= 0).all(), f"step {t}"


def test_kmedoids_empty_cluster_takes_the_medoid_of_all_points():
    X, C0 = _tasks(23, B=4, n=40)
    C0 = C0.clone()
    C0[:, 2] = -30.0
    out = KMeansTransformer.from_variant("kmedoids", 2, 4).to(F64)(X, C0, steps=1)
    D = pairwise_sq_distances(X)
    overall = D.sum(-1).argmin(-1)  # the medoid of all points
    # (the model's exact costs are these sums bitwise; it re-scores the best few candidates of
    # its rounded scores, so the medoid must be MARGIN ahead of the fifth best point)
    ordered = D.sum(-1).sort(-1).values
    assert (ordered[:, 1] > ordered[:, 0]).all() and (ordered[:, 4] - ordered[:, 0] >= MARGIN).all()
    assert torch.equal(medoid_indices(X, out.centers[:, 1])[:, 2], overall)


def test_kmedoids_tau0_equals_kmedoids_alternating_and_loss_is_monotone():
    X, C0 = _tasks(24, B=16, n=80, k=5)
    T = 40
    out = KMeansTransformer.from_variant("kmedoids", 2, 5).to(F64)(X, C0, steps=T)
    # (the package assigns and sums costs from D in its own order, the model by products)
    assert (_medoid_margins(X, C0, T, 0.0, 0, best_two=True)[0] >= MARGIN).all()
    start = medoid_indices(X, C0).numpy()
    final = medoid_indices(X, out.centers[:, -1]).numpy()
    D = pairwise_sq_distances(X).numpy()
    for b in range(X.shape[0]):
        alt = kmedoids.alternating(D[b], start[b].astype(np.int64), max_iter=1000)
        assert sorted(alt.medoids.tolist()) == sorted(final[b].tolist()), b
        assert math.isclose(alt.loss, out.objective[b, -1].item(), rel_tol=1e-12)
    steps = torch.diff(out.objective, dim=1)
    assert (steps <= 1e-12).all(), "the alternating step never increases the loss"


def test_kmedoids_objective_against_pam():
    """The model's objective is the k-medoids loss of its medoids; PAM reaches it or better here."""
    X, C0 = _tasks(25, B=10, n=60, k=3)
    out = KMeansTransformer.from_variant("kmedoids", 2, 3).to(F64)(X, C0, steps=30)
    D = pairwise_sq_distances(X).numpy()
    idx = medoid_indices(X, out.centers[:, -1]).numpy()
    wins = 0
    for b in range(X.shape[0]):
        loss = D[b][:, idx[b]].min(axis=1).sum()
        assert math.isclose(loss, out.objective[b, -1].item(), rel_tol=1e-12)
        pam = kmedoids.pam(D[b], 3, init="build")
        wins += pam.loss <= loss * (1 + 1e-12)
    assert wins >= 8  # PAM's swaps find as good a solution or better on (nearly) every task


def test_kmedoids_gibbs_law_of_one_step():
    """Selection probabilities exp(-cost/tau) / sum over the cluster, by a chi-square test."""
    g = torch.Generator().manual_seed(26)
    X1 = torch.rand(1, 14, 2, generator=g, dtype=F64)
    C1 = torch.tensor([[[0.2, 0.2], [0.8, 0.8]]], dtype=F64)
    R, tau = 6000, 0.4
    X, C0 = X1.expand(R, 14, 2).clone(), C1.expand(R, 2, 2).clone()
    out = KMeansTransformer.from_variant("kmedoids", 2, 2, tau=tau, seed=9).to(F64)(X, C0, steps=1)
    picks = medoid_indices(X, out.centers[:, 1]).numpy()  # (R, 2)
    # independent law: numpy costs from explicit loops
    x = X1[0].numpy()
    labels = ((x[:, None] - C1[0].numpy()[None]) ** 2).sum(-1).argmin(1)
    for j in range(2):
        members = np.flatnonzero(labels == j)
        cost = np.array([sum(((x[i] - x[m]) ** 2).sum() for m in members) for i in range(14)])
        logits = np.where(labels == j, -cost / tau, -np.inf)
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        counts = np.bincount(picks[:, j], minlength=14)
        assert counts[probs == 0].sum() == 0
        assert (probs > 0.02).sum() >= 3, "the test needs a spread law"
        assert chisquare_pvalue(counts, probs) > 1e-3, j
    cost_ref, member = medoid_costs(X1, torch.as_tensor(labels).unsqueeze(0), 2)
    assert torch.allclose(
        cost_ref[0, 0][member[0, 0]],
        torch.as_tensor(
            [sum(((x[i] - x[m]) ** 2).sum() for m in np.flatnonzero(labels == 0)) for i in np.flatnonzero(labels == 0)]
        ),
    )


def test_kmedoids_bad_options_and_generators():
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="tau"):
            KMeansTransformer.from_variant("kmedoids", 2, 3, tau=bad)
    with pytest.raises(TypeError, match="tau"):
        KMeansTransformer.from_variant("kmedoids", 2, 3, tau="0.1")
    with pytest.raises(ValueError, match="seed"):
        KMeansTransformer.from_variant("kmedoids", 2, 3, seed=-1)
    with pytest.raises(TypeError, match="inv_temperature"):
        KMeansTransformer.from_variant("kmedoids", 2, 3, inv_temperature=1.0)
    X, C0 = _tasks(27, B=2, k=3)
    with pytest.raises(ValueError, match="generator"):
        randomised_kmedoids(X, C0, 2, tau=0.1)
    model = KMeansTransformer.from_variant("kmedoids", 2, 3, tau=0.1)
    with pytest.raises(TypeError, match="Generator"):
        model.layer.generator = 3
    g = torch.Generator().manual_seed(4)
    model.layer.generator = g
    out = model.to(F64)(X, C0, steps=2)
    ref = randomised_kmedoids(X, C0, 2, tau=0.1, generator=torch.Generator().manual_seed(4))
    assert (_medoid_margins(X, C0, 2, 0.1, 4)[0] >= MARGIN).all()
    assert torch.equal(out.centers, ref.centers)


def test_kmedoids_save_and_load(tmp_path):
    model = KMeansTransformer.from_variant("kmedoids", 2, 4, tau=0.02, seed=3)
    again = kmtlib.load_model(model.save(tmp_path / "kmedoids.pt")).to(F64)
    X, C0 = _tasks(28, B=3)
    assert torch.equal(again(X, C0, steps=3).centers, model.to(F64)(X, C0, steps=3).centers)


def test_kmedoids_exact_costs_are_the_reference_costs_bitwise():
    """The model's exact re-scoring and the reference compute every cost with the same operations
    in the same order: bitwise equal (non-dyadic data, n not a multiple of any vector width), and
    the distances do not depend on where a pair sits (equal points: equal rows; symmetric)."""
    from kmtlib.variants.kmedoids import exact_costs

    g = torch.Generator().manual_seed(29)
    B, n, d, k = 3, 37, 5, 4
    X = torch.randn(B, n, d, generator=g, dtype=F64)
    X[:, 30] = X[:, 2]  # a duplicate point
    labels = torch.randint(0, k, (B, n), generator=g)
    cost, member = medoid_costs(X, labels, k)
    every = torch.arange(n).expand(B, k, n)
    assert torch.equal(exact_costs(X, member, every), cost)
    D = pairwise_sq_distances(X)
    assert torch.equal(D, D.transpose(1, 2)) and torch.equal(D[:, 30], D[:, 2])
    perm = torch.randperm(n, generator=g)
    assert torch.equal(pairwise_sq_distances(X[:, perm]), D[:, perm][:, :, perm])
    # a two-point cluster: both points cost the same, bitwise, and the model keeps the current medoid
    two = torch.zeros(B, n, dtype=torch.long)
    two[:, 5], two[:, 9] = 1, 1
    c2, _ = medoid_costs(X, two, 2)
    assert torch.equal(c2[:, 1, 5], c2[:, 1, 9])
