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
from .objective import _squared_distances, squared_distances


def _soft_weighted(dist: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    weights = torch.softmax(dist * (-inv_temperature), dim=-1)
    return (weights * dist).sum(dim=(1, 2))


def _smoothed_objective(X: torch.Tensor, C: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    """:func:`smoothed_objective` without input checks (the training hot path): the unchecked
    expansion, which gives the same numbers as the public :func:`~kmtlib.squared_distances` for
    data whose squares stay in the dtype's range (training data do), without its checks."""
    return _soft_weighted(_squared_distances(X, C), inv_temperature)  # (B, n, k) distances


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
    return _soft_weighted(squared_distances(X, C), inv_temperature)
