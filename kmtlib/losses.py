"""The training loss: a smoothed upper bound of the k-means objective (the paper's training
loss; the authors' ``losses.SoftKMObj`` in github.com/rithram/kmeans-trf).

For inverse temperature ``t`` (the paper's lambda^-1, 10 in the main runs),

    L_t(X, C) = sum_i sum_j softmax_j(-t ||x_i - c_j||^2) ||x_i - c_j||^2  >=  sum_i min_j ||x_i - c_j||^2,

because a weighted average of the squared distances is at least their minimum. As t grows the
soft-max weights concentrate on the nearest centre and the bound tends to the k-means objective.
"""

from __future__ import annotations

import torch

from ._checks import check_centers, check_points, check_positive_float
from ._numerics import times_gamma
from .objective import squared_distances, squared_distances_in_frame


def _soft_weighted(dist: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    weights = torch.softmax(dist * (-inv_temperature), dim=-1)
    return (weights * dist).sum(dim=(1, 2))


def smoothed_objective_unchecked(X: torch.Tensor, C: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    """:func:`smoothed_objective` without input checks (the training hot path): the unchecked
    expansion, which gives the same numbers as the public :func:`~kmtlib.squared_distances` for
    data whose squares stay in the dtype's range (training data do), without its checks."""
    return _soft_weighted(squared_distances_in_frame(X, C), inv_temperature)  # (B, n, k) distances


def smoothed_objective(X: torch.Tensor, C: torch.Tensor, inv_temperature: float = 10.0) -> torch.Tensor:
    """The smoothed k-means objective per task, shape (B,): an upper bound of
    :func:`kmtlib.kmeans_objective` that is differentiable in the centres.

    Args:
        X: points (B, n, d).
        C: centres (B, k, d), same device and dtype.
        inv_temperature: the soft-max inverse temperature (> 0; the paper trains with 10). Larger
            values make the bound tighter and the gradient more like Lloyd's hard assignment.

    Returns:
        ``sum_i sum_j softmax_j(-inv_temperature * D_ij) * D_ij`` per task, D_ij = ||x_i - c_j||^2
        (a sum over points, not a mean, as the paper's loss).
    """
    check_points(X)
    check_centers(C, X, name="C")
    inv_temperature = check_positive_float("inv_temperature", inv_temperature)
    # (the public distances: data at any scale, rescaled by a power of two where the squares
    # would leave the dtype's range)
    dist = squared_distances(X, C)
    if bool(torch.isfinite(dist * inv_temperature).all()):
        return _soft_weighted(dist, inv_temperature)
    return _soft_weighted_beyond_range(dist, inv_temperature)


def _soft_weighted_beyond_range(dist: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    """The same sum where squared distances (or their product with the inverse temperature) pass
    the dtype's largest value, as limits instead of NaN: the soft-max of each point is taken
    relative to its nearest centre (the same weights, mathematically), a distance beyond the
    range gets weight 0 and adds nothing (its term ``D exp(-t D) / Z`` tends to 0), and a point
    whose every distance is beyond the range adds inf (its true term exceeds the range). An
    inverse temperature above the dtype's largest number (1e39 in float32) is applied in
    representable factors (:func:`~kmtlib._numerics.times_gamma`): the weights go to the nearest
    centres, the limit, and the sum to the k-means objective."""
    finite = torch.isfinite(dist)
    nearest = torch.where(finite, dist, torch.finfo(dist.dtype).max).amin(dim=-1, keepdim=True)
    relative = torch.where(finite, dist - nearest, torch.inf)  # >= 0 and finite where dist is
    weights = torch.softmax(times_gamma(-relative, inv_temperature), dim=-1)  # the row's nearest has weight > 0
    terms = torch.where(weights > 0, weights * dist, torch.zeros((), dtype=dist.dtype, device=dist.device))
    lost = ~finite.any(dim=-1)  # (B, n): no distance in range
    per_point = torch.where(lost, torch.inf, terms.sum(-1))
    return per_point.sum(-1)
