"""The k-means objective and the squared-distance kernels everything else uses."""

from __future__ import annotations

import torch

from ._checks import check_centers, check_points


def squared_distances(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances (B, n, k) between points (B, n, d) and centres (B, k, d).

    Computed through ||x||^2 - 2 x.c + ||c||^2 with one batched matrix product (the fast route
    scikit-learn and faiss take), clamped at zero against rounding.
    """
    x2 = (X * X).sum(-1, keepdim=True)
    c2 = (C * C).sum(-1).unsqueeze(1)
    return torch.baddbmm(x2 + c2, X, C.transpose(1, 2), alpha=-2.0).clamp_min_(0.0)


def nearest_center(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Index (B, n) of the nearest centre of every point.

    The ||x||^2 term is the same for all centres, so it is left out of the comparison.
    Ties go to the lowest index on the CPU (torch.argmin's behaviour; not guaranteed on CUDA).
    """
    scores = torch.baddbmm((C * C).sum(-1).unsqueeze(1), X, C.transpose(1, 2), alpha=-2.0)
    return scores.argmin(dim=-1)


def gather_centers(C: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The centre (B, n, d) each point is assigned to."""
    B, n = labels.shape
    return torch.gather(C, 1, labels.unsqueeze(-1).expand(B, n, C.shape[-1]))


def assignment_cost(X: torch.Tensor, C: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum over points of ||x_i - c_{labels_i}||^2, per task (B,); differences taken exactly."""
    diff = X - gather_centers(C, labels)
    return (diff * diff).sum(dim=(1, 2))


def _kmeans_objective(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    return assignment_cost(X, C, nearest_center(X, C))


def kmeans_objective(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The k-means objective per task, shape (B,): the sum over points of the squared distance
    to the nearest centre (a sum, not a mean, as in the paper).

    The nearest centre is found with the fast expansion; the distance to it is then computed from
    the difference ``x - c`` itself, so the value carries no cancellation error.
    """
    check_points(X)
    check_centers(C, X, name="C")
    return _kmeans_objective(X, C)
