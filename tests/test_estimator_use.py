"""Training for the estimator's use (kmtlib.training.estimator_use): the starts are the estimator's,
the reference is its seeding arm, the loss prefers centres nearer Lloyd's fixed point, and a run
resumes to the weights of an uninterrupted one."""

import numpy as np
import pytest
import torch
from sklearn.utils import check_random_state

from kmtlib import TransformerKMeans, load_model
from kmtlib.domain.frame import data_unit
from kmtlib.estimator import DomainMap, lloyd_to_fixed_point, pretrained_model
from kmtlib.estimator.fit import initial_centers, run_model
from kmtlib.training import TrainConfig, train
from kmtlib.training.estimator_use import (
    estimator_batch,
    estimator_start,
    estimator_use_metrics,
    hard_objective,
    layer_final_centers,
    lloyd_gap_loss,
)


def _blobs(n=300, d=5, k=4, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    return centres[rng.integers(k, size=n)] + rng.normal(size=(n, d))


@pytest.mark.parametrize("state", [0, 7])
def test_the_start_is_the_estimators_draw_for_the_same_generator(state):
    X, k = _blobs(seed=state), 4
    X64 = X / data_unit(X)  # (the estimator's own unit, a power of two)
    random_state = check_random_state(state)
    C0_user = initial_centers(TransformerKMeans(k).init, X64, 1.0, k, 1, random_state)[0]
    domain = DomainMap.fit(X64, 32)
    # the estimator seeds its torch generator from the first draw of its random state
    seed = int(np.random.RandomState(state).randint(np.iinfo(np.int32).max))
    points, centres = estimator_start(X64, k, 32, torch.Generator().manual_seed(seed))
    np.testing.assert_array_equal(centres, domain.to_model(C0_user))
    np.testing.assert_array_equal(points, domain.to_model(X64))


def test_the_reference_is_the_estimators_seeding_arm():
    batch = estimator_batch(3, 128, 32, 4, torch.Generator().manual_seed(1), dtype=torch.float64)
    for b in range(3):
        X = batch.X[b].numpy()
        fixed = lloyd_to_fixed_point(X, batch.C0[b : b + 1].numpy())[0]
        expected = hard_objective(batch.X[b : b + 1], torch.tensor(fixed).unsqueeze(0))
        torch.testing.assert_close(batch.reference[b : b + 1], expected, rtol=1e-12, atol=0)


def test_the_layer_runs_as_in_the_estimator_and_keeps_the_padding_zero():
    batch = estimator_batch(2, 128, 32, 5, torch.Generator().manual_seed(2))
    model = pretrained_model().eval()
    with torch.no_grad():
        final = layer_final_centers(model, batch.X, batch.C0, batch.filled, 3)
        for b in range(2):
            filled = int(batch.filled[b])
            expected = run_model(model, batch.X[b], batch.C0[b : b + 1], 3, filled=filled)
            torch.testing.assert_close(final[b : b + 1], expected)
            assert torch.all(final[b, :, filled:] == 0)


def test_the_loss_is_lower_for_centres_nearer_lloyds_fixed_point():
    batch = estimator_batch(4, 200, 32, 6, torch.Generator().manual_seed(3), dtype=torch.float64)
    fixed = torch.stack([torch.tensor(lloyd_to_fixed_point(batch.X[b].numpy(), batch.C0[b : b + 1].numpy())[0])
                         for b in range(4)])  # fmt: skip
    direction = torch.randn(fixed.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 0.3
    direction = direction * (torch.arange(32) < batch.filled.unsqueeze(-1)).unsqueeze(1)
    losses = [float(lloyd_gap_loss(batch.X, fixed + t * direction, batch.reference)) for t in (0.0, 0.5, 1.0)]
    assert losses[0] < losses[1] < losses[2]


def test_the_loss_has_a_gradient_for_the_layer():
    batch = estimator_batch(2, 96, 32, 3, torch.Generator().manual_seed(5))
    model = pretrained_model().train()
    loss = lloyd_gap_loss(batch.X, layer_final_centers(model, batch.X, batch.C0, batch.filled, 2), batch.reference)
    loss.backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())


def test_the_validation_metric_is_one_where_the_layer_changes_nothing():
    # a layer run for 0 steps leaves the seeding: its arm is Lloyd from the same start
    batch = estimator_batch(2, 96, 32, 3, torch.Generator().manual_seed(6), dtype=torch.float64)
    ratio, log_ratio = estimator_use_metrics(pretrained_model().double(), [batch], steps=0)
    assert ratio == pytest.approx(1.0, abs=1e-12) and log_ratio == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    "options, problem",
    [(dict(starts="estimator"), "go together"), (dict(loss="lloyd_gap"), "go together"),
     (dict(starts="estimator", loss="lloyd_gap", tasks="paper"), "tasks must be 'broad'"),
     (dict(layer_steps=3), "layer_steps=3"), (dict(starts="somewhere"), "starts")],
)  # fmt: skip
def test_bad_combinations_are_refused(options, problem):
    with pytest.raises(ValueError, match=problem):
        TrainConfig(**dict(dict(tasks="broad"), **options)).validated()


ESTIMATOR_RUN = dict(d=32, k=4, n=48, batch=2, eval_every=2, val_batches=1, seed=11, tasks="broad", k_min=2, k_max=4,
                     embedding="codes", code_width=32, starts="estimator", loss="lloyd_gap", layer_steps=2)  # fmt: skip


def test_an_estimator_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path):
    straight = train(dict(ESTIMATOR_RUN, steps=4), tmp_path / "straight", quiet=True)
    first = train(dict(ESTIMATOR_RUN, steps=4), tmp_path / "resumed", quiet=True, stop_at=2)
    assert first["status"] == "stopped"
    second = train(dict(ESTIMATOR_RUN, steps=4), tmp_path / "resumed", quiet=True, resume=True)
    assert straight["status"] == second["status"] == "finished"
    a = load_model(tmp_path / "straight" / "model.pt").state_dict()
    b = load_model(tmp_path / "resumed" / "model.pt").state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    assert straight["final_val_rel_objective"] == second["final_val_rel_objective"]
