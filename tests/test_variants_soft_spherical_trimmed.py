"""The soft, spherical and trimmed circuit variants against their references and the peers.

Exact constructions are tested in float64 on random inputs at 1e-12 (soft at gamma 1e4 and 1e8 on
data of scale 1e3: 1e-9 relative, since a rounding error in a score is multiplied by gamma). The
circuit and its reference compute the same decisions (nearest centre, the members a centre keeps)
with different roundings (a matrix product in another layout, the mean as a weighted sum or as a
sum divided by the count), so the agreement of their runs is claimed only with a margin: every
test that compares a run's hard decisions checks first that the reference's run has every
decision at least MARGIN away from a tie (:func:`_decision_margins`), far above any rounding
error (about 1e-16 here) and so on every CPU. Exact ties that both codes compute bitwise (equal
centres, a centre halfway between two points) are decided by index in both. The
peers (faiss spherical k-means in float32, trimkmeans for global trimming) are dependencies of the
``variants`` extra, imported directly: a missing peer fails the tests instead of skipping them.
"""

from __future__ import annotations

import math

import faiss
import numpy as np
import pytest
import torch
from trimkmeans.trimkmeans import TrimKMeans

import kmtlib
from kmtlib import KMeansTransformer, lloyd
from kmtlib.attention import get_attention_map
from kmtlib.reference import soft_kmeans, spherical_kmeans, trimmed_kmeans
from kmtlib.reference.trimmed import trimmed_keep, trimmed_objective
from kmtlib.variants.attention_maps import normmax_attention, topk_attention

F64 = torch.float64
MARGIN = 1e-9
"""Smallest gap (squared-distance or cosine units, data of scale 1) between a decision of a
reference run and a tie, for the tests that compare hard decisions of two codes."""


def _exact_sq(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    diff = X.unsqueeze(2) - C.unsqueeze(1)
    return (diff * diff).sum(-1)  # (B, n, k), from the differences


def _gap(values: torch.Tensor, at: torch.Tensor, exact_ties: bool = False) -> torch.Tensor:
    """values sorted ascending (..., m), ``at`` (...,) long: values[at] - values[at - 1] (inf where
    at is 0 or m, and with ``exact_ties`` where the two are bitwise equal)."""
    m = values.shape[-1]
    hi = values.gather(-1, at.clamp(0, m - 1).unsqueeze(-1)).squeeze(-1)
    lo = values.gather(-1, (at - 1).clamp(0, m - 1).unsqueeze(-1)).squeeze(-1)
    skip = (at <= 0) | (at >= m) | (exact_ties & (hi == lo))
    return torch.where(skip, torch.full_like(hi, math.inf), hi - lo)


def _decision_margins(
    X: torch.Tensor,
    centers: torch.Tensor,
    rule: str | None = None,
    *,
    q: float = 0.95,
    lam: float = 1.0,
    alpha: float = 0.1,
    cosine: bool = False,
) -> torch.Tensor:
    """Per task (B,): the smallest distance to a tie of any decision of the run ``centers``
    (B, T+1, k, d) at steps 0..T-1 and of the final labels: the nearest centre (second smallest
    minus smallest distance; largest minus second largest cosine), and under ``rule`` the members
    a centre keeps (``"topk"``: the gap at the cut of every cluster's sorted distances, where an
    exact tie is no decision of the rounding: both codes rank equal distances by index, and such
    a tie comes from a centre halfway between two points, which both compute with one rounding
    of ``(a + b) / 2``, bitwise alike; ``"normmax"``: second smallest minus smallest value ``(D_s + lam) / s``;
    ``"global"``: the gap at the cut of all points' distances). A tie (or an exact tie) gives 0."""
    B, T1, k, _ = centers.shape
    out = torch.full((B,), math.inf, dtype=X.dtype)
    for t in range(T1):
        C = centers[:, t]
        if cosine:
            score = -(X.unsqueeze(2) * C.unsqueeze(1)).sum(-1)  # (B, n, k): minus the cosine
        else:
            score = _exact_sq(X, C)
        if k > 1:
            two = score.topk(2, dim=-1, largest=False).values
            out = torch.minimum(out, (two[..., 1] - two[..., 0]).amin(-1))
        if rule is None or t == T1 - 1:
            continue
        labels = score.argmin(-1)
        dist = _exact_sq(X, C).gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (B, n)
        if rule == "global":
            ordered = dist.sort(-1).values
            drop = math.floor(alpha * X.shape[1])
            out = torch.minimum(out, _gap(ordered, torch.full((B,), X.shape[1] - drop)))
            continue
        member = labels.unsqueeze(1) == torch.arange(k).view(1, k, 1)  # (B, k, n)
        ordered = torch.where(member, dist.unsqueeze(1), math.inf).sort(-1).values  # members first
        m = member.sum(-1)
        if rule == "topk":
            count = torch.ceil((m - 1).clamp_min(0).to(X.dtype) * q).long().clamp_min(1)
            out = torch.minimum(out, _gap(ordered, torch.where(m > 0, count, 0), exact_ties=True).amin(-1))
        else:  # normmax: value(s) over s = 1..m
            sizes = torch.arange(1, X.shape[1] + 1, dtype=X.dtype)
            value = (torch.where(torch.isfinite(ordered), ordered, 0.0).cumsum(-1) + lam) / sizes
            value = torch.where(sizes <= m.unsqueeze(-1), value, math.inf)
            two = value.topk(2, dim=-1, largest=False).values
            gap = torch.where(m > 1, two[..., 1] - two[..., 0], math.inf)
            out = torch.minimum(out, gap.amin(-1))
    return out


def _tasks(seed: int, B: int = 16, n: int = 80, d: int = 3, k: int = 4, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    X = kmtlib.sample_tasks(B, n, d, k, generator=g).to(F64) * scale
    C0 = kmtlib.init_centers(X, k, generator=g)
    return X, C0


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True)


# ------------------------------------------------------------------------------------- soft
@pytest.mark.parametrize("gamma", [0.5, 3.0, 30.0, 300.0])
def test_soft_equals_soft_kmeans(gamma):
    X, C0 = _tasks(1)
    model = KMeansTransformer.from_variant("soft", 3, 4, gamma=gamma).to(F64)
    out = model(X, C0, steps=8)
    ref = soft_kmeans(X, C0, 8, gamma=gamma)
    assert (out.centers - ref.centers).abs().max() <= 1e-12
    assert (out.assignments - ref.assignments).abs().max() <= 1e-12  # the point tokens hold r_ij


def test_soft_large_gamma_is_stable_and_hard():
    # data of scale 1e3 and gamma = 1e8: products of order 1e14 inside the soft-max
    X, C0 = _tasks(2, scale=1e3)
    for gamma in (1e4, 1e8):
        out = KMeansTransformer.from_variant("soft", 3, 4, gamma=gamma).to(F64)(X, C0, steps=6)
        assert torch.isfinite(out.centers).all() and torch.isfinite(out.assignments).all()
        ref = soft_kmeans(X, C0, 6, gamma=gamma)
        # The two codes' scores differ by rounding (about 1e-16 of 1e6 here), times gamma in the
        # exponent; that matters only for a point whose runner-up centre keeps some weight. Here
        # every point's runner-up is at least 40 / gamma farther (weight below e^-40 in both).
        assert (_decision_margins(X, ref.centers) * gamma >= 40).all()
        assert (out.centers - ref.centers).abs().max() <= 1e-9 * 1e3
    hard = lloyd(X, C0, 6, empty="mean")
    out = KMeansTransformer.from_variant("soft", 3, 4, gamma=1e8).to(F64)(X, C0, steps=6)
    assert (out.centers - hard.centers).abs().max() <= 1e-9 * 1e3


def test_soft_infinite_gamma_is_lloyd():
    X, C0 = _tasks(3)
    out = KMeansTransformer.from_variant("soft", 3, 4, gamma=math.inf).to(F64)(X, C0, steps=6)
    ref = lloyd(X, C0, 6, empty="mean")
    assert (_decision_margins(X, ref.centers) >= MARGIN).all()
    assert (out.centers - ref.centers).abs().max() <= 1e-12


# ------------------------------------------------------------------------------------- spherical
def test_spherical_equals_reference_and_normalises():
    X, C0 = _tasks(4, d=5)
    X = X - 0.5  # directions spread around the origin
    U, CU = _unit(X), _unit(C0 - 0.5)
    model = KMeansTransformer.from_variant("spherical", 5, 4).to(F64)
    out = model(U, CU, steps=10)
    ref = spherical_kmeans(U, CU, 10)
    assert (_decision_margins(U, ref.centers, cosine=True) >= MARGIN).all()
    assert (out.centers - ref.centers).abs().max() <= 1e-12
    assert torch.allclose(out.final_centers.norm(dim=-1), torch.ones(16, 4, dtype=F64), atol=1e-14)
    # the circuit normalises the data part of its tokens itself
    stretch = 0.5 + torch.rand(16, 80, 1, dtype=F64, generator=torch.Generator().manual_seed(0))
    scaled = model(U * stretch, CU * 3.0, steps=10)
    assert (scaled.centers[:, 1:] - ref.centers[:, 1:]).abs().max() <= 1e-12


FAISS_MARGIN = 1e-5


def test_spherical_against_faiss():
    g = torch.Generator().manual_seed(5)
    B, n, d, k, T = 12, 150, 6, 5, 12
    means = 1.5 * torch.randn(B, k, d, generator=g, dtype=F64).repeat_interleave(n // k, 1)
    X = torch.randn(B, n, d, generator=g, dtype=F64) + means
    U = _unit(X)
    C0 = U[:, :k].clone()
    out = KMeansTransformer.from_variant("spherical", d, k).to(F64)(U, C0, steps=T)
    ref = spherical_kmeans(U, C0, T)
    margins = _decision_margins(U, ref.centers, cosine=True)
    assert (margins >= MARGIN).all()
    assert (out.centers - ref.centers).abs().max() <= 1e-12
    compared = 0
    for b in range(B):
        if ref.n_empty[b].sum() > 0:  # faiss splits empty clusters; the circuit does not
            continue
        # faiss computes in float32 (cosines rounded at about 1e-7): it makes the same
        # assignments where none is nearer a tie than FAISS_MARGIN
        assert margins[b] >= FAISS_MARGIN, (b, float(margins[b]))
        km = faiss.Kmeans(d, k, niter=T, spherical=True, min_points_per_centroid=1, max_points_per_centroid=10**9)
        km.train(U[b].numpy().astype("float32"), init_centroids=C0[b].numpy().astype("float32"))
        assert np.abs(km.centroids - out.final_centers[b].numpy()).max() <= 1e-5
        compared += 1
    assert compared >= B - 2


# ------------------------------------------------------------------------------------- trimmed
@pytest.mark.parametrize("q", [0.5, 0.8, 0.95, 1.0])
def test_trimmed_topk_circuit_equals_its_rule(q):
    X, C0 = _tasks(6, B=24, n=61, d=2, k=5)
    out = KMeansTransformer.from_variant("trimmed", 2, 5, q=q).to(F64)(X, C0, steps=8)
    ref = trimmed_kmeans(X, C0, 8, rule="topk", q=q)
    assert (_decision_margins(X, ref.centers, "topk", q=q) >= MARGIN).all()
    assert (out.centers - ref.centers).abs().max() <= 1e-12


def test_topk_rule_is_the_quantile_rule_without_ties():
    # one step from the same centres: distinct distances, so the count form and the strict
    # quantile form keep the same members
    X, C0 = _tasks(14, B=32, n=200, d=3, k=4)
    for q in (0.5, 0.9, 0.95):
        # (the quantile threshold is interpolated between the two distances at the cut: with
        # them MARGIN apart, its rounding cannot put it on either)
        assert (_decision_margins(X, C0.unsqueeze(1).expand(-1, 2, -1, -1), "topk", q=q) >= MARGIN).all()
        _, by_count = trimmed_keep(X, C0, "topk", q=q)
        _, by_quantile = trimmed_keep(X, C0, "quantile", q=q)
        assert torch.equal(by_count, by_quantile), q
    # many steps at the authors' q = 0.95 on clusters of tens of points: still the same runs
    out = KMeansTransformer.from_variant("trimmed", 3, 4, q=0.95).to(F64)(X, C0, steps=10)
    ref = trimmed_kmeans(X, C0, 10, rule="quantile", q=0.95)
    assert (_decision_margins(X, ref.centers, "topk", q=0.95) >= MARGIN).all()
    assert (out.centers - ref.centers).abs().max() <= 1e-12


def test_topk_and_quantile_rules_part_on_a_tie():
    # a centre halfway between two members: the strict quantile rule keeps neither (and falls back
    # to all members), the count rule keeps the first of them
    X = torch.tensor([[[0.0, 0.0], [2.0, 0.0], [1.0, 3.0]]], dtype=F64)
    C = torch.tensor([[[1.0, 0.0]]], dtype=F64)
    _, by_quantile = trimmed_keep(X, C, "quantile", q=0.5)
    _, by_count = trimmed_keep(X, C, "topk", q=0.5)
    assert by_quantile.tolist() == [[True, True, True]] and by_count.tolist() == [[True, False, False]]
    out = KMeansTransformer.from_variant("trimmed", 2, 1, q=0.5).to(F64)(X, C, steps=1)
    assert torch.equal(out.final_centers, X[:, :1])


def test_quantile_rule_matches_torch_quantile_cluster_by_cluster():
    X, C0 = _tasks(7, B=4, n=41, d=2, k=3)
    labels, kept = trimmed_keep(X, C0, "quantile", q=0.9)
    for b in range(4):
        dist = ((X[b] - C0[b][labels[b]]) ** 2).sum(-1)
        for j in range(3):
            members = labels[b] == j
            if members.sum() > 1:
                threshold = torch.quantile(dist[members], 0.9)
                # (two computations of the interpolated threshold: equal decisions where no
                # member distance is within rounding of it)
                assert ((dist[members] - threshold).abs() > 1e-12 * threshold).all()
                assert torch.equal(kept[b][members], dist[members] < threshold)
            elif members.sum() == 1:
                assert kept[b][members].all()  # the fallback: a one-point cluster keeps its point


def test_trimmed_normmax_equals_its_rule():
    X, C0 = _tasks(8, B=24, n=60, d=2, k=4)
    for tau, gamma in ((0.5, 10.0), (2.0, 10.0), (1.0, 100.0)):
        out = KMeansTransformer.from_variant("trimmed", 2, 4, attention="normmax", tau=tau, gamma=gamma).to(F64)(
            X, C0, steps=8
        )
        ref = trimmed_kmeans(X, C0, 8, rule="normmax", lam=tau / gamma)
        # (the circuit scores gamma-scaled shifted sums, the reference (D_s + lam) / s: the same
        # choice of s where the best two values are MARGIN apart)
        assert (_decision_margins(X, ref.centers, "normmax", lam=tau / gamma) >= MARGIN).all(), (tau, gamma)
        assert (out.centers - ref.centers).abs().max() <= 1e-12, (tau, gamma)


def test_trimmed_empty_cluster_moves_to_the_mean():
    X = torch.tensor([[[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [5.0, 5.0]]], dtype=F64)
    C0 = torch.tensor([[[0.0, 0.0], [100.0, 100.0]]], dtype=F64)  # the second centre gets no point
    out = KMeansTransformer.from_variant("trimmed", 2, 2, q=0.5).to(F64)(X, C0, steps=1)
    assert torch.allclose(out.final_centers[0, 1], X[0].mean(0))
    ref = trimmed_kmeans(X, C0, 1, rule="topk", q=0.5)
    assert torch.allclose(out.final_centers, ref.final_centers)
    keep = trimmed_kmeans(X, C0, 1, rule="topk", q=0.5, empty="keep")
    assert torch.equal(keep.final_centers[0, 1], C0[0, 1])


def test_global_trimming_reference_against_trimkmeans():
    g = torch.Generator().manual_seed(9)
    for _b in range(4):
        X = torch.rand(1, 50, 2, generator=g, dtype=F64)
        X[:, :5] += 4 * torch.rand(1, 5, 2, generator=g, dtype=F64) + 1  # a few outliers
        C0 = X[:, 5:8].clone()
        ref = trimmed_kmeans(X, C0, 60, rule="global", alpha=0.1, empty="keep")
        assert (_decision_margins(X, ref.centers, "global", alpha=0.1) >= MARGIN).all()
        peer = TrimKMeans(n_clusters=3, trim=0.1, n_init=1, max_iter=60, init=C0[0].numpy().copy())
        peer.fit(X[0].numpy())
        # trimkmeans stops at a fixed point; our run repeats it
        assert np.abs(peer.cluster_centers_ - ref.final_centers[0].numpy()).max() <= 1e-12


def test_global_and_per_cluster_trimming_differ_on_outliers():
    # one tight cluster with a far outlier, one wide cluster: global trimming at alpha spends its
    # budget where the distances are largest, per-cluster trimming drops a share of every cluster
    g = torch.Generator().manual_seed(10)
    tight = 0.05 * torch.randn(40, 2, generator=g, dtype=F64)
    wide = torch.tensor([10.0, 0.0], dtype=F64) + torch.randn(40, 2, generator=g, dtype=F64)
    X = torch.cat([tight, wide, torch.tensor([[0.0, 3.0]], dtype=F64)]).unsqueeze(0)
    C0 = torch.stack([tight[0], wide[0]]).unsqueeze(0)
    _, kept_global = trimmed_keep(X, C0, "global", alpha=0.05)
    _, kept_quantile = trimmed_keep(X, C0, "quantile", q=0.95)
    assert not torch.equal(kept_global, kept_quantile)
    assert trimmed_objective(X, C0, 0.05).shape == (1,)


# ------------------------------------------------------------------------------------- maps
def test_normmax_map_solves_its_problem():
    g = torch.Generator().manual_seed(11)
    scores = torch.randn(3, 5, 9, generator=g, dtype=F64)
    scores[0, 0, 4:] = -math.inf  # masked keys
    for gamma, tau in ((1.0, 0.3), (2.0, 1.0), (1.0, 5.0)):
        p = normmax_attention(scores, gamma, tau=tau)
        assert torch.allclose(p.sum(-1), torch.ones(3, 5, dtype=F64))
        assert (p[0, 0, 4:] == 0).all()
        z = torch.where(torch.isfinite(scores), gamma * scores, torch.full_like(scores, -1e300))
        best = (p * z).sum(-1) - tau * p.amax(-1)
        # no point of the simplex does better: random draws and every uniform top-s distribution
        rand = torch.distributions.Dirichlet(torch.ones(9, dtype=F64)).sample((2000,))
        rand[:, :] = rand  # (2000, 9)
        for sample in (rand, torch.eye(9, dtype=F64)):
            other = torch.einsum("sr,bmr->bms", sample, z) - tau * sample.amax(-1)
            assert (other <= best.unsqueeze(-1) + 1e-9).all()
    assert torch.equal(normmax_attention(scores, 1.0, tau=1e-9), kmtlib.hard_attention(scores))
    flat = normmax_attention(scores[1:], 1.0, tau=1e9)
    assert torch.allclose(flat, torch.full_like(flat, 1 / 9))


def test_topk_map_and_registry():
    s = torch.tensor([[[3.0, 1.0, 2.0, -math.inf, 0.0]]], dtype=F64)
    assert torch.equal(topk_attention(s, count=2), torch.tensor([[[0.5, 0.0, 0.5, 0.0, 0.0]]], dtype=F64))
    assert torch.equal(topk_attention(s, fraction=0.5), torch.tensor([[[0.5, 0.0, 0.5, 0.0, 0.0]]], dtype=F64))
    empty = torch.full((1, 1, 4), -math.inf, dtype=F64)
    assert torch.equal(topk_attention(empty, count=1), torch.full((1, 1, 4), 0.25, dtype=F64))
    assert torch.equal(normmax_attention(empty, 1.0), torch.full((1, 1, 4), 0.25, dtype=F64))
    assert get_attention_map("normmax") is normmax_attention and get_attention_map("topk") is topk_attention


# ------------------------------------------------------------------------------------- options, files
@pytest.mark.parametrize(
    ("name", "options", "error", "words"),
    [
        ("soft", {"gamma": 0.0}, ValueError, "gamma"),
        ("soft", {"gamma": -1.0}, ValueError, "gamma"),
        ("soft", {"temperature": 1.0}, TypeError, "temperature"),
        ("spherical", {"gamma": float("nan")}, ValueError, "gamma"),
        ("trimmed", {"q": 0.0}, ValueError, "q"),
        ("trimmed", {"q": 1.5}, ValueError, "q"),
        ("trimmed", {"tau": 1.0}, ValueError, "tau"),
        ("trimmed", {"attention": "normmax", "q": 0.9}, ValueError, "q"),
        ("trimmed", {"attention": "sparsemax"}, ValueError, "attention"),
        ("trimmed", {"attention": "normmax", "tau": 0.0}, ValueError, "tau"),
    ],
)
def test_bad_options_are_named(name, options, error, words):
    with pytest.raises(error, match=words):
        KMeansTransformer.from_variant(name, 2, 3, **options)


def test_bad_reference_and_map_arguments():
    X, C0 = _tasks(12, B=2, n=20, d=2, k=3)
    with pytest.raises(ValueError, match="trimming rule"):
        trimmed_kmeans(X, C0, 2, rule="median")
    with pytest.raises(ValueError, match="alpha"):
        trimmed_kmeans(X, C0, 2, rule="global", alpha=1.0)
    with pytest.raises(ValueError, match="fewer than k"):
        trimmed_kmeans(X, C0, 2, rule="global", alpha=0.9)
    with pytest.raises(ValueError, match="lam"):
        trimmed_kmeans(X, C0, 2, rule="normmax", lam=0.0)
    with pytest.raises(ValueError, match="gamma"):
        soft_kmeans(X, C0, 2, gamma=0.0)
    with pytest.raises(ValueError, match="exactly one"):
        topk_attention(torch.zeros(1, 1, 3), count=1, fraction=0.5)
    with pytest.raises(ValueError, match="fraction"):
        topk_attention(torch.zeros(1, 1, 3), fraction=2.0)
    with pytest.raises(ValueError, match="tau"):
        normmax_attention(torch.zeros(1, 1, 3), 1.0, tau=-1.0)
    with pytest.raises(ValueError, match="d=2"):
        KMeansTransformer.from_variant("spherical", 3, 3).to(F64)(X, C0, steps=1)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("soft", {"gamma": 7.0}),
        ("spherical", {}),
        ("trimmed", {"q": 0.9}),
        ("trimmed", {"attention": "normmax", "tau": 2.0}),
    ],
)
def test_variant_models_save_and_load(tmp_path, name, options):
    X, C0 = _tasks(13, B=3, n=30, d=2, k=3)
    model = KMeansTransformer.from_variant(name, 2, 3, **options).to(F64)
    path = model.save(tmp_path / f"{name}.pt")
    again = kmtlib.load_model(path).to(F64)
    assert again.config == model.config
    assert torch.equal(again(X, C0, steps=3).centers, model(X, C0, steps=3).centers)


# ------------------------------------------------------------------------------------- ties
def _last_bit_by_position(scores: torch.Tensor) -> torch.Tensor:
    """Scores with every odd key's score moved up by one ulp: what a matrix product may do to
    equal keys at different positions of its tile on another CPU."""
    odd = (torch.arange(scores.shape[-1]) % 2 == 1).expand_as(scores)
    return torch.where(odd, torch.nextafter(scores, torch.tensor(math.inf, dtype=scores.dtype)), scores)


@pytest.mark.parametrize(
    ("name", "options"),
    [("soft", {"gamma": math.inf}), ("spherical", {}), ("trimmed", {"q": 0.5}), ("robust", {}), ("kmedoids", {})],
)
def test_circuit_assignment_ties_equal_centers_whatever_the_product_rounds(monkeypatch, name, options):
    """Equal centres (e.g. two empty clusters sent to the same point) get bitwise equal scores in
    the hard assignment, wherever they sit, even where the score product rounds by position."""
    import kmtlib.attention as attention
    import kmtlib.layer as circuit

    pytest.importorskip("entmax")
    for module in (circuit, attention):
        for score in ("euclidean_scores", "dot_scores"):
            if hasattr(module, score):
                original = getattr(module, score)
                monkeypatch.setattr(module, score, lambda *a, _f=original, **kw: _last_bit_by_position(_f(*a, **kw)))
    g = torch.Generator().manual_seed(31)
    X = _unit(torch.randn(2, 40, 3, generator=g, dtype=F64))
    C = _unit(torch.randn(2, 6, 3, generator=g, dtype=F64))
    C[:, 3] = C[:, 0]  # copies at an even and an odd position
    C[:, 5] = C[:, 0]
    model = KMeansTransformer.from_variant(name, 3, 6, **options).to(F64)
    W = model.layer.CAX.weights(*model.embedding.embed(X, C))
    picks = W[..., 0] > 0
    assert picks.any(), "some points must pick the duplicated centre"
    assert torch.equal(W[..., 3], W[..., 0]) and torch.equal(W[..., 5], W[..., 0])
    assert (W[..., 0][picks] == 1 / 3).all()


def test_spherical_reference_gives_equal_centers_equal_cosines(monkeypatch):
    """The reference's first-maximum rule sends every point of a duplicated centre to its first
    copy, even where the cosine product rounds by position."""
    g = torch.Generator().manual_seed(32)
    X = _unit(torch.randn(1, 50, 3, generator=g, dtype=F64))
    C = _unit(torch.randn(1, 4, 3, generator=g, dtype=F64))
    C[:, 1] = C[:, 0]
    clean = spherical_kmeans(X, C, 1)
    bmm = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda a, b: _last_bit_by_position(bmm(a, b)))
    shaken = spherical_kmeans(X, C, 1)
    assert clean.n_empty[0, 0] >= 1 and torch.equal(clean.n_empty, shaken.n_empty)
    assert torch.allclose(clean.centers, shaken.centers, rtol=0, atol=1e-15)
