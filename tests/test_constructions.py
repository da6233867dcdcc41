"""Theorems 2.1 and 2.2 as code (kmtlib.constructions): the limit models are Lloyd's algorithm.

Float64 throughout. Exactness is claimed on tie-free inputs: tasks whose assignment margin (second
smallest minus smallest squared distance to the centres, over all points and all steps of Lloyd's
run) falls below MARGIN are rejected before comparing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
import torch

import kmtlib
from kmtlib.constructions import theorem_config
from kmtlib.embedding import NormAugmentedEmbedding, OneHotEmbedding
from kmtlib.fast.choice import limit_blocks
from kmtlib.io.model_file import load_model
from kmtlib.kernels import limit_model
from kmtlib.kernels.limit_model import LimitRunner, is_coordinate_major
from kmtlib.layer import BLOCK_NAMES, AttentionBlock, KMeansLayer, LayerConfig
from kmtlib.objective import nearest_center, squared_distances
from kmtlib.theorems import theorem_weights
from kmtlib.transformer import KMeansTransformer

F64 = torch.float64
MARGIN = 1e-8
TOL = 1e-12

# the limit models under test: Theorem 2.1 with either centre update, and Theorem 2.2 (with either)
LIMIT_MODELS = {
    "2.1-linear": dict(attention="euclidean", center_update="linear"),
    "2.1-euclidean": dict(attention="euclidean", center_update="attention"),
    "2.2-linear": dict(attention="dot", center_update="linear"),
    "2.2-dot": dict(attention="dot", center_update="attention"),
}
# plus the authors' identity shortcut for the resets (the same numbers in the limit)
SMALL_CASE_MODELS = {**LIMIT_MODELS, "2.1-identity-shortcut": dict(attention="euclidean", self_attention="identity")}

# shape groups (n, d, k, T): varied sizes, steps up to 20, n = k, d = 1, k = 1
SHAPES = [
    (5, 1, 2, 3),
    (9, 1, 3, 20),
    (12, 2, 3, 10),
    (20, 2, 4, 20),
    (30, 3, 5, 15),
    (6, 2, 6, 4),
    (50, 2, 8, 10),
    (64, 5, 4, 20),
    (40, 8, 6, 7),
    (100, 2, 10, 12),
    (25, 3, 1, 5),
    (150, 4, 7, 20),
]
PER_SHAPE = 130  # generated per shape; the tie-free ones are kept


def _model(d: int, k: int, **options) -> KMeansTransformer:
    return KMeansTransformer.from_theorem(d, k, **options).to(F64)


def _initial_centers(X: torch.Tensor, k: int, g: torch.Generator) -> torch.Tensor:
    """A third of the tasks start from random data points, a third from uniform points of a box
    wider than the data, a third from the box with the last centre far away: the latter two make
    clusters go empty."""
    B, _, d = X.shape
    at_points = kmtlib.init_centers(X, k, generator=g)
    box = torch.rand(B, k, d, generator=g, dtype=F64) * 1.6 - 0.3
    far = box.clone()
    far[:, -1] += 5.0
    which = torch.arange(B) % 3
    return torch.where((which == 0).view(B, 1, 1), at_points, torch.where((which == 1).view(B, 1, 1), box, far))


def _margins(X: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """Smallest assignment margin per task over all steps of a trajectory (B, T+1, k, d)."""
    B, T1, k, d = centers.shape
    if k == 1:
        return torch.full((B,), math.inf, dtype=F64)
    n = X.shape[1]
    D = squared_distances(X.repeat_interleave(T1, 0), centers.reshape(B * T1, k, d))  # (B*T1, n, k)
    two = D.topk(2, dim=-1, largest=False).values
    return (two[..., 1] - two[..., 0]).view(B, T1 * n).amin(dim=1)


@dataclass
class Batch:
    X: torch.Tensor
    C0: torch.Tensor
    steps: int
    ref: kmtlib.ClusteringResult


def _tie_free_batches() -> list[Batch]:
    g = torch.Generator().manual_seed(2506_19125)
    batches = []
    for _i, (n, d, k, T) in enumerate(SHAPES):
        clustered = kmtlib.sample_tasks(PER_SHAPE, n, d, max(k, 2), generator=g, dtype=F64)
        uniform = torch.rand(PER_SHAPE, n, d, generator=g, dtype=F64)
        X = torch.where((torch.arange(PER_SHAPE) % 2 == 0).view(-1, 1, 1), clustered, uniform)
        C0 = _initial_centers(X, k, g)
        ref = kmtlib.lloyd(X, C0, T, empty="mean")
        keep = _margins(X, ref.centers) >= MARGIN
        X, C0 = X[keep], C0[keep]
        batches.append(Batch(X, C0, T, kmtlib.lloyd(X, C0, T, empty="mean")))
    return batches


@pytest.fixture(scope="module")
def batches() -> list[Batch]:
    return _tie_free_batches()


# ----------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("name", list(LIMIT_MODELS))
def test_limit_models_are_lloyd_on_tie_free_tasks(batches, name):
    tasks = tasks_with_empty = 0
    for b in batches:
        B, n, d = b.X.shape
        k = b.C0.shape[1]
        model = _model(d, k, **LIMIT_MODELS[name])
        with torch.no_grad():
            out = model(b.X, b.C0, steps=b.steps)
        err = (out.centers - b.ref.centers).abs().amax().item()
        assert err <= TOL, f"{name}: shape {(n, d, k, b.steps)}: centres differ from Lloyd by {err:.3g}"
        torch.testing.assert_close(out.objective, b.ref.objective, rtol=TOL, atol=TOL)
        assert torch.equal(out.labels, b.ref.labels)
        # the assignments the point tokens hold: exactly one-hot, Lloyd's assignment under C(T-1)
        expected = torch.nn.functional.one_hot(nearest_center(b.X, b.ref.centers[:, -2]), k).to(F64)
        assert torch.equal(out.assignments, expected), f"{name}: assignments are not Lloyd's one-hot labels"
        tasks += B
        tasks_with_empty += int((b.ref.n_empty.sum(dim=1) > 0).sum())
    assert tasks >= 1000, f"only {tasks} tie-free tasks were generated"
    assert tasks_with_empty >= 100, f"only {tasks_with_empty} tasks had an empty cluster"


def test_exactness_test_covers_empty_clusters_and_long_runs(batches):
    empties = sum(int((b.ref.n_empty > 0).sum()) for b in batches)  # (task, step) pairs with an empty cluster
    assert empties >= 100
    assert max(b.steps for b in batches) == 20
    assert {b.X.shape[-1] for b in batches} >= {1, 2, 8}
    assert any(b.X.shape[1] == b.C0.shape[1] for b in batches)  # n = k


def test_limit_models_match_scikit_learn(batches):
    sklearn = pytest.importorskip("sklearn.cluster")
    from threadpoolctl import threadpool_limits

    compared = 0
    with threadpool_limits(limits=1):
        for b in batches:
            clean = (b.ref.n_empty.sum(dim=1) == 0).nonzero().flatten()[:30]
            if len(clean) == 0 or b.steps < 1:
                continue
            d, k = b.X.shape[-1], b.C0.shape[1]
            out = _model(d, k)(b.X[clean], b.C0[clean], steps=b.steps)
            for j, i in enumerate(clean.tolist()):
                km = sklearn.KMeans(
                    n_clusters=k, init=b.C0[i].numpy(), n_init=1, max_iter=b.steps, tol=0.0, algorithm="lloyd"
                ).fit(b.X[i].numpy())
                diff = (out.centers[j, -1] - torch.from_numpy(km.cluster_centers_)).abs().max().item()
                assert diff <= 1e-10, f"task {i} of shape {tuple(b.X.shape[1:])}, k={k}: {diff:.3g} from scikit-learn"
                compared += 1
    assert compared >= 250


# ----------------------------------------------------------------------------- empty clusters, hand cases
@pytest.mark.parametrize("name", list(SMALL_CASE_MODELS))
def test_empty_cluster_moves_to_the_mean_of_all_points(name):
    X = torch.tensor([[[0.0], [1.0], [2.0], [6.0]]], dtype=F64)
    C0 = torch.tensor([[[1.0], [20.0], [-20.0]]], dtype=F64)  # clusters 1 and 2 receive no point
    out = _model(1, 3, **SMALL_CASE_MODELS[name])(X, C0, steps=1)
    torch.testing.assert_close(out.centers[:, 1], torch.full((1, 3, 1), 2.25, dtype=F64), rtol=0, atol=1e-15)
    torch.testing.assert_close(out.centers, kmtlib.lloyd(X, C0, 1, empty="mean").centers, rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", list(SMALL_CASE_MODELS))
def test_hand_checked_cases(name):
    opts = SMALL_CASE_MODELS[name]
    # d = 1, two clusters: [0, 1, 4, 5] from centres 0 and 1
    X = torch.tensor([[[0.0], [1.0], [4.0], [5.0]]], dtype=F64)
    C0 = torch.tensor([[[0.0], [1.0]]], dtype=F64)
    out = _model(1, 2, **opts)(X, C0, steps=3)
    expected = torch.tensor([[[0.0], [1.0]], [[0.0], [10 / 3]], [[0.5], [4.5]], [[0.5], [4.5]]], dtype=F64)
    torch.testing.assert_close(out.centers[0], expected, rtol=0, atol=1e-15)
    assert torch.equal(out.labels, torch.tensor([[0, 0, 1, 1]]))
    # k = 1: one step moves the centre to the mean
    Xk = torch.rand(3, 17, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    C1 = torch.rand(3, 1, 4, generator=torch.Generator().manual_seed(2), dtype=F64)
    out = _model(4, 1, **opts)(Xk, C1, steps=2)
    torch.testing.assert_close(out.centers[:, 1], Xk.mean(dim=1, keepdim=True), rtol=0, atol=1e-15)
    torch.testing.assert_close(out.centers[:, 2], out.centers[:, 1], rtol=0, atol=1e-15)
    assert torch.equal(out.assignments, torch.ones(3, 17, 1, dtype=F64))
    # n = k, centres on the points: every point is its own cluster, nothing moves
    Xn = torch.rand(2, 5, 3, generator=torch.Generator().manual_seed(3), dtype=F64)
    Cn = Xn[:, torch.tensor([3, 0, 4, 1, 2])]
    out = _model(3, 5, **opts)(Xn, Cn, steps=4)
    assert torch.equal(out.centers, Cn.unsqueeze(1).expand(2, 5, 5, 3))
    assert torch.equal(out.objective, torch.zeros(2, 5, dtype=F64))
    # zero steps: the initial centres
    out = _model(3, 5, **opts)(Xn, Cn, steps=0)
    assert out.centers.shape == (2, 1, 5, 3) and out.assignments is None


# ----------------------------------------------------------------------------- self-attention in the limit
@pytest.mark.parametrize("attention", ["euclidean", "dot"])
def test_closed_form_hard_self_attention_equals_dense_with_duplicate_points(attention):
    g = torch.Generator().manual_seed(4)
    base = torch.rand(6, 12, 2, generator=g, dtype=F64)
    X = torch.cat([base, base[:, :5]], dim=1)  # 5 points appear twice
    C0 = kmtlib.init_centers(base, 3, generator=g)
    ref = kmtlib.lloyd(X, C0, 6)
    keep = _margins(X, ref.centers) >= MARGIN
    X, C0 = X[keep], C0[keep]
    assert len(X) >= 3
    closed = _model(2, 3, attention=attention)
    dense = _model(2, 3, attention=attention)
    dense.fast = False  # the plain formula: dense n x n hard self-attention
    a, b = closed(X, C0, steps=6), dense(X, C0, steps=6)
    # (the fast model also lays out and sums its products differently: the same assignments,
    # centres equal up to the order of a sum)
    assert torch.equal(a.assignments, b.assignments)
    torch.testing.assert_close(a.centers, b.centers, rtol=0, atol=TOL)
    torch.testing.assert_close(a.centers, kmtlib.lloyd(X, C0, 6).centers, rtol=0, atol=TOL)
    torch.testing.assert_close(b.centers, kmtlib.lloyd(X, C0, 6).centers, rtol=0, atol=TOL)
    # layer by layer, the closed form and the dense attention give bitwise the same tokens (the
    # layers differ in nothing else: the other blocks have no kernel)
    P, C = closed.embedding.embed(X, C0)
    Pd, Cd = P, C
    for _ in range(6):
        P, C = closed.apply_layer(P, C)
        Pd, Cd = dense.layer(Pd, Cd)
        assert torch.equal(P, Pd) and torch.equal(C, Cd)
    # the dense SAX attention matrix averages over the copies of each point, exactly: the copies'
    # scores are made bitwise equal whatever the matrix product rounded (tie_equal_keys)
    P, _ = closed.embedding.embed(X, C0)
    W = closed.layer.blocks["SAX"].weights(P, P)
    same = (X.unsqueeze(2) == X.unsqueeze(1)).all(-1).to(F64)
    assert torch.equal(W, same / same.sum(-1, keepdim=True))


# ----------------------------------------------------------------------------- equivariance
@pytest.mark.parametrize("name", ["2.1-linear", "2.1-euclidean", "2.2-dot"])
def test_permutation_equivariance(batches, name):
    b = batches[4]  # n=30, d=3, k=5, T=15
    d, k = b.X.shape[-1], b.C0.shape[1]
    model = _model(d, k, **LIMIT_MODELS[name])
    out = model(b.X, b.C0, steps=b.steps)
    g = torch.Generator().manual_seed(5)
    pp = torch.randperm(b.X.shape[1], generator=g)
    out_p = model(b.X[:, pp], b.C0, steps=b.steps)
    torch.testing.assert_close(out_p.centers, out.centers, rtol=0, atol=TOL)
    assert torch.equal(out_p.labels, out.labels[:, pp])
    pc = torch.randperm(k, generator=g)
    out_c = model(b.X, b.C0[:, pc], steps=b.steps)
    torch.testing.assert_close(out_c.centers, out.centers[:, :, pc], rtol=0, atol=TOL)
    assert torch.equal(out_c.assignments, out.assignments[:, :, pc])


# ----------------------------------------------------------------------------- finite gamma
@pytest.mark.parametrize(
    "options", [dict(), dict(self_attention="identity"), dict(attention="dot")], ids=["default", "authors", "dot"]
)
def test_finite_gamma_gap_shrinks_as_gamma_grows(options):
    X = kmtlib.sample_tasks(48, 60, 2, 4, generator=3, dtype=F64)
    C0 = kmtlib.init_centers(X, 4, generator=4)
    ref = kmtlib.lloyd(X, C0, 10).objective[:, -1].log()
    gaps = []
    for gamma in (1.0, 10.0, 100.0, 1e4):
        out = _model(2, 4, gamma=gamma, **options)(X, C0, steps=10)
        assert torch.isfinite(out.centers).all()
        gaps.append((out.objective[:, -1].log() - ref).abs().mean().item())
        if gamma <= 100:
            # soft assignments: not one-hot, still distributions over the centres
            assert ((out.assignments > 0) & (out.assignments < 1)).any()
            torch.testing.assert_close(out.assignments.sum(-1), torch.ones(48, 60, dtype=F64), rtol=0, atol=1e-9)
    assert all(a > b for a, b in itertools.pairwise(gaps)), f"gaps {gaps} do not shrink"
    assert gaps[0] > 0.1 and gaps[-1] < 5e-3


def test_fully_softmax_model_needs_a_large_gamma():
    X = kmtlib.sample_tasks(16, 40, 2, 3, generator=6, dtype=F64)
    C0 = kmtlib.init_centers(X, 3, generator=7)
    ref = kmtlib.lloyd(X, C0, 5)
    soft = _model(2, 3, gamma=1e9, center_update="attention", self_attention="attention")
    assert all(b.config.gamma == 1e9 and b.config.map == "softmax" for b in soft.layer.blocks.values())
    out = soft(X, C0, steps=5)
    torch.testing.assert_close(out.centers, ref.centers, rtol=0, atol=1e-6)
    weak = _model(2, 3, gamma=1.0, center_update="attention")(X, C0, steps=5)
    assert (weak.centers - ref.centers).abs().max() > 1e-2
    split = _model(2, 3, gamma=1e4, center_update="attention", reset_gamma=1e12)
    assert split.layer.blocks["SAX"].config.gamma == 1e12 and split.layer.blocks["CAX"].config.gamma == 1e4


def test_huge_gamma_on_large_scale_data_is_stable():
    X = kmtlib.sample_tasks(8, 50, 3, 4, generator=8, dtype=F64) * 1e3
    C0 = kmtlib.init_centers(X, 4, generator=9)
    for opts in (dict(), dict(center_update="attention"), dict(attention="dot")):
        out = _model(3, 4, gamma=1e8, **opts)(X, C0, steps=5)
        assert torch.isfinite(out.centers).all() and torch.isfinite(out.assignments).all()
        torch.testing.assert_close(out.centers, kmtlib.lloyd(X, C0, 5).centers, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("gamma", "scale"), [(1e39, 1.0), (3e38, 1.0), (1e36, 100.0)])
def test_extreme_gamma_in_float32_gives_the_formulas_finite_centres_on_every_path(gamma, scale):
    """gamma beyond float32's range (1e39), or whose scores overflow it on data of a larger scale:
    the default path ends where the formula does (which shifts the scores before the temperature
    and never overflows), finite, instead of a RuntimeError or NaN from the soft-max kernel."""
    X = kmtlib.sample_tasks(4, 60, 2, 3, generator=10) * scale
    C0 = kmtlib.init_centers(X, 3, generator=11)
    model = KMeansTransformer.from_theorem(2, 3, gamma=gamma)
    assert X.dtype == torch.float32 and model.fast
    fast = model(X, C0, 4)
    model.fast = False
    formula = model(X, C0, 4)
    assert torch.isfinite(fast.centers).all()
    assert torch.equal(fast.centers, formula.centers)
    whole = kmtlib.whole_pass(model)(X, C0, 4)
    torch.testing.assert_close(whole.centers, formula.centers, rtol=1e-5, atol=1e-5 * scale)


# ----------------------------------------------------------------------------- weights, config, persistence
@pytest.mark.parametrize("attention", ["euclidean", "dot"])
def test_weights_are_inspectable_and_the_theorems(attention):
    d, k = 3, 4
    model = KMeansTransformer.from_theorem(d, k, attention=attention)
    W = theorem_weights(d, k, attention)
    D = d + k + (2 if attention == "dot" else 0)
    assert model.width == D
    assert isinstance(model.layer, KMeansLayer)
    assert tuple(model.layer.blocks) == BLOCK_NAMES
    for name in BLOCK_NAMES:
        block = model.layer.blocks[name]
        assert isinstance(block, AttentionBlock) and block is getattr(model.layer, name)
        for m, role in zip("QKV", ("query", "key", "value")):
            linear = getattr(block, role)
            assert linear.weight.shape == (D, D) and linear.bias is None
            assert torch.equal(linear.weight.to(F64), W[name][m])
            assert f"layer.{name}.{role}.weight" in model.state_dict()
    # fixed weights: nothing learns
    assert not model.config.trainable and all(not p.requires_grad for p in model.parameters())
    data, ids = torch.zeros(D), torch.zeros(D)
    data[:d], ids[d : d + k] = 1, 1
    assert torch.equal(W["CAX"]["Q"].diagonal()[:d], data[:d].to(F64))
    assert torch.equal(W["CAX"]["V"], torch.diag(ids).to(F64)) and torch.equal(W["SAX"]["V"], -W["CAX"]["V"])
    assert torch.equal(W["CAC"]["Q"], torch.diag(ids).to(F64))
    if attention == "euclidean":
        assert torch.equal(W["SAC"]["V"], -torch.diag(data).to(F64))
        assert isinstance(model.embedding, OneHotEmbedding) and model.layer.ffn is None
    else:
        assert isinstance(model.embedding, NormAugmentedEmbedding) and model.layer.ffn is not None
        assert W["CAX"]["Q"][d + k, d + k + 1] == -0.5 and W["CAX"]["K"][d + k, d + k] == 1
        # q.k = x.c - ||c||^2 / 2 on norm-augmented tokens
        x, c = torch.randn(1, 1, d, dtype=F64), torch.randn(1, k, d, dtype=F64)
        P, C = model.embedding.embed(x, c)
        q, kk = P @ W["CAX"]["Q"].T, C @ W["CAX"]["K"].T
        torch.testing.assert_close(q @ kk.transpose(1, 2), x @ c.transpose(1, 2) - (c * c).sum(-1).unsqueeze(1) / 2)
        # the FFN writes ||c||^2 into the norm coordinate
        h = torch.randn(2, 5, D, dtype=F64)
        out = model.layer.ffn.to(F64)(h)
        torch.testing.assert_close(out[..., d + k], (h[..., :d] ** 2).sum(-1))
        assert torch.equal(out[..., : d + k], torch.zeros(2, 5, d + k, dtype=F64))


def _plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, (bool, int, float, str))


def test_config_is_plain_and_save_load_round_trip(tmp_path):
    model = KMeansTransformer.from_theorem(2, 3, gamma=50.0, attention="dot", self_attention="identity").to(F64)
    kwargs = dict(
        d=2, k=3, gamma=50.0, attention="dot", center_update="linear", self_attention="identity", reset_gamma=None
    )
    assert isinstance(model.config, LayerConfig)
    assert model.config == theorem_config(**kwargs)
    assert model.config.embedding == "norm_augmented" and model.config.ffn and not model.config.trainable
    assert model.config.SAX.identity and model.config.CAX.gamma == 50.0 and model.config.CAC.map == "linear"
    assert model.config.origin.startswith("from_theorem(d=2, k=3")
    plain = model.config.to_dict()
    assert _plain(plain) and LayerConfig.from_dict(plain) == model.config
    path = model.save(tmp_path / "m.pt")
    loaded = load_model(path)
    assert loaded.config == model.config
    X = kmtlib.sample_tasks(4, 20, 2, 3, generator=10, dtype=F64)
    C0 = kmtlib.init_centers(X, 3, generator=11)
    assert torch.equal(loaded(X, C0, steps=3).centers, model(X, C0, steps=3).centers)
    by_hand = KMeansTransformer(theorem_config(**kwargs))  # the configuration and its initialiser, as from_theorem
    kmtlib.load_theorem_weights(by_hand.layer, kwargs["attention"])
    assert all(torch.equal(a, b) for a, b in zip(by_hand.state_dict().values(), model.state_dict().values()))


def test_changed_weights_take_effect():
    X = kmtlib.sample_tasks(2, 30, 2, 3, generator=12, dtype=F64)
    C0 = kmtlib.init_centers(X, 3, generator=13)
    model = _model(2, 3)
    before = model(X, C0, steps=2).centers
    with torch.no_grad():
        model.layer.blocks["CAC"].value.weight.mul_(0.5)  # halve the value of the centre update
    after = model(X, C0, steps=2).centers
    assert not torch.allclose(after, before)
    torch.testing.assert_close(after[:, 1], 0.5 * kmtlib.lloyd(X, C0, 1).centers[:, 1], rtol=0, atol=1e-15)


def test_attention_maps_for_plots():
    X = kmtlib.sample_tasks(2, 10, 2, 3, generator=14, dtype=F64)
    C0 = kmtlib.init_centers(X, 3, generator=15)
    model = _model(2, 3)
    P, C = model.embedding.embed(X, C0)
    maps = model.layer.attention_maps(P, C)
    assert {m: tuple(w.shape) for m, w in maps.items()} == {
        "CAX": (2, 10, 3),
        "SAX": (2, 10, 10),
        "CAC": (2, 3, 10),
        "SAC": (2, 3, 3),
    }
    for w in maps.values():
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:2], dtype=F64), rtol=0, atol=1e-15)
    assert torch.equal(maps["SAX"], torch.eye(10, dtype=F64).expand(2, 10, 10))
    # (CAX and nearest_center round their scores differently: equal where no point is near a tie)
    assert (_margins(X, C0.unsqueeze(1)) >= MARGIN).all()
    onehot = torch.nn.functional.one_hot(nearest_center(X, C0), 3).to(F64)
    assert torch.equal(maps["CAX"], onehot)


# ----------------------------------------------------------------------------- evaluation paths
@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(center_update="attention"),
        dict(attention="dot"),
        dict(gamma=30.0, center_update="attention"),
        dict(gamma=30.0, attention="dot", center_update="attention"),
        dict(gamma=30.0, self_attention="identity"),
    ],
)
def test_fast_path_matches_the_reference_formulas_and_autograd(options):
    # the fast path runs without autograd (inference_mode / no_grad / inputs without grad); with a
    # gradient the blocks use the plain formulas: both give the same numbers, in any order of calls
    X = kmtlib.sample_tasks(4, 40, 2, 3, generator=18, dtype=F64)
    C0 = kmtlib.init_centers(X, 3, generator=19)
    model = _model(2, 3, **options)
    with torch.inference_mode():
        first = model(X, C0, steps=4).centers.clone()
    Xg = X.clone().requires_grad_(True)
    graded = model(Xg, C0, steps=4)
    graded.centers.sum().backward()
    assert torch.isfinite(Xg.grad).all() and Xg.grad.abs().sum() > 0
    torch.testing.assert_close(graded.centers.detach(), first, rtol=0, atol=1e-14)
    with torch.no_grad():
        assert torch.equal(model(X, C0, steps=4).centers, first)
    assert torch.equal(model(X, C0, steps=4).centers, first)
    # the attention matrices handed out for plots are those the layer applies
    P, C = model.embedding.embed(X, C0)
    maps = model.layer.attention_maps(P, C)
    P1, C1 = model.layer(P, C)
    blocks = model.layer.blocks
    inc = blocks["CAX"](P, C) + blocks["SAX"](P, P)
    torch.testing.assert_close(P1, P + inc, rtol=0, atol=1e-15)
    V_cax, V_sax = blocks["CAX"].value.weight, blocks["SAX"].value.weight
    torch.testing.assert_close(blocks["CAX"](P, C), maps["CAX"] @ (C @ V_cax.T), rtol=0, atol=1e-14)
    torch.testing.assert_close(blocks["SAX"](P, P), maps["SAX"] @ (P @ V_sax.T), rtol=0, atol=1e-14)
    torch.testing.assert_close(
        C1 - C,
        (blocks["CAC"](C, P1) + blocks["SAC"](C, C)) + (model.layer.ffn(C1) if model.layer.ffn is not None else 0),
        rtol=0,
        atol=1e-12,
    )


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(center_update="attention"),
        dict(attention="dot"),
        dict(self_attention="identity"),
        dict(gamma=30.0, center_update="attention"),
        dict(gamma=30.0, attention="dot", center_update="attention"),
        dict(gamma=30.0, reset_gamma=1e6, center_update="attention"),
        "dense",
    ],
)
@pytest.mark.parametrize("n", [40, 1500])
def test_column_tokens_and_in_place_layers_change_no_number(options, n, monkeypatch):
    # the fast forward (kmtlib.kernels.limit_model) stores the point tokens as the paper's columns
    # and updates them in place; both are speed choices: in place must give bitwise the tokens of
    # the copying path; the two layouts the same tokens up to the summation order of BLAS
    # products; and the plain layer (the formula; "dense": with model.fast = False, dense hard
    # self-attention) the same tokens up to that rounding too
    dense = options == "dense"
    options = {} if dense else options
    if dense and n > 100:
        pytest.skip("the dense self-attention check materialises n x n scores")
    X = kmtlib.sample_tasks(3 if n < 100 else 1, n, 3, 4, generator=24, dtype=F64)
    C0 = kmtlib.init_centers(X, 4, generator=25)
    if not options.get("gamma"):
        # the layouts' scores differ by rounding (about 1e-16): their hard assignments agree
        # because no point is that close to a tie
        assert (_margins(X, kmtlib.lloyd(X, C0, 4).centers) >= MARGIN).all()
    model = _model(3, 4, **options)
    if dense:
        model.fast = False
    rows, C = model.embedding.embed(X, C0)
    cols = limit_model.point_tokens(X, model.width, model.k, model.config.embedding == "norm_augmented")
    assert torch.equal(rows, cols) and is_coordinate_major(cols) and not is_coordinate_major(rows)
    blocks = limit_blocks(model.layer)
    in_place, copying = LimitRunner(blocks, model.layer.ffn), LimitRunner(blocks, model.layer.ffn)

    def advance_copying(P, Ct):  # the same operations, the residual written into a new tensor
        with monkeypatch.context() as patch:
            patch.setattr(limit_model, "_residual_in_place", lambda tokens, *increments: False)
            return copying.advance_(P, Ct)

    with torch.no_grad():
        paths = {
            "rows": (rows, C),
            "columns": (cols, C),
            "rows in place": (rows.clone(), C),
            "columns in place": (cols.clone(), C),
            "formula": (rows, C),
        }
        for _ in range(4):
            for name, (P, Ct) in paths.items():
                if name.endswith("in place"):
                    P1, C1 = in_place.advance_(P, Ct)
                    if not options.get("gamma"):
                        assert P1 is P, f"{name}: the limit layer should update the tokens in place"
                elif name == "formula":
                    P1, C1 = model.apply_layer(P, Ct)
                else:
                    P1, C1 = advance_copying(P, Ct)
                    assert P1 is not P
                paths[name] = (P1, C1)
            _check_the_paths_agree(paths, model, soft=bool(options.get("gamma")))
    # the whole pass is the coordinate-major in-place layer chain (fast), the model the formula's chain
    out = model(X, C0, steps=4) if dense else kmtlib.whole_pass(model)(X, C0, steps=4)
    chain = paths["formula"] if dense else paths["columns"]
    assert torch.equal(out.centers[:, -1], model.embedding.centers(chain[1]))
    assert torch.equal(out.assignments, model.embedding.assignments(chain[0]))


def _check_the_paths_agree(paths: dict, model, soft: bool) -> None:
    """The tokens and centres of the paths of the test above after one more layer."""
    # in place or copied: the same operations, bitwise the same tokens
    for layout in ("rows", "columns"):
        P, Ct = paths[layout]
        done_in_place = paths[f"{layout} in place"]
        assert torch.equal(done_in_place[0], P) and torch.equal(done_in_place[1], Ct)
    # rows or columns, fast or formula: BLAS may sum the products over the points in another
    # order, so the centres may differ in the last bits; the hard assignments of the limit
    # models may not
    (Pr, Cr), (Pc, Cc), (Pf, Cf) = paths["rows"], paths["columns"], paths["formula"]
    assert is_coordinate_major(Pc)
    for Pt, Ctt in ((Pc, Cc), (Pf, Cf)):
        torch.testing.assert_close(Ctt, Cr, rtol=1e-13, atol=1e-13)
        if soft:
            torch.testing.assert_close(Pt, Pr, rtol=1e-13, atol=1e-13)
        else:
            assert torch.equal(model.embedding.assignments(Pt), model.embedding.assignments(Pr))


def test_in_place_residual_refuses_what_it_cannot_do_exactly():
    from kmtlib.kernels.limit_model import _residual, _residual_in_place

    t = torch.arange(24, dtype=F64).view(1, 4, 6)
    other = torch.ones(1, 4, 6, dtype=F64)
    before = t.clone()
    # a view of the tokens on other coordinates than those it is added to
    assert not _residual_in_place(t, (slice(0, 3), t[..., 3:], -1.0))
    assert not _residual_in_place(t, (slice(0, 3), other[..., 3:].clone(), 1.0), (slice(0, 3), t[..., 3:], -1.0))
    # a view of the very coordinates it is added to, but after another increment (which would
    # change it before it is read)
    assert not _residual_in_place(t, (slice(3, 6), other[..., :3].clone(), 1.0), (slice(3, 6), t[..., 3:], -1.0))
    # coordinates given by an index tensor
    assert not _residual_in_place(t, (torch.tensor([0, 2]), other[..., :2].clone(), 1.0))
    assert torch.equal(t, before)
    # the layer's pattern t_R - t_R + U (the reset first), and independent increments: the same as
    # the copying path
    u = torch.full((1, 4, 3), 0.3, dtype=F64)
    expected = _residual(t, (slice(3, 6), t[..., 3:], -1.0), (slice(3, 6), u.clone(), 1.0))
    assert _residual_in_place(t, (slice(3, 6), t[..., 3:], -1.0), (slice(3, 6), u, 1.0))
    assert torch.equal(t, expected)
    # an increment read from another token tensor is read, never written
    kept = other.clone()
    expected = _residual(t, (slice(0, 2), other[..., :2], -1.0))
    assert _residual_in_place(t, (slice(0, 2), other[..., :2], -1.0))
    assert torch.equal(t, expected) and torch.equal(other, kept)


def test_model_built_under_inference_mode():
    X = kmtlib.sample_tasks(2, 20, 2, 3, generator=22, dtype=F64)
    C0 = kmtlib.init_centers(X, 3, generator=23)
    with torch.inference_mode():
        model = _model(2, 3, attention="dot")
        out = model(X, C0, steps=3)
        model.layer.blocks["CAC"].value.weight.mul_(0.5)  # (no version counter on inference tensors: still seen)
        halved = model(X, C0, steps=1)
    torch.testing.assert_close(out.centers, kmtlib.lloyd(X, C0, 3).centers, rtol=0, atol=TOL)
    torch.testing.assert_close(halved.centers[:, 1], 0.5 * kmtlib.lloyd(X, C0, 1).centers[:, 1], rtol=0, atol=1e-15)


def test_recycled_token_memory_never_changes_tokens_a_caller_keeps():
    X = kmtlib.sample_tasks(3, 25, 2, 3, generator=20, dtype=F64)
    C0 = kmtlib.init_centers(X, 3, generator=21)
    model = _model(2, 3)
    whole = kmtlib.whole_pass(model)  # (the kernel that recycles its scratch memory from call to call)
    results = [whole(X, C0 * s, steps=4) for s in (1.0, 0.9, 1.1, 0.8, 1.2, 0.7)]
    kept = [r.assignments.clone() for r in results]
    for s in (1.3, 0.6):
        whole(X, C0 * s, steps=6)
    assert all(torch.equal(r.assignments, a) for r, a in zip(results, kept))
    P, C = model.embedding.embed(X, C0)
    chain = [(P, C)]
    for _ in range(5):
        chain.append(model.apply_layer(*chain[-1]))
    copies = [p.clone() for p, _ in chain]
    for _ in range(3):
        model.apply_layer(*chain[-1])
    assert all(torch.equal(p, c) for (p, _), c in zip(chain, copies))
    # the whole pass's scratch memory (its own, not the model's) can be dropped; the next call makes it anew
    whole.runner.scratch.clear()
    again = whole(X, C0, steps=4)
    assert not hasattr(model, "limit_runner")
    assert torch.equal(again.assignments, kept[0]) and torch.equal(again.centers, results[0].centers)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(attention="cosine"), ValueError, "attention"),
        (dict(gamma=0), ValueError, "gamma"),
        (dict(gamma=-1.0), ValueError, "gamma"),
        (dict(gamma=float("nan")), ValueError, "gamma"),
        (dict(gamma="1e4"), TypeError, "gamma"),
        (dict(center_update="mean"), ValueError, "center_update"),
        (dict(self_attention="none"), ValueError, "self_attention"),
        (dict(self_attention="identity", reset_gamma=1e6), ValueError, "reset_gamma"),
        (dict(reset_gamma=0.0), ValueError, "reset_gamma"),
        (dict(d=0), ValueError, "d"),
        (dict(k=2.5), TypeError, "k"),
    ],
)
def test_bad_options_raise_clear_errors(kwargs, error, match):
    args = dict(d=2, k=3)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        KMeansTransformer.from_theorem(**args)


def test_bad_inputs_raise_clear_errors():
    model = _model(2, 3)
    X = torch.rand(2, 10, 2, dtype=F64)
    with pytest.raises(ValueError, match="d=2"):
        model(torch.rand(2, 10, 3, dtype=F64), torch.rand(2, 3, 3, dtype=F64))
    with pytest.raises(ValueError, match="k=3"):
        model(X, X[:, :2])
    with pytest.raises(TypeError, match=r"float32.*float64|model.to"):
        KMeansTransformer.from_theorem(2, 3).to(torch.float32)(X, X[:, :3])
    with pytest.raises(TypeError, match="unexpected keyword"):
        KMeansTransformer.from_theorem(2, 3, temperature=3.0)


# ----------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(center_update="attention"),
        dict(attention="dot"),
        dict(gamma=100.0),
        dict(gamma=1e4, center_update="attention"),
    ],
)
def test_cuda_equals_cpu(options):
    X = kmtlib.sample_tasks(64, 80, 3, 5, generator=16, dtype=F64)
    C0 = kmtlib.init_centers(X, 5, generator=17)
    model = KMeansTransformer.from_theorem(3, 5, **options).to(F64)
    cpu = model(X, C0, steps=10)
    gpu = model.to("cuda")(X.cuda(), C0.cuda(), steps=10)
    torch.testing.assert_close(gpu.centers.cpu(), cpu.centers, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(gpu.assignments.cpu(), cpu.assignments, rtol=1e-9, atol=1e-9)


def test_fig3_survey_places_the_papers_values_among_draws_of_the_recipe():
    from kmtbook.theorem_checks import PAPER_FIG3, fig3_survey

    s = fig3_survey(16, torch.Generator().manual_seed(0), n=500, layers=len(PAPER_FIG3) - 1)
    assert s["draws"] == 16
    for key in ("share_layer0_at_or_above_paper", "share_layer1_at_or_above_paper", "share_final_at_or_below_paper"):
        assert 0.0 <= s[key] <= 1.0, key
    # Lloyd never raises the objective, and the unscaled data (a box larger than the unit square)
    # end higher than the scaled ones.
    assert s["median_final"] <= s["median_layer1"] <= s["median_layer0"]
    assert s["unscaled_median_final"] > s["median_final"]


def _survey_curves(layer0, layer1):
    """Curves of draws with the given values at layers 0 and 1 and a plain final value."""
    from kmtbook.theorem_checks import PAPER_FIG3

    final = [min(b, 4.6) for b in layer1]
    rows = [[a, b] + [f] * (len(PAPER_FIG3) - 2) for a, b, f in zip(layer0, layer1, final, strict=True)]
    return torch.tensor(rows, dtype=torch.float64)


def test_fig3_survey_summary_counts_the_high_starts_and_where_they_land():
    from kmtbook.theorem_checks import summarise_fig3_survey

    # Two draws start at or above 6.44 (one exactly at it); one of them reaches 5.78 after one layer
    # (exactly at it); a low start reaching 5.9 is not a high start.
    s = summarise_fig3_survey(_survey_curves([6.44, 6.6, 6.0, 5.5], [5.78, 5.0, 5.9, 4.9]))
    assert s["draws"] == 4 and s["high_start_draws"] == 2
    assert s["high_start_layer1_at_or_above_paper"] == 1
    assert s["high_start_max_layer1"] == 5.78 and s["max_layer1"] == 5.9
    assert s["share_layer0_at_or_above_paper"] == 0.5 and s["share_layer1_at_or_above_paper"] == 0.5
    none_high = summarise_fig3_survey(_survey_curves([6.0, 5.5], [5.0, 4.9]))
    assert none_high["high_start_draws"] == 0 and math.isnan(none_high["high_start_max_layer1"])
    with pytest.raises(ValueError, match="curves must be"):
        summarise_fig3_survey(torch.zeros(3))


def test_fig3_layer1_reading_follows_the_survey():
    from kmtbook.theorem_checks import fig3_layer1_reading, summarise_fig3_survey

    # High starts that never reach 5.78: a poor start is ruled out, the rest is open, the test is given.
    ruled_out = fig3_layer1_reading(summarise_fig3_survey(_survey_curves([6.5, 6.7, 6.0], [5.1, 5.3, 4.9])))
    assert "does not reproduce it" in ruled_out and "at most 5.30, 0.48 below" in ruled_out
    assert "2 of the 3 draws" in ruled_out
    assert "Still open" in ruled_out and "github.com/rithram/kmeans-trf" in ruled_out
    # A high start that does reach it: the start can explain it.
    explained = fig3_layer1_reading(summarise_fig3_survey(_survey_curves([6.5, 6.7, 6.0], [5.8, 5.3, 4.9])))
    assert "can explain" in explained and "1 of the 2 draws" in explained and "does not reproduce" not in explained
    # No draw starts that high: the survey cannot tell.
    untested = fig3_layer1_reading(summarise_fig3_survey(_survey_curves([6.0, 5.9], [5.0, 4.9])))
    assert "cannot tell" in untested and "does not reproduce" not in untested
