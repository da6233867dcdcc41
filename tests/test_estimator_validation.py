"""The user's data are checked once per call of the estimator (``fit``, ``predict``,
``transform``, ``score``), where they come in: one scikit-learn validation, and no check of
points (:func:`kmtlib._checks.check_points`) in the steps of the fit below it, however many Lloyd
steps the polish makes. The model checks the tensor it is handed at its own entry
(``KMeansTransformer``'s contract: once per run of the model, not per step of the fit); those
checks are not the estimator's and are not counted here.

The calls are counted by code object with ``sys.setprofile``, so a check is seen whatever name
or module it was imported under."""

from __future__ import annotations

import importlib
import sys
from collections import Counter

import pytest
from sklearn.datasets import make_blobs
from sklearn.utils import validation

from kmtlib import KMeansTransformer, TransformerKMeans, _checks

LLOYD = importlib.import_module("kmtlib.lloyd")  # (the module: ``kmtlib.lloyd`` is also the function's name)


def _counted(call):
    """``call()``'s result and the checks it made: scikit-learn validations, kmtlib point checks
    outside the model's entry, and the model's entry checks; and the Lloyd steps it made (the
    update half of a step, :func:`kmtlib.lloyd._move_centers`, runs once per step)."""
    names = {
        validation.validate_data.__code__: "validate_data",
        _checks.check_points.__code__: "check_points",
        LLOYD._move_centers.__code__: "lloyd step",
    }
    model_entry = KMeansTransformer.checked_steps.__code__
    counts: Counter[str] = Counter()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in names:
            name = names[frame.f_code]
            counts["model entry" if frame.f_back.f_code is model_entry else name] += 1

    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return result, counts


# overlapping clusters: the read-out and the polish make several Lloyd steps
_X = make_blobs(n_samples=400, centers=6, n_features=3, cluster_std=2.5, random_state=0)[0]


@pytest.mark.parametrize(
    "params",
    [dict(), dict(init="random", n_init=3, frames=2), dict(model="theorem", polish=True, steps=2)],
    ids=["learned", "learned-frames", "theorem-polish"],
)
def test_a_fit_checks_the_data_once(params):
    """One validation however many Lloyd steps the read-out and the polish make (here more
    than two: a check inside the step would be counted at each)."""
    _, counts = _counted(lambda: TransformerKMeans(6, random_state=0, **params).fit(_X))
    assert counts["lloyd step"] > 2
    assert counts["validate_data"] == 1
    assert counts["check_points"] == 0, counts


@pytest.mark.parametrize("method", ["predict", "transform", "score"])
def test_using_the_fit_checks_the_data_once(method):
    estimator = TransformerKMeans(6, model="theorem", random_state=0).fit(_X)
    _, counts = _counted(lambda: getattr(estimator, method)(_X[:50]))
    assert counts == Counter(validate_data=1)
