"""kmtlib.domain.broad_tasks: the broad training family, its normalisation, and the training options
that use it (--tasks broad, --init-from)."""

from __future__ import annotations

import json

import pytest
import torch

import kmtlib
from kmtlib.domain.broad_tasks import CENTRE, TARGET_TOTAL_VARIANCE, sample_broad_tasks, spread_normalise
from kmtlib.training import TrainConfig, train

F64 = torch.float64


def _total_variance(X: torch.Tensor) -> torch.Tensor:
    return ((X - X.mean(dim=1, keepdim=True)) ** 2).sum(dim=-1).mean(dim=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_task_is_normalised_and_padded(dtype):
    X, mixture = sample_broad_tasks(64, 200, 32, 6, generator=0, dtype=dtype, return_mixture=True)
    assert X.shape == (64, 200, 32) and X.dtype == dtype and bool(torch.isfinite(X).all())
    tol = 1e-4 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(
        _total_variance(X), torch.full((64,), TARGET_TOTAL_VARIANCE, dtype=dtype), rtol=tol, atol=0
    )
    for b, filled in enumerate(mixture.filled.tolist()):
        assert 1 <= filled <= 32
        torch.testing.assert_close(
            X[b, :, :filled].mean(dim=0), torch.full((filled,), CENTRE, dtype=dtype), rtol=0, atol=tol
        )
        assert not X[b, :, filled:].any()


def test_the_family_is_broad():
    """Each property the family promises varies across tasks: filled coordinates from 1 to 32,
    unequal cluster sizes, stray points in some tasks only."""
    _, mixture = sample_broad_tasks(400, 300, 32, 5, generator=1, return_mixture=True)
    filled = mixture.filled
    assert int(filled.min()) == 1 and int(filled.max()) >= 24
    # log-uniform: about as many tasks fill 1..5 coordinates as 6..32 (ln 6 / ln 33 = 0.51)
    assert 0.4 < float((filled <= 5).double().mean()) < 0.62
    stray = (mixture.components == -1).double().mean(dim=1)
    assert 0.35 < float((stray > 0).double().mean()) < 0.65 and float(stray.max()) < 0.09
    sizes = torch.stack([(mixture.components == j).sum(dim=1) for j in range(5)], dim=1).double()
    ratio = sizes.max(dim=1).values / sizes.min(dim=1).values.clamp_min(1)
    assert float(ratio.min()) < 1.6 and float(ratio.max()) > 4


def test_points_follow_their_components():
    """Points of one component are closer to each other than to the rest, on average."""
    X, mixture = sample_broad_tasks(40, 400, 8, 3, generator=2, dtype=F64, return_mixture=True)
    within, between = [], []
    for b in range(40):
        labels = mixture.components[b]
        D = torch.cdist(X[b], X[b])
        same = (labels[:, None] == labels[None, :]) & (labels[:, None] >= 0)
        other = (labels[:, None] != labels[None, :]) & (labels[:, None] >= 0) & (labels[None, :] >= 0)
        within.append(D[same].mean())
        between.append(D[other].mean())
    assert float((torch.stack(within) < torch.stack(between)).double().mean()) > 0.9


def test_determinism_and_bad_input():
    a = sample_broad_tasks(4, 30, 5, 3, generator=5)
    assert torch.equal(a, sample_broad_tasks(4, 30, 5, 3, generator=torch.Generator().manual_seed(5)))
    assert not torch.equal(a, sample_broad_tasks(4, 30, 5, 3, generator=6))
    with pytest.raises(ValueError, match="k"):
        sample_broad_tasks(4, 30, 5, 0, generator=0)
    with pytest.raises(TypeError, match="dtype"):
        sample_broad_tasks(4, 30, 5, 3, generator=0, dtype=torch.int64)


def test_normalise_keeps_distance_ratios_and_constant_tasks():
    X = torch.randn(3, 50, 4, dtype=F64, generator=torch.Generator().manual_seed(0)) * 7 + 3
    Z = spread_normalise(X, torch.tensor([4, 4, 4]))
    ratio = torch.cdist(Z, Z)[:, 1:, 0] / torch.cdist(X, X)[:, 1:, 0]
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio), rtol=1e-12, atol=0)
    constant = spread_normalise(torch.full((1, 5, 3), 2.0, dtype=F64), torch.tensor([2]))
    assert (constant[..., :2] == CENTRE).all() and not constant[..., 2:].any()


def test_target_is_about_the_paper_tasks_total_variance():
    """The normalisation gives every task about the total variance of the paper's own tasks (d = 32,
    k = 10), so a layer warm-started from a paper-trained one meets distances of its size."""
    X = kmtlib.sample_tasks(64, 512, 32, 10, generator=0, dtype=F64)
    assert float(_total_variance(X).mean()) == pytest.approx(TARGET_TOTAL_VARIANCE, rel=0.05)


def _tiny(tmp_path, **changes):
    values = dict(d=4, k=3, n=24, steps=4, batch=4, eval_every=2, val_batches=2, embedding="codes", code_width=4,
                  k_min=2, k_max=4, tasks="broad")  # fmt: skip
    values.update(changes)
    return TrainConfig(**values).validated()


def test_broad_training_runs_resumes_and_warm_starts(tmp_path):
    config = _tiny(tmp_path)
    first = train(config, tmp_path / "a", quiet=True, threads=1)
    assert first["status"] == "finished"
    # a warm start begins from the saved weights and records their SHA-256
    warm = _tiny(tmp_path, init_from=str(tmp_path / "a" / "model.pt"), steps=0)
    train(warm, tmp_path / "b", quiet=True, threads=1)
    source, started = kmtlib.load_model(tmp_path / "a" / "model.pt"), kmtlib.load_model(tmp_path / "b" / "model.pt")
    for (name, p), (_, q) in zip(source.state_dict().items(), started.state_dict().items()):
        assert torch.equal(p, q), name
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert (
        manifest["config"]["init_from"] == str(tmp_path / "a" / "model.pt") and len(manifest["init_from_sha256"]) == 64
    )
    # a run of the broad family stopped after 2 steps and resumed equals the run in one go
    train(_tiny(tmp_path, steps=2), tmp_path / "c", quiet=True, threads=1)
    train(config, tmp_path / "c", resume=True, quiet=True, threads=1)
    a, c = kmtlib.load_model(tmp_path / "a" / "model.pt"), kmtlib.load_model(tmp_path / "c" / "model.pt")
    for (name, p), (_, q) in zip(a.state_dict().items(), c.state_dict().items()):
        assert torch.equal(p, q), name
    # the same log, but for the wall-clock column
    rows = [[line.split(",")[:-1] for line in (tmp_path / r / "log.csv").read_text().splitlines()] for r in "ac"]
    assert rows[0] == rows[1]


def test_warm_start_of_another_shape_is_refused(tmp_path):
    train(_tiny(tmp_path, steps=0), tmp_path / "a", quiet=True, threads=1)
    with pytest.raises(ValueError, match="does not have the shape"):
        train(_tiny(tmp_path, d=5, init_from=str(tmp_path / "a" / "model.pt")), tmp_path / "b", quiet=True)
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    with pytest.raises(ValueError, match=r"junk\.pt"):
        train(_tiny(tmp_path, init_from=str(tmp_path / "junk.pt")), tmp_path / "c", quiet=True)


def test_bad_task_options_are_named():
    with pytest.raises(ValueError, match="tasks"):
        TrainConfig(tasks="wide").validated()
    with pytest.raises(ValueError, match="family"):
        TrainConfig(tasks="broad", family="cauchy").validated()


def test_runs_written_before_the_options_resume(tmp_path):
    """A run folder whose manifest and checkpoint predate --tasks and --init-from resumes: a
    missing option counts as its default."""
    from kmtlib.training.config import config_differences

    saved = {k: v for k, v in TrainConfig().__dict__.items() if k not in ("tasks", "init_from")}
    assert config_differences(saved, TrainConfig()) == []
    assert config_differences(saved, TrainConfig(tasks="broad")) == ["tasks: 'paper' there vs 'broad' now"]


@pytest.mark.parametrize("d", [1, 5, 32])
def test_every_number_of_filled_coordinates_and_every_coordinate_occurs(d):
    """The module's ``d_task``, log-uniform in 1..d: over a seeded batch every count from 1 to d
    occurs (d itself has probability ln((d + 1) / d) / ln(d + 1), 0.9 % at d = 32: 1 000 tasks miss
    it with probability 1e-4), every task's points vary in each coordinate it says it fills, and so
    every coordinate 0..d-1 is used by some task (a layer of width d is trained on all of its inputs)."""
    X, mixture = sample_broad_tasks(1000, 8, d, 2, generator=7, dtype=F64, return_mixture=True)
    assert sorted(set(mixture.filled.tolist())) == list(range(1, d + 1))
    fills = torch.arange(d) < mixture.filled.unsqueeze(-1)  # (B, d)
    spread = X.std(dim=1)  # (B, d)
    assert bool((spread[fills] > 0).all()) and not spread[~fills].any()
    assert bool((X != 0).any(dim=1).any(dim=0).all())


def test_clusters_range_from_separated_to_overlapping_and_from_round_to_elongated():
    """The base scale (log-uniform in [0.02, 0.25]) gives tasks whose clusters hold from under 5 % to
    over 80 % of the total variance; the elongation (a stretch of up to exp(1.5) along a random
    direction, a variance ratio up to exp(3) = 20) gives clusters whose covariance has a largest
    eigenvalue from about that of the next one to several times it."""
    X, mixture = sample_broad_tasks(300, 400, 8, 3, generator=3, dtype=F64, return_mixture=True)
    within_share, elongation = [], []
    for b in range(X.shape[0]):
        filled, labels = int(mixture.filled[b]), mixture.components[b]
        total = ((X[b] - X[b].mean(dim=0)) ** 2).sum()
        within = X.new_zeros(())
        for j in range(3):
            P = X[b, labels == j, :filled]
            if len(P):
                within = within + ((P - P.mean(dim=0)) ** 2).sum()
            if filled >= 2 and len(P) > 50:
                eigenvalues = torch.linalg.eigvalsh(torch.cov(P.T))
                elongation.append(float(eigenvalues[-1] / eigenvalues[-2]))
        within_share.append(float(within / total))
    assert min(within_share) < 0.05 and max(within_share) > 0.8
    assert min(elongation) < 1.5 and max(elongation) > 8
