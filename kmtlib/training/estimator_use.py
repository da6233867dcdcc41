"""Training a layer for the job :class:`~kmtlib.estimator.TransformerKMeans` gives it.

The paper's training (and the shipped layer's) starts the layer from random centres and lowers the
smoothed objective of its centres after one step. The estimator uses the layer otherwise: it maps
the user's data into the layer's domain (:class:`~kmtlib.domain.domain_map.DomainMap`: the
data's own principal frame, one scale, zero padding), draws greedy k-means++ centres, runs the
layer ``T`` steps (the padding projected away after every step), reads the centres out as the
means of their clusters, runs Lloyd's algorithm to a fixed point, and keeps the result only where
it beats Lloyd's fixed point from the same seeding. This module trains for that use
(``TrainConfig(starts="estimator", loss="lloyd_gap")``):

* :func:`estimator_batch` -- broad training tasks presented exactly as the estimator presents a
  user's data to its layer, with the estimator's seeding drawn from the training stream;
* :func:`lloyd_fixed_point_objective` -- the objective of Lloyd's fixed point from those starts
  (per task, no gradient): the seeding arm the layer competes with;
* :func:`layer_final_centers` -- ``T`` steps of the layer as the estimator runs them;
* :func:`soft_polish` -- a differentiable stand-in for the estimator's read-out and polish:
  :data:`SOFT_POLISH_STEPS` Lloyd steps with soft-max assignments at inverse temperature
  :data:`SOFT_POLISH_INV_TEMP` (the hard read-out and Lloyd's steps are piecewise constant in the
  centres and give no gradient; the layer's centres themselves, before any read-out, are far
  from a fixed point, so their objective measures how far they are from converging rather than
  which basin they lie in);
* :func:`lloyd_gap_loss` -- ``s * softplus(g / s)`` of the gap
  ``g = ln(J(P(C_T)) / J_Lloyd)`` (the relative gap for small gaps; the logarithm keeps a task
  where the layer merged two well-separated clusters, ten times Lloyd's objective, from
  outweighing the batch), with ``J(C) = sum_i min_j ||x_i - c_j||^2`` the hard k-means
  objective (the paper's objective, Sec. 2) and ``P`` the soft polish of the layer's final
  centres ``C_T``. The loss falls as the layer's centres lead to a better fixed point than
  Lloyd's from the same start, and flattens once they beat it by much more than ``s``;
* :func:`estimator_use_metrics` -- the validation numbers: the estimator's layer arm (read-out
  and Lloyd to a fixed point after the layer) against Lloyd from the same start.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ..domain.broad_tasks import sample_broad_tasks
from ..domain.domain_map import DomainMap
from ..init import init_centers
from ..lloyd import lloyd_step
from ..objective import assignment_cost, nearest_center
from ..transformer import KMeansTransformer

ESTIMATOR_STEPS = 20
"""The layer steps the estimator runs by default (``TransformerKMeans(steps=20)``)."""

SOFT_POLISH_STEPS = 5
"""The soft Lloyd steps of :func:`soft_polish`."""

SOFT_POLISH_INV_TEMP = 30.0
"""The inverse temperature of :func:`soft_polish`'s assignments, for tasks of total variance 1.6
(the layer's domain, :data:`kmtlib.domain.broad_tasks.TARGET_TOTAL_VARIANCE`): a point 0.1
farther in squared distance from one centre than from another gives it about 1/20 of its weight."""

GAP_SCALE = 0.01
"""The gap ``s`` at which :func:`lloyd_gap_loss` turns from linear to flat."""

FIXED_POINT_MAX_ITER = 300
"""The most Lloyd steps of a fixed point (the estimator's polish, ``KMeans``' ``max_iter``)."""


class EstimatorBatch(NamedTuple):
    """Training tasks as the estimator presents them: points ``X`` (B, n, D) and k-means++
    centres ``C0`` (B, k, D) in the layer's domain, the coordinates each task fills ``filled``
    (B,), and ``reference`` (B,), the objective of Lloyd's fixed point from ``C0`` (float64)."""

    X: torch.Tensor
    C0: torch.Tensor
    filled: torch.Tensor
    reference: torch.Tensor


def estimator_start(user_points: np.ndarray, k: int, width: int, generator: torch.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """One data set (n, d) as ``TransformerKMeans`` presents it to a layer of width D: its
    :class:`DomainMap` applied to the points and to greedy k-means++ centres drawn in the user's
    space from ``generator`` (``init_centers(..., "kmeans++", n_local_trials=None)``, the
    estimator's ``init="k-means++"``); float64 arrays (n, D) and (k, D)."""
    X64 = np.asarray(user_points, dtype=np.float64)
    domain = DomainMap.fit(X64, width)
    C0 = init_centers(torch.tensor(X64).unsqueeze(0), k, "kmeans++", generator, n_local_trials=None)[0].numpy()
    return domain.to_model(X64), domain.to_model(C0)


def lloyd_fixed_point_objective(X: torch.Tensor, C0: torch.Tensor, max_iter: int = FIXED_POINT_MAX_ITER
                                ) -> torch.Tensor:  # fmt: skip
    """The k-means objective (B,) of Lloyd's algorithm run from ``C0`` (B, k, D) on ``X`` (B, n, D)
    until no label of any task changes (at most ``max_iter`` steps), in float64, no gradient. An
    empty cluster keeps its centre (the estimator moves it onto a far point; from k-means++
    centres, which lie on distinct points, clusters rarely empty)."""
    X64, C = X.detach().double(), C0.detach().double()
    labels = None
    with torch.no_grad():
        for _ in range(max_iter):
            C, new, _ = lloyd_step(X64, C, empty="keep")
            if labels is not None and torch.equal(new, labels):
                break
            labels = new
        return assignment_cost(X64, C, nearest_center(X64, C))


def estimator_batch(
    batch: int, n: int, width: int, k: int, generator: torch.Generator, dtype: torch.dtype = torch.float32
) -> EstimatorBatch:
    """``batch`` broad tasks (:func:`~kmtlib.domain.broad_tasks.sample_broad_tasks`), each taken
    as a user's data set of its filled coordinates and presented by :func:`estimator_start`, with
    its Lloyd reference (:func:`lloyd_fixed_point_objective`). One generator draws the tasks and
    then the seedings, task by task (each task has its own frame and its own d, so the map runs per
    task; a few milliseconds each, small beside the layer's steps)."""
    X, mixture = sample_broad_tasks(batch, n, width, k, generator, dtype=torch.float64, return_mixture=True)
    starts = [estimator_start(X[b, :, : int(f)].numpy(), k, width, generator) for b, f in enumerate(mixture.filled)]
    Xm = torch.tensor(np.stack([s[0] for s in starts]))
    C0m = torch.tensor(np.stack([s[1] for s in starts]))
    reference = lloyd_fixed_point_objective(Xm, C0m)
    return EstimatorBatch(Xm.to(dtype), C0m.to(dtype), mixture.filled, reference)


def filled_mask(filled: torch.Tensor, width: int, like: torch.Tensor) -> torch.Tensor:
    """(B, 1, D): 1 on the coordinates each task fills, 0 on its padding."""
    return (torch.arange(width, device=like.device) < filled.to(like.device).unsqueeze(-1)).to(like.dtype).unsqueeze(1)


def layer_final_centers(
    model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, filled: torch.Tensor, steps: int
) -> torch.Tensor:
    """The centres (B, k, D) after ``steps`` steps of ``model`` from ``C0``, the coordinates a task
    does not fill set to 0 after every step, as the estimator runs a layer on data of fewer
    features than its width (differentiable in the layer's weights)."""
    mask = filled_mask(filled, X.shape[-1], X)
    C = C0
    for _ in range(steps):
        C = model.step(X, C) * mask
    return C


def hard_objective(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The k-means objective (B,) ``J(C) = sum_i min_j ||x_i - c_j||^2``, differentiable in C (the
    gradient flows through each point's nearest centre)."""
    return ((X.unsqueeze(2) - C.unsqueeze(1)) ** 2).sum(-1).min(dim=-1).values.sum(dim=-1)


def soft_polish(X: torch.Tensor, C: torch.Tensor, steps: int = SOFT_POLISH_STEPS,
                inv_temp: float = SOFT_POLISH_INV_TEMP) -> torch.Tensor:  # fmt: skip
    """``steps`` soft Lloyd steps from C (B, k, D): every centre to the mean of the points weighted
    by ``softmax_j(-inv_temp ||x_i - c_j||^2)``; as ``inv_temp`` grows, Lloyd's step."""
    for _ in range(steps):
        weights = torch.softmax(-inv_temp * ((X.unsqueeze(2) - C.unsqueeze(1)) ** 2).sum(-1), dim=-1)  # (B, n, k)
        C = (weights.transpose(1, 2) @ X) / weights.sum(dim=1).unsqueeze(-1).clamp_min(1e-12)
    return C


def lloyd_gap_loss(X: torch.Tensor, C: torch.Tensor, reference: torch.Tensor, scale: float = GAP_SCALE
                   ) -> torch.Tensor:  # fmt: skip
    """The mean over tasks of ``scale * softplus(g / scale)``, ``g = ln(J(soft_polish(C)) / reference)``
    the gap of the polished centres' hard objective to Lloyd's fixed point from the same start
    (``reference``)."""
    gap = torch.log(hard_objective(X, soft_polish(X, C)) / reference.to(C.dtype))
    return (scale * F.softplus(gap / scale)).mean()


@torch.no_grad()
def estimator_use_metrics(
    model: KMeansTransformer, batches: list[EstimatorBatch], steps: int
) -> tuple[float, float]:
    """(mean over tasks of the layer arm's objective over the seeding arm's, mean log of it): the
    layer arm is the estimator's candidate (``steps`` layer steps, the read-out as cluster
    means, Lloyd to a fixed point), the seeding arm Lloyd from the same start (``reference``).
    Below 1 the layer arm wins on average. In eval mode (restored afterwards)."""
    was_training = model.training
    model.eval()
    try:
        ratios = []
        for b in batches:
            C = layer_final_centers(model, b.X, b.C0, b.filled, steps)
            ratios.append(lloyd_fixed_point_objective(b.X, C) / b.reference)
    finally:
        model.train(was_training)
    ratio = torch.cat(ratios)
    return float(ratio.mean()), float(ratio.log().mean())
