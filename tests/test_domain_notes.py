"""A trained layer's warning of tasks outside its training domain is caught where a chapter expects
it, filed with a shared result, and said in words (kmtbook.domain_notes, kmtbook.shared_results)."""

from __future__ import annotations

import warnings

import pytest

import kmtlib
from kmtbook import shared_results
from kmtbook.domain_notes import domain_sentence, expected_domain_warnings, outside_domain
from kmtbook.shipped import require_runs


def shipped_model():
    """One of chapter 05's shipped one-hot layers (d = 32, k = 10), as chapter 07 evaluates them."""
    return require_runs("onehot", None, max_runs=1, d=32, k=10, n=512)[0].load("cpu")


def _tasks(family: str, seed: int):
    X = kmtlib.sample_tasks(2, 512, 32, 10, family=family, generator=seed)  # (as chapter 07 draws them)
    return X, kmtlib.init_centers(X, 10, "random", generator=seed + 1)


def test_only_the_domain_warning_is_caught_and_others_pass():
    with pytest.warns(RuntimeWarning, match="another"), expected_domain_warnings() as said:
        warnings.warn("outside", kmtlib.OutsideTrainingDomainWarning, stacklevel=1)
        warnings.warn("outside", kmtlib.OutsideTrainingDomainWarning, stacklevel=1)  # every one, not once per line
        warnings.warn("another", RuntimeWarning, stacklevel=1)
    assert said == ["outside", "outside"]


def test_a_filed_result_raises_the_warning_again_at_the_callers_line(tmp_path, monkeypatch):
    monkeypatch.setenv(shared_results.SHARED_VARIABLE, str(tmp_path))
    model = shipped_model()
    X, C0 = _tasks("cauchy", 3)
    for _ in range(2):  # computed, then read from the folder: the same warning both times
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            shared_results.evaluate_seeds([model], [X], [C0], steps=2, generator=4)
        domain = [w for w in caught if w.category is kmtlib.OutsideTrainingDomainWarning]
        assert domain and all(w.filename == __file__ for w in domain)
    assert len(list(tmp_path.glob("*.pkl"))) == 1


def test_the_sentence_says_which_tasks_why_and_what_it_does_to_the_number():
    model = shipped_model()
    X, _ = _tasks("cauchy", 5)
    where = outside_domain([model], [X])
    assert where["models_outside"] == 1 and where["spread_high"] < where["trained_low"]
    words = domain_sentence("Cauchy family", where, model=3.40, lloyd=3.25, steps=20, only_loss=True)
    assert words.startswith("The tasks of the Cauchy family lie outside")
    assert f"{where['spread_low']:.3f} to {where['spread_high']:.3f}" in words and "squeezed" in words
    assert "ends above Lloyd there, 3.40 against 3.25" in words and "the only setting" in words
    assert "1 of 1 model)" in words
    normal, _ = _tasks("normal", 5)
    assert outside_domain([model], [normal])["models_outside"] == 0
    assert "still ends below Lloyd" in domain_sentence("x", where, model=3.0, lloyd=3.2, steps=20, only_loss=False)
    with pytest.raises(ValueError, match="training domain"):
        outside_domain([kmtlib.KMeansTransformer.from_theorem(32, 10)], [X])
