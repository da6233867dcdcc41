"""One layer for any number of clusters: the equivariant maps, the model at any k, mixed-k training."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import kmtlib
from kmtlib import KMeansTransformer
from kmtlib.equivariant import EquivariantMap
from kmtlib.training import TrainConfig, make_validation_batches, read_log, train

F64 = torch.float64


def _tasks(B: int, n: int, d: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = kmtlib.sample_tasks(B, n, d, k, generator=g, dtype=F64)
    return X, kmtlib.init_centers(X, k, generator=g)


def test_equivariant_map_is_its_dense_matrix_at_every_k():
    torch.manual_seed(0)
    f = EquivariantMap(3).double()
    f.reset_parameters(7)
    for k in (1, 2, 5):
        W, bias = f.dense(k)
        assert W.shape == (3 + k, 3 + k)
        z = torch.randn(4, 6, 3 + k, dtype=F64)
        torch.testing.assert_close(f(z), z @ W.T + bias, rtol=0, atol=1e-14)


def test_equivariant_map_commutes_with_renumbering_the_clusters():
    torch.manual_seed(1)
    f = EquivariantMap(2).double()
    f.reset_parameters(6)
    z = torch.randn(3, 5, 2 + 4, dtype=F64)
    for perm in itertools.permutations(range(4)):
        idx = torch.tensor([0, 1, *(2 + p for p in perm)])
        torch.testing.assert_close(f(z[..., idx]), f(z)[..., idx], rtol=0, atol=1e-14)


def test_from_linear_is_the_average_over_all_renumberings():
    torch.manual_seed(2)
    d, k = 3, 4
    linear = torch.nn.Linear(d + k, d + k).double()
    W, b = linear.weight.detach(), linear.bias.detach()
    mean_W, mean_b = torch.zeros_like(W), torch.zeros_like(b)
    for perm in itertools.permutations(range(k)):
        P = torch.eye(d + k, dtype=F64)[torch.tensor([*range(d), *(d + p for p in perm)])]
        mean_W += P.T @ W @ P
        mean_b += P.T @ b
    mean_W /= math.factorial(k)
    mean_b /= math.factorial(k)
    W_avg, b_avg = EquivariantMap.from_linear(linear, d).dense(k)
    torch.testing.assert_close(W_avg, mean_W, rtol=0, atol=1e-14)
    torch.testing.assert_close(b_avg, mean_b, rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="no cluster coordinates"):
        EquivariantMap.from_linear(torch.nn.Linear(3, 3), 3)


def test_theorem_weights_lie_in_the_family():
    # Theorem 2.1's id blocks are 0 or +-1 times the identity: the projection keeps them exactly
    model = KMeansTransformer.from_theorem(3, 4).double()
    for block in model.layer.blocks.values():
        for linear in block.linear_maps():
            W, _ = EquivariantMap.from_linear(linear, 3).dense(4)
            assert torch.equal(W, linear.weight)


def test_a_model_for_any_k_runs_at_every_k_and_ignores_the_numbering():
    model = KMeansTransformer.trainable(3, 6, any_k=True, generator=0).double().eval()
    for k in (1, 2, 6, 11):
        X, C0 = _tasks(3, 40, 3, k, seed=k)
        out = model(X, C0, steps=3)
        assert out.centers.shape == (3, 4, k, 3) and out.objective.shape == (3, 4)
        perm = torch.randperm(k, generator=torch.Generator().manual_seed(k))
        again = model(X, C0[:, perm], steps=3)
        torch.testing.assert_close(again.centers, out.centers[:, :, perm], rtol=0, atol=1e-12)
    fixed = KMeansTransformer.trainable(3, 6, generator=0).double()
    X, C0 = _tasks(2, 40, 3, 4)
    with pytest.raises(ValueError, match="k=6"):
        fixed(X, C0)


def test_a_model_for_any_k_saves_and_loads_bitwise(tmp_path):
    model = KMeansTransformer.trainable(3, 5, any_k=True, generator=3).double().eval()
    loaded = kmtlib.load_model(model.save(tmp_path / "any_k.pt")).eval()
    assert loaded.config == model.config and loaded.config.any_k
    X, C0 = _tasks(2, 30, 3, 8)
    assert torch.equal(loaded(X, C0, steps=2).centers, model(X, C0, steps=2).centers)


def test_mixed_k_options_are_checked():
    with pytest.raises(ValueError, match="k_min <= k_max"):
        TrainConfig(k_min=5, k_max=3).validated()
    with pytest.raises(ValueError, match="outside"):
        TrainConfig(k_min=2, k_max=6, k_held_out="9").validated()
    with pytest.raises(ValueError, match="integers"):
        TrainConfig(k_min=2, k_max=6, k_held_out="3,x").validated()
    with pytest.raises(ValueError, match="no number of clusters"):
        TrainConfig(k_min=2, k_max=3, k_held_out="2,3").validated()
    with pytest.raises(ValueError, match="need k_max"):
        TrainConfig(k_held_out="3").validated()
    with pytest.raises(ValueError, match="onehot"):
        TrainConfig(k_min=2, k_max=4, embedding="data").validated()
    assert TrainConfig(k_min=2, k_max=6, k_held_out="3, 5").validated().training_ks() == [2, 4, 6]
    assert TrainConfig(k=7).training_ks() == [7]


TINY = dict(d=3, k=4, n=40, batch=4, steps=12, eval_every=4, val_batches=3, k_min=2, k_max=6, k_held_out="4")


def test_validation_of_a_mixed_run_is_at_the_training_ks_only():
    groups = make_validation_batches(TrainConfig(**TINY))
    assert [C0.shape[1] for _, C0, _ in groups] == [2, 3, 5]
    # a run of one k keeps its validation set as it was (one group, the shipped runs' tasks)
    ((_, C0, _),) = make_validation_batches(TrainConfig(**dict(TINY, k_min=0, k_max=0, k_held_out="")))
    assert C0.shape == (12, 4, 3)


def test_mixed_k_training_is_deterministic_and_resumes_bitwise(tmp_path):
    config = TrainConfig(**TINY)
    train(config, tmp_path / "a", quiet=True, threads=1)
    train(TrainConfig(**dict(TINY, steps=8)), tmp_path / "b", quiet=True, threads=1)
    train(config, tmp_path / "b", resume=True, quiet=True, threads=1)
    last_a, last_b = (read_log(tmp_path / run / "log.csv")[-1] for run in ("a", "b"))
    assert {**last_b, "wall_s": last_a["wall_s"]} == last_a
    a, b = (kmtlib.load_model(tmp_path / run / "model.pt") for run in ("a", "b"))
    assert a.config.any_k
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name


def test_fair_test_names_seeded_models_beyond_the_models_given():
    """Asking more layers to start from the k-means++ seeds than there are layers is an error
    naming the parameter, raised before any task is drawn."""
    from kmtbook.any_k import fair_test

    with pytest.raises(ValueError, match="seeded_models"):
        fair_test([object()], [4], 2, generator_for=None, seeded_models=2)  # type: ignore[list-item]
