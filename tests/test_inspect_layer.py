"""kmtlib.analysis.inspect_layer: weights, attention maps and step measures, checked on the theorem model
(where every measure has a known answer) and on trainable layers (consistency with the model's
own forward pass)."""

from __future__ import annotations

import math

import pytest
import torch

import kmtlib
from kmtbook.shipped import shipped_runs
from kmtlib.analysis.inspect_layer import (
    attention_summary,
    block_weights,
    compare_with_lloyd,
    components_covered,
    effective_number,
    entropy,
    layer_maps,
    layer_maps_centers,
    lloyd_step,
    paper_theorem_model,
    qk_structure,
)
from kmtlib.theorems import theorem_weights

D_, K_ = 5, 4


def _tasks(B=6, n=40, d=D_, k=K_, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = kmtlib.sample_tasks(B, n, d, k, generator=g, dtype=dtype)
    # Centres are data points: every cluster holds at least its own point (no empty cluster).
    return X, kmtlib.init_centers(X, k, generator=g)


def _limit_model(d=D_, k=K_):
    return paper_theorem_model(d, k, gamma=math.inf)


# ------------------------------------------------------------------------------------ weights
def test_theorem_block_weights_are_the_selectors():
    model = kmtlib.KMeansTransformer.from_theorem(D_, K_).to(torch.float64)
    got = block_weights(model)
    ref = theorem_weights(D_, K_)
    data = torch.diag(torch.tensor([1.0] * D_ + [0.0] * K_, dtype=torch.float64))
    ids = torch.diag(torch.tensor([0.0] * D_ + [1.0] * K_, dtype=torch.float64))
    assert list(got) == ["CAX", "SAX", "CAC", "SAC"]
    for name, bw in got.items():
        for m in ("Q", "K", "V"):
            assert torch.equal(getattr(bw, m), ref[name][m])
        for b in (bw.q_bias, bw.k_bias, bw.v_bias):
            assert b.shape == (D_ + K_,) and not b.any()
        assert list(bw.matrices()) == ["Q", "K", "V", "QtK"]
    # Q^T K is the identity on the data block (CAX, SAX) or on the id block (CAC, SAC).
    assert torch.equal(got["CAX"].QtK, data) and torch.equal(got["SAX"].QtK, data)
    assert torch.equal(got["CAC"].QtK, ids) and torch.equal(got["SAC"].QtK, ids)
    s = qk_structure(got["CAX"].QtK, D_)
    assert s == {"data_diag": 1.0, "data_off": 0.0, "id_diag": 0.0, "id_off": 0.0, "cross": 0.0}
    assert qk_structure(got["SAC"].QtK, D_)["id_diag"] == 1.0


@pytest.mark.parametrize("embedding,width", [("onehot", D_ + K_), ("data", D_)])
def test_trainable_block_weights_read_the_linear_maps(embedding, width):
    model = kmtlib.KMeansTransformer.trainable(D_, K_, embedding=embedding, generator=3)
    got = block_weights(model)
    for name, bw in got.items():
        block = getattr(model.layer, name)
        assert bw.Q.dtype == torch.float64 and bw.Q.shape == (width, width)
        assert torch.equal(bw.Q, block.query.weight.detach().double())
        assert torch.equal(bw.v_bias, block.value.bias.detach().double())
        assert torch.allclose(bw.QtK, block.query.weight.double().T @ block.key.weight.double())
    assert "id_diag" not in qk_structure(got["CAX"].QtK, D_) or embedding == "onehot"


# ------------------------------------------------------------------------------------ maps
def test_limit_model_maps_and_measures_give_lloyd():
    X, C = _tasks()
    model = _limit_model()
    maps = layer_maps(model, X, C)
    new, labels, counts = lloyd_step(X, C, empty="keep")
    assert (counts > 0).all()
    # CAX's hard scores and nearest_center's come from products in two layouts: the same
    # maximiser wherever no point is within rounding of a tie (margin far above 1e-16 here)
    D = ((X.unsqueeze(2) - C.unsqueeze(1)) ** 2).sum(-1)
    two = D.topk(2, dim=-1, largest=False).values
    assert (two[..., 1] - two[..., 0] >= 1e-9).all()
    onehot = torch.nn.functional.one_hot(labels, K_).double()
    eye_n = torch.eye(X.shape[1], dtype=torch.float64).expand_as(maps.SAX)
    assert torch.equal(maps.CAX, onehot)  # hard assignment to the nearest centre
    assert torch.equal(maps.SAX, eye_n)
    assert torch.equal(maps.SAC, torch.eye(K_, dtype=torch.float64).expand_as(maps.SAC))
    assert torch.allclose(maps.CAC, (onehot / counts.unsqueeze(1)).transpose(1, 2), atol=0, rtol=1e-15)
    assert torch.allclose(maps.centers, new, atol=1e-15, rtol=0)  # the update is the cluster mean
    assert torch.equal(maps.scratch, onehot)

    s = attention_summary(maps, X, C)
    assert torch.equal(s.cax_effective, torch.ones_like(s.cax_effective)) and s.cax_max.eq(1).all()
    assert s.cax_agree.all() and s.cac_agree.all() and s.scratch_agree.all()
    assert torch.allclose(s.cac_effective, counts, rtol=1e-12)
    assert torch.allclose(s.cac_own_mass, torch.ones_like(s.cac_own_mass))
    assert s.sax_self.eq(1).all() and s.sac_self.eq(1).all() and s.sax_effective.eq(1).all()
    assert s.sax_own_mass.eq(1).all()
    assert s.point_shift.eq(0).all()

    cmp = compare_with_lloyd(model, X, C, new_centers=maps.centers)
    assert cmp.dist_to_mean.abs().max() <= 1e-15
    moved = cmp.lloyd_move > 1e-9
    assert torch.allclose(cmp.step_ratio[moved], torch.ones(int(moved.sum()), dtype=torch.float64), atol=1e-9)
    assert cmp.nearest_own_mean.all() and cmp.n_empty.eq(0).all()
    assert torch.allclose(cmp.objective_model, cmp.objective_lloyd, rtol=1e-12)
    assert torch.allclose(cmp.fixed_model, cmp.fixed_lloyd, rtol=1e-12)
    # The same when compare_with_lloyd computes the step itself.
    again = compare_with_lloyd(model, X, C)
    assert torch.allclose(again.objective_model, cmp.objective_model, rtol=1e-12)


def test_paper_theorem_model_temperature_and_closeness_to_the_limit():
    m = paper_theorem_model(D_, K_, gamma=1000.0)
    assert m.layer.blocks["CAX"].config.inverse_temperature == pytest.approx(1000.0 / math.sqrt(D_ + K_))
    assert m.layer.blocks["CAC"].config.map == "softmax" and not m.layer.blocks["SAX"].config.identity
    raw = paper_theorem_model(D_, K_, gamma=1000.0, sqrt_scaling=False)
    assert raw.layer.blocks["SAX"].config.inverse_temperature == pytest.approx(1000.0)
    X, C = _tasks(seed=2)
    soft, hard = layer_maps(raw, X, C), layer_maps(_limit_model(), X, C)
    # Each map is the soft-max at inverse temperature beta = 1000 of minus the squared distances of
    # the coordinates its weights select (Theorem 2.1: data for CAX, one-hot ids for CAC and SAC),
    # computed here from the points, centres and updated point tokens, not by the layer.
    beta = 1000.0
    ids = torch.eye(K_, dtype=torch.float64).expand(X.shape[0], K_, K_)
    assignment = soft.point_tokens[..., D_:]
    squared = {
        "CAX": ((X.unsqueeze(2) - C.unsqueeze(1)) ** 2).sum(-1),
        "CAC": ((ids.unsqueeze(2) - assignment.unsqueeze(1)) ** 2).sum(-1),
        "SAC": ((ids.unsqueeze(2) - ids.unsqueeze(1)) ** 2).sum(-1),
    }
    for name, d2 in squared.items():
        torch.testing.assert_close(soft.maps()[name], torch.softmax(-beta * d2, dim=-1), rtol=1e-9, atol=1e-12)
    # Close to the limit: a point whose nearest centre is nearer by a margin m than the next one puts
    # at most (k - 1) exp(-beta m) of its weight elsewhere than the hard assignment, and at least
    # exp(-beta m) / (1 + (k - 1) exp(-beta m)).
    nearest_two = squared["CAX"].topk(2, dim=-1, largest=False).values
    margin = nearest_two[..., 1] - nearest_two[..., 0]
    elsewhere = (soft.CAX - hard.CAX).abs().sum(-1) / 2
    tail = torch.exp(-beta * margin)
    unique = margin > 0  # (a tie's hard row splits its weight: the bounds are for a unique nearest centre)
    assert (elsewhere <= (K_ - 1) * tail * (1 + 1e-9) + 1e-15)[unique].all()
    assert (elsewhere >= tail / (1 + (K_ - 1) * tail) * (1 - 1e-9) - 1e-15)[unique].all()
    assert ((margin > 0.01) & (margin < 0.03)).any(), "some point near a tie, where the bounds bite"
    assert torch.equal(soft.SAC, hard.SAC)  # (distinct ids: beta * 2 puts exp(-2000) = 0 elsewhere)


@pytest.mark.parametrize("embedding", ["onehot", "data"])
def test_learned_maps_match_the_forward_pass_without_dropout(embedding):
    X, C = _tasks(B=3, n=30, dtype=torch.float32, seed=4)
    model = kmtlib.KMeansTransformer.trainable(D_, K_, embedding=embedding, generator=5)
    model.train()  # the maps ignore the mode: no dropout either way
    maps = layer_maps(model, X, C)
    assert model.training
    model.eval()
    assert torch.allclose(maps.centers, model.step(X, C), atol=1e-5)
    assert torch.allclose(layer_maps_centers(model, X, C), model.step(X, C))
    assert torch.allclose(layer_maps_centers(model, X, C, batch_size=2), model.step(X, C), atol=1e-5)
    assert maps.CAX.shape == (3, 30, K_) and maps.SAX.shape == (3, 30, 30)
    assert maps.CAC.shape == (3, K_, 30) and maps.SAC.shape == (3, K_, K_)
    for W in maps.maps().values():
        assert torch.allclose(W.sum(-1), torch.ones(W.shape[:2]), atol=1e-5)
    assert (maps.scratch is None) == (embedding == "data")
    s = attention_summary(maps, X, C)
    assert ((s.cax_effective >= 1 - 1e-5) & (s.cax_effective <= K_ + 1e-4)).all()
    assert s.counts.sum(-1).eq(30).all()
    assert ((s.sax_own_mass >= 0) & (s.sax_own_mass <= 1 + 1e-5)).all()


def test_chunked_maps_equal_one_batch(monkeypatch):
    import kmtlib.analysis.inspect_layer as il

    X, C = _tasks(B=5, n=20, dtype=torch.float32)
    model = kmtlib.KMeansTransformer.trainable(D_, K_, generator=1)
    whole = layer_maps(model, X, C)
    monkeypatch.setattr(il, "MAX_SCORE_ELEMENTS", 2 * 20 * 20)
    parts = layer_maps(model, X, C)
    for a, b in zip(whole.maps().values(), parts.maps().values()):
        assert torch.allclose(a, b)
    assert torch.allclose(whole.centers, parts.centers)


def test_gain_decomposition_and_lloyd_optimality_on_the_old_assignment():
    X, C = _tasks(B=8, n=50, dtype=torch.float32, seed=7)
    model = kmtlib.KMeansTransformer.trainable(D_, K_, generator=2)
    cmp = compare_with_lloyd(model, X, C)
    total = cmp.objective_before - cmp.objective_model
    assert torch.allclose(cmp.update_gain_model + cmp.reassign_gain_model, total, rtol=1e-5, atol=1e-4)
    assert (cmp.reassign_gain_model >= -1e-4).all() and (cmp.reassign_gain_lloyd >= -1e-4).all()
    # On the old assignment the cluster means are the best centres there are.
    assert (cmp.fixed_lloyd <= cmp.fixed_model + 1e-4).all()
    assert cmp.counts.sum(-1).eq(50).all()
    both = cmp.cat(cmp)
    assert both.counts.shape == (16, K_)


def test_empty_cluster_measures():
    X = torch.tensor([[[0.0, 0.0], [0.1, 0.0], [1.0, 1.0]]], dtype=torch.float64)
    C = torch.tensor([[[0.0, 0.0], [1.0, 1.0], [9.0, 9.0]]], dtype=torch.float64)  # centre 2 gets no point
    model = paper_theorem_model(2, 3, gamma=math.inf)
    cmp = compare_with_lloyd(model, X, C)
    assert cmp.n_empty.tolist() == [1] and cmp.counts.tolist() == [[2.0, 1.0, 0.0]]
    assert math.isnan(cmp.dist_to_mean[0, 2]) and math.isnan(cmp.step_ratio[0, 2])
    assert not cmp.nearest_own_mean[0, 2] and cmp.nearest_own_mean[0, :2].all()
    new, _, _ = lloyd_step(X, C, empty="keep")
    assert torch.equal(new[0, 2], C[0, 2])  # Lloyd here: an empty cluster keeps its centre


# ------------------------------------------------------------------------------------ helpers
def test_entropy_and_effective_number():
    W = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(entropy(W), torch.tensor([0.0, math.log(4), math.log(2)], dtype=torch.float64))
    assert torch.allclose(effective_number(W), torch.tensor([1.0, 4.0, 2.0], dtype=torch.float64))


def test_components_covered():
    means = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    C = torch.tensor([[[0.1, 0.0], [0.0, 0.9], [0.9, 0.1]], [[0.1, 0.0], [0.0, 0.1], [0.2, 0.1]]])
    assert components_covered(C, means.expand(2, 3, 2)).tolist() == [3, 1]


# ------------------------------------------------------------------------------------ bad input
def test_bad_inputs_raise_clear_errors():
    model = kmtlib.KMeansTransformer.trainable(D_, K_, generator=0)
    X, C = _tasks(B=2, n=10, dtype=torch.float32)
    with pytest.raises(TypeError, match="KMeansTransformer"):
        block_weights("model")
    with pytest.raises(TypeError, match="KMeansTransformer"):
        layer_maps(torch.nn.Linear(2, 2), X, C)
    with pytest.raises(TypeError, match="float64"):
        layer_maps(model, X.double(), C.double())
    with pytest.raises(ValueError, match="d=5"):
        layer_maps(model, X[..., :3], C[..., :3])
    with pytest.raises(ValueError, match="k=4"):
        layer_maps(model, X, C[:, :2])
    with pytest.raises(ValueError, match="shape"):
        layer_maps(model, X[0], C)
    with pytest.raises(ValueError, match="new_centers"):
        compare_with_lloyd(model, X, C, new_centers=C[:, :2])
    with pytest.raises(ValueError, match="square"):
        qk_structure(torch.zeros(3, 4), 2)
    with pytest.raises(ValueError, match="exceeds"):
        qk_structure(torch.zeros(3, 3), 4)
    with pytest.raises(ValueError, match="gamma"):
        paper_theorem_model(D_, K_, gamma=-1.0)
    with pytest.raises(TypeError, match="LayerMaps"):
        attention_summary({"CAX": None}, X, C)
    maps = layer_maps(model, X, C)
    with pytest.raises(ValueError, match="CAX"):
        attention_summary(maps, X[:, :5], C)
    with pytest.raises(ValueError, match="same B and d"):
        components_covered(C, C[:1])


# ------------------------------------------------------------------------------------ shipped weights
@pytest.mark.skipif(not shipped_runs("onehot", d=32, k=10), reason="no shipped one-hot weights under data/weights")
def test_shipped_layer_reads_out_in_the_common_layout():
    run = shipped_runs("onehot", d=32, k=10)[0]
    model = run.load()
    got = block_weights(model)
    assert all(bw.Q.shape == (42, 42) for bw in got.values())
    X, C = _tasks(B=2, n=64, d=32, k=10, dtype=torch.float32, seed=9)
    maps = layer_maps(model, X, C)
    assert torch.allclose(maps.centers, model.eval().step(X, C), atol=1e-4)


def test_inspect_step_in_batches_equals_one_batch():
    from kmtlib.analysis.inspect_layer import inspect_step

    X, C = _tasks(B=5, n=20, dtype=torch.float32, seed=3)
    model = kmtlib.KMeansTransformer.trainable(D_, K_, generator=6)
    a1, c1 = inspect_step(model, X, C, batch_size=5)
    a2, c2 = inspect_step(model, X, C, batch_size=2)
    assert torch.allclose(a1.cac_own_mass, a2.cac_own_mass) and torch.equal(a1.cax_agree, a2.cax_agree)
    assert torch.allclose(c1.objective_model, c2.objective_model) and c2.counts.shape == (5, K_)
    with pytest.raises(ValueError, match="batch_size"):
        inspect_step(model, X, C, batch_size=0)
