"""The tasks a run trains and is validated on: training batches drawn from the run's data
stream and the fixed validation tasks, with the metric they give (the relative objective after one
model step)."""

from __future__ import annotations

from typing import Any

import torch

from ..device import resolve_device
from ..domain.broad_tasks import sample_broad_tasks
from ..init import init_centers
from ..lloyd import lloyd
from ..objective import kmeans_objective_unchecked
from ..tasks import sample_tasks
from ..transformer import KMeansTransformer
from .config import DTYPES, TrainConfig, derive_seeds
from .estimator_use import EstimatorBatch, estimator_batch


def seeded_generator(seed: int, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def sample_batch(
    config: TrainConfig, g: torch.Generator | None, device: torch.device, dtype: torch.dtype, k: int | None = None
) -> torch.Tensor:
    """One batch of training or validation tasks (B, n, d) of the run's distribution (mixtures of
    ``k`` components; default the run's k)."""
    k = config.k if k is None else k
    X: torch.Tensor | tuple[torch.Tensor, Any]
    if config.tasks == "broad":
        X = sample_broad_tasks(config.batch, config.n, config.d, k, g, device=device, dtype=dtype)
    else:
        X = sample_tasks(
            config.batch, config.n, config.d, k, config.family, config.scale, g, device=device, dtype=dtype
        )
    assert isinstance(X, torch.Tensor)  # (without return_mixture: the points alone)
    return X


def make_validation_set(
    config: TrainConfig, device: str | torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The run's fixed validation tasks: points X (V, n, d), initial centres C0 (V, k, d) (random
    k-subsets) and the objective after one Lloyd step from C0 (V,), V = val_batches * batch.

    Regenerated from the run seed, so an evaluation can rebuild the exact tasks a model was
    validated on (the paper's multi-step evaluation uses these tasks).
    """
    config = config.validated()
    device = resolve_device(config.device if device is None else device)
    dtype = DTYPES[config.dtype]
    seeds = derive_seeds(config.seed)
    g = seeded_generator(seeds["validation"], device)
    xs, cs = [], []
    for _ in range(config.val_batches):
        X = sample_batch(config, g, device, dtype)
        xs.append(X)
        cs.append(init_centers(X, config.k, "random", generator=g))
    X, C0 = torch.cat(xs), torch.cat(cs)
    reference = lloyd(X, C0, 1, empty="random", generator=seeded_generator(seeds["lloyd"], device)).objective[:, 1]
    return X, C0, reference


def make_validation_batches(
    config: TrainConfig, device: str | torch.device | None = None
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The run's validation tasks as ``(X, C0, reference)`` groups: one group of all
    :func:`make_validation_set` tasks at one k; for a run of any k one batch per group, the
    training numbers of clusters in turn (held-out ones never: checkpoints are chosen at the
    training k only), each with its own Lloyd reference."""
    config = config.validated()
    if not config.mixed_k:
        return [make_validation_set(config, device)]
    device = resolve_device(config.device if device is None else device)
    dtype = DTYPES[config.dtype]
    seeds = derive_seeds(config.seed)
    g, g_lloyd = seeded_generator(seeds["validation"], device), seeded_generator(seeds["lloyd"], device)
    ks, groups = config.training_ks(), []
    for i in range(config.val_batches):
        k = ks[i % len(ks)]
        X = sample_batch(config, g, device, dtype, k)
        C0 = init_centers(X, k, "random", generator=g)
        groups.append((X, C0, lloyd(X, C0, 1, empty="random", generator=g_lloyd).objective[:, 1]))
    return groups


def estimator_validation_batches(config: TrainConfig) -> list[EstimatorBatch]:
    """The validation tasks of a run for the estimator's use (``starts="estimator"``):
    ``val_batches`` batches of :func:`~kmtlib.training.estimator_use.estimator_batch` from the
    run's validation seed, the training numbers of clusters in turn (held-out ones never)."""
    config = config.validated()
    g = seeded_generator(derive_seeds(config.seed)["validation"], torch.device("cpu"))
    ks = config.training_ks()
    return [estimator_batch(config.batch, config.n, config.d, ks[i % len(ks)], g, DTYPES[config.dtype])
            for i in range(config.val_batches)]  # fmt: skip


@torch.no_grad()
def validation_metrics(
    model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, reference: torch.Tensor, batch: int = 32
) -> tuple[float, float]:
    """(mean relative objective vs one Lloyd step, mean log-objective) after one model step, in
    eval mode (no dropout); the model's train/eval mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        objective = torch.cat(
            [
                kmeans_objective_unchecked(X[i : i + batch], model.step(X[i : i + batch], C0[i : i + batch]))
                for i in range(0, X.shape[0], batch)
            ]
        )
    finally:
        model.train(was_training)
    return float((objective / reference).mean()), float(objective.log().mean())


def validate_groups(
    model: KMeansTransformer, groups: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], batch: int
) -> tuple[float, float]:
    """:func:`validation_metrics` over the tasks of all groups (means over every task)."""
    if len(groups) == 1:
        return validation_metrics(model, *groups[0], batch)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            rel, logs = [], []
            for X, C0, reference in groups:
                objective = torch.cat(
                    [kmeans_objective_unchecked(X[i : i + batch], model.step(X[i : i + batch], C0[i : i + batch]))
                     for i in range(0, X.shape[0], batch)]
                )  # fmt: skip
                rel.append(objective / reference)
                logs.append(objective.log())
    finally:
        model.train(was_training)
    return float(torch.cat(rel).mean()), float(torch.cat(logs).mean())
