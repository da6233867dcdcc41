"""A bare trained layer called on data far outside the tasks it was trained on says so (a
UserWarning naming the range), and changes nothing; data in its domain, the estimator's mapped
data and fixed-weight models stay silent."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import kmtlib
from kmtlib.estimator import pretrained_model
from kmtlib.init import init_centers


def _tasks():
    X = kmtlib.sample_tasks(2, 128, 32, 10, generator=1)
    return X, init_centers(X, 10, "kmeans++", generator=2)


def test_the_bare_trained_layer_warns_on_data_outside_its_training_domain():
    model = pretrained_model()
    X, C0 = _tasks()
    with pytest.warns(UserWarning, match=r"trained on tasks around the unit cube \[0, 1\]\^32") as said:
        far = model(X * 1e4, C0 * 1e4, steps=3)
    from kmtlib.transformer import training_domain_radius

    message = str(said[0].message)
    assert f"at most {training_domain_radius(32):.2f}" in message and "total variance to 1.6" in message
    # a warning, not a refusal: the numbers are those of the same call with the warning ignored
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = model(X * 1e4, C0 * 1e4, steps=3)
    assert torch.equal(far.centers, again.centers) and torch.equal(far.objective, again.objective)
    # shifted far from the cube, at the training scale
    with pytest.warns(UserWarning, match="unit cube"):
        model(X + 50.0, C0 + 50.0, steps=1)


def test_the_training_domain_holds_the_training_tasks_and_the_estimators_data():
    """The radius bounds both training families at any d (the paper's tasks lie in the unit cube;
    the broad ones, as the estimator's mapped data, have mean 0.5 or 0 per coordinate and total
    variance 1.6), so none of them warns."""
    from kmtlib.analysis.broad_tasks import sample_broad_tasks
    from kmtlib.transformer import training_domain_radius

    for d in (1, 4, 32):
        paper = kmtlib.sample_tasks(16, 256, d, 3, family="cauchy", generator=3)
        broad = sample_broad_tasks(16, 256, d, 3, generator=4)
        broad = broad[0] if isinstance(broad, tuple) else broad
        for X in (paper, broad):
            reach = float(((X.double() - 0.5) ** 2).sum(-1).mean(-1).sqrt().max())
            assert reach <= training_domain_radius(d) * (1 + 1e-6), (d, reach)
    model = pretrained_model()
    X, C0 = _tasks()
    rng = np.random.default_rng(5)
    data = rng.normal(size=(300, 5)) * 1e4
    data[0] = 1e7  # (a far outlier: the seeding may pick it; the check reads the points, not the centres)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(X, C0, steps=2)
        kmtlib.TransformerKMeans(3, steps=2, random_state=0).fit(data)
        fixed = kmtlib.KMeansTransformer.from_theorem(2, 3, gamma=math.inf)
        points = torch.rand(1, 40, 2, dtype=torch.float64) * 1e4
        fixed.to(torch.float64)(points, points[:, :3].clone(), steps=1)
