"""The parametrisations of a layer for any k that chapter 12 compares: how the equivariant maps
spread a number over the cluster coordinates, random cluster codes, and the loss temperature per k."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import kmtlib
from kmtlib import KMeansTransformer
from kmtlib.embedding import CodeEmbedding
from kmtlib.equivariant import EquivariantMap, broadcast_weight
from kmtlib.training import TrainConfig, read_log, train
from kmtlib.training.config import config_differences

F64 = torch.float64


def _tasks(B: int, n: int, d: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = kmtlib.sample_tasks(B, n, d, k, generator=g, dtype=F64)
    return X, kmtlib.init_centers(X, k, generator=g)


@pytest.mark.parametrize("broadcast", ["ones", "mean", "unit"])
def test_every_broadcast_is_its_dense_matrix_and_commutes_with_renumbering(broadcast):
    torch.manual_seed(3)
    f = EquivariantMap(2, broadcast=broadcast).double()
    f.reset_parameters(6)
    for k in (1, 3, 4):
        W, bias = f.dense(k)
        z = torch.randn(3, 5, 2 + k, dtype=F64)
        torch.testing.assert_close(f(z), z @ W.T + bias, rtol=0, atol=1e-14)
    z = torch.randn(3, 5, 2 + 4, dtype=F64)
    for perm in itertools.permutations(range(4)):
        idx = torch.tensor([0, 1, *(2 + p for p in perm)])
        torch.testing.assert_close(f(z[..., idx]), f(z)[..., idx], rtol=0, atol=1e-14)


def test_the_broadcasts_differ_only_in_the_factor_of_the_ones_vector():
    # the cluster block of "mean" is a I + (b / k) 1 1^T; "unit" writes a vector of the same length at every k
    maps = {}
    for broadcast in ("ones", "mean", "unit"):
        maps[broadcast] = EquivariantMap(2, broadcast=broadcast).double()
        maps[broadcast].reset_parameters(6, torch.Generator().manual_seed(4))
    k = 5
    W_ones, b_ones = maps["ones"].dense(k)
    a, b = maps["ones"].a.item(), maps["ones"].b.item()
    for broadcast, w in (("mean", 1 / k), ("unit", 1 / math.sqrt(k))):
        W, bias = maps[broadcast].dense(k)
        assert broadcast_weight(broadcast, k) == w
        torch.testing.assert_close(W[:2], W_ones[:2], rtol=0, atol=0)  # (what x reads is the same)
        torch.testing.assert_close(W[2:, :2], w * W_ones[2:, :2], rtol=0, atol=1e-15)
        expected = a * torch.eye(k, dtype=F64) + w * b * torch.ones(k, k, dtype=F64)
        torch.testing.assert_close(W[2:, 2:], expected, rtol=0, atol=1e-15)
        torch.testing.assert_close(bias[2:], w * b_ones[2:], rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="unknown broadcast"):
        EquivariantMap(2, broadcast="sum")


def test_a_broadcast_is_saved_with_the_model_and_old_files_read_as_ones(tmp_path):
    model = KMeansTransformer.trainable(3, 5, any_k=True, cluster_broadcast="mean", generator=1).double().eval()
    loaded = kmtlib.load_model(model.save(tmp_path / "mean.pt")).eval()
    assert loaded.config.cluster_broadcast == "mean"
    X, C0 = _tasks(2, 30, 3, 7)
    assert torch.equal(loaded(X, C0, steps=2).centers, model(X, C0, steps=2).centers)
    shipped = kmtlib.load_model("data/weights_any_k_forms/onehot_anyk_seed153476998/model.pt")
    assert shipped.config.cluster_broadcast == "ones"
    with pytest.raises(ValueError, match="any_k=True"):
        KMeansTransformer.trainable(3, 5, cluster_broadcast="unit")


def test_a_layer_with_cluster_codes_runs_at_any_k_and_repeats_itself_in_eval():
    model = KMeansTransformer.trainable(3, 4, embedding="codes", code_width=5, generator=2).double().eval()
    assert model.width == 8 and model.config.reads_any_k
    for k in (1, 4, 9):
        X, C0 = _tasks(3, 30, 3, k, seed=k)
        out = model(X, C0, steps=2)
        assert out.centers.shape == (3, 3, k, 3)
        assert torch.equal(model(X, C0, steps=2).centers, out.centers)
    codes = model.embedding.codes(2, 9, C0)
    assert codes.shape == (2, 9, 5) and torch.equal(codes[0], codes[1])  # (in eval: the same codes for every task)
    assert torch.linalg.matrix_rank(codes[0]) == 5  # (nine different codes in five dimensions)
    # a task's result does not depend on the rest of its batch
    X, C0 = _tasks(3, 30, 3, 6, seed=2)
    torch.testing.assert_close(model(X[1:2], C0[1:2], steps=2).centers, model(X, C0, steps=2).centers[1:2],
                               rtol=0, atol=1e-12)  # fmt: skip
    with pytest.raises(ValueError, match="code_width"):
        KMeansTransformer.trainable(3, 4, embedding="codes")
    with pytest.raises(ValueError, match="code_width"):
        KMeansTransformer.trainable(3, 4, code_width=3)


def test_codes_come_from_the_generator_only_in_training_mode():
    embedding = CodeEmbedding(2, 3, code_width=4, seed=7)
    C = torch.zeros(1, 3, 2)
    fixed = embedding.codes(1, 3, C)
    embedding.generator = torch.Generator().manual_seed(99)
    fresh = embedding.codes(2, 3, C)
    assert not torch.equal(fresh[0], fixed[0]) and not torch.equal(fresh[0], fresh[1])  # (a code per task)
    assert not torch.equal(embedding.codes(2, 3, C), fresh)
    embedding.training = False
    assert torch.equal(embedding.codes(1, 3, C), fixed)


def test_the_loss_temperature_per_k():
    fixed = TrainConfig(k_min=2, k_max=16).validated()
    assert fixed.loss_inv_temp_at(3) == fixed.loss_inv_temp_at(16) == 10.0
    log_k = TrainConfig(k_min=2, k_max=16, loss_temperature_rule="log_k").validated()
    assert log_k.loss_inv_temp_at(10) == pytest.approx(10.0)
    assert log_k.loss_inv_temp_at(100) == pytest.approx(20.0)
    with pytest.raises(ValueError, match="log_k"):
        TrainConfig(loss_temperature_rule="log_k").validated()
    with pytest.raises(ValueError, match="cluster_broadcast"):
        TrainConfig(cluster_broadcast="unit").validated()
    with pytest.raises(ValueError, match="code_width"):
        TrainConfig(embedding="codes").validated()


def test_runs_written_before_the_new_options_still_resume():
    saved = {k: v for k, v in TrainConfig(k_min=2, k_max=16).__dict__.items()
             if k not in ("cluster_broadcast", "loss_temperature_rule", "code_width")}  # fmt: skip
    assert config_differences(saved, TrainConfig(k_min=2, k_max=16)) == []
    assert config_differences(saved, TrainConfig(k_min=2, k_max=16, cluster_broadcast="unit")) == [
        "cluster_broadcast: 'ones' there vs 'unit' now"
    ]


TINY = dict(d=3, k=4, n=40, batch=4, steps=12, eval_every=4, val_batches=3, k_min=2, k_max=6, k_held_out="4")


@pytest.mark.parametrize(
    "form", [dict(cluster_broadcast="unit"), dict(embedding="codes", code_width=3), dict(loss_temperature_rule="log_k")]
)
def test_every_form_trains_deterministically_and_resumes_bitwise(tmp_path, form):
    train(TrainConfig(**TINY, **form), tmp_path / "a", quiet=True, threads=1)
    train(TrainConfig(**dict(TINY, steps=8), **form), tmp_path / "b", quiet=True, threads=1)
    train(TrainConfig(**TINY, **form), tmp_path / "b", resume=True, quiet=True, threads=1)
    last_a, last_b = (read_log(tmp_path / run / "log.csv")[-1] for run in ("a", "b"))
    assert {**last_b, "wall_s": last_a["wall_s"]} == last_a
    a, b = (kmtlib.load_model(tmp_path / run / "model.pt") for run in ("a", "b"))
    assert a.config.reads_any_k
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
