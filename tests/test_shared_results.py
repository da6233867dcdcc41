"""kmtbook.shared_results: what chapters compute alike is computed once per build, bitwise the same."""

from __future__ import annotations

import os

import torch

from kmtbook import execute_chapters
from kmtbook.shared_results import SHARED_VARIABLE, dropout_effect, dropout_seeds, evaluate_seeds, fingerprint, shared
from kmtlib import KMeansTransformer
from kmtlib.analysis.evaluate import evaluate_seeds as kmtlib_evaluate_seeds


def test_a_result_is_computed_once_per_folder_and_the_generator_ends_alike(tmp_path, monkeypatch):
    monkeypatch.delenv(SHARED_VARIABLE, raising=False)
    calls = []

    def draw(g):
        calls.append(1)
        return torch.rand(3, generator=g)

    g1 = torch.Generator().manual_seed(5)
    first = shared(("draw", torch.ones(2)), lambda: draw(g1), g1, folder=tmp_path)
    g2 = torch.Generator().manual_seed(5)
    second = shared(("draw", torch.ones(2)), lambda: draw(g2), g2, folder=tmp_path)
    assert len(calls) == 1 and torch.equal(first, second)
    assert torch.equal(g1.get_state(), g2.get_state())  # as if the second had drawn itself
    shared(("draw", torch.zeros(2)), lambda: draw(torch.Generator()), folder=tmp_path)
    assert len(calls) == 2  # other inputs, another result
    shared(("draw", torch.ones(2)), lambda: draw(torch.Generator()))  # no folder: computed
    assert len(calls) == 3


def test_the_fingerprint_reads_values_not_names():
    a, b = torch.arange(4.0), torch.arange(4.0)
    assert fingerprint(a, [1, "x"]) == fingerprint(b, [1, "x"])
    assert fingerprint(a) != fingerprint(a.double()) and fingerprint(a) != fingerprint(a.reshape(2, 2))
    m1, m2 = KMeansTransformer.trainable(3, 4, generator=0), KMeansTransformer.trainable(3, 4, generator=0)
    assert fingerprint(m1) == fingerprint(m2) != fingerprint(KMeansTransformer.trainable(3, 4, generator=1))


def test_shared_evaluation_is_kmtlibs_bitwise(tmp_path, monkeypatch):
    monkeypatch.setenv(SHARED_VARIABLE, str(tmp_path))
    g = torch.Generator().manual_seed(0)
    X = torch.randn(4, 30, 3, generator=g)
    C0 = X[:, :4].clone()
    models = [KMeansTransformer.trainable(3, 4, generator=s).eval() for s in range(2)]
    direct = kmtlib_evaluate_seeds(models, X, C0, steps=3, generator=torch.Generator().manual_seed(7))
    for _ in range(2):  # computed, then read
        got = evaluate_seeds(models, X, C0, steps=3, generator=torch.Generator().manual_seed(7))
        assert torch.equal(got.model_curves, direct.model_curves) and torch.equal(got.lloyd_curves, direct.lloyd_curves)
    assert len(list(tmp_path.glob("*.pkl"))) == 1


def test_the_build_names_a_fresh_folder_for_the_chapters_it_runs(tmp_path, monkeypatch):
    monkeypatch.delenv(SHARED_VARIABLE, raising=False)
    folder = tmp_path / execute_chapters.SHARED_FOLDER
    folder.mkdir()
    (folder / "old.pkl").write_bytes(b"from another build")
    with execute_chapters._shared_results(folder):
        assert os.environ[SHARED_VARIABLE] == str(folder) and not (folder / "old.pkl").exists()
    assert SHARED_VARIABLE not in os.environ and not folder.exists()


def test_the_dropout_effect_is_the_mean_over_dropout_seeds_and_the_same_for_the_same_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv(SHARED_VARIABLE, str(tmp_path))
    g = torch.Generator().manual_seed(1)
    X = torch.rand(3, 24, 3, generator=g)
    C0 = X[:, :4].clone()
    models = []
    for s in range(3):
        m = KMeansTransformer.trainable(3, 4, generator=s, dropout=0.3).eval()
        models.append(m)
    effect = dropout_effect(models, X, C0, seed=5, steps=2, generator_seed=9, repeats=3)
    assert effect.dropout_seeds == dropout_seeds(5, 3, 3) == (3005, 3008, 3011)  # no two repeats share a stream
    off = kmtlib_evaluate_seeds(models, X, C0, steps=2, generator=torch.Generator().manual_seed(9))
    assert effect.median_off == float(off.model_median[2])
    for s, on in zip(effect.dropout_seeds, effect.medians_on):  # each repeat is kmtlib's evaluation with that seed
        direct = kmtlib_evaluate_seeds(models, X, C0, steps=2, generator=torch.Generator().manual_seed(9),
                                       dropout_seed=s)
        assert on == float(direct.model_median[2])
    assert len(set(effect.per_seed)) > 1, "dropout at p = 0.3 must move the medians differently per seed"
    assert effect.mean == sum(effect.per_seed) / 3 and effect.low == min(effect.per_seed) <= effect.high
    monkeypatch.delenv(SHARED_VARIABLE)  # computed again, not read: the same number
    again = dropout_effect(models, X, C0, seed=5, steps=2, generator_seed=9, repeats=3)
    assert again == effect
