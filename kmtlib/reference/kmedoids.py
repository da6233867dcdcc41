"""Randomised k-medoids (Gibbs-law medoid updates): the plain algorithm behind the ``"kmedoids"``
variant.

One step, on every task of the batch, with squared Euclidean dissimilarities
``D_il = ||x_i - x_l||^2``::

    a(l)       = argmin_j ||x_l - c_j||^2                                (ties: lowest index)
    cost_j(i)  = sum_{l: a(l) = j} D_il                                  (medoid cost of candidate i)
    c_j       <- x_{i*},  i* = argmax_{i: a(i) = j} ( -cost_j(i) / tau + g_ji ),  g ~ Gumbel(0, 1)

so ``i*`` is drawn with probability proportional to ``exp(-cost_j(i) / tau)`` among the members
of cluster ``j``; ``tau = 0`` takes the member of least cost, which is the alternating k-medoids
step of ``kmedoids.alternating`` on the matrix ``D`` (ties: the member nearest to the current
centre, i.e. the current medoid as ``kmedoids.alternating`` keeps it, then the lowest index). An empty cluster picks
among all points by their cost over all points. The noise is one standard Gumbel tensor (B, k, n)
per step when ``tau > 0`` (:func:`kmtlib.attention.standard_gumbel`), so equal generators give the
variant model's draws. The costs come from the full (B, n, n) dissimilarity matrix, computed from
differences: O(k n^2) memory per task, meant for tests and small tasks.
"""

from __future__ import annotations

import torch

from .._checks import check_centers, check_generator, check_int, check_points, check_tau
from ..attention import first_argmax, standard_gumbel
from ..objective import gather_centers, nearest_center
from ..results import ClusteringResult
from ._result import trajectory_result


def pairwise_sq_distances(X: torch.Tensor) -> torch.Tensor:
    """(B, n, n) squared distances between the points of each task, from explicit differences,
    summed coordinate by coordinate in order (one rounding per product and per sum, wherever the
    pair sits: ``D`` is bitwise symmetric and equal points have bitwise equal rows)."""
    B, n, d = X.shape
    D = X.new_zeros(B, n, n)
    for c in range(d):  # (a loop over coordinates, not points)
        diff = X[..., c].unsqueeze(2) - X[..., c].unsqueeze(1)
        D += diff * diff
    return D


def medoid_costs(
    X: torch.Tensor, labels: torch.Tensor, k: int, D: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Medoid costs (B, k, n), ``cost_j(i) = sum over the points l of cluster j of D_il``, and the
    candidate mask (B, k, n) (members of cluster j; all points for an empty cluster).

    The sum over ``l`` is a plain reduction over the last dimension (B, k, n, n), not a matrix
    product: it adds the same terms in the same order for every candidate on every CPU, so
    mathematically tied costs built from equal terms (a two-point cluster, duplicate points)
    are bitwise tied, and the costs are bitwise those of the variant's exact re-scoring
    (:func:`kmtlib.variants.kmedoids.exact_costs`). O(k n^2) memory: for tests and small tasks."""
    if D is None:
        D = pairwise_sq_distances(X)
    member = labels.unsqueeze(1) == torch.arange(k, device=X.device).view(1, k, 1)
    member = member | ~member.any(dim=-1, keepdim=True)
    return (D.unsqueeze(1) * member.to(X.dtype).unsqueeze(2)).sum(-1), member


def randomised_kmedoids(
    X: torch.Tensor,
    C0: torch.Tensor,
    steps: int,
    tau: float = 0.0,
    generator: torch.Generator | int | None = None,
) -> ClusteringResult:
    """Run ``steps`` randomised k-medoids steps (module documentation) on every task.

    Args:
        X: points (B, n, d); C0: initial centres (B, k, d) (any points; after one step every
            centre is a data point).
        steps: number of steps T >= 0.
        tau: temperature in squared-distance units, >= 0 (0: deterministic).
        generator: a ``torch.Generator`` on X's device or a seed; needed when ``tau > 0``.

    Returns:
        A :class:`~kmtlib.results.ClusteringResult`; ``objective`` is the k-means objective of the
        centres, which for medoid centres is the k-medoids loss with squared Euclidean
        dissimilarities (``kmedoids.pam(D).loss`` on the same ``D``). Use
        :func:`medoid_indices` to get the chosen points' indices.
    """
    check_points(X)
    check_centers(C0, X)
    steps = check_int("steps", steps, minimum=0)
    tau = check_tau(tau)
    g = check_generator(generator, X.device)
    if tau > 0 and g is None:
        raise ValueError("randomised_kmedoids with tau > 0 needs a generator (a torch.Generator or a seed)")
    B, n, _ = X.shape
    k = C0.shape[1]
    D = pairwise_sq_distances(X)
    C = C0
    centers, n_empty = [C0], []
    for _ in range(steps):
        labels = nearest_center(X, C)
        cost, member = medoid_costs(X, labels, k, D)
        used = (labels.unsqueeze(1) == torch.arange(k, device=X.device).view(1, k, 1)).any(dim=-1)
        n_empty.append((~used).sum(dim=1))
        if tau > 0:
            value = -cost / tau + standard_gumbel((B, k, n), dtype=X.dtype, device=X.device, generator=g)
        else:
            value = -cost
        value = value.masked_fill(~member, float("-inf"))
        # ties: the candidate nearest to the current centre, then the lowest index
        best = value == value.amax(dim=-1, keepdim=True)
        near = -((X.unsqueeze(1) - C.unsqueeze(2)) ** 2).sum(-1)  # (B, k, n)
        pick = first_argmax(near.masked_fill(~best, float("-inf")))  # (B, k)
        C = gather_centers(X, pick)
        centers.append(C)
    return trajectory_result(X, centers, n_empty)


def medoid_indices(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """For centres C (B, k, d), the index (B, k) of a data point of X (B, n, d) **exactly equal** to
    each centre (the lowest such index), or -1 where a centre is not a data point."""
    check_points(X)
    check_centers(C, X, name="C")
    equal = (C.unsqueeze(2) == X.unsqueeze(1)).all(dim=-1)  # (B, k, n)
    missing = torch.full(equal.shape[:2], -1, device=X.device)
    return torch.where(equal.any(dim=-1), first_argmax(equal.to(torch.uint8)), missing)


__all__ = ["medoid_costs", "medoid_indices", "pairwise_sq_distances", "randomised_kmedoids"]
