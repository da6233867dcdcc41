"""A bare trained layer knows its domain by position and by scale: on data shrunk, grown or shifted
beyond the tasks it was trained on it says so (a UserWarning at the caller's line, naming the
range) and changes nothing; data in its domain, the estimator's mapped data and fixed-weight models
stay silent. A model file records the range (format 4); an older file falls back to the documented
range of kmtlib's training families."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import kmtlib
from kmtlib.domain.broad_tasks import sample_broad_tasks
from kmtlib.domain.trained import TrainingDomain
from kmtlib.estimator import pretrained_model
from kmtlib.init import init_centers
from kmtlib.io.model_file import ModelFileError
from kmtlib.training import train

CASES = {"shrunk 1e-3": lambda X: X * 1e-3, "shrunk 0.3": lambda X: X * 0.3, "grown 1e4": lambda X: X * 1e4,
         "shifted 1.5": lambda X: X + 1.5}  # fmt: skip
"""The hostile cases of issue 43: the paper's tasks of the layer's d, changed in scale or position."""


def _tasks(d: int = 32, k: int = 10):
    X = kmtlib.sample_tasks(4, 128, d, k, generator=1)
    return X, init_centers(X, k, "kmeans++", generator=2)


@pytest.mark.parametrize("case", CASES)
def test_the_bare_trained_layer_warns_at_the_callers_line_on_data_shrunk_grown_or_shifted(case):
    model = pretrained_model()
    X, C0 = _tasks()
    X, C0 = CASES[case](X), CASES[case](C0)
    for no_grad in (True, False):  # (a torch.no_grad wrapper in between changes nothing of where it points)
        with pytest.warns(UserWarning, match="trained on tasks of spread") as said, torch.set_grad_enabled(not no_grad):
            warned = model(X, C0, steps=3)
        assert [w.filename for w in said] == [__file__], case
        assert all(w.category is kmtlib.OutsideTrainingDomainWarning for w in said)  # a class of its own
    assert "documented range" in str(said[0].message)  # (the shipped file is of format 3: no recorded range)
    # a warning, never a change: the numbers of the same call without the check, bitwise
    domain, model.training_domain = model.training_domain, None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            unchecked = model(X, C0, steps=3)
    finally:
        model.training_domain = domain
    assert torch.equal(warned.centers, unchecked.centers) and torch.equal(warned.objective, unchecked.objective)


def test_the_training_tasks_the_estimators_data_and_fixed_weight_models_stay_silent():
    """The documented range holds both training families at any d (the paper's tasks, and the broad
    ones, where the estimator maps a user's data); fixed-weight models never check."""
    for d in (1, 4, 32):
        domain = TrainingDomain.documented(d)
        paper = kmtlib.sample_tasks(64, 256, d, 3, generator=3)
        broad = sample_broad_tasks(64, 256, d, 3, generator=4)
        for X in (paper, broad[0] if isinstance(broad, tuple) else broad):
            assert domain.outside(X) is None, (d, domain.outside(X))
    model = pretrained_model()
    X, C0 = _tasks()
    data = np.random.default_rng(5).normal(size=(300, 5)) * 1e4
    data[0] = 1e7  # (a far outlier: the seeding may pick it; the check reads the points, not the centres)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(X, C0, steps=2)
        kmtlib.TransformerKMeans(3, steps=2, random_state=0).fit(data)
        fixed = kmtlib.KMeansTransformer.from_theorem(2, 3, gamma=math.inf).to(torch.float64)
        points = torch.rand(1, 40, 2, dtype=torch.float64) * 1e4
        fixed(points, points[:, :3].clone(), steps=1)
        kmtlib.whole_pass(fixed)(points, points[:, :3].clone(), steps=1)


def test_a_model_file_records_the_range_and_an_old_file_falls_back(tmp_path):
    model = pretrained_model()
    X, _ = _tasks()
    recorded = TrainingDomain.of_tasks([X, X * 1.2], "two batches of a test")
    assert math.isclose(recorded.spread_high, 1.2 * TrainingDomain.of_tasks([X], "").spread_high, rel_tol=1e-6)
    model.training_domain = recorded
    path = model.save(tmp_path / "model.pt")
    assert kmtlib.load_model(path).training_domain == recorded
    # an older file (no entry) falls back to the documented range; a damaged entry names the file
    payload = torch.load(path, weights_only=True)
    del payload["training_domain"]
    torch.save(payload, tmp_path / "old.pt")
    assert kmtlib.load_model(tmp_path / "old.pt").training_domain == TrainingDomain.documented(model.d)
    good = {"spread_low": 0.1, "spread_high": 0.3, "offset": 0.1, "source": "x"}
    for damaged in (dict(good, spread_low=0.5), dict(good, spread_low=True), dict(good, spread_high=math.nan), [0.1]):
        payload["training_domain"] = damaged
        torch.save(payload, tmp_path / "damaged.pt")
        with pytest.raises(ModelFileError, match=r"damaged\.pt: damaged .*training_domain"):
            kmtlib.load_model(tmp_path / "damaged.pt")


def test_training_records_the_range_of_its_tasks(tmp_path):
    tiny = dict(d=3, k=3, n=24, batch=8, eval_every=5, val_batches=2, seed=123, steps=5)
    train(tiny, tmp_path / "run", quiet=True)
    domain = kmtlib.load_model(tmp_path / "run" / "model.pt").training_domain
    assert domain is not None and "validation tasks: paper tasks, normal 0.1" in domain.source
    assert 0 < domain.spread_low <= domain.spread_high < 0.5 and domain.offset < 0.5
